//! The model-visible bytes for the bundled example, pinned by snapshots, and their independence
//! from input order.

use serde_json::Value;
use toolshelf_core::{Catalog, Compiled, Config, Format, Ledger, Surface};

const CATALOG: &str = include_str!("../../../examples/catalog.json");
const CONFIG: &str = include_str!("../../../examples/toolshelf.toml");

fn surface_of(catalog: &Catalog, config: &Config, mode: Option<&str>) -> Surface {
    let compiled = Compiled::new(config.clone(), "toolshelf.toml", mode).expect("compiles");
    compiled.surface(catalog, &compiled.expose(catalog))
}

fn example() -> (Catalog, Config) {
    (
        Catalog::from_json_str(CATALOG, "catalog.json").expect("example catalog"),
        Config::from_toml_str(CONFIG, "toolshelf.toml").expect("example config"),
    )
}

fn rendered(catalog: &Catalog, config: &Config, mode: Option<&str>, format: Format) -> String {
    serde_json::to_string_pretty(&surface_of(catalog, config, mode).tools(catalog, format))
        .expect("json")
}

#[test]
fn example_surface_anthropic() {
    let (c, cfg) = example();
    insta::assert_snapshot!(rendered(&c, &cfg, None, Format::Anthropic));
}

#[test]
fn example_surface_other_formats() {
    let (c, cfg) = example();
    insta::assert_snapshot!("openai", rendered(&c, &cfg, None, Format::OpenAi));
    insta::assert_snapshot!(
        "openai_responses",
        rendered(&c, &cfg, None, Format::OpenAiResponses)
    );
    insta::assert_snapshot!("mcp", rendered(&c, &cfg, None, Format::Mcp));
}

#[test]
fn example_tool_search_description() {
    let (c, cfg) = example();
    insta::assert_snapshot!(
        surface_of(&c, &cfg, None)
            .tool_search_description()
            .expect("something deferred")
    );
}

#[test]
fn example_index_in_each_mode() {
    let (c, cfg) = example();
    for mode in ["ask", "files", "review"] {
        let s = surface_of(&c, &cfg, Some(mode));
        insta::assert_snapshot!(
            format!("index_mode_{mode}"),
            s.index.expect("deferred").text
        );
    }
}

#[test]
fn example_index_without_config_defers_all_but_declared() {
    let (c, _) = example();
    let s = surface_of(&c, &Config::default(), None);
    insta::assert_snapshot!(s.index.expect("deferred").text);
}

#[test]
fn example_ledger() {
    let (c, cfg) = example();
    let s = surface_of(&c, &cfg, None);
    let ledger = Ledger::compute(&c, &s, Format::Anthropic, 200_000);
    insta::assert_json_snapshot!(ledger);
    assert!(ledger.saved_per_turn.tokens > 0);
    assert_eq!(
        ledger.deferred + ledger.resident + ledger.hidden,
        ledger.tools_total
    );
}

#[test]
fn hidden_tools_appear_nowhere() {
    let (c, cfg) = example();
    let s = surface_of(&c, &cfg, Some("ask"));
    let text = serde_json::to_string(&s.tools(&c, Format::Anthropic)).expect("json");
    assert!(!s.hidden.is_empty());
    for &i in &s.hidden {
        let t = &c.tools()[i];
        let needle = match &t.server {
            Some(_) => format!("\\n  {}\\n", t.bare),
            None => format!("\"{}\"", t.name),
        };
        assert!(
            !text.contains(&needle),
            "{} leaks into the ask surface",
            t.name
        );
    }
}

/// A server with no tools yet (starting, or failed) gets a group in the index so the model knows
/// its tools may come, unless the rules or the mode would hide a tool of it: then it is named
/// nowhere, as a server whose tools are all hidden.
#[test]
fn a_server_without_tools_is_named_only_where_its_tools_could_be_seen() {
    let catalog = Catalog::from_value(
        &serde_json::json!({"builtin": [{"name": "Read", "description": "Read a file."}],
            "servers": [{"name": "db", "description": "Database"}, {"name": "docs", "description": "Docs"},
                        {"name": "files", "tools": [{"name": "read_file", "annotations": {"readOnlyHint": true}}]}]}),
        "c.json",
    )
    .expect("catalog");
    let index = |config: &str, mode: Option<&str>| {
        let config = Config::from_toml_str(config, "t.toml").expect("config");
        surface_of(&catalog, &config, mode)
            .index
            .map(|i| i.text)
            .unwrap_or_default()
    };
    let open = index("", None);
    assert!(
        open.contains("mcp__db: Database") && open.contains("mcp__docs: Docs"),
        "{open}"
    );
    let denied = index(
        "[permissions]\ndeny = [\"^mcp__db__\", \"^mcp__docs__secret$\"]\n",
        None,
    );
    assert!(
        !denied.contains("mcp__db") && denied.contains("mcp__docs: Docs"),
        "{denied}"
    );
    let read_only = index("[modes.look]\nread_only = true\n", Some("look"));
    assert!(
        !read_only.contains("mcp__db") && !read_only.contains("mcp__docs"),
        "{read_only}"
    );
    assert!(read_only.contains("read_file"), "{read_only}");
}

#[test]
fn deferred_schemas_and_descriptions_appear_nowhere() {
    let (c, cfg) = example();
    let s = surface_of(&c, &cfg, None);
    for format in [Format::Anthropic, Format::OpenAi, Format::Mcp] {
        let text = serde_json::to_string(&s.tools(&c, format)).expect("json");
        // Resident tools may share a property with a deferred one (git's repo_path): only what
        // is not also in a resident schema can leak.
        let resident: String = s
            .resident
            .iter()
            .map(|&i| serde_json::to_string(&c.tools()[i].input_schema).expect("json"))
            .collect();
        let mut schemas_checked = 0;
        for &i in &s.deferred {
            let t = &c.tools()[i];
            if t.description.len() > 20 {
                assert!(
                    !text.contains(&serde_json::to_string(&t.description).expect("json")),
                    "{} description leaks",
                    t.name
                );
            }
            // The schema, whole or in part: no property of a deferred tool is described in the
            // surface (property descriptions are the bulk of a schema).
            let schema = serde_json::to_string(&t.input_schema).expect("json");
            assert!(!text.contains(&schema), "{} schema leaks", t.name);
            let props = t.input_schema.get("properties").and_then(Value::as_object);
            for (name, prop) in props.into_iter().flatten() {
                let property = format!("\"{name}\":{}", serde_json::to_string(prop).expect("json"));
                if resident.contains(&property) {
                    continue;
                }
                schemas_checked += 1;
                assert!(
                    !text.contains(&property),
                    "{} property {name} leaks",
                    t.name
                );
                if let Some(d) = prop
                    .get("description")
                    .and_then(Value::as_str)
                    .filter(|d| d.len() > 30)
                {
                    assert!(
                        !text.contains(d),
                        "{} property {name}'s description leaks",
                        t.name
                    );
                }
            }
        }
        assert!(
            schemas_checked > 50,
            "the example's deferred tools have properties to check"
        );
        // And the check can fail: a resident tool's schema is in the same text.
        let resident = &c.tools()[s.resident[0]];
        assert!(text.contains(&serde_json::to_string(&resident.input_schema).expect("json")));
    }
}

#[test]
fn resident_order_is_the_sorted_order_and_meta_tools_come_last() {
    let (c, cfg) = example();
    let tools = surface_of(&c, &cfg, None).tools(&c, Format::Anthropic);
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    let n = names.len();
    assert_eq!(&names[n - 2..], ["tool_search", "defer_execute"]);
    let resident = &names[..n - 2];
    let (builtin, mcp): (Vec<&str>, Vec<&str>) =
        resident.iter().partition(|n| !n.starts_with("mcp__"));
    let mut sorted_b = builtin.clone();
    sorted_b.sort();
    let mut sorted_m = mcp.clone();
    sorted_m.sort();
    assert_eq!(resident, [sorted_b, sorted_m].concat());
}

/// A small deterministic shuffle (no dependency on a random crate, same on every machine).
fn shuffle<T>(items: &mut [T], seed: &mut u64) {
    for i in (1..items.len()).rev() {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = (*seed >> 33) as usize % (i + 1);
        items.swap(i, j);
    }
}

fn permuted(seed: u64) -> String {
    let mut v: Value = serde_json::from_str(CATALOG).expect("json");
    let mut s = seed;
    if let Some(b) = v["builtin"].as_array_mut() {
        shuffle(b, &mut s);
    }
    let servers = v["servers"].as_array_mut().expect("servers");
    shuffle(servers, &mut s);
    for server in servers.iter_mut() {
        if let Some(t) = server["tools"].as_array_mut() {
            shuffle(t, &mut s);
        }
    }
    v.to_string()
}

#[test]
fn bytes_do_not_depend_on_input_order() {
    let (c, cfg) = example();
    let reference: Vec<String> = [None, Some("ask"), Some("files")]
        .into_iter()
        .flat_map(|m| Format::ALL.map(|(_, f)| rendered(&c, &cfg, m, f)))
        .collect();
    for seed in 1..=8 {
        let text = permuted(seed);
        assert_ne!(
            text,
            serde_json::from_str::<Value>(CATALOG)
                .expect("json")
                .to_string(),
            "seed {seed} permutes"
        );
        let pc = Catalog::from_json_str(&text, "permuted.json").expect("permuted catalog");
        let got: Vec<String> = [None, Some("ask"), Some("files")]
            .into_iter()
            .flat_map(|m| Format::ALL.map(|(_, f)| rendered(&pc, &cfg, m, f)))
            .collect();
        assert_eq!(got, reference, "seed {seed}");
    }
}

#[test]
fn a_tight_budget_drops_whole_groups_and_keeps_them_counted() {
    let (c, mut cfg) = example();
    cfg.defer.index_budget_chars = 900;
    let idx = surface_of(&c, &cfg, None).index.expect("deferred");
    assert!(idx.text.chars().count() <= 900, "{}", idx.text);
    assert!(!idx.dropped.is_empty() && !idx.listed.is_empty());
    let pointer = format!("[other {} MCP server", idx.dropped.len());
    assert!(idx.text.contains(&pointer), "{}", idx.text);
    for d in &idx.dropped {
        assert!(
            !idx.text.contains(&format!("{d}:")),
            "{d} should be dropped whole"
        );
    }
}

#[test]
fn nothing_deferred_means_no_meta_tools() {
    let (c, _) = example();
    let cfg = Config::from_toml_str("[defer]\ndefault = false", "t").expect("config");
    let s = surface_of(&c, &cfg, None);
    let tools = s.tools(&c, Format::Anthropic);
    // Only tools that declare defer_loading = true are deferred; the example declares none.
    assert!(s.deferred.is_empty());
    assert!(s.index.is_none());
    assert_eq!(tools.len(), c.tools().len());
    assert!(
        tools
            .iter()
            .all(|t| t["name"] != "tool_search" && t["name"] != "defer_execute")
    );
}
