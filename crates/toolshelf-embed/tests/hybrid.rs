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

fn top(index: &SearchIndex, query: &str) -> Vec<(String, String)> {
    index
        .rank(&[query.to_owned()], 3)
        .into_iter()
        .map(|h| (h.name.to_string(), h.reason))
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
                .rank(&[query.to_owned()], 3)
                .iter()
                .all(|h| &*h.name != want),
            "{query}: lexical search should not find {want}"
        );
        // ...the fused ranking puts the right tool first, and says it matched on meaning.
        let got = top(&idx, query);
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
            top(&idx, query).is_empty(),
            "{query}: {:?}",
            top(&idx, query)
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
            let names: Vec<String> = top(&idx, query).into_iter().map(|h| h.0).collect();
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

#[test]
fn a_tools_server_counts_toward_its_meaning() {
    use toolshelf_core::search::Retriever;
    use toolshelf_embed::{Embedder, Semantic};
    // Two servers with the same `trending` tool, told apart only by their other tools.
    let c = Catalog::from_value(
        &json!({"servers": [
            {"name": "clips", "description": "", "tools": [
                {"name": "trending", "description": "What is trending now"},
                {"name": "video_search", "description": "Search videos by keyword"},
                {"name": "video_details", "description": "Details and related videos of one video"}]},
            {"name": "charts", "description": "", "tools": [
                {"name": "trending", "description": "What is trending now"},
                {"name": "song_lyrics", "description": "Lyrics of a song"},
                {"name": "top_artists", "description": "The most played music artists this week"}]}
        ]}),
        "t",
    )
    .expect("catalog");
    let index = SearchIndex::build(&c, &(0..c.tools().len()).collect::<Vec<_>>());
    let mut semantic = Semantic::build(Embedder::bundled().expect("model"), &c, &index);
    let doc = |name: &str| {
        index
            .catalog_indices()
            .iter()
            .position(|&i| c.tools()[i].name == name)
            .expect(name)
    };
    let (clips, charts) = (doc("mcp__clips__trending"), doc("mcp__charts__trending"));
    let allowed = vec![true; index.len()];
    let scores = |s: &Semantic, query: &str| {
        let mut v = vec![0.0; index.len()];
        s.score(&index.parse(query), &allowed, &mut v);
        v
    };
    semantic.group_blend = false;
    for query in ["trending videos", "trending songs"] {
        let alone = scores(&semantic, query);
        assert!(alone[clips] > 0.0, "{query}: {alone:?}");
        assert_eq!(
            alone[clips], alone[charts],
            "{query}: same text, same score"
        );
    }
    semantic.group_blend = true;
    let videos = scores(&semantic, "trending videos");
    assert!(videos[clips] > videos[charts], "{videos:?}");
    let songs = scores(&semantic, "trending songs");
    assert!(songs[charts] > songs[clips], "{songs:?}");

    // A flat catalog has no groups: the weight changes nothing.
    let flat = Catalog::from_value(&tools(), "t").expect("catalog");
    let index = SearchIndex::build(&flat, &(0..flat.tools().len()).collect::<Vec<_>>());
    let mut semantic = Semantic::build(Embedder::bundled().expect("model"), &flat, &index);
    let allowed = vec![true; index.len()];
    let q = index.parse("weather forecast");
    let (mut with, mut without) = (vec![0.0; index.len()], vec![0.0; index.len()]);
    semantic.score(&q, &allowed, &mut with);
    semantic.group_blend = false;
    semantic.score(&q, &allowed, &mut without);
    assert_eq!(with, without);
}

#[test]
fn the_order_a_schema_lists_its_params_in_changes_no_ranking() {
    // A tool with more parameter text than the embedding reads: which params it reads must not
    // depend on the order the server listed them in, which carries no meaning in JSON.
    let topics = [
        "the colour of the invoice header",
        "the language of the weather report",
        "the currency to convert prices into",
        "the timezone of the calendar event",
        "the font used for the printed label",
        "the airline of the booked flight",
    ];
    let params: Vec<(String, Value)> = (0..60)
        .map(|i| {
            let topic = topics[i % topics.len()];
            (
                format!("option_{i:02}"),
                json!({"type": "string", "description": format!("Option {i}: {topic}, spelled out in full words for the service")}),
            )
        })
        .collect();
    let catalog = |reversed: bool| {
        let mut props = serde_json::Map::new();
        let mut ordered = params.clone();
        if reversed {
            ordered.reverse();
        }
        for (name, schema) in ordered {
            props.insert(name, schema);
        }
        let tools = json!([
            {"name": "configure", "description": "Configure the service",
             "inputSchema": {"type": "object", "properties": props, "required": ["option_59"]}},
            {"name": "send_mail", "description": "Send an email message to a contact"},
            {"name": "book_flight", "description": "Book a flight with an airline"},
            {"name": "weather_now", "description": "Get the weather report for a city"}
        ]);
        Catalog::from_value(&tools, "t").expect("catalog")
    };
    let ranked = |reversed: bool| {
        let c = catalog(reversed);
        let idx = hybrid(&c);
        [
            "airline flight option",
            "weather report language",
            "invoice colour",
        ]
        .iter()
        .map(|q| {
            idx.rank(&[(*q).to_owned()], 4)
                .into_iter()
                .map(|h| format!("{} {:.6} {}", h.name, h.score, h.reason))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
    };
    assert_eq!(ranked(false), ranked(true));
}
