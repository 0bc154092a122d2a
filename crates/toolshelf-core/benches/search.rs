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

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use toolshelf_core::search::SearchIndex;

mod common;

use common::{catalog_of, latency_percentiles, pooled_tools, queries};

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
        let (p50, p99) = latency_percentiles(&qs, |q| {
            black_box(index.rank(&catalog, std::slice::from_ref(q), 10));
        });
        eprintln!(
            "search_{size}: {} queries, p50 {p50:.0} µs, p99 {p99:.0} µs",
            qs.len()
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
