//! tool_search end to end over the core: requests, ranking rules, the response text and its
//! budget, and determinism.

use serde_json::{Value, json};
use toolshelf_core::config::SearchConfig;
use toolshelf_core::search::render::{Outcome, search};
use toolshelf_core::search::{SearchIndex, SearchRequest};
use toolshelf_core::{Catalog, Compiled, Config, State};

const CATALOG: &str = include_str!("../../../examples/catalog.json");
const CONFIG: &str = include_str!("../../../examples/toolshelf.toml");

struct Env {
    catalog: Catalog,
    index: SearchIndex,
    config: SearchConfig,
}

fn env_with(catalog: Catalog, mode: Option<&str>) -> Env {
    let config = Config::from_toml_str(CONFIG, "toolshelf.toml").expect("config");
    let compiled = Compiled::new(config.clone(), "toolshelf.toml", mode).expect("compiles");
    let surface = compiled.surface(&catalog, &compiled.expose(&catalog));
    let visible: Vec<usize> = surface
        .resident
        .iter()
        .chain(&surface.deferred)
        .copied()
        .collect();
    let index = SearchIndex::build(&catalog, &visible);
    Env {
        catalog,
        index,
        config: config.search,
    }
}

/// Every tool of the catalog `tools` searchable, with the default search settings.
fn env_of(tools: Value) -> Env {
    let catalog = Catalog::from_value(&tools, "t").expect("catalog");
    let all: Vec<usize> = (0..catalog.tools().len()).collect();
    Env {
        index: SearchIndex::build(&catalog, &all),
        catalog,
        config: SearchConfig::default(),
    }
}

fn env(mode: Option<&str>) -> Env {
    env_with(
        Catalog::from_json_str(CATALOG, "catalog.json").expect("catalog"),
        mode,
    )
}

fn run(e: &Env, args: Value) -> toolshelf_core::search::render::SearchResponse {
    let request = SearchRequest::from_json(&args).expect("valid request");
    search(&e.index, &e.catalog, &request, &e.config)
}

fn names(e: &Env, queries: &[&str], limit: usize) -> Vec<String> {
    let q: Vec<String> = queries.iter().map(|s| (*s).to_owned()).collect();
    e.index
        .rank(&q, limit)
        .into_iter()
        .map(|h| h.name.to_string())
        .collect()
}

#[test]
fn exactly_one_of_names_or_queries() {
    for bad in [
        json!({}),
        json!({"tool_names": ["a"], "queries": ["b"]}),
        json!({"limit": 3}),
    ] {
        let err = SearchRequest::from_json(&bad).expect_err("invalid");
        assert!(
            err.contains("exactly one of tool_names or queries"),
            "{err}"
        );
        assert!(
            err.contains("{\"queries\": [\"read file\", \"读取文件\"]}"),
            "shows an example: {err}"
        );
    }
    for bad in [
        json!({"queries": []}),
        json!({"queries": [1]}),
        json!({"queries": ["x"], "limit": 0}),
        json!({"query": "x"}),
        json!("x"),
    ] {
        assert!(SearchRequest::from_json(&bad).is_err(), "{bad}");
    }
    // Empty lists count as not given: this is "neither", not "both".
    let err =
        SearchRequest::from_json(&json!({"tool_names": [], "queries": []})).expect_err("empty");
    assert!(err.contains("hold no non-blank entry"), "{err}");
    let err = SearchRequest::from_json(&json!({"tool_names": [" "], "queries": ["git log"]}))
        .expect("a blank list is not given");
    assert_eq!(
        err,
        SearchRequest::Queries {
            queries: vec!["git log".into()],
            limit: None
        }
    );
    let err = SearchRequest::from_json(&json!({"tool_names": [], "queries": ["x"], "limit": 3}));
    assert!(err.is_ok(), "{err:?}");
    let err =
        SearchRequest::from_json(&json!({"queries": ["x"], "extra": 1})).expect_err("unknown");
    assert!(err.contains("unknown field `extra`"), "{err}");
    assert_eq!(
        SearchRequest::from_json(&json!({"queries": "git log"}))
            .expect("a lone string is accepted"),
        SearchRequest::Queries {
            queries: vec!["git log".into()],
            limit: None
        }
    );
}

#[test]
fn fuzzy_limit_defaults_and_is_capped_but_exact_lookups_are_not() {
    let e = env(None);
    let r = run(&e, json!({"queries": ["file"]}));
    assert_eq!(
        r.text
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .count(),
        5,
        "default limit 5:\n{}",
        r.text
    );
    let r = run(&e, json!({"queries": ["file"], "limit": 50}));
    let numbered = r
        .text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert_eq!(numbered, 10, "capped at max_limit 10");
    let all: Vec<String> = e
        .catalog
        .tools()
        .iter()
        .filter(|t| t.server.as_deref() == Some("filesystem"))
        .map(|t| t.name.clone())
        .collect();
    assert!(all.len() > 10);
    let r = run(&e, json!({"tool_names": all}));
    assert_eq!(r.loaded.len(), all.len(), "every named tool is loaded");
}

#[test]
fn exact_lookup_by_canonical_and_bare_name() {
    let e = env(None);
    let r = run(
        &e,
        json!({"tool_names": ["mcp__git__git_log", "git_status"]}),
    );
    let got: Vec<&str> = r.hits.iter().map(|h| &*h.name).collect();
    assert_eq!(got, ["mcp__git__git_log", "mcp__git__git_status"]);
    assert!(
        r.text
            .contains("call: defer_execute {\"tool_name\":\"mcp__git__git_log\""),
        "{}",
        r.text
    );
    assert_eq!(r.outcome, Outcome::Found);
}

#[test]
fn ambiguous_bare_names_return_every_candidate() {
    let e = env_of(json!({"servers": [
        {"name": "a", "tools": [{"name": "search", "description": "search a"}]},
        {"name": "b", "tools": [{"name": "search", "description": "search b"}]}
    ]}));
    let r = run(&e, json!({"tool_names": ["search"]}));
    assert_eq!(r.hits.len(), 2);
    assert!(r.text.contains("\"search\" names 2 tools"), "{}", r.text);
}

#[test]
fn unknown_names_fall_back_to_search_and_say_so() {
    let e = env(None);
    let r = run(&e, json!({"tool_names": ["git_history"]}));
    assert!(
        r.text
            .starts_with("No tool is named \"git_history\"; a search for it found:"),
        "{}",
        r.text
    );
    assert!(r.hits.iter().any(|h| h.name.starts_with("mcp__git__")));
    assert_eq!(r.unresolved, ["git_history"]);
    let r = run(&e, json!({"tool_names": ["zzqx"]}));
    assert_eq!(r.outcome, Outcome::NoMatch);
    assert!(
        r.text.starts_with("No tool matches the names \"zzqx\"."),
        "{}",
        r.text
    );
    assert_eq!(r.unresolved, ["zzqx"]);
    let r = run(&e, json!({"tool_names": ["Write", "zzqx", "git_log"]}));
    assert_eq!(r.unresolved, ["zzqx"]);
    assert!(
        run(&e, json!({"tool_names": ["Write"]}))
            .unresolved
            .is_empty()
    );
}

#[test]
fn listed_hits_come_first_and_the_rest_are_only_named() {
    let e = env(None);
    for limit in [1usize, 3, 5] {
        let r = run(&e, json!({"queries": ["read a file"], "limit": limit}));
        assert_eq!(r.listed, limit, "{}", r.text);
        assert!(r.hits.len() > limit, "{}", r.text);
        let (_, also) = r.text.split_once("Also matching").expect("names-only line");
        for (i, h) in r.hits.iter().enumerate() {
            assert_eq!(
                i >= limit,
                also.contains(&*h.name),
                "{i} {}: {}",
                h.name,
                r.text
            );
        }
    }
}

#[test]
fn an_exact_name_inside_a_query_ranks_first() {
    let e = env(None);
    // The words alone rank the deprecated `read_file` below its replacement; its name, written
    // in the query, ranks it first all the same.
    let read = names(&e, &["read file"], 10);
    let at = |n: &str| read.iter().position(|x| x == n).unwrap_or(usize::MAX);
    assert!(
        at("mcp__filesystem__read_text_file") < at("mcp__filesystem__read_file"),
        "{read:?}"
    );
    assert_eq!(
        names(&e, &["read a file with mcp__filesystem__read_file"], 1),
        ["mcp__filesystem__read_file"]
    );
    assert_eq!(
        names(&e, &["read a file with read_media_file please"], 1),
        ["mcp__filesystem__read_media_file"]
    );
}

#[test]
fn plus_terms_must_be_in_the_name() {
    let e = env(None);
    let got = names(&e, &["+commit changes"], 10);
    assert!(!got.is_empty());
    assert!(got.iter().all(|n| n.contains("commit")), "{got:?}");
    // A number with its sign is a number, not a name the tool must carry.
    let got = names(&e, &["commit changes for +4915112345678"], 10);
    assert!(
        got.iter().any(|n| n.contains("commit")),
        "a phone number does not empty the result: {got:?}"
    );
    // A `+term` no tool's name has is read as a plain word, with a note, not as a filter that
    // empties the result.
    let got = names(&e, &["commit changes, +aug 0.74"], 10);
    assert!(got.iter().any(|n| n.contains("commit")), "{got:?}");
    assert_eq!(
        e.index.notes(&["commit changes, +aug 0.74".to_owned()]),
        ["no tool's name has \"aug\", so \"+aug\" was read as a plain word."]
    );
    assert!(e.index.notes(&["+commit changes".to_owned()]).is_empty());
}

#[test]
fn server_filters_narrow_first() {
    let e = env(None);
    for q in [
        "server:memory read",
        "mcp__memory__ read",
        "server:MEMORY read",
    ] {
        let got = names(&e, &[q], 10);
        assert!(!got.is_empty(), "{q}");
        assert!(
            got.iter().all(|n| n.starts_with("mcp__memory__")),
            "{q}: {got:?}"
        );
    }
    // Several server filters search each of them.
    let both = names(&e, &["server:memory server:git read"], 10);
    assert!(
        both.iter().any(|n| n.starts_with("mcp__memory__")),
        "{both:?}"
    );
    assert!(both.iter().any(|n| n.starts_with("mcp__git__")), "{both:?}");
    assert!(
        both.iter()
            .all(|n| n.starts_with("mcp__memory__") || n.starts_with("mcp__git__")),
        "{both:?}"
    );
}

/// A `server:` value written in prose, with punctuation around it, still names the server:
/// alone it lists the server's tools, with words it filters them, and no note says otherwise.
#[test]
fn a_server_value_with_punctuation_around_it_names_the_server() {
    let e = env(None);
    let listed = names(&e, &["server:git"], 50);
    assert!(
        listed.len() > 3 && listed.iter().all(|n| n.starts_with("mcp__git__")),
        "{listed:?}"
    );
    let ranked = names(&e, &["server:git log history"], 10);
    for value in [
        "server:git,",
        "server:git.",
        "server:git;",
        "(server:git)",
        "server:\"git\"",
        "server:\"git\",",
    ] {
        assert_eq!(names(&e, &[value], 50), listed, "{value}");
        assert_eq!(
            e.index.notes(&[value.to_owned()]),
            Vec::<String>::new(),
            "{value}"
        );
        let r = run(&e, json!({ "queries": [value] }));
        assert!(
            r.text
                .contains("why: a tool of server git (the query names only servers)"),
            "{value}: {}",
            r.text
        );
        let query = format!("{value} log history");
        assert_eq!(names(&e, &[&query], 10), ranked, "{query}");
    }
}

/// Only punctuation at the ends of a value is taken for prose: a `.` inside a server's name
/// stays, so `server:foo.bar` is the server foo.bar, not foo, with or without a full stop after.
#[test]
fn a_dot_inside_a_server_value_is_part_of_the_name() {
    let e = env_of(json!({"servers": [
        {"name": "foo", "tools": [{"name": "ping", "description": "ping foo"}]},
        {"name": "foo.bar", "tools": [{"name": "pong", "description": "pong foo.bar"}]}
    ]}));
    let foo_bar = names(&e, &["server:foo.bar"], 5);
    assert_eq!(foo_bar.len(), 1, "{foo_bar:?}");
    assert!(foo_bar[0].ends_with("__pong"), "{foo_bar:?}");
    for q in ["server:foo.bar.", "server:foo.bar,", "(server:foo.bar)"] {
        assert_eq!(names(&e, &[q], 5), foo_bar, "{q}");
    }
    for q in ["server:foo", "server:foo.", "server:foo,"] {
        assert_eq!(names(&e, &[q], 5), ["mcp__foo__ping"], "{q}");
    }
}

#[test]
fn ignored_parts_of_a_query_are_named_in_the_response() {
    let e = env(None);
    // An unknown server filter is dropped, and the response says so instead of silently
    // returning nothing (or silently ignoring it).
    for q in ["server:nosuch read file", "mcp__nosuch__ read file"] {
        let r = run(&e, json!({ "queries": [q] }));
        assert_eq!(r.outcome, Outcome::Found, "{q}");
        assert!(
            r.text.starts_with("Note: ") && r.text.contains("\"nosuch\" is unknown"),
            "{q}: {}",
            r.text
        );
        assert!(r.text.contains("servers: "), "{}", r.text);
        assert!(
            r.hits.iter().any(|h| h.server.as_deref() != Some("memory")),
            "every server searched"
        );
    }
    let r = run(&e, json!({"queries": ["server:nosuch xylophone quasar"]}));
    assert_eq!(r.outcome, Outcome::NoMatch);
    assert!(r.text.contains("\"nosuch\" is unknown"), "{}", r.text);
    // A known filter adds no note.
    let r = run(&e, json!({"queries": ["server:memory read"]}));
    assert!(!r.text.contains("Note: "), "{}", r.text);
}

#[test]
fn no_padding_with_noise() {
    let e = env(None);
    let r = run(&e, json!({"queries": ["the of and please"]}));
    assert_eq!(r.outcome, Outcome::NoMatch);
    assert!(r.text.contains("both English and Chinese"), "{}", r.text);
    let r = run(&e, json!({"queries": ["xylophone quasar"]}));
    assert_eq!(r.outcome, Outcome::NoMatch);
}

#[test]
fn every_hit_says_why() {
    let e = env(None);
    let hits = e.index.rank(&["show commit history".to_owned()], 10);
    assert!(!hits.is_empty());
    for h in &hits {
        assert!(h.reason.contains(" in "), "{}: {}", h.name, h.reason);
    }
    assert_eq!(&*hits[0].name, "mcp__git__git_log");
}

#[test]
fn chinese_and_mixed_queries() {
    let e = env_of(json!([
        {"name": "weather_now", "description": "查询城市的实时天气和温度"},
        {"name": "send_mail", "description": "发送电子邮件给联系人"},
        {"name": "git_commit", "description": "Record changes to the repository"}
    ]));
    assert_eq!(names(&e, &["北京今天的天气怎么样"], 1), ["weather_now"]);
    assert_eq!(names(&e, &["给老板发邮件"], 1), ["send_mail"]);
    assert_eq!(names(&e, &["提交 commit"], 1), ["git_commit"]);
}

/// A limit below the number of queries (steps of one task) still lists one hit per step: each
/// step's best gets its schema, none is left only named after "Also matching".
#[test]
fn every_query_is_listed_whatever_the_limit() {
    let e = env(None);
    let r = run(
        &e,
        json!({"queries": ["read file", "git commit", "memory graph"], "limit": 2}),
    );
    let listed: Vec<&str> = r
        .text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(listed.len(), 3, "{}", r.text);
    for step in ["mcp__filesystem__read", "git_commit", "read_graph"] {
        assert!(
            listed.iter().any(|l| l.contains(step)),
            "{step}: {}",
            r.text
        );
    }
    let one = run(&e, json!({"queries": ["read file"], "limit": 2}));
    let numbered = one
        .text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert_eq!(numbered, 2, "one query keeps its limit:\n{}", one.text);
}

#[test]
fn several_queries_are_intents_merged_round_robin() {
    let e = env(None);
    // Each query alone puts another tool first, and both rank a third highly. Merged, each
    // query's best comes first (in the order given), then the tool both found leads the next
    // round: every intent is represented, and the shared tool is not lost.
    let sizes = names(&e, &["file metadata size"], 3);
    let listing = names(&e, &["directory listing"], 3);
    let combined = names(&e, &["file metadata size", "directory listing"], 3);
    let both = "mcp__filesystem__list_directory_with_sizes";
    assert_ne!(sizes[0], both, "{sizes:?}");
    assert_ne!(listing[0], both, "{listing:?}");
    assert!(sizes.contains(&both.to_owned()) && listing.contains(&both.to_owned()));
    assert_eq!(combined, [&sizes[0], &listing[0], both], "{combined:?}");
}

#[test]
fn hidden_tools_are_never_returned() {
    let e = env(Some("ask"));
    let config = Config::from_toml_str(CONFIG, "t").expect("config");
    let exposure = Compiled::new(config, "t", Some("ask"))
        .expect("compiles")
        .expose(&e.catalog);
    let hidden: Vec<&str> = e
        .catalog
        .tools()
        .iter()
        .zip(&exposure.decisions)
        .filter(|(_, d)| d.state == State::Hidden)
        .map(|(t, _)| t.name.as_str())
        .collect();
    assert!(hidden.contains(&"mcp__git__git_commit"));
    for q in [
        "commit changes",
        "write file",
        "delete entities",
        "git_commit",
        "mcp__git__git_commit",
    ] {
        let got = names(&e, &[q], 10);
        for h in &hidden {
            assert!(!got.iter().any(|n| n == h), "{q} returned hidden {h}");
        }
    }
    let r = run(&e, json!({"tool_names": ["mcp__git__git_commit"]}));
    assert!(
        !r.hits.iter().any(|h| &*h.name == "mcp__git__git_commit"),
        "{}",
        r.text
    );
}

#[test]
fn the_response_never_exceeds_its_budget_and_never_cuts_a_name() {
    let e = env(None);
    let request = SearchRequest::from_json(&json!({"queries": ["file", "文件"], "limit": 10}))
        .expect("request");
    let mut previous_len = usize::MAX;
    // From generous down to the smallest budget the configuration accepts.
    let minimum = Compiled::new(
        Config::from_toml_str("[search]\nresponse_budget_chars = 199", "t").expect("toml"),
        "t",
        None,
    )
    .expect_err("below the minimum");
    assert!(minimum.to_string().contains("at least 200"), "{minimum}");
    for budget in [16_000, 8_000, 4_000, 2_000, 1_000, 600, 400, 300, 200] {
        let config = SearchConfig {
            response_budget_chars: budget,
            ..SearchConfig::default()
        };
        let r = search(&e.index, &e.catalog, &request, &config);
        let len = r.text.chars().count();
        assert!(len <= budget, "budget {budget}: {len} chars\n{}", r.text);
        assert!(len <= previous_len);
        previous_len = len;
        // Every hit is either named in full or counted as left out, and the ones `listed`
        // counts have their line.
        assert!(r.listed <= 10, "budget {budget}");
        for h in &r.hits[..r.listed] {
            assert!(
                r.text.contains(&*h.name),
                "budget {budget}: {}\n{}",
                h.name,
                r.text
            );
        }
        let named = r.hits.iter().filter(|h| r.text.contains(&*h.name)).count();
        if let Some(rest) = r.text.split("(+").nth(1) {
            let omitted: usize = rest
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("count");
            assert_eq!(named + omitted, r.hits.len(), "budget {budget}\n{}", r.text);
        } else if budget >= 400 {
            assert_eq!(named, r.hits.len(), "budget {budget}\n{}", r.text);
        }
    }
}

#[test]
fn descriptions_are_cut_before_names() {
    let e = env(None);
    let request =
        SearchRequest::from_json(&json!({"queries": ["file"], "limit": 10})).expect("request");
    let full = search(&e.index, &e.catalog, &request, &SearchConfig::default());
    let tight = SearchConfig {
        response_budget_chars: full.text.chars().count() / 2,
        ..SearchConfig::default()
    };
    let r = search(&e.index, &e.catalog, &request, &tight);
    for h in &full.hits {
        assert!(r.text.contains(&*h.name), "{} lost:\n{}", h.name, r.text);
    }
}

#[test]
fn responses_do_not_depend_on_catalog_order() {
    let e = env(None);
    let mut v: Value = serde_json::from_str(CATALOG).expect("json");
    v["servers"].as_array_mut().expect("servers").reverse();
    for s in v["servers"].as_array_mut().expect("servers") {
        s["tools"].as_array_mut().expect("tools").reverse();
    }
    let p = env_with(Catalog::from_value(&v, "rev").expect("catalog"), None);
    for args in [
        json!({"queries": ["file"]}),
        json!({"queries": ["git", "提交"]}),
        json!({"tool_names": ["git_log", "nosuch"]}),
    ] {
        assert_eq!(run(&e, args.clone()).text, run(&p, args).text);
    }
}

#[test]
fn response_snapshots() {
    let e = env(None);
    insta::assert_snapshot!(
        "fuzzy_read_file",
        run(&e, json!({"queries": ["read file", "读取文件"]})).text
    );
    insta::assert_snapshot!(
        "fuzzy_commit",
        run(
            &e,
            json!({"queries": ["commit staged changes"], "limit": 3})
        )
        .text
    );
    insta::assert_snapshot!(
        "exact_names",
        run(
            &e,
            json!({"tool_names": ["mcp__git__git_log", "create_entities"]})
        )
        .text
    );
    insta::assert_snapshot!(
        "unknown_name",
        run(&e, json!({"tool_names": ["git_history"]})).text
    );
    insta::assert_snapshot!("no_match", run(&e, json!({"queries": ["xylophone"]})).text);
    // A name written with other case and separators, as the whole query.
    insta::assert_snapshot!(
        "folded_name",
        run(&e, json!({"queries": ["Git-Log"], "limit": 2})).text
    );
    // Server filters alone list that server's tools by name, and the header says so.
    insta::assert_snapshot!(
        "server_listing",
        run(&e, json!({"queries": ["server:memory"], "limit": 3})).text
    );
    // A canonical name that names no tool is said to, before the tools its words find.
    insta::assert_snapshot!(
        "unknown_canonical_name",
        run(
            &e,
            json!({"queries": ["use mcp__git__git_stash to shelve changes"], "limit": 2})
        )
        .text
    );
    let tight = SearchConfig {
        response_budget_chars: 700,
        ..SearchConfig::default()
    };
    let request =
        SearchRequest::from_json(&json!({"queries": ["file"], "limit": 8})).expect("request");
    insta::assert_snapshot!(
        "tight_budget",
        search(&e.index, &e.catalog, &request, &tight).text
    );
}

#[test]
fn an_engine_failure_says_it_is_one() {
    let r = toolshelf_core::search::render::SearchResponse::engine_failure("index missing");
    assert!(
        r.text.starts_with("tool_search failed: index missing."),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("not a sign that no tool matches"),
        "{}",
        r.text
    );
    assert_ne!(
        r.text,
        run(&env(None), json!({"queries": ["xylophone"]})).text
    );
}

#[test]
fn a_lexical_clone_ranks_like_the_original() {
    let e = env(None);
    let copy = e.index.clone_lexical();
    for q in ["read file", "commit changes", "提交", "server:git log"] {
        let a: Vec<_> = e.index.rank(&[q.to_owned()], 10);
        let b: Vec<_> = copy.rank(&[q.to_owned()], 10);
        assert_eq!(a, b, "{q}");
    }
}

#[test]
fn active_tools_are_marked_and_the_marks_stay_within_the_budget() {
    use toolshelf_core::search::render::search_in_session;
    let e = env(None);
    let request =
        SearchRequest::from_json(&json!({"queries": ["read file"], "limit": 5})).expect("request");
    let plain = search(&e.index, &e.catalog, &request, &SearchConfig::default());
    assert!(!plain.text.contains("already active"));
    let all = |_: usize| true;
    let marked = search_in_session(
        &e.index,
        &e.catalog,
        &request,
        &SearchConfig::default(),
        &all,
        &Default::default(),
    );
    assert_eq!(
        marked.text.matches(" (already active)").count(),
        marked.loaded.len(),
        "{}",
        marked.text
    );
    for budget in [200, 300, 600, 1_000] {
        let config = SearchConfig {
            response_budget_chars: budget,
            ..SearchConfig::default()
        };
        let r = search_in_session(
            &e.index,
            &e.catalog,
            &request,
            &config,
            &all,
            &Default::default(),
        );
        assert!(
            r.text.chars().count() <= budget,
            "budget {budget}:\n{}",
            r.text
        );
    }
}

/// MCP servers name their tools `search`, `latest`, `details`: a query that merely contains such a
/// word must not put every tool of that name first.
#[test]
fn a_name_counts_as_a_name_only_when_written_as_one() {
    let mut servers = Vec::new();
    for (server, description) in [
        (
            "flights",
            "Search flights between airports and compare fares",
        ),
        ("music", "Search songs and artists"),
        ("news", "Search news articles"),
        ("shop", "Online shop orders"),
        ("market", "Stock market data"),
    ] {
        servers.push(
            json!({"name": server, "description": description, "tools": [
                {"name": "search", "description": format!("{description}.")},
                {"name": "get_order", "description": "Get an order by id"},
                {"name": format!("{server}_latest_prices"), "description": "Latest prices"}
            ]}),
        );
    }
    servers.push(json!({"name": "travel", "tools": [
        {"name": "find_cheap_flights", "description": "Find the cheapest flights to a destination city", "inputSchema": {"type": "object", "properties": {"destination": {"type": "string"}}}}
    ]}));
    let catalog = Catalog::from_value(&json!({"servers": servers}), "c").expect("catalog");
    let all: Vec<usize> = (0..catalog.tools().len()).collect();
    let index = SearchIndex::build(&catalog, &all);
    let rank = |q: &str| -> Vec<(String, String)> {
        index
            .rank(&[q.to_owned()], 5)
            .into_iter()
            .map(|h| (h.name.to_string(), h.reason))
            .collect()
    };
    // A word inside a sentence is scored like any word: the flight tools lead, not every "search".
    let got = rank("search cheap flights to Tokyo");
    assert!(
        got[0].0 == "mcp__travel__find_cheap_flights" || got[0].0 == "mcp__flights__search",
        "{got:?}"
    );
    assert!(
        got.iter().all(|(_, why)| why != "exact name in the query"),
        "{got:?}"
    );
    assert!(
        !got[..2]
            .iter()
            .any(|(n, _)| n == "mcp__music__search" || n == "mcp__news__search"),
        "{got:?}"
    );
    // Standing alone, the name asks for the tools of that name.
    let alone = rank("search");
    assert_eq!(alone.len(), 5);
    assert!(
        alone
            .iter()
            .all(|(n, why)| n.ends_with("__search") && why == "exact name in the query"),
        "{alone:?}"
    );
    // A canonical name, or an identifier only one tool has, is a name wherever it stands.
    assert_eq!(
        rank("use mcp__news__search please")[0].0,
        "mcp__news__search"
    );
    assert_eq!(
        rank("call music_latest_prices now")[0],
        (
            "mcp__music__music_latest_prices".to_owned(),
            "exact name in the query".to_owned()
        )
    );
    // An identifier several servers share is evidence, not a verdict.
    assert!(
        rank("get_order for my shoes")
            .iter()
            .all(|(_, why)| why != "exact name in the query")
    );
}

/// A tool's server says what it is for when the tool's own text says little: its description and
/// its other tools are evidence for each of its tools.
#[test]
fn a_servers_description_and_sibling_tools_count_for_its_tools() {
    use toolshelf_core::search::RankParams;
    let catalog = Catalog::from_value(
        &json!({"servers": [
            {"name": "12306", "description": "China railway", "tools": [
                {"name": "get-tickets", "description": "Query availability"},
                {"name": "get-stations", "description": "List the train stations of a city"},
                {"name": "get-timetable", "description": "Train timetable between two stations"}
            ]},
            {"name": "cinema", "description": "Movie showtimes", "tools": [
                {"name": "get-tickets", "description": "Buy tickets for a showing"}
            ]},
            {"name": "weather", "description": "Forecasts", "tools": [{"name": "forecast", "description": "Weather forecast for a city"}]}
        ]}),
        "c",
    )
    .expect("catalog");
    let all: Vec<usize> = (0..catalog.tools().len()).collect();
    let first = |params: RankParams| {
        let index = SearchIndex::build_with(&catalog, &all, params);
        index.rank(&["train tickets".to_owned()], 3)
    };
    let with = first(RankParams::default());
    assert_eq!(&*with[0].name, "mcp__12306__get-tickets", "{with:?}");
    let without = first(RankParams {
        group_weight: 0.0,
        ..RankParams::default()
    });
    assert_eq!(
        &*without[0].name, "mcp__cinema__get-tickets",
        "the tool's own text alone favours the cinema: {without:?}"
    );
}

/// `named` counts the hits the text names, however each is shown: with its schema, on one line,
/// after "Also matching", or as the one name of an answer over budget.
#[test]
fn a_response_says_how_many_hits_its_text_names() {
    let tools: Vec<Value> = [
        "list_notes",
        "add_note",
        "archive_notes",
        "mail_notes",
        "tag_notes",
    ]
    .iter()
    .map(|t| json!({"name": t, "description": format!("{t} of the notebook.")}))
    .collect();
    let catalog = Catalog::from_json_str(
        &json!({"servers": [{"name": "notes", "tools": tools}]}).to_string(),
        "catalog.json",
    )
    .expect("catalog");
    let visible: Vec<usize> = (0..catalog.tools().len()).collect();
    let index = SearchIndex::build(&catalog, &visible);
    let request = SearchRequest::Queries {
        queries: vec!["notes".into()],
        limit: Some(2),
    };
    for budget in [16_000, 200, 60] {
        let config = toolshelf_core::config::SearchConfig {
            full_schemas: 1,
            response_budget_chars: budget,
            ..Default::default()
        };
        let r = toolshelf_core::search::render::search(&index, &catalog, &request, &config);
        let in_text: Vec<&str> = r
            .hits
            .iter()
            .filter(|h| r.text.contains(&*h.name))
            .map(|h| &*h.name)
            .collect();
        let named: Vec<&str> = r.hits[..r.named].iter().map(|h| &*h.name).collect();
        assert!(!named.is_empty(), "{}", r.text);
        assert_eq!(named, in_text, "budget {budget}: {}", r.text);
    }
}

/// The example's resident tools (pinned: in the model's list with their schemas), by catalog
/// index, each with the name `listed` gives it.
fn pinned_of(
    e: &Env,
    listed: impl Fn(&str) -> String,
) -> std::collections::BTreeMap<usize, String> {
    let config = Config::from_toml_str(CONFIG, "toolshelf.toml").expect("config");
    let compiled = Compiled::new(config, "toolshelf.toml", None).expect("compiles");
    let surface = compiled.surface(&e.catalog, &compiled.expose(&e.catalog));
    surface
        .resident
        .iter()
        .map(|&i| (i, listed(&e.catalog.tools()[i].name)))
        .collect()
}

fn run_for(
    e: &Env,
    args: Value,
    pinned: &std::collections::BTreeMap<usize, String>,
) -> toolshelf_core::search::render::SearchResponse {
    use toolshelf_core::search::render::{SessionView, search_for};
    let request = SearchRequest::from_json(&args).expect("valid request");
    let view = SessionView {
        active: &|_| false,
        pinned: &|i| pinned.get(&i).cloned(),
        described: &Default::default(),
    };
    search_for(&e.index, &e.catalog, &request, &e.config, &view)
}

#[test]
fn a_pinned_hit_keeps_its_rank_and_says_to_call_it_directly() {
    let e = env(None);
    let pinned = pinned_of(&e, |n| format!("listed_{n}"));
    assert!(pinned.values().any(|n| n == "listed_Bash"), "{pinned:?}");
    let args = json!({"queries": ["run a shell command"], "limit": 3});
    let plain = run(&e, args.clone());
    let r = run_for(&e, args, &pinned);
    assert_eq!(r.hits, plain.hits, "the same ranking");
    assert_eq!(&*r.hits[0].name, "Bash", "{}", r.text);
    assert!(
        r.text.contains(
            "\n1. listed_Bash (already in your tool list with its schema: call it directly)\n"
        ),
        "{}",
        r.text
    );
    for (i, h) in r.hits.iter().enumerate() {
        let is_pinned = pinned.contains_key(&h.index);
        if is_pinned {
            // Named as the list names it, with no schema and no call form.
            assert!(
                !r.text.contains(&format!("\"tool_name\":\"{}\"", h.name))
                    && !r.text.contains(&format!("{}. {}\n", i + 1, h.name)),
                "{}: {}",
                h.name,
                r.text
            );
            assert!(!r.loaded.contains(&h.index), "{} is not loaded", h.name);
        }
    }
    // Every schema place goes to a deferred hit: three within the limit of three, one pinned.
    let full = r.text.matches("   call: defer_execute ").count();
    let deferred_listed = r.hits[..r.listed]
        .iter()
        .filter(|h| !pinned.contains_key(&h.index))
        .count();
    assert_eq!(full, deferred_listed.min(3), "{}", r.text);
    assert_eq!(r.loaded.len(), full);
    // Pinned hits past the limit are named apart, without the hint to fetch their schemas.
    let (_, also) = r
        .text
        .split_once("Also matching (pass names as tool_names to get their schemas): ")
        .expect("names-only line");
    let (deferred_names, pinned_names) = also
        .split_once("\nAlso matching, already in your tool list (call them directly): ")
        .expect("pinned names line");
    assert!(!deferred_names.contains("listed_"), "{}", r.text);
    assert!(
        pinned_names.split(", ").all(|n| n.starts_with("listed_")),
        "{}",
        r.text
    );
    // Within any budget, as every response.
    for budget in [60, 200, 400, 800] {
        let e = Env {
            config: SearchConfig {
                response_budget_chars: budget,
                ..e.config.clone()
            },
            ..env(None)
        };
        let r = run_for(&e, json!({"queries": ["run a shell command"]}), &pinned);
        assert!(r.text.chars().count() <= budget, "{budget}: {}", r.text);
        assert!(r.text.contains("listed_Bash"), "{budget}: {}", r.text);
    }
}

#[test]
fn a_response_of_pinned_hits_only_reads_right() {
    let e = env(None);
    let pinned = pinned_of(&e, str::to_owned);
    let r = run_for(&e, json!({"tool_names": ["Bash", "Read"]}), &pinned);
    assert_eq!(
        r.text,
        "1. Bash (already in your tool list with its schema: call it directly)\n\
         2. Read (already in your tool list with its schema: call it directly)"
    );
    assert!(r.loaded.is_empty());
    assert_eq!(r.outcome, Outcome::Found);
    let r = run_for(&e, json!({"queries": ["server:time"]}), &pinned);
    assert!(
        r.text.ends_with(
            "(by name):\n\n1. mcp__time__convert_time (already in your tool list with its schema: call it directly)\n\
             2. mcp__time__get_current_time (already in your tool list with its schema: call it directly)"
        ),
        "{}",
        r.text
    );
    assert!(r.loaded.is_empty());
    // The no-match text speaks of every tool: the search covers pinned tools too.
    let r = run_for(&e, json!({"queries": ["xylophone"]}), &pinned);
    assert!(
        r.text.starts_with("No tool matches \"xylophone\"."),
        "{}",
        r.text
    );
}

#[test]
fn a_tool_whose_schema_is_broken_is_found_but_not_offered_for_a_call() {
    use toolshelf_core::search::render::{SessionView, search_for};
    let c = Catalog::from_value(
        &json!({"servers": [{"name": "s", "tools": [
            {"name": "fetch_page", "description": "Fetch a web page by URL",
             "inputSchema": {"type": "object", "properties": {"url": {"type": "string", "pattern": "(["}}, "required": ["url"]}},
            {"name": "fetch_feed", "description": "Fetch an RSS feed by URL",
             "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}
        ]}]}),
        "c",
    )
    .expect("catalog");
    let all: Vec<usize> = (0..c.tools().len()).collect();
    let e = Env {
        index: SearchIndex::build(&c, &all),
        catalog: c,
        config: SearchConfig::default(),
    };
    let page = e.catalog.get("mcp__s__fetch_page").expect("tool");
    let problem = toolshelf_core::invoke::schema_problem(&page.input_schema).expect("broken");
    for args in [
        json!({"queries": ["fetch web page"]}),
        json!({"tool_names": ["mcp__s__fetch_page", "mcp__s__fetch_feed"]}),
    ] {
        let r = run(&e, args.clone());
        assert_eq!(&*r.hits[0].name, "mcp__s__fetch_page", "{}", r.text);
        assert!(
            r.text
                .contains("1. mcp__s__fetch_page\n   Fetch a web page by URL\n   why: ")
                && r.text.contains(&format!(
                "   cannot be called: its input schema is not valid JSON Schema ({problem}), so \
                 defer_execute refuses every call to it until its server fixes the schema. Use \
                 another tool, or tell the user.\n\n2. mcp__s__fetch_feed"
            )),
            "{args}: {}",
            r.text
        );
        assert!(
            !r.text.contains("\"tool_name\":\"mcp__s__fetch_page\""),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("call: defer_execute {\"tool_name\":\"mcp__s__fetch_feed\""),
            "{}",
            r.text
        );
        let page_i = r.hits[0].index;
        assert_eq!(r.broken, [page_i]);
        assert!(
            r.loaded.contains(&page_i),
            "a call gets its own refusal at once"
        );
        // A tool that cannot be called is not marked as ready to call.
        let request = SearchRequest::from_json(&args).expect("request");
        let view = SessionView {
            active: &|_| true,
            ..SessionView::none()
        };
        let marked = search_for(&e.index, &e.catalog, &request, &e.config, &view);
        assert!(
            marked
                .text
                .contains("\n2. mcp__s__fetch_feed (already active)\n")
                && !marked.text.contains("fetch_page (already active)"),
            "{}",
            marked.text
        );
    }
}

#[test]
fn the_models_words_are_quoted_plainly_without_escapes() {
    let e = env(None);
    let r = run(
        &e,
        json!({"queries": ["read \"quoted\" file", "C:\\Users\\me"]}),
    );
    assert!(
        r.text
            .contains("\"read \"quoted\" file\", \"C:\\Users\\me\""),
        "{}",
        r.text
    );
    // A control character cannot break the line or hide: it shows as U+FFFD.
    let r = run(&e, json!({"queries": ["read\u{1b}[2Jfile"]}));
    assert!(r.text.contains("\"read\u{fffd}[2Jfile\""), "{}", r.text);
    let r = run(&e, json!({"tool_names": ["no \"such\" tool"]}));
    assert!(
        r.text.contains("No tool is named \"no \"such\" tool\""),
        "{}",
        r.text
    );
}

/// A script tool whose script could not be defined is listed with the description
/// `This script tool is unavailable: REASON` and an empty schema; its hit says it cannot be
/// called and why, in place of a parameter list and a call form, and a pinned one is not offered
/// for a direct call either.
#[test]
fn an_unavailable_script_tool_is_found_but_not_offered_for_a_call() {
    use toolshelf_core::search::render::{SessionView, search_for};
    let why = "script tool \"mcp__scripts__lookup\" (tools/lookup.star): script line 1: reads \
               turn.number, a per-turn value, which a tool's script cannot read: a tool is \
               defined once and called from any turn (take what a call needs as a param; pkg.* \
               and session.* hold the fixed values)";
    let e = env_of(json!({"servers": [{"name": "scripts", "tools": [
        {"name": "lookup", "description": format!("This script tool is unavailable: {why}"),
         "inputSchema": {"type": "object", "properties": {}}},
        {"name": "lookup_word", "description": "Look up a word in the dictionary",
         "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}
    ]}]}));
    let lookup = e.catalog.position("mcp__scripts__lookup").expect("tool");
    for args in [
        json!({"tool_names": ["mcp__scripts__lookup"]}),
        json!({"queries": ["lookup"]}),
    ] {
        let r = run(&e, args.clone());
        assert!(
            r.text.contains(&format!(
                "   cannot be called: this script tool is unavailable: its script could not be \
                 defined ({why}), so every call to it fails until the script is fixed. Use \
                 another tool, or tell the user."
            )) && !r.text.contains("\"tool_name\":\"mcp__scripts__lookup\""),
            "{args}: {}",
            r.text
        );
        assert_eq!(r.broken, [lookup], "{args}");
        assert!(
            r.loaded.contains(&lookup),
            "a call gets its own answer at once"
        );
    }
    // Pinned, it is in the session's list: its hit says it is unavailable, not to call it.
    let request = SearchRequest::from_json(&json!({"queries": ["lookup"]})).expect("request");
    let pinned = |i: usize| (i == lookup).then(|| "mcp__scripts__lookup".to_owned());
    let view = SessionView {
        pinned: &pinned,
        ..SessionView::none()
    };
    let r = search_for(&e.index, &e.catalog, &request, &e.config, &view);
    let line = r
        .text
        .lines()
        .find(|l| l.contains("mcp__scripts__lookup") && !l.contains("lookup_word"))
        .expect("the pinned hit");
    assert!(
        line.ends_with(
            "mcp__scripts__lookup (in your tool list, but unavailable: its script could not be defined, as its description there says)"
        ),
        "{}",
        r.text
    );
    let r = run(
        &e,
        json!({"tool_names": ["mcp__scripts__lookup", "mcp__scripts__lookup_word"]}),
    );
    insta::assert_snapshot!("unavailable_script_tool", r.text);
}
