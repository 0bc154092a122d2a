//! Hybrid (BM25F + embeddings) benchmarks at 1k, 10k and 100k tools: index build including
//! embedding every tool, and query latency with both rankers fused. Same synthetic catalogs and
//! queries as toolshelf-core's search benchmark.

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use toolshelf_core::search::SearchIndex;

// The binary's allocator, so latencies are the shipped ones.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../../toolshelf-core/benches/common/mod.rs"]
mod common;

fn bench(c: &mut Criterion) {
    toolshelf_core::search::analyze::warm_up();
    let t = Instant::now();
    toolshelf_embed::Embedder::bundled().expect("bundled model");
    eprintln!("model load: {:.0} ms", t.elapsed().as_secs_f64() * 1000.0);
    common::bench_sizes(c, "hybrid", 10_000, |catalog, all| {
        let mut index = SearchIndex::build(catalog, all);
        toolshelf_embed::attach_bundled(&mut index, catalog).expect("model");
        index
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
