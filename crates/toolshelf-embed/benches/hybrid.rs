//! Hybrid (BM25F + embeddings) benchmarks at 1k, 10k and 100k tools: index build including
//! embedding every tool, and query latency with both rankers fused. Same synthetic catalogs and
//! queries as toolshelf-core's search benchmark.

use std::hint::black_box;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use toolshelf_core::search::SearchIndex;

#[path = "../../toolshelf-core/benches/common/mod.rs"]
mod common;

use common::{catalog_of, latency_percentiles, pooled_tools, queries};

fn bench(c: &mut Criterion) {
    toolshelf_core::search::analyze::warm_up();
    let t = Instant::now();
    toolshelf_embed::Embedder::bundled().expect("bundled model");
    eprintln!("model load: {:.0} ms", t.elapsed().as_secs_f64() * 1000.0);
    let pool = pooled_tools();
    let qs = queries();
    for size in [1_000usize, 10_000, 100_000] {
        let catalog = catalog_of(&pool, size);
        let all: Vec<usize> = (0..catalog.tools().len()).collect();
        let build = || {
            let mut index = SearchIndex::build(&catalog, &all);
            toolshelf_embed::attach_bundled(&mut index, &catalog).expect("model");
            index
        };
        let mut group = c.benchmark_group(format!("hybrid_{size}"));
        group.sample_size(10);
        if size <= 10_000 {
            group.bench_function(BenchmarkId::new("build", size), |b| {
                b.iter(|| black_box(build()))
            });
        }
        let t = Instant::now();
        let index = build();
        eprintln!(
            "hybrid_{size}: build {:.0} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
        let mut i = 0;
        group.bench_function(BenchmarkId::new("query", size), |b| {
            b.iter(|| {
                i = (i + 1) % qs.len();
                black_box(index.rank(&catalog, std::slice::from_ref(&qs[i]), 10))
            })
        });
        group.finish();
        let (p50, p99) = latency_percentiles(&qs, |q| {
            black_box(index.rank(&catalog, std::slice::from_ref(q), 10));
        });
        eprintln!(
            "hybrid_{size}: {} queries, p50 {p50:.0} µs, p99 {p99:.0} µs",
            qs.len()
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
