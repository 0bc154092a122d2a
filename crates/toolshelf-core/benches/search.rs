//! Search benchmarks: index build and fuzzy query latency at 1k, 10k and 100k tools.
//!
//! Large catalogs are synthesized by pooling the evaluation catalogs (ACEBench zh/en, MetaTool)
//! and adding renamed copies until the size is reached, so term statistics stay realistic.
//! Queries are drawn from the evaluation query files. The data directory is
//! `$TOOLSHELF_EVAL_DIR`, default `../shared/eval` beside the repository.
//!
//! Besides criterion's timings, each size prints p50/p99 of single-query latency measured over
//! every sampled query, since tail latency is part of the target.

use criterion::{Criterion, criterion_group, criterion_main};
use toolshelf_core::search::SearchIndex;

mod common;

// The binary's allocator, so latencies are the shipped ones.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    toolshelf_core::search::analyze::warm_up();
    common::bench_sizes(c, "search", usize::MAX, SearchIndex::build);
}

criterion_group!(benches, bench);
criterion_main!(benches);
