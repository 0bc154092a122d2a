//! Search benchmarks: index build and fuzzy query latency at 1k, 10k and 100k tools.
//!
//! Large catalogs are synthesized by pooling the evaluation catalogs (ACEBench zh/en, MetaTool)
//! and adding renamed copies until the size is reached, so term statistics stay realistic.
//! Queries are drawn from the evaluation query files. The data directory is
//! `$TOOLSHELF_EVAL_DIR`, default `../shared/eval` beside the repository.
//!
//! Besides criterion's timings, each size prints p50/p99 of single-query latency measured over
//! every sampled query, since tail latency is part of the target.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::Value;
use toolshelf_core::Catalog;
use toolshelf_core::search::SearchIndex;

const SETS: [&str; 4] = [
    "acebench_zh",
    "acebench_en",
    "metatool_single",
    "metatool_multi",
];

fn eval_dir() -> PathBuf {
    std::env::var_os("TOOLSHELF_EVAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/eval"))
}

fn read(name: &str) -> String {
    let path = eval_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} (set TOOLSHELF_EVAL_DIR): {e}",
            path.display()
        )
    })
}

fn pooled_tools() -> Vec<Value> {
    let mut tools = Vec::new();
    for set in SETS {
        let v: Value =
            serde_json::from_str(&read(&format!("{set}.catalog.json"))).expect("catalog json");
        tools.extend(v.as_array().expect("array").iter().cloned());
    }
    tools
}

fn catalog_of(pool: &[Value], size: usize) -> Catalog {
    let mut tools = Vec::with_capacity(size);
    let mut copy = 0;
    'outer: loop {
        for (i, t) in pool.iter().enumerate() {
            if tools.len() == size {
                break 'outer;
            }
            let mut t = t.clone();
            let name = t["name"].as_str().unwrap_or("tool").to_owned();
            // Copy k of every tool goes to server s<k>, so names stay unique and groups realistic.
            t["name"] = Value::String(format!("{name}_{i}"));
            t["server"] = Value::String(format!("s{copy}"));
            tools.push(t);
        }
        copy += 1;
    }
    Catalog::from_value(&Value::Array(tools), "bench").expect("synthetic catalog")
}

fn queries() -> Vec<String> {
    let mut out = Vec::new();
    for set in SETS {
        let text = read(&format!("{set}.queries.jsonl"));
        // Every 20th query of each set: a mixed, language-balanced sample.
        for line in text.lines().step_by(20) {
            let v: Value = serde_json::from_str(line).expect("query json");
            out.push(v["query"].as_str().expect("query").to_owned());
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    toolshelf_core::search::analyze::warm_up();
    let pool = pooled_tools();
    let qs = queries();
    for size in [1_000usize, 10_000, 100_000] {
        let catalog = catalog_of(&pool, size);
        let all: Vec<usize> = (0..catalog.tools().len()).collect();
        let mut group = c.benchmark_group(format!("search_{size}"));
        group.sample_size(10);
        group.bench_function(BenchmarkId::new("build", size), |b| {
            b.iter(|| black_box(SearchIndex::build(&catalog, &all)))
        });
        let index = SearchIndex::build(&catalog, &all);
        let mut i = 0;
        group.bench_function(BenchmarkId::new("query", size), |b| {
            b.iter(|| {
                i = (i + 1) % qs.len();
                black_box(index.rank(&catalog, std::slice::from_ref(&qs[i]), 10))
            })
        });
        group.finish();
        let mut lat: Vec<f64> = qs
            .iter()
            .map(|q| {
                let t = Instant::now();
                black_box(index.rank(&catalog, std::slice::from_ref(q), 10));
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        lat.sort_by(f64::total_cmp);
        let pct = |p: f64| lat[((p / 100.0) * (lat.len() - 1) as f64).round() as usize];
        eprintln!(
            "search_{size}: {} queries, p50 {:.0} µs, p99 {:.0} µs",
            lat.len(),
            pct(50.0),
            pct(99.0)
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
