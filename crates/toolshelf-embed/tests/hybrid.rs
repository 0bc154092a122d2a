//! BM25F fused with the bundled embedding ranker: cross-language retrieval, abstention, reasons
//! and tie order.

use serde_json::{Value, json};
use toolshelf_core::Catalog;
use toolshelf_core::search::SearchIndex;

fn tools() -> Value {
    json!([
        {"name": "weather_now", "description": "Get the current weather and temperature forecast for a city"},
        {"name": "send_mail", "description": "Send an email message to a contact"},
        {"name": "read_file", "description": "Read the contents of a file from disk"},
        {"name": "huilv", "description": "查询两种货币之间的实时汇率"},
        {"name": "fanyi", "description": "把一段文本翻译成另一种语言"},
        {"name": "book_flight", "description": "预订航班机票"}
    ])
}

fn hybrid(catalog: &Catalog) -> SearchIndex {
    let all: Vec<usize> = (0..catalog.tools().len()).collect();
    let mut index = SearchIndex::build(catalog, &all);
    toolshelf_embed::attach_bundled(&mut index, catalog).expect("bundled model");
    index
}

fn top(index: &SearchIndex, catalog: &Catalog, query: &str) -> Vec<(String, String)> {
    index
        .rank(catalog, &[query.to_owned()], 3)
        .into_iter()
        .map(|h| (h.name, h.reason))
        .collect()
}

#[test]
fn chinese_queries_find_english_tools_and_the_reverse() {
    let c = Catalog::from_value(&tools(), "t").expect("catalog");
    let bm25_only = SearchIndex::build(&c, &(0..c.tools().len()).collect::<Vec<_>>());
    let idx = hybrid(&c);
    for (query, want) in [
        ("今天天气怎么样", "weather_now"),
        ("发送电子邮件", "send_mail"),
        ("读取文件", "read_file"),
        ("convert dollars to another currency", "huilv"),
        ("translate this sentence", "fanyi"),
    ] {
        // BM25F alone cannot bridge the languages...
        assert!(
            bm25_only
                .rank(&c, &[query.to_owned()], 3)
                .iter()
                .all(|h| h.name != want),
            "{query}: lexical search should not find {want}"
        );
        // ...the fused ranking puts the right tool first, and says it matched on meaning.
        let got = top(&idx, &c, query);
        assert_eq!(
            got.first().map(|h| h.0.as_str()),
            Some(want),
            "{query}: {got:?}"
        );
        assert!(got[0].1.contains("meaning"), "{query}: {}", got[0].1);
    }
}

#[test]
fn nonsense_still_finds_nothing() {
    let c = Catalog::from_value(&tools(), "t").expect("catalog");
    let idx = hybrid(&c);
    for query in ["xylophone quasar zebra", "the of and please", "嗯嗯啊啊"] {
        assert!(
            top(&idx, &c, query).is_empty(),
            "{query}: {:?}",
            top(&idx, &c, query)
        );
    }
}

#[test]
fn ties_break_by_name_whatever_the_input_order() {
    // The same tool on three servers: equal on every ranker, so only the name can order them.
    let twins = |order: &[usize]| {
        let servers: Vec<Value> = order
            .iter()
            .map(|&i| {
                let name = ["beta", "alpha", "gamma"][i];
                json!({"name": name, "description": "Forecasts",
                       "tools": [{"name": "weather", "description": "Weather forecast for a city"}]})
            })
            .collect();
        json!({"servers": servers})
    };
    let mut results = Vec::new();
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
        let c = Catalog::from_value(&twins(&order), "t").expect("catalog");
        let idx = hybrid(&c);
        for query in ["weather forecast", "天气预报"] {
            let names: Vec<String> = top(&idx, &c, query).into_iter().map(|h| h.0).collect();
            results.push(names);
        }
    }
    for r in &results {
        assert_eq!(
            r,
            &[
                "mcp__alpha__weather",
                "mcp__beta__weather",
                "mcp__gamma__weather"
            ]
        );
    }
}

#[test]
fn tool_vectors_are_cached_on_disk_and_reused() {
    use toolshelf_embed::{Embedder, Semantic, VectorCache};
    let c = Catalog::from_value(&tools(), "t").expect("catalog");
    let index = SearchIndex::build(&c, &(0..c.tools().len()).collect::<Vec<_>>());
    let embedder = Embedder::bundled().expect("model");
    let path = std::env::temp_dir().join(format!("toolshelf-vectors-{}.bin", std::process::id()));
    let _ = std::fs::remove_file(&path);

    let mut cache = VectorCache::load(&path, embedder.dim());
    assert!(cache.is_empty());
    let fresh = Semantic::build_cached(embedder, &c, &index, &mut cache);
    assert_eq!(cache.len(), c.tools().len());
    cache.save(&path).expect("save");

    let mut reloaded = VectorCache::load(&path, embedder.dim());
    assert_eq!(reloaded.len(), c.tools().len());
    let again = Semantic::build_cached(embedder, &c, &index, &mut reloaded);
    assert_eq!(reloaded.embedded(), 0, "every vector came from the file");
    assert_eq!(
        again.rows(),
        fresh.rows(),
        "cached vectors equal freshly embedded ones"
    );

    // A file cut short is ignored, not trusted.
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() - 1]).expect("write");
    assert!(VectorCache::load(&path, embedder.dim()).is_empty());
    // So is one written for another model.
    std::fs::write(&path, b"toolshelf-vectors-v1 another-model\n").expect("write");
    assert!(VectorCache::load(&path, embedder.dim()).is_empty());
    let _ = std::fs::remove_file(&path);
}
