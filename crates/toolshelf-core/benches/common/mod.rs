//! Shared by the search benchmarks of toolshelf-core and toolshelf-embed: catalogs of any size
//! synthesized from the evaluation catalogs, and a sample of their queries.

#![allow(dead_code)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion};
use toolshelf_core::search::SearchIndex;

use serde_json::Value;
use toolshelf_core::Catalog;

const SETS: [&str; 4] = [
    "acebench_zh",
    "acebench_en",
    "metatool_single",
    "metatool_multi",
];

pub fn eval_dir() -> PathBuf {
    std::env::var_os("TOOLSHELF_EVAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/eval"))
}

pub fn read(name: &str) -> String {
    let path = eval_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} (set TOOLSHELF_EVAL_DIR): {e}",
            path.display()
        )
    })
}

pub fn pooled_tools() -> Vec<Value> {
    let mut tools = Vec::new();
    for set in SETS {
        let v: Value =
            serde_json::from_str(&read(&format!("{set}.catalog.json"))).expect("catalog json");
        tools.extend(v.as_array().expect("array").iter().cloned());
    }
    tools
}

pub fn catalog_of(pool: &[Value], size: usize) -> Catalog {
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

pub fn queries() -> Vec<String> {
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

/// p50 and p99 of `f` over every query (three times each), in microseconds.
pub fn latency_percentiles(queries: &[String], mut f: impl FnMut(&String)) -> (f64, f64) {
    // Three passes over every query: one pass's p50 moved by 10-15% from run to run on a shared
    // machine.
    let mut lat: Vec<f64> = (0..3)
        .flat_map(|_| queries.iter())
        .map(|q| {
            let t = Instant::now();
            f(q);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((p / 100.0) * (lat.len() - 1) as f64).round() as usize];
    (pct(50.0), pct(99.0))
}

/// The catalog sizes to measure: `$TOOLSHELF_BENCH_SIZES` (comma-separated, e.g. `10000`), else
/// 1k, 10k and 100k.
pub fn sizes() -> Vec<usize> {
    match std::env::var("TOOLSHELF_BENCH_SIZES") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("TOOLSHELF_BENCH_SIZES: {s:?} is not a size"))
            })
            .collect(),
        Err(_) => vec![1_000, 10_000, 100_000],
    }
}

/// For each size: a synthetic catalog, `build`'s time (criterion, up to `bench_build_up_to`
/// tools; larger builds are timed once), query time (criterion) and p50/p99 over every query.
pub fn bench_sizes(
    c: &mut Criterion,
    label: &str,
    bench_build_up_to: usize,
    build: impl Fn(&Catalog, &[usize]) -> SearchIndex,
) {
    let pool = pooled_tools();
    let qs = queries();
    for size in sizes() {
        let catalog = catalog_of(&pool, size);
        let all: Vec<usize> = (0..catalog.tools().len()).collect();
        let mut group = c.benchmark_group(format!("{label}_{size}"));
        group.sample_size(10);
        if size <= bench_build_up_to {
            group.bench_function(BenchmarkId::new("build", size), |b| {
                b.iter(|| black_box(build(&catalog, &all)))
            });
        }
        let t = Instant::now();
        let index = build(&catalog, &all);
        eprintln!(
            "{label}_{size}: build {:.0} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
        let mut i = 0;
        group.bench_function(BenchmarkId::new("query", size), |b| {
            b.iter(|| {
                i = (i + 1) % qs.len();
                black_box(index.rank(std::slice::from_ref(&qs[i]), 10))
            })
        });
        group.finish();
        let (p50, p99) = latency_percentiles(&qs, |q| {
            black_box(index.rank(std::slice::from_ref(q), 10));
        });
        eprintln!(
            "{label}_{size}: {} queries, p50 {p50:.0} µs, p99 {p99:.0} µs",
            qs.len()
        );
    }
}
