//! Description templates: what rendering a session's surface costs when tools carry templates.
//!
//! A session renders every visible tool's template once, when it is created (the gateway on its
//! first `tools/list`, the proxy on a conversation's first request). Catalogs of 10, 100 and
//! 1,000 tools, every one with a template of the size the README shows (a `part`, a `tag`, a
//! `render_section` over the parameter names), all resident; against the same catalog without
//! templates, which is the cost of the surface alone.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolshelf_core::template::SessionValues;
use toolshelf_core::{Catalog, Compiled, Config, Format};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TEMPLATE: &str = "\
description = join([
    part(pkg.description, 'Paths are relative to', tag('workspace', session.workspace) + '.'),
    render_section('Parameters', pkg.params),
    part('Owned by', pkg.team) if has(pkg, 'team') else None,
], sep='\\n\\n')
";

fn catalog(size: usize, templated: bool) -> Catalog {
    let tools: Vec<_> = (0..size)
        .map(|i| {
            let mut t = json!({
                "name": format!("tool_{i}"),
                "description": format!("Does thing number {i} with a file."),
                "defer_loading": false,
                "input_schema": {"type": "object", "properties": {
                    "path": {"type": "string"}, "mode": {"type": "string"}, "count": {"type": "integer"}
                }}
            });
            if templated {
                t["description_template"] = json!(TEMPLATE);
            }
            t
        })
        .collect();
    Catalog::from_value(&json!(tools), "bench").expect("catalog")
}

fn bench(c: &mut Criterion) {
    let compiled = Compiled::new(
        Config::from_toml_str("[template.vars]\nteam = \"payments\"", "bench").expect("config"),
        "bench",
        None,
    )
    .expect("compiles");
    let session = SessionValues {
        mode: None,
        client: Some("bench".into()),
        workspace: Some("/src/shop".into()),
    };
    let mut group = c.benchmark_group("session_surface");
    group.sample_size(10);
    for size in [10, 100, 1000] {
        for templated in [false, true] {
            let cat = catalog(size, templated);
            let exposure = compiled.expose(&cat);
            let label = format!("{size}_{}", if templated { "templated" } else { "plain" });
            group.bench_function(label, |b| {
                b.iter(|| {
                    let s = compiled
                        .session_surface(&cat, &exposure, &session)
                        .expect("renders");
                    black_box(s.tools(&cat, Format::Anthropic).len())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
