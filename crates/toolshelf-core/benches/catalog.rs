//! Catalog benchmarks: loading, exposure and rendering of one server group of 10k, 40k and 100k
//! tools (the shape that was quadratic once: every tool checked against every earlier one), and
//! the search index over it.
//!
//! The tools are the evaluation catalogs' (see `common`), renamed to be unique, all in one group.
//! Criterion times the 10k case; the larger ones are timed once each and printed, with the
//! target for 100k: load and render within 2 s, the search index within 6 s. The benchmark uses
//! the allocator the `toolshelf` binary ships with (mimalloc), so its figures are the binary's.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use toolshelf_core::search::SearchIndex;
use toolshelf_core::{Catalog, Compiled, Config, Format};

mod common;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The catalog file's text: one server holding `size` tools.
fn single_group(pool: &[Value], size: usize) -> String {
    let tools: Vec<Value> = (0..size)
        .map(|i| {
            let mut t = pool[i % pool.len()].clone();
            let name = t["name"].as_str().unwrap_or("tool").to_owned();
            t["name"] = Value::String(format!("{name}_{i}"));
            t
        })
        .collect();
    json!({"servers": [{"name": "big", "description": "one server with every tool", "tools": tools}]}).to_string()
}

/// Load, decide and render: everything before the first request can be answered.
fn load_and_render(text: &str, compiled: &Compiled) -> (Catalog, usize) {
    let catalog = Catalog::from_json_str(text, "bench").expect("catalog");
    let exposure = compiled.expose(&catalog);
    let surface = compiled.surface(&catalog, &exposure);
    let bytes = serde_json::to_string(&surface.tools(&catalog, Format::Anthropic))
        .expect("json")
        .len();
    (catalog, bytes)
}

fn bench(c: &mut Criterion) {
    toolshelf_core::search::analyze::warm_up();
    let pool = common::pooled_tools();
    let compiled = Compiled::new(Config::default(), "bench", None).expect("defaults");
    for size in [10_000usize, 40_000, 100_000] {
        let text = single_group(&pool, size);
        if size == 10_000 {
            let mut group = c.benchmark_group("catalog_single_group");
            group.sample_size(10);
            group.bench_function("load_and_render_10k", |b| {
                b.iter(|| black_box(load_and_render(&text, &compiled)))
            });
            group.finish();
        }
        let t = Instant::now();
        let (catalog, bytes) = load_and_render(&text, &compiled);
        let load = t.elapsed();
        let all: Vec<usize> = (0..catalog.tools().len()).collect();
        let t = Instant::now();
        let index = SearchIndex::build(&catalog, &all);
        let build = t.elapsed();
        eprintln!(
            "catalog_single_group_{size}: load and render {:.0} ms ({bytes} bytes of tool list), search index {:.0} ms ({} tools)",
            load.as_secs_f64() * 1000.0,
            build.as_secs_f64() * 1000.0,
            index.len()
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
