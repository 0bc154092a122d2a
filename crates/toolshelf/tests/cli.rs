//! The command-line contract, exercised through the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolshelf"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(file: &str) -> String {
    root().join("examples").join(file).display().to_string()
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run toolshelf")
}

/// A run with `input` on standard input.
fn run_with_stdin(args: &[&str], input: &str) -> Output {
    use std::io::Write as _;
    let mut child = bin()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run toolshelf");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8(out.stderr).expect("utf-8")
}

fn temp_file(name: &str, content: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolshelf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write");
    path.display().to_string()
}

#[test]
fn no_arguments_runs_the_bundled_example() {
    let bundled = ok(&["render"]);
    let explicit = ok(&[
        "render",
        "--catalog",
        &example("catalog.json"),
        "--config",
        &example("toolshelf.toml"),
    ]);
    assert_eq!(bundled, explicit);
    let tools: Vec<Value> = serde_json::from_str(&bundled).expect("json array");
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(&names[names.len() - 2..], ["tool_search", "defer_execute"]);
    assert!(
        tools.iter().all(|t| t.get("input_schema").is_some()),
        "anthropic format by default"
    );
}

#[test]
fn formats_change_the_shape() {
    let openai: Vec<Value> =
        serde_json::from_str(&ok(&["render", "--format", "openai"])).expect("json");
    assert!(
        openai
            .iter()
            .all(|t| t["type"] == "function" && t["function"]["parameters"].is_object())
    );
    let responses: Vec<Value> =
        serde_json::from_str(&ok(&["render", "--format", "openai-responses"])).expect("json");
    assert!(
        responses
            .iter()
            .all(|t| t["type"] == "function" && t["parameters"].is_object())
    );
    let mcp: Vec<Value> = serde_json::from_str(&ok(&["render", "--format", "mcp"])).expect("json");
    assert!(mcp.iter().all(|t| t["inputSchema"].is_object()));
    assert!(fails(&["render", "--format", "xml"]).contains("possible values"));
}

#[test]
fn a_resident_tool_that_fills_the_window_is_warned_about() {
    let huge = serde_json::json!([
        {"name": "huge", "description": "word ".repeat(100_000), "defer_loading": false},
        {"name": "small", "description": "x", "defer_loading": false}
    ]);
    let path = temp_file("huge.json", &huge.to_string());
    let out = run(&["ledger", "--catalog", &path]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: resident tool \"huge\" alone takes ")
            && err.contains("-token window on every turn"),
        "{err}"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("largest resident: huge ("), "{table}");
    // The bundled example has no such tool: no warning.
    let out = run(&["ledger"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("alone takes"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ledger_json_has_the_documented_fields() {
    let v: Value = serde_json::from_str(&ok(&["ledger", "--json"])).expect("json");
    for key in ["tools_total", "deferred", "resident", "hidden"] {
        assert!(v[key].is_u64(), "{key}");
    }
    for key in ["all_resident", "after"] {
        for f in ["chars", "tokens", "window_share"] {
            assert!(v[key][f].is_number(), "{key}.{f}");
        }
    }
    for key in ["index", "saved_per_turn"] {
        for f in ["chars", "tokens"] {
            assert!(v[key][f].is_number(), "{key}.{f}");
        }
    }
    for f in ["name", "chars", "share_of_deferred"] {
        assert!(!v["largest"][f].is_null(), "largest.{f}");
    }
    for f in ["name", "chars", "tokens", "window_share"] {
        assert!(!v["largest_resident"][f].is_null(), "largest_resident.{f}");
    }
    for f in ["all", "deferred", "largest"] {
        let r = v["ratios"][f].as_str().expect("ratio");
        assert!(r.ends_with(":1"), "{r}");
    }
    assert!(v["saved_per_turn"]["tokens"].as_i64() > Some(0));
    let narrow: Value =
        serde_json::from_str(&ok(&["ledger", "--json", "--window", "100000"])).expect("json");
    let share = |v: &Value| v["after"]["window_share"].as_f64().expect("share");
    assert!((share(&narrow) - 2.0 * share(&v)).abs() < 1e-5);
    let table = ok(&["ledger"]);
    assert!(
        table.contains("saved per turn") && table.contains("all resident"),
        "{table}"
    );
    // Any window a u64 holds is printed as given.
    let wide = ok(&["ledger", "--window", "18446744073709551615"]);
    assert!(
        wide.contains("window 18,446,744,073,709,551,615 tokens"),
        "{wide}"
    );
}

#[test]
fn explain_prints_the_chain() {
    let text = ok(&["explain", "mcp__everything__echo"]);
    assert!(
        text.contains("Defer(^mcp__everything__)")
            && text.contains("NoDefer(^mcp__everything__echo$)"),
        "{text}"
    );
    assert!(text.contains("final:     resident"), "{text}");
    let v: Value = serde_json::from_str(&ok(&["explain", "Bash", "--json"])).expect("json");
    assert_eq!(v["final"], "resident");
    assert_eq!(v["declared"], false);
    let bash_rule = v["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["rule"] == "Defer(^Bash$)")
        .expect("rule");
    assert_eq!(bash_rule["matched"], true);
    let v: Value = serde_json::from_str(&ok(&["explain", "git_commit", "--mode", "ask", "--json"]))
        .expect("json");
    assert_eq!(v["tool"], "mcp__git__git_commit", "bare names resolve");
    assert_eq!(v["final"], "hidden");
    assert_eq!(v["mode"]["admits"], false);
}

/// `render` lists `tool_search` and `defer_execute`; `explain` explains them as the resident
/// meta-tools toolshelf adds, and says when a configuration has none (nothing deferred).
#[test]
fn explain_explains_the_meta_tools() {
    let text = ok(&["explain", "tool_search"]);
    assert!(
        text.contains("toolshelf's own meta-tool, not in the catalog"),
        "{text}"
    );
    assert!(
        text.contains("final:     resident, pinned, never deferred"),
        "{text}"
    );
    let json: Value =
        serde_json::from_str(&ok(&["explain", "defer_execute", "--json"])).expect("json");
    assert_eq!(json["tool"], "defer_execute");
    assert_eq!(json["origin"], "meta");
    assert_eq!(json["final"], "resident");
    assert_eq!(json["pinned"], true);
    // A spelling of the name that names no catalog tool is read as it, as names resolve.
    let text = ok(&["explain", "Tool-Search"]);
    assert!(text.starts_with("tool_search\n"), "{text}");
    // With nothing deferred the list has neither.
    let catalog = temp_file(
        "meta.json",
        r#"[{"name": "tool_search", "description": "the catalog's own"}, {"name": "b", "description": "d"}]"#,
    );
    let none = temp_file("meta-none.toml", "[defer]\ndefault = false\n");
    let args = ["explain", "--catalog", &catalog, "--config", &none];
    let json: Value =
        serde_json::from_str(&ok(&[&args[..], &["tool_search", "--json"]].concat())).expect("json");
    assert_eq!(json["tool"], "tool_search");
    assert_eq!(json["final"], "absent");
    assert_eq!(json["pinned"], false);
    assert!(
        json["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("nothing is deferred")),
        "{json}"
    );
    // The catalog's own tool of that name is named otherwise, and said so.
    assert_eq!(
        json["namesakes"].as_array().map(Vec::len),
        Some(1),
        "{json}"
    );
    let text = ok(&[&args[..], &["tool_search"]].concat());
    assert!(
        text.contains("final:     absent (nothing is deferred"),
        "{text}"
    );
    assert!(
        text.contains("namesakes: the catalog's own tools of this name are named tool_search_"),
        "{text}"
    );
}

/// `explain` names the configuration whose rules it applies; on the bundled example, that it is
/// not the one `serve` runs with no flags, and how to explain under that one.
#[test]
fn explain_names_the_configuration_it_explains_under() {
    let text = ok(&["explain", "git_reset"]);
    assert!(
        text.contains("  config:    examples/toolshelf.toml (bundled); `serve` with no --config runs examples/gateway.toml")
            && text.contains("final:     deferred"),
        "{text}"
    );
    let gateway = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/gateway.toml");
    let out = run(&["explain", "git_reset", "--config", gateway]);
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.contains(&format!("  config:    {gateway}\n"))
            && text.contains("denies every call: hidden"),
        "{text}"
    );
}

#[test]
fn explain_unknown_tool_suggests_close_names() {
    let e = fails(&["explain", "git_comit"]);
    assert!(
        e.contains("no tool named \"git_comit\"") && e.contains("mcp__git__git_commit"),
        "{e}"
    ); // With --json, a script gets JSON on stdout for the finding too.
    let out = run(&["explain", "git_comit", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    assert_eq!(v["name"], "git_comit");
    assert_eq!(v["error"], "unknown");
    assert_eq!(v["suggestions"][0], "mcp__git__git_commit", "{v}");
    // A slip of a meta-tool's name suggests the meta-tool first.
    for (written, meta) in [
        ("tool_serach", "tool_search"),
        ("defer_exectue", "defer_execute"),
    ] {
        let out = run(&["explain", written, "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
        assert_eq!(v["suggestions"][0], meta, "{written}: {v}");
    }
    let catalog = temp_file(
        "two-reads.json",
        r#"{"servers": [{"name": "s1", "tools": [{"name": "read"}]}, {"name": "s2", "tools": [{"name": "read"}]}]}"#,
    );
    let out = run(&["explain", "--catalog", &catalog, "read", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    assert_eq!(
        v,
        serde_json::json!({"name": "read", "error": "ambiguous", "candidates": ["mcp__s1__read", "mcp__s2__read"]})
    );
}

/// A name whose item loading left out is explained as left out, with the load warning's reason,
/// not as a misspelling.
#[test]
fn explain_says_a_tool_the_catalog_left_out_was_left_out_and_why() {
    let catalog = temp_file(
        "left-out.json",
        r#"{"builtin": [
            {"name": "Read", "description": "read", "input_schema": {"type": "object"}},
            {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}}
        ], "servers": [{"name": "web", "tools": [{"type": "web_search_20250305", "name": "web_search"}]}]}"#,
    );
    let (code, err) = status_and_err(&["explain", "--catalog", &catalog, "apply_patch"]);
    assert_eq!(code, Some(1), "{err}");
    let warned = format!("warning: {catalog}: builtin[1] \"apply_patch\": left out: ");
    let why = err
        .lines()
        .find_map(|l| l.split_once(&warned))
        .map(|(_, why)| why)
        .unwrap_or_else(|| panic!("no load warning: {err}"));
    assert!(
        why.starts_with("\"type\": \"custom\" with a \"format\""),
        "{why}"
    );
    assert!(
        err.contains(&format!(
            "error: \"apply_patch\" was left out when the catalog loaded ({catalog}: builtin[1] \"apply_patch\"): {why}\n"
        )) && !err.contains("no tool named"),
        "{err}"
    );
    // As written, as its server's tool would be named, or folded; with --json too.
    for written in ["web_search", "mcp__web__web_search", "Web-Search"] {
        let out = run(&["explain", "--catalog", &catalog, written, "--json"]);
        assert_eq!(out.status.code(), Some(1), "{written}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
        assert_eq!(v["name"], written);
        assert_eq!(v["error"], "left_out", "{written}: {v}");
        assert_eq!(
            v["location"],
            format!("{catalog}: servers[0] \"web\" tools[0] \"web_search\""),
            "{v}"
        );
        assert!(
            v["why"]
                .as_str()
                .is_some_and(|w| w
                    .starts_with("\"type\": \"web_search_20250305\" makes this a provider's tool")),
            "{v}"
        );
    }
    // A name no item had is still unknown.
    let err = fails(&["explain", "--catalog", &catalog, "apply_pach"]);
    assert!(err.contains("no tool named \"apply_pach\""), "{err}");
    // `search -n` says the same of a left-out name, and still calls an unknown one unknown.
    let (code, err) = status_and_err(&[
        "search",
        "--catalog",
        &catalog,
        "-n",
        "apply_patch",
        "-n",
        "apply_pach",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "toolshelf: \"apply_patch\" was left out when the catalog loaded ({catalog}: builtin[1] \"apply_patch\"): {why}\n"
        )),
        "{err}"
    );
    assert!(
        err.contains("toolshelf: no visible tool is named \"apply_pach\" (see above)"),
        "{err}"
    );
}

#[test]
fn names_resolve_with_case_and_separators_folded_away() {
    for written in ["GIT_LOG", "git-log", "gitlog", "Git Log"] {
        let v: Value = serde_json::from_str(&ok(&["search", "-n", written, "--json"]))
            .unwrap_or_else(|e| panic!("{written}: {e}"));
        assert_eq!(v["hits"][0]["name"], "mcp__git__git_log", "{written}: {v}");
        assert_eq!(v["unresolved"], serde_json::json!([]), "{written}");
        let v: Value = serde_json::from_str(&ok(&["explain", written, "--json"])).expect("json");
        assert_eq!(v["tool"], "mcp__git__git_log", "{written}");
    }
    let text = ok(&["search", "-n", "GIT_LOG"]);
    assert!(
        text.starts_with("1. mcp__git__git_log\n") && !text.contains("No tool is named"),
        "{text}"
    );
    let catalog = temp_file(
        "folded-names.json",
        r#"{"servers": [
            {"name": "notion", "tools": [{"name": "notion-search"}, {"name": "notion-fetch"}]},
            {"name": "slack", "tools": [{"name": "post_message"}, {"name": "list_channels"}]},
            {"name": "a", "tools": [{"name": "read_file"}]},
            {"name": "b", "tools": [{"name": "readFile"}]}
        ]}"#,
    );
    for (written, tool) in [
        ("notion_search", "mcp__notion__notion-search"),
        ("post-message", "mcp__slack__post_message"),
        ("SLACK.POST_MESSAGE", "mcp__slack__post_message"),
    ] {
        let v: Value = serde_json::from_str(&ok(&[
            "search",
            "--catalog",
            &catalog,
            "-n",
            written,
            "--json",
        ]))
        .expect("json");
        assert_eq!(v["hits"][0]["name"], tool, "{written}: {v}");
        assert_eq!(v["unresolved"], serde_json::json!([]), "{written}");
        let v: Value =
            serde_json::from_str(&ok(&["explain", "--catalog", &catalog, written, "--json"]))
                .expect("json");
        assert_eq!(v["tool"], tool, "{written}");
    }
    // Two tools fold alike: no guess, both are named.
    let out = run(&["explain", "--catalog", &catalog, "READ-FILE", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    assert_eq!(
        v,
        serde_json::json!({"name": "READ-FILE", "error": "ambiguous", "candidates": ["mcp__a__read_file", "mcp__b__readFile"]})
    );
}

#[test]
fn explain_suggests_typos_first() {
    for (written, first) in [
        ("git_stauts", "mcp__git__git_status"),
        ("fecht", "mcp__fetch__fetch"),
        ("GIT-STATSU", "mcp__git__git_status"),
        ("create_entitis", "mcp__memory__create_entities"),
    ] {
        let out = run(&["explain", written, "--json"]);
        assert_eq!(out.status.code(), Some(1), "{written}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
        assert_eq!(v["suggestions"][0], first, "{written}: {v}");
        // `search -n` (and so `tool_names`) lists the same likely typo first.
        let out = run(&["search", "-n", written, "--json"]);
        assert_eq!(out.status.code(), Some(1), "{written}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
        assert_eq!(v["hits"][0]["name"], first, "{written}: {v}");
        assert_eq!(v["unresolved"], serde_json::json!([written]), "{written}");
    }
}

#[test]
fn a_gateway_config_without_a_catalog_says_whose_tools_it_reads() {
    let config = temp_file(
        "gateway-no-catalog.toml",
        "[servers.mine]\ncommand = \"my-server\"\n",
    );
    let e = fails(&["explain", "--config", &config, "mcp__mine__thing"]);
    assert!(
        e.contains("no tool named \"mcp__mine__thing\"")
            && e.contains("the bundled example catalog")
            && e.contains(&format!(
                "toolshelf catalog --config {config} --all > c.json`, then give --catalog c.json"
            )),
        "{e}"
    );
    let out = run(&["ledger", "--config", &config]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && e.contains("toolshelf: note: the tools are the bundled example catalog's"),
        "{e}"
    );
    // Script tools are the gateway's too, and every catalog command says so.
    let scripts = temp_file(
        "scripts-no-catalog.toml",
        "[tools.lookup]\nscript = \"lookup.star\"\n",
    );
    for args in [
        vec!["render", "--config", &scripts],
        vec!["search", "--config", &scripts, "-q", "lookup"],
        vec!["explain", "--config", &scripts, "mcp__scripts__lookup"],
    ] {
        let out = run(&args);
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains(&format!(
                "toolshelf: note: the tools are the bundled example catalog's, not the script \
tools of {scripts}; for theirs run `toolshelf catalog --config {scripts} --all > c.json`"
            )),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn unknown_mode_lists_the_modes() {
    let e = fails(&["render", "--mode", "nope"]);
    assert!(
        e.contains("unknown mode \"nope\"") && e.contains("ask, files, review"),
        "{e}"
    );
}

#[test]
fn bad_catalogs_name_the_file_and_item() {
    let path = temp_file(
        "bad.json",
        r#"{"servers": [{"name": "docs", "tools": [{"name": "a"}, {"name": "a"}]}]}"#,
    );
    let e = fails(&["render", "--catalog", &path]);
    assert!(
        e.contains(&path) && e.contains("servers[0] \"docs\" tools[1] \"a\": duplicate tool name"),
        "{e}"
    );
    let path = temp_file("schema.json", r#"[{"name": "x", "input_schema": [1]}]"#);
    let e = fails(&["ledger", "--catalog", &path]);
    assert!(
        e.contains("[0] \"x\"") && e.contains("must be a JSON Schema object"),
        "{e}"
    );
    let e = fails(&["render", "--catalog", "/nonexistent/catalog.json"]);
    assert!(
        e.contains("cannot read catalog /nonexistent/catalog.json"),
        "{e}"
    );
    let cfg = temp_file("bad.toml", "[defer]\nrules = [\"Defer(x)\", \"Hide(y)\"]\n");
    let e = fails(&["render", "--config", &cfg]);
    assert!(e.contains(&cfg) && e.contains("rules[1]"), "{e}");
}

#[test]
fn a_schema_that_cannot_be_checked_is_warned_about_at_load() {
    let path = temp_file(
        "nested.json",
        r#"{"servers": [{"name": "docs", "tools": [
            {"name": "fine", "inputSchema": {"type": "object", "properties": {"p": {"type": "string"}}}},
            {"name": "odd", "inputSchema": {"type": "object", "properties": {"p": {"type": 42}}}}
        ]}]}"#,
    );
    for cmd in ["render", "ledger", "search"] {
        let mut args = vec![cmd, "--catalog", &path];
        if cmd == "search" {
            args.extend(["-q", "odd"]);
        }
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd}: {err}");
        let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
        assert_eq!(warnings.len(), 1, "{cmd}: {err}");
        assert!(
            warnings[0].contains("tool \"mcp__docs__odd\": its input schema is not a valid JSON Schema (at /properties/p/type:"),
            "{cmd}: {err}"
        );
    }
    // The tool is still listed as given.
    let listed = ok(&[
        "render",
        "--catalog",
        &path,
        "--config",
        &temp_file("all.toml", "[defer]\ndefault = false\n"),
    ]);
    assert!(
        listed.contains("mcp__docs__odd") && listed.contains("\"type\": 42"),
        "{listed}"
    );
}

/// Eight pairs of tools that want one name give eight rename warnings: five are printed and the
/// rest counted, and a warning of another kind after them is still printed; `-v` prints all.
#[test]
fn many_warnings_of_one_kind_are_cut_and_counted() {
    let mut tools: Vec<Value> = (0..8)
        .flat_map(|i| {
            [
                serde_json::json!({"name": format!("Pair.tool{i}"), "description": "dotted"}),
                serde_json::json!({"name": format!("Pair_tool{i}"), "description": "plain"}),
            ]
        })
        .collect();
    tools.push(serde_json::json!({
        "name": "odd",
        "description": "a wrong type",
        "input_schema": {"type": "object", "properties": {"p": {"type": 42}}}
    }));
    let path = temp_file("pairs.json", &Value::from(tools).to_string());
    let renames = |err: &str| err.matches("like another tool; named").count();
    let out = run(&["render", "--catalog", &path]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(renames(&err), 5, "{err}");
    assert!(
        err.contains(
            "toolshelf: warning: ... and 3 more like these (8 in all; -v prints every one)"
        ),
        "{err}"
    );
    assert!(
        err.contains("tool \"odd\": its input schema is not a valid"),
        "{err}"
    );
    let out = run(&["-v", "render", "--catalog", &path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(renames(&err), 8, "{err}");
    assert!(!err.contains("more like these"), "{err}");
}

/// Keys the loader does not read, items it leaves out and tools it names otherwise are three
/// kinds of load warning, each cut to its own first five: six unread keys or six provider tools
/// do not hide the one rename after them.
#[test]
fn each_kind_of_catalog_warning_is_cut_on_its_own() {
    let rename = [
        serde_json::json!({"name": "dup x", "description": "spaced"}),
        serde_json::json!({"name": "dup_x", "description": "plain"}),
    ];
    for (name, item, says) in [
        (
            "unread.json",
            serde_json::json!({"name": "u", "description": "d", "foo": 1}),
            "unknown key \"foo\"",
        ),
        (
            "provider.json",
            serde_json::json!({"type": "web_search_20250305", "name": "ws"}),
            "left out: \"type\": \"web_search_20250305\"",
        ),
    ] {
        let mut tools: Vec<Value> = (0..6)
            .map(|i| {
                let mut t = item.clone();
                t["name"] = format!("{}{i}", t["name"].as_str().unwrap_or_default()).into();
                t
            })
            .collect();
        tools.extend(rename.iter().cloned());
        let path = temp_file(name, &Value::from(tools).to_string());
        let out = run(&["render", "--catalog", &path]);
        assert!(out.status.success(), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.matches(says).count(), 5, "{name}: {err}");
        assert!(
            err.contains("... and 1 more like these (6 in all; -v prints every one)"),
            "{name}: {err}"
        );
        assert!(
            err.contains("tool \"dup x\" would be named \"dup_x\" like another tool"),
            "{name}: the rename is printed: {err}"
        );
    }
}

#[test]
fn over_budget_builtins_warn_on_stderr() {
    let cfg = temp_file("tiny.toml", "[defer]\nindex_budget_chars = 10\n");
    for cmd in ["render", "ledger"] {
        let out = run(&[cmd, "--config", &cfg]);
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("over its budget of 10"), "{cmd}: {err}");
    }
}

#[test]
fn render_is_byte_identical_for_a_reordered_catalog_file() {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(example("catalog.json")).expect("read"))
            .expect("json");
    v["servers"].as_array_mut().expect("servers").reverse();
    for s in v["servers"].as_array_mut().expect("servers") {
        s["tools"].as_array_mut().expect("tools").reverse();
    }
    v["builtin"].as_array_mut().expect("builtin").reverse();
    let path = temp_file("reversed.json", &v.to_string());
    let cfg = example("toolshelf.toml");
    for format in ["anthropic", "openai", "mcp"] {
        assert_eq!(
            ok(&[
                "render",
                "--catalog",
                &path,
                "--config",
                &cfg,
                "--format",
                format
            ]),
            ok(&[
                "render",
                "--catalog",
                &example("catalog.json"),
                "--config",
                &cfg,
                "--format",
                format
            ]),
        );
    }
}

#[test]
fn search_prints_text_or_json_hits_in_rank_order() {
    let text = ok(&["search", "--query", "commit changes"]);
    assert!(
        text.starts_with("Tools matching \"commit changes\""),
        "{text}"
    );
    let v: Value = serde_json::from_str(&ok(&[
        "search",
        "-q",
        "commit changes",
        "--json",
        "--limit",
        "3",
    ]))
    .expect("json");
    let hits = v["hits"].as_array().expect("hits");
    assert!(!hits.is_empty());
    for h in hits {
        for k in ["name", "tool", "score", "reason"] {
            assert!(!h[k].is_null(), "{k} in {h}");
        }
        assert!(h.get("server").is_some());
    }
    let scores: Vec<f64> = hits
        .iter()
        .map(|h| h["score"].as_f64().expect("score"))
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert_eq!(hits[0]["name"], "mcp__git__git_commit");
    assert_eq!(hits[0]["tool"], "git_commit");
    assert_eq!(hits[0]["server"], "git");
    assert_eq!(
        v["text"]
            .as_str()
            .map(|t| t.contains("mcp__git__git_commit")),
        Some(true)
    );
    // `hits` are the three the text lists; the names it only mentions come apart, also in order.
    assert_eq!(hits.len(), 3, "{v}");
    let also = v["also_matching"].as_array().expect("also_matching");
    assert!(!also.is_empty(), "{v}");
    let mentioned = v["text"]
        .as_str()
        .and_then(|t| t.split_once("Also matching"))
        .map(|(_, rest)| rest.to_owned())
        .expect("an Also matching line");
    for h in also {
        let name = h["name"].as_str().expect("name");
        assert!(mentioned.contains(name), "{name} in {mentioned}");
        assert!(!hits.iter().any(|x| x["name"] == name), "{name} twice");
    }
    assert!(
        also[0]["score"].as_f64() <= hits[2]["score"].as_f64(),
        "{v}"
    );
    assert_eq!(v["unresolved"], serde_json::json!([]));
    let v: Value =
        serde_json::from_str(&ok(&["search", "--name", "Write", "--json"])).expect("json");
    assert_eq!(v["hits"][0]["name"], "Write");
    assert!(v["hits"][0]["server"].is_null());
    assert_eq!(v["unresolved"], serde_json::json!([]));
    // A name no tool has still gets its suggestions, but the command says so and fails.
    let out = run(&["search", "-n", "Write", "-n", "nosuchtool", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    assert_eq!(v["unresolved"], serde_json::json!(["nosuchtool"]));
    assert_eq!(v["hits"][0]["name"], "Write");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no visible tool is named \"nosuchtool\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e = fails(&["search", "-n", "nosuchtool", "-n", "nor_this"]);
    assert!(
        e.contains("no visible tool is named \"nosuchtool\", \"nor_this\" (see above)"),
        "{e}"
    );
    assert!(fails(&["search"]).contains("required"));
    assert!(fails(&["search", "-q", "x", "-n", "y"]).contains("cannot be used with"));
}

#[test]
fn search_batch_writes_one_line_per_request() {
    let path = temp_file(
        "batch.jsonl",
        "{\"query\": \"commit changes\"}\n\n{\"queries\": [\"read file\", \"读取文件\"]}\n{\"query\": \"xylophone\"}\n",
    );
    let out = ok(&["search", "--batch", &path, "--limit", "2", "--json"]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["hits"][0]["name"], "mcp__git__git_commit");
    assert_eq!(lines[0]["hits"].as_array().map(Vec::len), Some(2));
    assert!(
        lines[1]["hits"][0]["name"]
            .as_str()
            .expect("name")
            .contains("read")
    );
    assert_eq!(lines[2]["hits"].as_array().map(Vec::len), Some(0));
    // Each answer names the line it answers (the blank line 2 is skipped).
    let answered: Vec<u64> = lines.iter().filter_map(|l| l["line"].as_u64()).collect();
    assert_eq!(answered, [1, 3, 4]);
    // The output is JSON lines whether or not --json is given.
    assert_eq!(ok(&["search", "--batch", &path, "--limit", "2"]), out);
    let bad = temp_file("bad.jsonl", "{\"q\": 1}\n");
    assert!(fails(&["search", "--batch", &bad, "--json"]).contains("bad.jsonl:1"));
    let empty = temp_file("empty-batch.jsonl", "\n\n");
    let out = run(&["search", "--batch", &empty]);
    assert_eq!(out.status.code(), Some(2), "an empty batch is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no requests"));
    // A query that is not a string, or a line with no words, names its line and entry.
    let typed = temp_file(
        "typed.jsonl",
        "{\"query\": \"read\"}\n{\"queries\": [\"read\", 3]}\n",
    );
    let out = run(&["search", "--batch", &typed, "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("typed.jsonl:2: queries[1] is 3"), "{err}");
    // Input that cannot be searched is status 2 (an unknown --name is 1), and the good line
    // before the bad one is not answered.
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "no partial output");
    let out = run(&[
        "search",
        "--catalog",
        "/nonexistent/catalog.json",
        "-q",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    // A blank query is refused as `-q` refuses it, even beside others.
    for (text, expected) in [
        (
            "{\"queries\": [\" \", \"\"]}\n",
            "blank.jsonl:1: queries[0] is blank",
        ),
        (
            "{\"queries\": [\"read\", \" \"]}\n",
            "blank.jsonl:1: queries[1] is blank",
        ),
        (
            "{\"query\": \"\\t\"}\n",
            "blank.jsonl:1: the query is blank",
        ),
        (
            "{\"queries\": [\"read\"]}\n{\"queries\": []}\n",
            "blank.jsonl:2: queries is empty",
        ),
    ] {
        let blank = temp_file("blank.jsonl", text);
        let err = fails(&["search", "--batch", &blank, "--json"]);
        assert!(err.contains(expected), "{text}: {err}");
    }
    // Each query of a line gets a hit of its own, past --limit, as with -q (and tool_search).
    let queries = ["commit changes", "read file", "create entities"];
    let several = temp_file(
        "several.jsonl",
        &format!("{}\n", serde_json::json!({ "queries": queries })),
    );
    let line: Value =
        serde_json::from_str(ok(&["search", "--batch", &several, "--limit", "2"]).trim())
            .expect("json line");
    let names = |hits: &Value| -> Vec<String> {
        hits.as_array()
            .expect("hits")
            .iter()
            .map(|h| h["name"].as_str().expect("name").to_owned())
            .collect()
    };
    let mut args = vec!["search", "--limit", "2", "--json"];
    for q in queries {
        args.extend(["-q", q]);
    }
    let direct: Value = serde_json::from_str(&ok(&args)).expect("json");
    assert_eq!(names(&line["hits"]).len(), 3, "{line}");
    assert_eq!(names(&line["hits"]), names(&direct["hits"]));
}

#[test]
fn search_refuses_arguments_that_would_mean_nothing() {
    for k in ["0", "-1", "many"] {
        let err = fails(&["search", "-q", "read file", "-k", k]);
        assert!(err.contains("--limit"), "-k {k}: {err}");
    }
    let err = fails(&["search", "-q", "read file", "-q", "  "]);
    assert!(err.contains("--query number 2 is blank"), "{err}");
    let err = fails(&["search", "-n", "Write", "-k", "2"]);
    assert!(err.contains("--limit applies to --query"), "{err}");
    assert!(ok(&["search", "-q", "read file", "-k", "1"]).contains("1. "));
}

#[test]
fn eval_reports_the_documented_metrics() {
    let path = temp_file(
        "eval.jsonl",
        "{\"query\": \"commit my changes\", \"gold\": [\"git_commit\"]}\n{\"query\": \"current time in Tokyo\", \"gold\": [\"mcp__time__get_current_time\"]}\n{\"query\": \"xylophone\", \"gold\": [\"Read\"]}\n",
    );
    let v: Value =
        serde_json::from_str(&ok(&["eval", "--queries", &path, "--json"])).expect("json");
    assert_eq!(v["queries"], 3);
    for k in ["1", "3", "5", "10"] {
        let r = v["recall"][k].as_f64().expect("recall");
        assert!((0.0..=1.0).contains(&r));
    }
    // Two of three queries find their tool first; the third cannot.
    assert!(
        (v["recall"]["1"].as_f64().expect("r1") - 2.0 / 3.0).abs() < 1e-3,
        "{v}"
    );
    assert!(
        (v["mrr"].as_f64().expect("mrr") - 2.0 / 3.0).abs() < 1e-3,
        "{v}"
    );
    for k in ["ndcg10", "build_ms"] {
        assert!(v[k].is_number(), "{k}");
    }
    assert!(v["latency_us"]["p50"].is_number() && v["latency_us"]["p99"].is_number());
    assert_eq!(v["warm_up"], false);
    let text = ok(&["eval", "--queries", &path]);
    assert!(text.contains("recall@1") && text.contains("p99"), "{text}");
    assert!(text.contains("(first sight)"), "{text}");
    // A warm-up pass changes the timing only: every quality figure is the same.
    let warm: Value =
        serde_json::from_str(&ok(&["eval", "--queries", &path, "--json", "--warm-up"]))
            .expect("json");
    assert_eq!(warm["warm_up"], true);
    for k in ["recall", "mrr", "ndcg10", "by_length", "by_gold", "queries"] {
        assert_eq!(warm[k], v[k], "{k}");
    }
    assert!(ok(&["eval", "--queries", &path, "--warm-up"]).contains("(warm)"));
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let tools: Vec<Value> = (0..3000)
        .map(|i| serde_json::json!({"name": format!("tool_{i}"), "description": "x".repeat(200), "defer_loading": false}))
        .collect();
    let path = temp_file("big.json", &Value::Array(tools).to_string());
    let bin = env!("CARGO_BIN_EXE_toolshelf");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{bin}' render --catalog '{path}' | head -c 10 >/dev/null"
        ))
        .output()
        .expect("sh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}

#[test]
fn a_closed_stderr_does_not_panic() {
    // Two tools that collide when named, so loading warns on stderr, whose reader is gone.
    let path = temp_file(
        "collide.json",
        r#"[{"name": "a.b", "description": "one"}, {"name": "a_b", "description": "two"}]"#,
    );
    for args in [
        vec!["ledger", "--catalog", &path],
        vec!["explain", "--catalog", &path, "nosuch"],
    ] {
        let mut child = bin()
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run toolshelf");
        // The reading end closes before the catalog is loaded and its warnings are written.
        drop(child.stderr.take());
        let status = child.wait().expect("wait");
        assert_ne!(status.code(), Some(101), "{args:?} panicked");
    }
}

#[test]
fn eval_counts_unknown_gold_names_as_misses() {
    let path = temp_file(
        "eval-unknown.jsonl",
        "{\"query\": \"commit my changes\", \"gold\": [\"git_commit\", \"no_such_tool\"]}\n",
    );
    let out = run(&["eval", "--ranker", "bm25", "--queries", &path, "--json"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{path}:1: gold \"no_such_tool\" is not in the catalog (counted as a miss)"
        )),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["recall"]["10"].as_f64(), Some(0.5), "{v}");
    assert_eq!(v["unknown_gold"].as_u64(), Some(1), "{v}");
    // Past ten, the rest are counted, not named.
    let many: String = (0..12)
        .map(|i| format!("{{\"query\": \"commit\", \"gold\": [\"missing_{i}\"]}}\n"))
        .collect();
    let path = temp_file("eval-many-unknown.jsonl", &many);
    let out = run(&["eval", "--ranker", "bm25", "--queries", &path, "--json"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("is not in the catalog (counted as a miss)")
            .count(),
        10,
        "{err}"
    );
    assert!(
        err.contains(&format!("{path}:10: gold \"missing_9\"")),
        "{err}"
    );
    assert!(!err.contains("missing_10"), "{err}");
    assert!(
        err.contains("12 gold names in all are not in the catalog"),
        "{err}"
    );
    // A bare name two servers share is no particular tool: a miss, named, not a guess.
    let catalog = temp_file(
        "eval-shared.json",
        r#"{"servers": [
            {"name": "s1", "tools": [{"name": "read", "description": "read a blob", "inputSchema": {"type": "object"}}]},
            {"name": "s2", "tools": [{"name": "read", "description": "read a blob", "inputSchema": {"type": "object"}}]}]}"#,
    );
    let path = temp_file(
        "eval-shared.jsonl",
        "{\"query\": \"read a blob\", \"gold\": [\"read\"]}\n",
    );
    let out = run(&[
        "eval",
        "--ranker",
        "bm25",
        "--catalog",
        &catalog,
        "--queries",
        &path,
        "--json",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gold \"read\" names several tools (mcp__s1__read, mcp__s2__read)"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["unknown_gold"].as_u64(), Some(1), "{v}");
    // A gold tool the mode hides cannot be found: named as such, not as a ranking miss.
    let path = temp_file(
        "eval-hidden.jsonl",
        "{\"query\": \"write a file\", \"gold\": [\"Write\"]}\n",
    );
    let out = run(&[
        "eval",
        "--ranker",
        "bm25",
        "--mode",
        "ask",
        "--queries",
        &path,
        "--json",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gold \"Write\" (Write) is hidden by the active mode or a deny rule"),
        "{err}"
    );
}

#[test]
fn eval_refuses_lines_that_cannot_be_scored() {
    for (line, says) in [
        (
            r#"{"query": "  ", "gold": ["git_commit"]}"#,
            "\"query\" is blank",
        ),
        (r#"{"query": "commit", "gold": []}"#, "\"gold\" is empty"),
        (
            r#"{"query": "commit", "gold": ["git_commit", 7]}"#,
            "gold[1] is 7, not a tool name",
        ),
        (
            r#"{"query": "commit", "gold": ["git_commit", ""]}"#,
            "gold[1] is blank; give a tool name",
        ),
        (
            r#"{"query": "commit", "gold": [" "]}"#,
            "gold[0] is blank; give a tool name",
        ),
        (
            r#"{"query": "commit"}"#,
            "the line has no \"gold\", the tools the query should find",
        ),
        (
            r#"{"query": "commit", "gold": "git_commit"}"#,
            "\"gold\" is \"git_commit\", not an array of tool names: write [\"git_commit\"]",
        ),
        (
            r#"{"query": "commit", "gld": ["git_commit"]}"#,
            "unknown key \"gld\"; did you mean \"gold\"?",
        ),
        (
            r#"{"Query": "commit", "gold": ["git_commit"]}"#,
            "unknown key \"Query\"; did you mean \"query\"?",
        ),
        (
            r#"{"query": 5, "gold": ["git_commit"]}"#,
            "\"query\" is 5, not a string of words to search for",
        ),
        (r#"{"gold": ["git_commit"]}"#, "the line has no \"query\""),
        (
            r#"["commit", ["git_commit"]]"#,
            "the line is an array, not an object such as {\"query\"",
        ),
    ] {
        let path = temp_file(
            "eval-unscorable.jsonl",
            &format!("{{\"query\": \"log\", \"gold\": [\"git_log\"]}}\n\n{line}\n"),
        );
        let (code, e) = status_and_err(&["eval", "--ranker", "bm25", "--queries", &path]);
        assert_eq!(code, Some(2), "{line}: {e}");
        assert!(e.contains(&format!("{path}:3: {says}")), "{line}: {e}");
    }
}

/// The query-length buckets come in order of length, in the text and in `--json`'s `by_length`.
#[test]
fn eval_lists_the_length_buckets_shortest_first() {
    let line = |words: usize| {
        format!(
            "{{\"query\": \"{}\", \"gold\": [\"git_log\"]}}\n",
            vec!["log"; words].join(" ")
        )
    };
    let path = temp_file("eval-lengths.jsonl", &[20, 10, 5, 2].map(line).concat());
    let order = ["1-3 words", "4-8 words", "9-16 words", "17+ words"];
    let v: Value = serde_json::from_str(&ok(&[
        "eval",
        "--ranker",
        "bm25",
        "--queries",
        &path,
        "--json",
    ]))
    .expect("json");
    let keys: Vec<&str> = v["by_length"]
        .as_object()
        .expect("by_length")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, order, "{v}");
    let text = ok(&["eval", "--ranker", "bm25", "--queries", &path]);
    let at: Vec<usize> = order
        .iter()
        .map(|b| text.find(&format!("  {b} ")).expect(b))
        .collect();
    assert!(at.is_sorted(), "{text}");
}

/// `ledger --window N` is the window `[defer] window = N` sets: `auto:N` deferral is decided
/// against it too, so both give the same account.
#[test]
fn ledger_window_decides_auto_deferral_as_the_configured_window_does() {
    let catalog = example("catalog.json");
    let flag = temp_file("auto-flag.toml", "[defer]\ndefault = \"auto:4\"\n");
    let set = temp_file(
        "auto-window.toml",
        "[defer]\ndefault = \"auto:4\"\nwindow = 100000\n",
    );
    let account = |config: &str, window: Option<&str>| -> Value {
        let mut args = vec![
            "ledger",
            "--catalog",
            &catalog,
            "--config",
            config,
            "--json",
        ];
        if let Some(w) = window {
            args.extend(["--window", w]);
        }
        serde_json::from_str(&ok(&args)).expect("json")
    };
    let by_flag = account(&flag, Some("100000"));
    assert_eq!(by_flag, account(&set, None));
    assert!(by_flag["deferred"].as_u64() > Some(0), "{by_flag}");
    // The flag overrides the configured window, for the decision as for the shares.
    assert_eq!(account(&set, Some("2000000"))["deferred"], 0);
    assert_eq!(
        ok(&[
            "ledger",
            "--catalog",
            &catalog,
            "--config",
            &flag,
            "--window",
            "100000"
        ]),
        ok(&["ledger", "--catalog", &catalog, "--config", &set])
    );
}

/// The note naming the server groups the index budget dropped names the first few and counts
/// the rest, as the other load warnings do; -v names every one.
#[test]
fn the_dropped_groups_note_is_cut_like_the_other_warnings() {
    let servers: Vec<Value> = (0..20)
        .map(|i| {
            serde_json::json!({
                "name": format!("srv{i:02}"),
                "description": format!("Server number {i}"),
                "tools": [{"name": "tool_a", "description": "Does a thing", "inputSchema": {"type": "object"}}],
            })
        })
        .collect();
    let catalog = temp_file(
        "many-groups.json",
        &serde_json::json!({ "servers": servers }).to_string(),
    );
    let config = temp_file("small-index.toml", "[defer]\nindex_budget_chars = 400\n");
    let note = |verbose: bool| -> String {
        let mut args = vec!["render", "--catalog", &catalog, "--config", &config];
        if verbose {
            args.insert(0, "-v");
        }
        let out = run(&args);
        assert!(out.status.success());
        let err = String::from_utf8(out.stderr).expect("utf-8");
        err.lines()
            .find(|l| l.contains("did not fit the index budget"))
            .unwrap_or_else(|| panic!("{err}"))
            .to_owned()
    };
    let short = note(false);
    assert!(
        short.ends_with(
            "so they are searchable only: mcp__srv06, mcp__srv07, mcp__srv08, mcp__srv09, mcp__srv10, ... and 9 more (-v names every one)"
        ),
        "{short}"
    );
    assert!(
        short.starts_with("toolshelf: note: 14 server groups with 14 tools"),
        "{short}"
    );
    let all = note(true);
    assert!(all.ends_with("mcp__srv18, mcp__srv19"), "{all}");
    assert!(!all.contains("more"), "{all}");
}

#[test]
fn bytes_are_stable_across_processes() {
    // Each process seeds its hash maps afresh: output that iterated one would differ here.
    for format in ["anthropic", "openai", "openai-responses", "mcp"] {
        let first = ok(&["render", "--format", format]);
        for _ in 0..2 {
            assert_eq!(first, ok(&["render", "--format", format]), "{format}");
        }
    }
    assert_eq!(
        ok(&["render", "--index-only"]),
        ok(&["render", "--index-only"])
    );
    assert_eq!(ok(&["ledger", "--json"]), ok(&["ledger", "--json"]));
}

#[test]
fn a_deny_rule_hides_the_tool_in_every_command() {
    let cfg = temp_file(
        "deny.toml",
        "[permissions]\ndeny = [\"^mcp__git__git_commit$\", \"^mcp__filesystem__(file:path=/etc/**)\"]\n",
    );
    let render = ok(&["render", "--config", &cfg]);
    assert!(
        !render.contains("git_commit"),
        "render shows the denied tool"
    );
    assert!(
        ok(&["render", "--index-only"]).contains("git_commit"),
        "shown without the rule"
    );
    let index = ok(&["render", "--config", &cfg, "--index-only"]);
    assert!(
        !index.contains("git_commit") && index.contains("git_log"),
        "{index}"
    );
    let with: Value =
        serde_json::from_str(&ok(&["ledger", "--config", &cfg, "--json"])).expect("json");
    assert_eq!(with["hidden"], 1, "{with}");
    let search: Value = serde_json::from_str(&ok(&[
        "search",
        "--config",
        &cfg,
        "-q",
        "commit changes",
        "--json",
    ]))
    .expect("json");
    let names: Vec<&str> = ["hits", "also_matching"]
        .iter()
        .flat_map(|k| search[k].as_array().expect(k))
        .map(|h| h["name"].as_str().expect("name"))
        .collect();
    assert!(!names.contains(&"mcp__git__git_commit"), "{names:?}");
    let explain = ok(&["explain", "--config", &cfg, "mcp__git__git_commit"]);
    assert!(
        explain.contains(
            "deny:      [permissions] deny[0] \"^mcp__git__git_commit$\" denies every call: hidden"
        ) && explain.contains("final:     hidden"),
        "{explain}"
    );
    let v: Value = serde_json::from_str(&ok(&[
        "explain",
        "--config",
        &cfg,
        "mcp__git__git_commit",
        "--json",
    ]))
    .expect("json");
    assert_eq!(v["denied_by"], "deny[0] \"^mcp__git__git_commit$\"");
    // A deny with an argument glob refuses some calls only, so the tool stays.
    let v: Value = serde_json::from_str(&ok(&[
        "explain",
        "--config",
        &cfg,
        "read_text_file",
        "--json",
    ]))
    .expect("json");
    assert_eq!(v["final"], "deferred");
    assert!(v["denied_by"].is_null());
}

/// `default = "deny"` hides every tool no allow or ask rule names, as a deny rule would: the
/// model is not shown tools it can never run. One an allow rule names (with arguments too)
/// stays.
#[test]
fn a_deny_default_hides_the_tools_no_rule_allows() {
    let cfg = temp_file(
        "deny-default.toml",
        "[permissions]\ndefault = \"deny\"\n\
         allow = [\"^mcp__git__git_log$\", \"^mcp__filesystem__read_text_file(path=/src/*)\"]\n\
         ask = [\"^Bash$\"]\n",
    );
    let index = ok(&["render", "--config", &cfg, "--index-only"]);
    assert!(
        index.contains("git_log")
            && index.contains("read_text_file")
            && !index.contains("git_commit"),
        "{index}"
    );
    let explain = |name: &str| -> Value {
        serde_json::from_str(&ok(&["explain", "--config", &cfg, name, "--json"])).expect("json")
    };
    for hidden in ["mcp__git__git_commit", "Read"] {
        let v = explain(hidden);
        assert_eq!(v["final"], "hidden", "{v}");
        assert_eq!(v["denied_by"], "default = \"deny\"", "{v}");
    }
    for shown in [
        "mcp__git__git_log",
        "mcp__filesystem__read_text_file",
        "Bash",
    ] {
        let v = explain(shown);
        assert_ne!(v["final"], "hidden", "{v}");
    }
}

/// `search` shows what tool_search returns to a session: descriptions its templates render.
#[test]
fn search_hits_show_the_sessions_rendered_descriptions() {
    let cfg = temp_file(
        "search-template.toml",
        "[tools.\"mcp__git__git_log\"]\n\
         description_template = \"part(pkg.description, 'For', session.client)\"\n",
    );
    let args = |rest: &[&str]| -> Vec<String> {
        ["search", "--config", &cfg, "--client", "tester/1.0"]
            .iter()
            .chain(rest)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let named: Vec<String> = args(&["-n", "mcp__git__git_log"]);
    let named = ok(&named.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(named.contains("For tester/1.0"), "{named}");
    let fuzzy: Vec<String> = args(&["-q", "commit history log", "--json"]);
    let fuzzy = ok(&fuzzy.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(fuzzy.contains("For tester/1.0"), "{fuzzy}");
}

/// Exit status 1 is for what a command found (an unknown tool, a failed server, a broken
/// prefix), 2 for what kept it from running, in every command.
#[test]
fn exit_status_tells_a_finding_from_an_error() {
    let missing = "/nonexistent/toolshelf/x.json";
    let bad_config = temp_file("bad-key.toml", "[defer]\nno_such_key = 1\n");
    let blank = temp_file(
        "blank-query.jsonl",
        "{\"query\": \" \", \"gold\": [\"Read\"]}\n",
    );
    for (args, code) in [
        (vec!["explain", "no_such_tool"], 1),
        (vec!["search", "-n", "no_such_tool"], 1),
        (vec!["explain", "Read", "--catalog", missing], 2),
        (vec!["render", "--catalog", missing], 2),
        (vec!["ledger", "--catalog", missing], 2),
        (vec!["render", "--mode", "no_such_mode"], 2),
        (vec!["render", "--config", &bad_config], 2),
        (vec!["status", "--config", &bad_config], 2),
        (vec!["catalog", "--config", &bad_config], 2),
        (vec!["eval", "--queries", &blank], 2),
        (vec!["eval", "--queries", missing], 2),
        (vec!["replay", "--transcript", missing], 2),
        (vec!["search", "-q", "x", "--catalog", missing], 2),
        (vec!["prefix-check", missing], 2),
    ] {
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("toolshelf: "),
            "{args:?} says why"
        );
    }
}

/// `ledger --window` refuses a value that is no positive number of tokens, saying so: a negative
/// one is its value, not an unknown option.
#[test]
fn a_window_that_is_no_positive_number_is_refused_saying_why() {
    for (value, says) in [
        ("-5", "the window must be a positive number of tokens"),
        ("0", "the window must be at least 1 token"),
        ("200k", "the window is a whole number of tokens"),
    ] {
        let out = run(&["ledger", "--window", value]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "invalid value '{value}' for '--window <TOKENS>': {says}"
            )),
            "{value}: {stderr}"
        );
    }
}

/// With `[cache] enabled = false` no gateway writes a status file, so `status` cannot tell
/// whether one runs: it says that it found no status file (and why), not that no gateway runs,
/// and probes the servers itself as without a gateway.
#[test]
fn status_without_the_cache_does_not_say_that_no_gateway_runs() {
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/test_server.py");
    let config = temp_file(
        "no-cache.toml",
        &format!(
            "[servers.test]\ncommand = \"python3\"\nargs = [{:?}]\n[cache]\nenabled = false\n",
            server.display().to_string()
        ),
    );
    let out = run(&["status", "--config", &config]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Whether a gateway runs cannot be known: no running one was found.
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().next(),
        Some(
            "no status file to read: with [cache] enabled = false a running gateway writes none; started each server to check it"
        ),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("test ") && l.contains("ready")),
        "{stdout}"
    );
}

/// A byte-order mark (Windows editors write one) is skipped in every input, and a line that
/// cannot be read is named by file and line.
#[test]
fn inputs_with_a_byte_order_mark_read_like_any_other() {
    let catalog = r#"[{"name": "Read", "description": "Read a file from disk."},
                      {"name": "Grep", "description": "Search file contents."}]"#;
    let plain = temp_file("plain-catalog.json", catalog);
    let bom = temp_file("bom-catalog.json", &format!("\u{feff}{catalog}"));
    assert_eq!(
        ok(&["render", "--catalog", &bom]),
        ok(&["render", "--catalog", &plain])
    );
    let queries = "{\"query\": \"read a file\", \"gold\": [\"Read\"]}\n";
    let q = temp_file("bom-queries.jsonl", &format!("\u{feff}{queries}"));
    let v: Value = serde_json::from_str(&ok(&[
        "eval",
        "--catalog",
        &plain,
        "--queries",
        &q,
        "--json",
        "--ranker",
        "bm25",
    ]))
    .expect("json");
    assert_eq!(v["queries"], 1, "{v}");
    let b = temp_file("bom-batch.jsonl", "\u{feff}{\"query\": \"read a file\"}\n");
    let out = ok(&[
        "search",
        "--catalog",
        &plain,
        "--batch",
        &b,
        "--ranker",
        "bm25",
    ]);
    assert!(out.contains("\"name\":\"Read\""), "{out}");
    // Not UTF-8 on line 2, and a directory: named.
    let dir = std::env::temp_dir().join(format!("toolshelf-cli-{}", std::process::id()));
    let latin = dir.join("latin-queries.jsonl");
    std::fs::write(&latin, b"{\"query\": \"a\", \"gold\": [\"Read\"]}\n{\"query\": \"caf\xe9\", \"gold\": [\"Read\"]}\n")
        .expect("write");
    let latin = latin.display().to_string();
    let e = fails(&["eval", "--catalog", &plain, "--queries", &latin]);
    assert!(
        e.contains(&format!(
            "{latin}:2: not valid UTF-8 (byte 47 of the file); the queries must be UTF-8 text"
        )),
        "{e}"
    );
    let d = dir.display().to_string();
    let e = fails(&["eval", "--catalog", &plain, "--queries", &d]);
    assert!(e.contains(&d), "{e}");
}

#[test]
fn rules_that_match_no_tool_are_warned_about() {
    let cfg = temp_file(
        "typo.toml",
        "[permissions]\ndeny = [\"^mcp__git__git_comit$\"]\n",
    );
    let out = run(&["render", "--config", &cfg]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: [permissions] deny[0] \"^mcp__git__git_comit$\" matches no tool"),
        "{err}"
    );
}

/// A mode that admits no tool of the catalog is warned about where it is used, naming what
/// it admits by; one that admits a tool is not.
#[test]
fn a_mode_that_hides_every_tool_is_warned_about() {
    let cfg = temp_file(
        "mode-hides-all.toml",
        "[modes.ask]\ntools = [\"^mcp__gti__\"]\n[modes.ro]\nread_only = true\n",
    );
    for args in [
        vec!["render", "--config", &cfg, "--mode", "ask"],
        vec!["explain", "Read", "--config", &cfg, "--mode", "ask"],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        let warned: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("toolshelf: warning: [modes.ask] hides all "))
            .collect();
        assert_eq!(warned.len(), 1, "{args:?}: {err}");
        assert!(
            warned[0].ends_with(
                "tools of the catalog, so the model is shown none of them: tools = [\"^mcp__gti__\"] matches none of them"
            ),
            "{args:?}: {err}"
        );
    }
    let unhinted = temp_file("unhinted.json", r#"[{"name": "Write"}, {"name": "Edit"}]"#);
    let out = run(&[
        "render",
        "--catalog",
        &unhinted,
        "--config",
        &cfg,
        "--mode",
        "ro",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: [modes.ro] hides all 2 tools of the catalog, so the model is shown none of them: read_only = true admits only tools with readOnlyHint = true, and none has it"),
        "{err}"
    );
    // The bundled catalog's readers have readOnlyHint = true.
    let out = run(&["render", "--config", &cfg, "--mode", "ro"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("hides all"), "{err}");
}

#[test]
fn a_catalog_with_a_meta_tool_name_loads_and_hits_map_back_to_originals() {
    // Real sets have a function called tool_search (a GitHub search tool): it must not make
    // the whole catalog unloadable.
    let catalog = temp_file(
        "meta.json",
        &serde_json::json!({
            "builtin": [{"name": "tool_search", "description": "Search GitHub repositories by topic"}],
            "servers": [
                {"name": "Asset Price MCP", "tools": [{"name": "price.get", "description": "Get the current price of a stock ticker"}]},
                {"name": "a__b", "tools": [{"name": "c", "description": "a tool behind a double underscore"}]}
            ]
        })
        .to_string(),
    );
    let out = run(&[
        "search",
        "--catalog",
        &catalog,
        "-q",
        "github repositories",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tool \"tool_search\" has the name of toolshelf's own meta-tool"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let hit = &v["hits"][0];
    assert_eq!(hit["original"], "tool_search");
    assert_ne!(hit["name"], "tool_search");
    assert!(hit["original_server"].is_null());
    let v: Value = serde_json::from_str(&ok(&[
        "search",
        "--catalog",
        &catalog,
        "-q",
        "stock price",
        "--json",
    ]))
    .expect("json");
    let hit = &v["hits"][0];
    assert_eq!(
        (
            hit["name"].as_str(),
            hit["tool"].as_str(),
            hit["server"].as_str(),
            hit["original"].as_str(),
            hit["original_server"].as_str()
        ),
        (
            Some("mcp__Asset_Price_MCP__price_get"),
            Some("price_get"),
            Some("Asset_Price_MCP"),
            Some("price.get"),
            Some("Asset Price MCP")
        )
    );
    // Rendered: the renamed tool in the index, the real meta-tools once each.
    let tools: Vec<Value> =
        serde_json::from_str(&ok(&["render", "--catalog", &catalog])).expect("json");
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["tool_search", "defer_execute"]);
    // eval takes gold as canonical, bare, original or mcp__<original server>__<original tool>.
    let queries = temp_file(
        "meta-eval.jsonl",
        "{\"query\": \"stock price\", \"gold\": [\"price.get\"]}\n\
         {\"query\": \"stock price\", \"gold\": [\"mcp__Asset Price MCP__price.get\"]}\n\
         {\"query\": \"github repositories\", \"gold\": [\"tool_search\"]}\n\
         {\"query\": \"double underscore\", \"gold\": [\"mcp__a__b__c\"]}\n",
    );
    let out = run(&[
        "eval",
        "--ranker",
        "bm25",
        "--catalog",
        &catalog,
        "--queries",
        &queries,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not in the catalog"));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["recall"]["1"].as_f64(), Some(1.0), "{v}");
}

#[test]
fn duplicate_keys_in_a_catalog_are_refused() {
    let path = temp_file(
        "dup.json",
        r#"{"servers": [{"name": "docs", "tools": [{"name": "a", "inputSchema": {"type": "object"}, "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}]}]}"#,
    );
    let e = fails(&["render", "--catalog", &path]);
    assert!(
        e.contains(&path) && e.contains("duplicate key \"inputSchema\" in servers[0].tools[0]"),
        "{e}"
    );
}

#[test]
fn a_bad_upstream_flag_is_named_as_the_flag() {
    for flag in ["--anthropic-upstream", "--openai-upstream"] {
        let e = fails(&["proxy", flag, "not a url"]);
        assert!(
            e.contains(&format!("invalid value 'not a url' for '{flag} <URL>'"))
                && e.contains("must be an http:// or https:// URL")
                && !e.contains("(defaults)"),
            "{e}"
        );
        let e = fails(&["proxy", flag, "http://127.0.0.1:11434/v1/"]);
        assert!(
            e.contains("must not end in /v1") && e.contains("so give http://127.0.0.1:11434"),
            "{e}"
        );
    }
    let config = temp_file(
        "v1-upstream.toml",
        "[proxy]\nopenai_upstream = \"https://api.example.com/v1\"\n",
    );
    let e = fails(&["proxy", "--config", &config]);
    assert!(
        e.contains("[proxy] openai_upstream must not end in /v1")
            && e.contains("so give https://api.example.com"),
        "{e}"
    );
}

#[test]
fn verbosity_and_help_are_documented() {
    let help = ok(&["--help"]);
    assert!(
        help.contains("--verbose") && help.contains("RUST_LOG"),
        "{help}"
    );
}

#[test]
fn eval_reports_buckets_and_explains_misses() {
    let path = temp_file(
        "eval-buckets.jsonl",
        "{\"query\": \"commit my changes\", \"gold\": [\"git_commit\"]}\n{\"query\": \"xylophone quasar\", \"gold\": [\"Read\", \"mcp__time__get_current_time\"]}\n",
    );
    let v: Value = serde_json::from_str(&ok(&[
        "eval",
        "--ranker",
        "bm25",
        "--queries",
        &path,
        "--json",
        "--misses",
        "5",
    ]))
    .expect("json");
    assert_eq!(v["by_length"]["1-3 words"]["queries"], 2, "{v}");
    assert_eq!(v["by_gold"]["1 gold"]["queries"], 1);
    assert_eq!(v["by_gold"]["2 gold"]["recall"]["10"], 0.0);
    let misses = v["misses"].as_array().expect("misses");
    assert_eq!(misses.len(), 1, "only the query that missed: {misses:?}");
    assert_eq!(misses[0]["query"], "xylophone quasar");
    assert_eq!(misses[0]["gold"].as_array().map(Vec::len), Some(2));
    assert!(misses[0]["gold"][0]["rank"].is_null());
    let text = ok(&[
        "eval",
        "--ranker",
        "bm25",
        "--queries",
        &path,
        "--misses",
        "1",
    ]);
    assert!(
        text.contains("by query length:") && text.contains("miss: \"xylophone quasar\""),
        "{text}"
    );
}

/// A miss names what ranked first among the tools that are no gold tool, and lists gold names
/// no search can find with why.
#[test]
fn eval_misses_name_the_best_hit_that_is_no_gold_tool_and_every_gold_name() {
    let path = temp_file(
        "eval-first-instead.jsonl",
        "{\"query\": \"read file\", \"gold\": [\"mcp__filesystem__read_multiple_files\", \"mcp__time__convert_time\", \"no_such_tool\"]}\n",
    );
    let v: Value = serde_json::from_str(&ok(&[
        "eval",
        "--ranker",
        "bm25",
        "--queries",
        &path,
        "--json",
        "--misses",
        "1",
    ]))
    .expect("json");
    let miss = &v["misses"][0];
    let gold: Vec<(&str, Option<u64>, &str)> = miss["gold"]
        .as_array()
        .expect("gold")
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap_or_default(),
                g["rank"].as_u64(),
                g["reason"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(gold.len(), 3, "{miss}");
    assert_eq!(gold[0].0, "mcp__filesystem__read_multiple_files");
    assert_eq!(gold[0].1, Some(1), "{miss}");
    assert_eq!(
        gold[2],
        ("no_such_tool", None, "not in the catalog"),
        "{miss}"
    );
    let first = miss["first"]["name"].as_str().expect("a first hit");
    assert!(
        !gold.iter().any(|(name, ..)| *name == first),
        "{first} is a gold tool: {miss}"
    );
    let text = ok(&[
        "eval",
        "--ranker",
        "bm25",
        "--queries",
        &path,
        "--misses",
        "1",
    ]);
    assert!(
        text.contains("  gold no_such_tool not ranked: not in the catalog\n")
            && text.contains(&format!("  first instead: {first} (")),
        "{text}"
    );
}

#[test]
fn check_template_reports_each_refused_access_with_its_line() {
    let file = temp_file(
        "bad.star",
        "intro = part(pkg.description, 'in', session.workspace)\n\
         if session.mode == 'review':\n    \
             intro = intro + ' (turn ' + str(turn.number) + ')'\n\
         stamp = time()\n\
         join([intro, pkg.team])\n",
    );
    let out = run(&["check-template", &file, "--workspace", "/src/shop"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a forbidden access is exit status 1"
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].ends_with("bad.star: description template line 3: reads turn.number, a per-turn value: a description is rendered once per session and must not change between turns (use pkg.* and session.*)"),
        "{text}"
    );
    assert!(lines[1].contains("line 4: uses time,"), "{text}");
    assert!(
        lines[2].contains("line 5: pkg.team is not a value here (pkg has: description, name, params, required, server, tags, tool, tools)"),
        "{text}"
    );
    // The render stops at the stub (mode is not review, so turn.number is not reached), which is
    // already listed.
    assert!(lines[3].ends_with("bad.star: 3 refused accesses"), "{text}");

    let out = run(&[
        "check-template",
        &file,
        "--json",
        "--vars",
        r#"{"pkg": {"team": "payments"}, "session": {"mode": "review"}}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["ok"], false);
    let found: Vec<(u64, &str, &str)> = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["line"].as_u64().expect("line"),
                f["kind"].as_str().expect("kind"),
                f["access"].as_str().expect("access"),
            )
        })
        .collect();
    assert_eq!(found, [(3, "turn", "turn.number"), (4, "stub", "time")]);
    // In review mode the render reaches turn.number first.
    assert!(
        v["error"]
            .as_str()
            .expect("error")
            .contains("description template line 3: reads turn.number"),
        "{v}"
    );
    assert_eq!(v["rendered"], Value::Null);
}

/// A script tool's file whose `run` cannot take the params is refused as its definition would be,
/// naming the line of the `def`; one whose `run` takes them renders as before.
#[test]
fn check_template_refuses_a_script_whose_run_cannot_take_the_params() {
    for (name, def, takes) in [
        ("run0.star", "def run():", "takes no argument"),
        ("run2.star", "def run(a, b):", "needs 2 arguments"),
    ] {
        let file = temp_file(
            name,
            &format!("description = \"d\"\nschema = {{}}\n{def}\n    return 1\n"),
        );
        let out = run(&["check-template", &file]);
        assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.trim_end().ends_with(&format!(
                "{name}: script line 3: failed: a script must define `def run(params): ...`, a function of one argument; its `run` {takes}"
            )),
            "{name}: {text}"
        );
        let v: Value = serde_json::from_str(&String::from_utf8_lossy(
            &run(&["check-template", &file, "--json"]).stdout,
        ))
        .expect("json");
        assert_eq!(
            (v["ok"].clone(), v["rendered"].clone()),
            (Value::Bool(false), Value::Null),
            "{v}"
        );
        assert!(v["error"].as_str().expect("error").contains(takes), "{v}");
    }
    let good = temp_file(
        "run1.star",
        "description = \"d\"\nschema = {}\ndef run(params):\n    return 1\n",
    );
    assert!(ok(&["check-template", &good]).ends_with("run1.star: ok; renders to:\nd\n"));
}

/// What a template renders is printed line by line with its other control and invisible
/// characters escaped: it cannot move the terminal's cursor or hide text there.
#[test]
fn check_template_prints_a_rendering_without_its_control_characters() {
    let file = temp_file(
        "ctrl.star",
        "'red ' + chr(27) + '[31m' + chr(0x202e) + 'x\\ttab\\nsecond ' + chr(0)",
    );
    let out = ok(&["check-template", &file]);
    assert!(
        out.ends_with("renders to:\nred \\u{1b}[31m\\u{202e}x\\ttab\nsecond \\0\n"),
        "{out:?}"
    );
    assert!(!out.contains(['\u{1b}', '\u{202e}', '\0']), "{out:?}");
}

#[test]
fn check_template_renders_a_clean_template() {
    let file = temp_file(
        "good.star",
        "description = part(pkg.description, 'Team:', pkg.team, tag('client', session.client))\n",
    );
    let out = ok(&[
        "check-template",
        &file,
        "--pkg",
        "team=payments",
        "--pkg",
        "description=Shows the log.",
        "--client",
        "cursor",
    ]);
    assert!(
        out.ends_with(
            "good.star: ok; renders to:\nShows the log. Team: payments <client>cursor</client>\n"
        ),
        "{out}"
    );
    let v: Value =
        serde_json::from_str(&ok(&["check-template", &file, "--json", "--pkg", "team=7"]))
            .expect("json");
    assert_eq!(v["ok"], true);
    // No client: the tag has no body.
    assert_eq!(v["rendered"], "An example tool. Team: 7 <client/>");
    assert_eq!(v["findings"], serde_json::json!([]));
    // session.workspace is what a session has: the directory toolshelf runs in, unless given.
    let ws = temp_file("ws.star", "description = 'Repo: ' + session.workspace\n");
    let dir = Path::new(&ws).parent().expect("the temp dir");
    let out = bin()
        .args(["check-template", &ws])
        .current_dir(dir)
        .output()
        .expect("run toolshelf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.ends_with(&format!("renders to:\nRepo: {}\n", dir.display())),
        "{text}"
    );
    let out = ok(&["check-template", &ws, "--workspace", "shop"]);
    assert!(out.ends_with("renders to:\nRepo: shop\n"), "{out}");
    // A syntax error is reported with its line, exit status 1.
    let broken = temp_file("broken.star", "x = (\n");
    let out = run(&["check-template", &broken]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("broken.star: description template line"),
        "{out:?}"
    );
    // What cannot be checked at all is status 2: a missing file, a configuration the gateway
    // would refuse (a [template.vars] value the catalog fills in).
    let out = run(&["check-template", "/nonexistent/t.star"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let config = temp_file(
        "vars.toml",
        "[template.vars]\ndescription = \"overridden\"\n",
    );
    let out = run(&["check-template", &file, "--config", &config]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a value the catalog fills in"),
        "{out:?}"
    );
}

#[test]
fn render_fills_in_templates_for_the_session_it_is_given() {
    let catalog = temp_file(
        "templated.json",
        r#"[{"name": "Read", "description": "Read a file.", "defer_loading": false,
             "description_template": "part(pkg.description, 'Workspace:', session.workspace, 'Client:', session.client)"},
            {"name": "Grep", "description": "Search."}]"#,
    );
    let tools: Vec<Value> = serde_json::from_str(&ok(&[
        "render",
        "--catalog",
        &catalog,
        "--workspace",
        "/src/shop",
        "--client",
        "cli",
    ]))
    .expect("json");
    assert_eq!(
        tools[0]["description"],
        "Read a file. Workspace: /src/shop Client: cli"
    );
    let bad = temp_file(
        "templated-bad.json",
        r#"[{"name": "Read", "defer_loading": false, "description_template": "x = 1\nuuid()"}]"#,
    );
    let err = fails(&["render", "--catalog", &bad]);
    assert!(
        err.contains("tool \"Read\": description template line 2: uses uuid,"),
        "{err}"
    );
}

#[test]
fn replay_sends_the_sessions_rendered_descriptions() {
    let catalog = temp_file(
        "replay-templated.json",
        r#"[{"name": "Read", "description": "Read a file.", "defer_loading": false,
             "description_template": "part(pkg.description, 'Workspace:', session.workspace)"}]"#,
    );
    let transcript = temp_file("replay-templated.jsonl", "{\"user\": \"hello\"}\n");
    let out = ok(&[
        "replay",
        "--catalog",
        &catalog,
        "--workspace",
        "/src/shop",
        "--transcript",
        &transcript,
    ]);
    let body: Value = serde_json::from_str(out.lines().next().expect("a body")).expect("json");
    assert_eq!(
        body["tools"][0]["description"],
        "Read a file. Workspace: /src/shop"
    );
}

/// A `defer_execute` of `tool_define`, as a transcript line.
fn define_line(name: &str, description: &str) -> String {
    serde_json::json!({"call": {"name": "defer_execute", "input": {
        "tool_name": "tool_define",
        "params": {
            "name": name,
            "description": description,
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "script": "def run(params):\n    return len(params['text'].split())\n"
        }
    }}})
    .to_string()
}

/// A tool the model defined may be removed later: the check made before the replay leaves that
/// removal to the replay, which knows whether the definition succeeded.
#[test]
fn a_replay_may_remove_a_tool_the_model_defined() {
    let catalog = temp_file(
        "authoring-remove.json",
        r#"[{"name": "Read", "description": "Read a file.", "defer_loading": false},
            {"name": "Grep", "description": "Search file contents."}]"#,
    );
    let config = temp_file("authoring-remove.toml", "[authoring]\nenabled = true\n");
    let transcript = |remove: &str| {
        temp_file(
            &format!("authoring-remove-{remove}.jsonl"),
            &[
                r#"{"user": "count the words in my notes"}"#.to_owned(),
                r#"{"call": {"name": "tool_search", "input": {"tool_names": ["tool_define"]}}}"#
                    .to_owned(),
                define_line("word_count", "Counts the words of a text."),
                format!(r#"{{"tools_changed": {{"remove": ["{remove}"]}}}}"#),
                r#"{"user": "thanks"}"#.to_owned(),
            ]
            .join("\n"),
        )
    };
    let args = |t: &str| {
        vec![
            "replay".to_owned(),
            "--catalog".to_owned(),
            catalog.clone(),
            "--config".to_owned(),
            config.clone(),
            "--transcript".to_owned(),
            t.to_owned(),
        ]
    };
    let defined = args(&transcript("word_count"));
    let out = ok(&defined.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.lines().count(), 4, "{out}");
    // A name no tool has and the model never defines is refused before any output.
    let never = args(&transcript("line_count"));
    let out = run(&never.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!out.status.success() && out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(":4: tools_changed.remove names \"line_count\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_replayed_session_that_authors_two_tools_keeps_its_prefix() {
    let catalog = temp_file(
        "authoring.json",
        r#"[{"name": "Read", "description": "Read a file.", "defer_loading": false},
            {"name": "Grep", "description": "Search file contents."}]"#,
    );
    let config = temp_file(
        "authoring.toml",
        "[authoring]\nenabled = true\nmax_tools = 2\n",
    );
    let transcript = temp_file(
        "authoring.jsonl",
        &[
            r#"{"user": "count the words in my notes, and the lines"}"#.to_owned(),
            r#"{"call": {"name": "tool_search", "input": {"tool_names": ["tool_define"]}}}"#.to_owned(),
            define_line("word_count", "Counts the words of a text."),
            define_line("line_count", "Counts the lines of a text."),
            define_line("char_count", "Counts the characters of a text."),
            r#"{"call": {"name": "tool_search", "input": {"queries": ["count words"]}}}"#.to_owned(),
            r#"{"call": {"name": "defer_execute", "input": {"tool_name": "word_count", "params": {"text": "a b c"}}}}"#.to_owned(),
            r#"{"assistant": "Three words."}"#.to_owned(),
        ]
        .join("\n"),
    );
    let out = ok(&[
        "replay",
        "--catalog",
        &catalog,
        "--config",
        &config,
        "--transcript",
        &transcript,
    ]);
    let bodies: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a body"))
        .collect();
    assert_eq!(bodies.len(), 7, "{out}");
    // Not one byte of the tool list changes, and tool_define is in the index from the start.
    for b in &bodies {
        assert_eq!(b["tools"], bodies[0]["tools"]);
    }
    let index = bodies[0]["tools"][1]["description"]
        .as_str()
        .expect("tool_search");
    assert!(index.contains("\ntool_define\n"), "{index}");
    assert!(!index.contains("word_count"), "{index}");
    let results = |i: usize| {
        bodies[i]["messages"]
            .as_array()
            .expect("messages")
            .last()
            .expect("last")
            .to_string()
    };
    // The proxy answers the definitions inside the client's request and announces them in the
    // change notice of its next request: here the one after the fourth round, where the rounds
    // of a request ([proxy] max_search_rounds, 4) run out.
    for (i, name) in [(2, "word_count"), (3, "line_count")] {
        let r = results(i);
        assert!(
            r.contains(&format!("Defined {name} for this session"))
                && !r.contains("the available tools changed"),
            "{r}"
        );
    }
    assert!(
        results(4).contains("[authoring] max_tools allows")
            && results(4).contains("the available tools changed; new: line_count, word_count."),
        "{}",
        results(4)
    );
    assert!(
        results(5).contains("word_count"),
        "searchable at once: {}",
        results(5)
    );
    assert!(
        results(6).contains("[dry run] word_count would run through defer_execute"),
        "{}",
        results(6)
    );

    let bodies_file = temp_file("authoring-bodies.jsonl", &out);
    let check = run(&["prefix-check", &bodies_file]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// `tool_define` reads the script's top level in replay as the proxy's runner does: one the
/// proxy would refuse (a stub read at the top level) is refused here too, and one that reads a
/// `[template.vars]` value is defined.
#[test]
fn a_replayed_definition_whose_top_level_cannot_run_is_refused() {
    let catalog = temp_file(
        "authoring-top.json",
        r#"[{"name": "Read", "description": "Read a file.", "defer_loading": false}]"#,
    );
    let config = temp_file(
        "authoring-top.toml",
        "[authoring]\nenabled = true\n[template.vars]\nteam = \"ops\"\n",
    );
    let define = |name: &str, script: &str| {
        serde_json::json!({"call": {"name": "defer_execute", "input": {
            "tool_name": "tool_define",
            "params": {
                "name": name,
                "description": "Says something.",
                "schema": {"type": "object", "properties": {}},
                "script": script
            }
        }}})
        .to_string()
    };
    let transcript = temp_file(
        "authoring-top.jsonl",
        &[
            r#"{"user": "tell me the time and the team"}"#.to_owned(),
            r#"{"call": {"name": "tool_search", "input": {"tool_names": ["tool_define"]}}}"#
                .to_owned(),
            define(
                "clock",
                "STARTED = time.now()\ndef run(params):\n    return STARTED\n",
            ),
            define(
                "team",
                "TEAM = pkg.team\ndef run(params):\n    return TEAM\n",
            ),
            r#"{"call": {"name": "defer_execute", "input": {"tool_name": "clock", "params": {}}}}"#
                .to_owned(),
        ]
        .join("\n"),
    );
    let out = ok(&[
        "replay",
        "--catalog",
        &catalog,
        "--config",
        &config,
        "--transcript",
        &transcript,
    ]);
    let bodies: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a body"))
        .collect();
    assert_eq!(bodies.len(), 5, "{out}");
    let result = |i: usize| {
        bodies[i]["messages"]
            .as_array()
            .expect("messages")
            .last()
            .expect("last")
            .to_string()
    };
    let clock = result(2);
    assert!(
        clock.contains(r#"tool_define \"clock\""#)
            && clock.contains("line 1")
            && clock.contains("fix the script and define the tool again")
            && clock.contains(r#""is_error":true"#),
        "{clock}"
    );
    assert!(
        result(3).contains("Defined team for this session"),
        "{}",
        result(3)
    );
    // The refused tool was never defined: a call of it names no tool.
    let call = result(4);
    assert!(
        call.contains(r#""is_error":true"#) && !call.contains("[dry run] clock"),
        "{call}"
    );
}

/// A replayed definition's top level is read in a runner process under the `[scripts]` limits,
/// as the proxy reads it: a value nested deep at the top level is a refusal, not a crash of the
/// replay, and a huge constant reaches the runner's memory limit, in the proxy's words, without
/// the replay itself allocating it.
#[test]
fn a_replayed_definition_is_read_under_the_proxys_limits() {
    let catalog = temp_file(
        "authoring-limits.json",
        r#"[{"name": "Read", "description": "Read a file.", "defer_loading": false}]"#,
    );
    let config = temp_file(
        "authoring-limits.toml",
        "[authoring]\nenabled = true\n[scripts]\nmax_memory_mb = 512\n",
    );
    let define = |name: &str, script: &str| {
        serde_json::json!({"call": {"name": "defer_execute", "input": {
            "tool_name": "tool_define",
            "params": {
                "name": name,
                "description": "Says something.",
                "schema": {"type": "object", "properties": {}},
                "script": script
            }
        }}})
        .to_string()
    };
    let transcript = temp_file(
        "authoring-limits.jsonl",
        &[
            r#"{"user": "build something big"}"#.to_owned(),
            r#"{"call": {"name": "tool_search", "input": {"tool_names": ["tool_define"]}}}"#
                .to_owned(),
            define(
                "deeptop",
                "x = []\nfor i in range(100000):\n    x = [x]\ny = str(x)\ndef run(params):\n    return 1\n",
            ),
            define(
                "bigconst",
                "x = \"a\" * 1500000000\ndef run(params):\n    return len(x)\n",
            ),
        ]
        .join("\n"),
    );
    let out = ok(&[
        "replay",
        "--catalog",
        &catalog,
        "--config",
        &config,
        "--transcript",
        &transcript,
    ]);
    let bodies: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a body"))
        .collect();
    assert_eq!(bodies.len(), 4, "{out}");
    let result = |i: usize| {
        bodies[i]["messages"]
            .as_array()
            .expect("messages")
            .last()
            .expect("last")
            .to_string()
    };
    let deep = result(2);
    assert!(
        deep.contains(r#"tool_define \"deeptop\""#)
            && deep.contains("fix the script and define the tool again")
            && deep.contains(r#""is_error":true"#),
        "{deep}"
    );
    let big = result(3);
    assert!(
        big.contains(r#"tool_define \"bigconst\""#)
            && big.contains(
                "stopped: the memory limit of 512 MiB ([scripts] max_memory_mb) was reached"
            )
            && big.contains(r#""is_error":true"#),
        "{big}"
    );
}

#[test]
fn duplicate_keys_in_queries_and_batch_lines_are_refused() {
    // The first line is fine; the second gives a key twice, which no value may win.
    let queries = temp_file(
        "dup-queries.jsonl",
        "{\"query\": \"read\", \"gold\": [\"Read\"]}\n{\"query\": \"read\", \"gold\": [\"Read\"], \"query\": \"git\"}\n",
    );
    let batch = temp_file(
        "dup-batch.jsonl",
        "{\"query\": \"read\"}\n{\"queries\": [\"a\"], \"queries\": [\"b\"]}\n",
    );
    for (args, path, key) in [
        (
            vec!["eval", "--ranker", "bm25", "--queries", &queries],
            &queries,
            "query",
        ),
        (
            vec!["search", "--ranker", "bm25", "--batch", &batch],
            &batch,
            "queries",
        ),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains(&format!(
                "{path}:2: duplicate key \"{key}\" in the top level"
            )),
            "{args:?}: {e}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: no output");
    }
    // Nested objects are read as strictly.
    let nested = temp_file(
        "dup-nested.jsonl",
        "{\"query\": \"read\", \"meta\": {\"k\": 1, \"k\": 2}}\n",
    );
    let e = fails(&["search", "--ranker", "bm25", "--batch", &nested]);
    assert!(
        e.contains(&format!("{nested}:1: duplicate key \"k\" in meta")),
        "{e}"
    );
}

#[test]
fn eval_counts_a_repeated_unknown_gold_name_once() {
    let path = temp_file(
        "eval-unknown-twice.jsonl",
        "{\"query\": \"commit my changes\", \"gold\": [\"git_commit\", \"no_such_tool\", \"no_such_tool\", \"git_commit\"]}\n",
    );
    let out = run(&["eval", "--ranker", "bm25", "--queries", &path, "--json"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("gold \"no_such_tool\"").count(), 1, "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["unknown_gold"].as_u64(), Some(1), "{v}");
    // Two gold tools, one of them found: as if each had been given once.
    assert_eq!(v["recall"]["10"].as_f64(), Some(0.5), "{v}");
    assert!(v["by_gold"]["2 gold"].is_object(), "{v}");
    // A hidden tool named twice, once bare and once canonical, is one miss too.
    let path = temp_file(
        "eval-hidden-twice.jsonl",
        "{\"query\": \"write a file\", \"gold\": [\"Write\", \"Write\"]}\n",
    );
    let out = run(&[
        "eval",
        "--ranker",
        "bm25",
        "--mode",
        "ask",
        "--queries",
        &path,
        "--json",
    ]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["unknown_gold"].as_u64(), Some(1), "{v}");
}

#[test]
fn blank_names_and_unknown_values_are_refused_as_arguments() {
    let template = temp_file("args.star", "description = pkg.description\n");
    for (args, says) in [
        (
            vec!["search", "-n", "Read", "-n", ""],
            "--name number 2 is blank",
        ),
        (vec!["search", "-n", " "], "--name number 1 is blank"),
        (vec!["explain", ""], "the tool name is blank"),
        (
            vec![
                "check-template",
                &template,
                "--config",
                &example("toolshelf.toml"),
                "--mode",
                "no_such_mode",
            ],
            "unknown mode \"no_such_mode\"; defined modes: ask, files, review",
        ),
        (
            vec!["check-template", &template, "--pkg", "=x"],
            "--pkg \"=x\": the NAME before `=` is empty",
        ),
        (
            vec![
                "replay",
                "--transcript",
                &example("transcript.jsonl"),
                "--json",
            ],
            "--explain",
        ),
    ] {
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(says), "{args:?}: {e}");
        assert!(out.stdout.is_empty(), "{args:?}: no output");
    }
    // A mode the configuration defines is a session value like any other.
    let out = ok(&[
        "check-template",
        &template,
        "--config",
        &example("toolshelf.toml"),
        "--mode",
        "ask",
    ]);
    assert!(out.contains("ok; renders to:"), "{out}");
}

#[test]
fn a_directory_for_a_json_lines_file_is_named_without_a_line() {
    let dir = std::env::temp_dir().join(format!("toolshelf-cli-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let d = dir.display().to_string();
    for (args, what) in [
        (vec!["eval", "--queries", &d], "queries"),
        (vec!["search", "--batch", &d], "batch file"),
        (vec!["prefix-check", &d], "log"),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains(&format!("cannot read {what} {d}: it is a directory")),
            "{args:?}: {e}"
        );
        assert!(
            !e.contains(&format!("{d}:1")),
            "{args:?}: no line is at fault: {e}"
        );
    }
}

/// A template that reads a per-turn value, or a `pkg` or `session` value that is not there, is a
/// finding of the catalog commands (exit 1), as `check-template` reports it; a template that
/// does not parse keeps them from running (exit 2).
#[test]
fn a_refused_template_access_is_a_finding_and_a_broken_template_an_error() {
    for (name, template, code, says) in [
        (
            "turn.toml",
            "part('Reads.', turn.number)",
            1,
            "reads turn.number",
        ),
        (
            "pkg.toml",
            "part('Reads.', pkg.nosuch)",
            1,
            "pkg.nosuch is not a value here (pkg has: description, name, params",
        ),
        (
            "session.toml",
            "part('Reads.', session.nosuch)",
            1,
            "session.nosuch is not a value here (session has: client, mode, workspace)",
        ),
        ("syntax.toml", "part('Reads.'", 2, "does not parse"),
    ] {
        let config = temp_file(
            name,
            &format!("[tools.Read]\ndescription_template = {template:?}\n"),
        );
        for command in [
            vec!["render"],
            vec!["ledger"],
            vec!["explain", "Read"],
            vec!["search", "-q", "read"],
            vec!["search", "-n", "Read"],
        ] {
            let mut args = command.clone();
            args.extend(["--config", &config]);
            let out = run(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{command:?} {name}: {err}");
            assert!(err.contains(says), "{command:?} {name}: {err}");
        }
    }
}

/// With `--json`, a template finding is printed on stdout too, as JSON, and the exit status
/// stays 1.
#[test]
fn a_template_finding_is_printed_as_json_with_json() {
    let turn = temp_file(
        "turn-json.toml",
        "[tools.Read]\ndescription_template = \"turn.number\"\n",
    );
    let pkg = temp_file(
        "pkg-json.toml",
        "[tools.Read]\ndescription_template = \"pkg.nosuch\"\n",
    );
    let queries = temp_file(
        "turn-json.jsonl",
        "{\"query\": \"read a file\", \"gold\": [\"Read\"]}\n",
    );
    let transcript = temp_file("turn-json-transcript.jsonl", "{\"user\": \"hi\"}\n");
    for ((command, name), (config, says)) in [
        (vec!["explain", "Read", "--json"], Some("Read")),
        (vec!["ledger", "--json"], None),
        (vec!["search", "-q", "read a file", "--json"], None),
        (vec!["eval", "--queries", &queries, "--json"], None),
        (vec!["search", "--batch", &queries, "--json"], None),
        (
            vec!["replay", "--transcript", &transcript, "--explain", "--json"],
            None,
        ),
    ]
    .into_iter()
    .flat_map(|c| {
        [
            (c.clone(), (turn.as_str(), "reads turn.number")),
            (c, (pkg.as_str(), "pkg.nosuch is not a value here")),
        ]
    }) {
        let mut args = command.clone();
        args.extend(["--config", config]);
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command:?} {config}: {err}");
        assert!(err.contains(says), "{command:?}: {err}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{command:?}: {e}: stdout {:?}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        assert_eq!(v["error"], "template", "{v}");
        assert_eq!(v["owner"], "tool \"Read\"", "{v}");
        assert_eq!(v["line"], 1, "{v}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains(says)),
            "{v}"
        );
        match name {
            Some(n) => assert_eq!(v["name"], n, "{v}"),
            None => assert!(v.get("name").is_none(), "{v}"),
        }
        // Without --json, stdout stays empty.
        let plain: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
        assert!(run(&plain).stdout.is_empty(), "{command:?}");
    }
}

/// A tiny window makes the share wider than its column: the columns still keep a space apart.
#[test]
fn ledger_columns_stay_apart_whatever_their_widths() {
    let table = ok(&["ledger", "--window", "1"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("all resident"))
        .expect("the all-resident row");
    let cells: Vec<&str> = row["all resident".len()..].split_whitespace().collect();
    assert_eq!(cells.len(), 3, "{row}");
    assert!(cells[2].ends_with('%'), "{row}");
    // The usual widths are unchanged.
    let usual = ok(&["ledger"]);
    let header = usual
        .lines()
        .find(|l| l.starts_with("per turn"))
        .expect("header");
    assert_eq!(header.len(), 24 + 3 * 10, "{header:?}");
}

#[test]
fn check_template_vars_name_their_file_and_refuse_json_that_is_not_an_object() {
    let template = temp_file("vars-kinds.star", "part(pkg.description)");
    let not_json = temp_file("vars-not-json.txt", "part(\"x\")\n");
    let (code, err) = status_and_err(&["check-template", &template, "--vars", &not_json]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("--vars file {not_json} is not valid JSON: ")),
        "{err}"
    );
    for inline in ["[]", " [\"a\"]"] {
        let (code, err) = status_and_err(&["check-template", &template, "--vars", inline]);
        assert_eq!(code, Some(2), "{inline}: {err}");
        assert!(
            err.contains("--vars must be a JSON object") && err.contains("found an array"),
            "{inline}: {err}"
        );
    }
    let array_file = temp_file("vars-array.json", "[1]");
    let (code, err) = status_and_err(&["check-template", &template, "--vars", &array_file]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("--vars file {array_file} must be a JSON object"))
            && err.contains("found an array"),
        "{err}"
    );
    // A file whose name opens as JSON does is read when it is there.
    let named = temp_file(
        "[team].json",
        r#"{"pkg": {"description": "from the file"}}"#,
    );
    let dir = std::path::Path::new(&named).parent().expect("dir");
    let out = bin()
        .current_dir(dir)
        .args(["check-template", &template, "--vars", "[team].json"])
        .output()
        .expect("run");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("from the file"), "{shown}");
    // A file that is not there is still said so.
    let (code, err) =
        status_and_err(&["check-template", &template, "--vars", "/nonexistent/v.json"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("cannot read --vars file /nonexistent/v.json"),
        "{err}"
    );
}

/// `(status, stderr)` of a run.
fn status_and_err(args: &[&str]) -> (Option<i32>, String) {
    let out = run(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An option that only one mode of a command reads is refused in the other, not ignored.
#[test]
fn an_option_the_command_would_ignore_is_refused() {
    for (args, says) in [
        (
            vec!["ledger", "--system", "foo"],
            "--system needs --transcript",
        ),
        (
            vec!["ledger", "--ranker", "bm25"],
            "--ranker needs --transcript",
        ),
        (
            vec![
                "ledger", "--system", "foo", "--ranker", "semantic", "--json",
            ],
            "--system needs --transcript",
        ),
        (
            vec!["render", "--index-only", "--format", "openai"],
            "--format applies to the tool definitions",
        ),
    ] {
        let (code, err) = status_and_err(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // With what they belong to, they work.
    let transcript = example("transcript.jsonl");
    let v: Value = serde_json::from_str(&ok(&[
        "ledger",
        "--transcript",
        &transcript,
        "--system",
        "Be brief.",
        "--ranker",
        "bm25",
        "--json",
    ]))
    .expect("json");
    assert!(v["requests"].as_u64() > Some(0), "{v}");
    assert!(ok(&["render", "--index-only"]).contains("<available_deferred_tools>"));
    assert!(ok(&["render", "--format", "openai"]).contains("\"function\""));
}

#[test]
fn check_template_vars_refuse_a_key_given_twice() {
    let template = temp_file("dup-vars.star", "part(pkg.description)");
    let (code, err) = status_and_err(&[
        "check-template",
        &template,
        "--vars",
        r#"{"pkg": {"team": "t"}, "pkg": {}}"#,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(r#"duplicate key "pkg" in the top level"#),
        "{err}"
    );
    let vars = temp_file("dup-vars.json", r#"{"pkg": {"team": "a", "team": "b"}}"#);
    let (code, err) = status_and_err(&["check-template", &template, "--vars", &vars]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(r#"duplicate key "team" in pkg"#), "{err}");
    let (code, err) = status_and_err(&[
        "check-template",
        &template,
        "--pkg",
        r#"x={"a": 1, "a": 2}"#,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(r#"--pkg "x={"a": 1, "a": 2}": duplicate key "a""#),
        "{err}"
    );
    // A value that is not JSON is still a string.
    assert!(ok(&["check-template", &template, "--pkg", "x={not json"]).contains("ok"));
}

/// The text a person or the model reads quotes words as they are: no JSON escapes, no `null`.
#[test]
fn readable_text_quotes_without_escapes() {
    let text = ok(&["search", "--ranker", "bm25", "-q", r#"read "quoted" file"#]);
    assert!(
        text.starts_with(r#"Tools matching "read "quoted" file" (best first):"#),
        "{text}"
    );
    let text = ok(&["search", "--ranker", "bm25", "-q", r"read C:\Users\me"]);
    assert!(text.contains(r#""read C:\Users\me""#), "{text}");
    // --json keeps JSON's own escaping.
    let v: Value = serde_json::from_str(&ok(&[
        "search",
        "--ranker",
        "bm25",
        "-q",
        r#"read "quoted" file"#,
        "--json",
    ]))
    .expect("json");
    assert!(
        v["text"]
            .as_str()
            .is_some_and(|t| t.starts_with(r#"Tools matching "read "quoted" file""#)),
        "{v}"
    );

    let queries = temp_file(
        "eval-readable.jsonl",
        "{\"query\": \"file\", \"gold\": [\"git_add\"]}\n{\"query\": \"xylophone \\\"quasar\\\"\", \"gold\": [\"Read\"]}\n",
    );
    let text = ok(&[
        "eval",
        "--ranker",
        "bm25",
        "--queries",
        &queries,
        "--misses",
        "2",
    ]);
    assert!(
        text.contains("\n  gold mcp__git__git_add at rank ")
            && text.contains(": \"file\" in description")
            && text.contains("miss: \"xylophone \"quasar\"\" (recall@10 0.0)")
            && text.contains("\n  gold Read not ranked: not among the first 1,000 hits"),
        "{text}"
    );
    assert!(!text.contains("null") && !text.contains("\\\""), "{text}");

    let log = temp_file(
        "choice.jsonl",
        concat!(
            r#"{"model": "m", "tool_choice": {"type": "auto"}, "messages": [{"role": "user", "content": "say \"hi\""}]}"#,
            "\n",
            r#"{"model": "m", "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "say \"hi\""}]}"#,
            "\n",
        ),
    );
    let out = run(&["prefix-check", &log]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    // The later excerpt sits under the earlier, so the first difference is in one column.
    assert_eq!(
        text,
        concat!(
            "1→2 tool_choice differs at byte 10: earlier {\"type\":\"auto\"}\n",
            "                                    later   {\"type\":\"any\"}\n",
            "2 requests, 1 pair: 1 broken\n",
        ),
        "{text}"
    );
}

#[test]
fn a_mode_that_admits_no_tool_is_refused() {
    let config = temp_file("mode-none.toml", "[modes.x]\ntools = []\n");
    for args in [
        vec!["ledger", "--config", &config, "--mode", "x"],
        vec!["render", "--config", &config],
    ] {
        let (code, err) = status_and_err(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("[modes.x] tools = [] admits no tool, so the mode would hide every tool"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_closed_stdout_ends_a_search_batch_quietly() {
    let path = temp_file(
        "long-batch.jsonl",
        &"{\"query\": \"read a file\"}\n".repeat(3000),
    );
    let mut child = bin()
        .args(["search", "--ranker", "bm25", "--batch", &path])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run toolshelf");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 1];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("a first byte");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn help_describes_batch_output_and_gold_names_as_they_are() {
    let help = ok(&["search", "--help"]);
    assert!(help.contains(r#"{"line", "hits": [...]}"#), "{help}");
    let help = ok(&["eval", "--help"]);
    assert!(
        help.contains("canonical, bare,")
            && help.contains("original, or")
            && help.contains("mcp__<original server>__<original tool>"),
        "{help}"
    );
}

#[test]
fn check_template_reads_a_template_with_a_byte_order_mark() {
    let plain = temp_file("plain.star", "part(pkg.description)");
    let bom = temp_file("bom.star", "\u{feff}part(pkg.description)");
    let rendered = ok(&["check-template", &plain]);
    assert_eq!(
        ok(&["check-template", &bom]),
        rendered.replace("plain.star", "bom.star")
    );
}

#[test]
fn counts_and_refusals_read_as_words() {
    let queries = temp_file(
        "one-query.jsonl",
        "{\"query\": \"commit my changes\", \"gold\": [\"git_commit\"]}\n",
    );
    let text = ok(&["eval", "--ranker", "bm25", "--queries", &queries]);
    assert!(text.starts_with("1 query over 60 tools"), "{text}");
    assert!(text.contains("        1 query    recall@1"), "{text}");
    let template = temp_file("one-finding.star", "part(pkg.description, turn.number)");
    let out = run(&["check-template", &template]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.ends_with("one-finding.star: 1 refused access\n"),
        "{text}"
    );
    let transcript = temp_file(
        "refusals.jsonl",
        concat!(
            "{\"user\": \"hi\"}\n",
            "{\"call\": {\"name\": \"no_such_tool\", \"input\": {}}}\n",
            "{\"call\": {\"name\": \"defer_execute\", \"input\": {\"tool_name\": \"mcp__memory__create_entities\", \"params\": {}}}}\n",
        ),
    );
    let text = ok(&[
        "replay",
        "--ranker",
        "bm25",
        "--explain",
        "--transcript",
        &transcript,
    ]);
    assert!(
        text.contains("refused: no_such_tool: unknown name (no visible tool has it)")
            && text.contains("mcp__memory__create_entities: not loaded (its schema was not shown yet: search for it first)"),
        "{text}"
    );
    // --json keeps the codes.
    let text = ok(&[
        "replay",
        "--ranker",
        "bm25",
        "--explain",
        "--json",
        "--transcript",
        &transcript,
    ]);
    assert!(text.contains("\"no_such_tool: unknown\""), "{text}");
    assert!(
        text.contains("\"mcp__memory__create_entities: not_loaded\""),
        "{text}"
    );
}

/// A server that fails is reported once, in the table or the error, not again as a log line.
#[test]
fn status_and_catalog_report_a_failed_server_without_raw_log_lines() {
    let config = temp_file(
        "failing-server.toml",
        "[servers.bad]\ncommand = \"/nonexistent/prog\"\n[cache]\nenabled = false\n",
    );
    let out = run(&["status", "--config", &config]);
    // No running gateway found (3), which the failed server's probe does not hide.
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("bad     failed"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("WARN"), "{err}");
    assert!(err.contains("1 server failed: bad"), "{err}");
    let out = run(&["catalog", "--config", &config]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("WARN"), "{err}");
    assert!(
        err.contains(
            "1 server did not start, the catalog above lacks its tools:\n  bad: cannot run"
        ),
        "{err}"
    );
    // -v still shows the log.
    let err =
        String::from_utf8_lossy(&run(&["status", "-v", "--config", &config]).stderr).into_owned();
    assert!(err.contains("WARN"), "{err}");
}

#[test]
fn text_that_is_not_utf8_is_named_with_its_line_and_byte() {
    let dir = std::env::temp_dir().join(format!("toolshelf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        path.display().to_string()
    };
    let catalog = write(
        "latin.json",
        b"[{\"name\": \"Read\",\n \"description\": \"caf\xe9\"}]",
    );
    let config = write("latin.toml", b"[defer]\nwindow = 1000 # caf\xe9\n");
    let template = write("latin.star", b"part('caf\xe9')");
    let queries = write(
        "latin-q.jsonl",
        b"{\"query\": \"caf\xe9\", \"gold\": [\"Read\"]}\n",
    );
    for (args, says) in [
        (
            vec!["render", "--catalog", &catalog],
            format!(
                "{catalog}:2: not valid UTF-8 (byte 38 of the file); the catalog must be UTF-8 text"
            ),
        ),
        (
            vec!["render", "--config", &config],
            format!(
                "{config}:2: not valid UTF-8 (byte 27 of the file); the config must be UTF-8 text"
            ),
        ),
        (
            vec!["check-template", &template],
            format!(
                "{template}:1: not valid UTF-8 (byte 9 of the file); the template must be UTF-8 text"
            ),
        ),
        (
            vec!["eval", "--queries", &queries],
            format!(
                "{queries}:1: not valid UTF-8 (byte 14 of the file); the queries must be UTF-8 text"
            ),
        ),
    ] {
        let (code, err) = status_and_err(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(&says), "{args:?}: {err}");
        assert!(!err.contains("stream"), "{args:?}: {err}");
    }
}

#[test]
fn bad_values_and_files_are_said_in_plain_words() {
    let window = temp_file("window-neg.toml", "[defer]\nwindow = -5\n");
    let rules = temp_file("rules-str.toml", "[defer]\nrules = \"NoDefer(x)\"\n");
    let ttl = temp_file("ttl-str.toml", "[session]\nactivation_ttl_turns = \"x\"\n");
    let empty = temp_file("empty-catalog.json", "");
    let dir = std::env::temp_dir().join(format!("toolshelf-cli-catdir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let dir = dir.display().to_string();
    let words = temp_file("words.jsonl", "not json\n");
    for (args, says) in [
        (
            vec!["render", "--config", &window],
            "expected a whole number of tokens, at least 1, found -5".to_owned(),
        ),
        (
            vec!["render", "--config", &rules],
            "expected a list [...], found the string \"NoDefer(x)\"".to_owned(),
        ),
        (
            vec!["render", "--config", &ttl],
            "expected a whole number, not negative, found the string \"x\"".to_owned(),
        ),
        (
            vec!["render", "--catalog", &empty],
            format!("{empty}: not valid JSON: it is empty (no JSON value)"),
        ),
        (
            vec!["render", "--catalog", &dir],
            format!("cannot read catalog {dir}: it is a directory, not a file"),
        ),
        (
            vec!["eval", "--queries", &words],
            format!("{words}:1: not valid JSON: a bare word that is not true, false or null"),
        ),
    ] {
        let (code, err) = status_and_err(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(&says), "{args:?}: {err}");
        for jargon in ["u64", "sequence", "EOF", "os error", "ident"] {
            assert!(!err.contains(jargon), "{args:?}: {err}");
        }
    }
}

#[test]
fn search_names_only_the_servers_the_model_can_see() {
    // In the bundled example's `files` mode only the filesystem server's tools are visible.
    let out = ok(&["search", "-q", "server:nosuch commit", "--mode", "files"]);
    assert!(
        out.contains("(\"nosuch\" is unknown; servers: filesystem)"),
        "{out}"
    );
    for (q, server) in [
        ("server:git commit", "git"),
        ("mcp__memory__ read", "memory"),
    ] {
        let out = ok(&["search", "-q", q, "--mode", "files"]);
        assert!(
            out.contains(&format!("({server:?} is unknown;")),
            "{q}: {out}"
        );
    }
    // A server whose only tool a deny rule hides is an unknown server too.
    let catalog = temp_file(
        "hidden-server.json",
        r#"{"servers": [
            {"name": "git", "description": "git", "tools": [{"name": "git_log", "description": "log"}]},
            {"name": "time", "tools": [{"name": "now", "description": "the time now"}]}
        ]}"#,
    );
    let cfg = temp_file(
        "hidden-server.toml",
        "[permissions]\ndeny = [\"^mcp__time__now$\"]\n",
    );
    let search = |q: &str| ok(&["search", "-q", q, "--catalog", &catalog, "--config", &cfg]);
    let out = search("server:nosuch now");
    assert!(
        out.contains("(\"nosuch\" is unknown; servers: git)"),
        "{out}"
    );
    let out = search("server:time");
    assert!(
        out.contains("\"server:time\" names no server (\"time\" is unknown; servers: git)"),
        "{out}"
    );
}

#[test]
fn servers_differing_only_in_case_are_searched_apart() {
    let catalog = temp_file(
        "case-servers.json",
        r#"{"servers":[{"name":"Git","description":"upper","tools":[{"name":"log_upper"}]},{"name":"git","description":"lower","tools":[{"name":"log_lower"}]}]}"#,
    );
    let names = |q: &str| -> Vec<String> {
        let v: Value =
            serde_json::from_str(&ok(&["search", "-q", q, "--json", "--catalog", &catalog]))
                .expect("json");
        v["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["name"].as_str().expect("name").to_owned())
            .collect()
    };
    assert_eq!(names("server:Git"), ["mcp__Git__log_upper"]);
    assert_eq!(names("mcp__Git__ log"), ["mcp__Git__log_upper"]);
    assert_eq!(names("server:git"), ["mcp__git__log_lower"]);
}

#[test]
fn the_index_stays_within_budget_and_the_warning_blames_what_does_not_fit() {
    // A group with no tools is dropped alone: "1 MCP server with 0 tools … them" is longer
    // than the line for both groups ("2 MCP servers with 1 tool … it").
    let catalog = temp_file(
        "plural.json",
        &serde_json::json!({"builtin": [{"name": "Read"}], "servers": [
            {"name": "a_starting", "description": "x".repeat(150), "tools": []},
            {"name": "b", "description": "bee", "tools": [{"name": "t"}]}
        ]})
        .to_string(),
    );
    let fits = temp_file("plural.toml", "[defer]\nindex_budget_chars = 175\n");
    let out = run(&[
        "render",
        "--index-only",
        "--catalog",
        &catalog,
        "--config",
        &fits,
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("over its budget"), "{err}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let block = &text[text.find("<available_deferred_tools>\n").expect("index")..];
    assert!(block.trim_end().chars().count() <= 175, "{block}");
    let v: Value = serde_json::from_str(&ok(&[
        "ledger",
        "--json",
        "--catalog",
        &catalog,
        "--config",
        &fits,
    ]))
    .expect("json");
    assert_eq!(v["index_over_budget"], false, "{v}");
    // The built-in names fit 100 characters, the line for the dropped groups does not.
    let tight = temp_file("plural-tight.toml", "[defer]\nindex_budget_chars = 100\n");
    let out = run(&[
        "render",
        "--index-only",
        "--catalog",
        &catalog,
        "--config",
        &tight,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("over its budget of 100"), "{err}");
    assert!(!err.contains("built-in names are never dropped"), "{err}");
    assert!(
        err.contains("the tags and the built-in names take 59 characters; the line that stands for the dropped server groups, which is always kept, takes the other"),
        "{err}"
    );
    // Past the budget with the built-in names alone, they are blamed.
    let tiny = temp_file("plural-tiny.toml", "[defer]\nindex_budget_chars = 50\n");
    let out = run(&[
        "render",
        "--index-only",
        "--catalog",
        &catalog,
        "--config",
        &tiny,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "the tags and the built-in names alone take 59 characters, and built-in names are never dropped"
        ),
        "{err}"
    );
}

#[test]
fn an_index_without_built_ins_blames_only_its_tags() {
    let catalog = temp_file(
        "servers-only.json",
        r#"{"servers": [{"name": "git", "tools": [{"name": "git_log", "description": "log"}]}]}"#,
    );
    for (budget, says) in [
        ("0", "its tags alone take 54 characters"),
        (
            "60",
            "its tags take 54 characters; the line that stands for the dropped server groups",
        ),
    ] {
        let cfg = temp_file(
            &format!("servers-only-{budget}.toml"),
            &format!("[defer]\nindex_budget_chars = {budget}\n"),
        );
        let out = run(&[
            "render",
            "--index-only",
            "--catalog",
            &catalog,
            "--config",
            &cfg,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{budget}: {err}");
        assert!(!err.contains("built-in"), "{budget}: {err}");
    }
}

#[test]
fn no_server_description_characters_gives_headers_of_the_name_alone() {
    let cfg = temp_file("desc0.toml", "[defer]\nserver_description_chars = 0\n");
    let index = ok(&["render", "--index-only", "--config", &cfg]);
    assert!(index.contains("\nmcp__git\n"), "{index}");
    assert!(!index.contains('…'), "{index}");
}

/// A server name too long to leave room for its tools: the index's group header and the tools'
/// names agree on the server, so a rule or a mode written as the index shows it applies.
#[test]
fn rules_written_as_the_index_shows_a_long_server_apply() {
    let catalog = temp_file(
        "long-server.json",
        r#"{"servers": [{"name": "Google Cloud Platform BigQuery Data Warehouse Admin", "description": "bq", "tools": [
            {"name": "run_query"}, {"name": "list_datasets", "annotations": {"readOnlyHint": true}}]}]}"#,
    );
    let plain = temp_file("long-server-plain.toml", "");
    let index = ok(&[
        "render",
        "--index-only",
        "--catalog",
        &catalog,
        "--config",
        &plain,
    ]);
    let header = index
        .lines()
        .find_map(|l| l.strip_suffix(": bq"))
        .expect("the server's group header")
        .to_owned();
    let config = temp_file(
        "long-server.toml",
        &format!(
            "[defer]\nrules = [\"NoDefer(^{header}__list_datasets$)\"]\n[modes.bq]\ntools = [\"^{header}__\"]\n"
        ),
    );
    let out = run(&[
        "render",
        "--index-only",
        "--catalog",
        &catalog,
        "--config",
        &config,
        "--mode",
        "bq",
    ]);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && !err.contains("matches no tool"),
        "{err}"
    );
    assert!(
        text.contains(&format!("{header}: bq\n  run_query\n")),
        "{header}: {text}"
    );
    let explain = |tool: &str| -> Value {
        serde_json::from_str(&ok(&[
            "explain",
            tool,
            "--catalog",
            &catalog,
            "--config",
            &config,
            "--mode",
            "bq",
            "--json",
        ]))
        .expect("json")
    };
    let list = explain("list_datasets");
    assert_eq!(list["tool"], format!("{header}__list_datasets"), "{list:#}");
    assert_eq!(list["final"], "resident", "{list:#}");
    let run_query = explain("run_query");
    assert_eq!(run_query["tool"], format!("{header}__run_query"));
    assert_eq!(run_query["mode"]["admits"], true, "{run_query:#}");
}

/// A server with no tools yet is judged as a whole: a rule or a mode that could leave a tool of
/// it visible keeps its group in the index.
#[test]
fn a_server_without_tools_keeps_its_group_unless_every_tool_of_it_would_be_hidden() {
    let catalog = temp_file(
        "empty-servers.json",
        r#"{"builtin": [{"name": "Read"}], "servers": [{"name": "db", "description": "database", "tools": []}, {"name": "web", "description": "w", "tools": []}]}"#,
    );
    let index = |config: &str, mode: &[&str]| {
        let path = temp_file("empty-servers.toml", config);
        let mut args = vec![
            "render",
            "--index-only",
            "--catalog",
            &catalog,
            "--config",
            &path,
        ];
        args.extend(mode);
        ok(&args)
    };
    let text = index("[permissions]\ndeny = [\"_tool$\"]\n", &[]);
    assert!(
        text.contains("mcp__db: database") && text.contains("mcp__web: w"),
        "{text}"
    );
    let text = index(
        "[modes.m]\ntools = [\"^mcp__db__query$\", \"^mcp__web__\"]\n",
        &["--mode", "m"],
    );
    assert!(
        text.contains("mcp__db: database") && text.contains("mcp__web: w"),
        "{text}"
    );
    let text = index("[permissions]\ndeny = [\"^mcp__db__\"]\n", &[]);
    assert!(
        !text.contains("mcp__db") && text.contains("mcp__web: w"),
        "{text}"
    );
}

/// A catalog key one or two letters off a key the loader reads is refused, not dropped.
#[test]
fn a_slip_of_annotations_is_refused_not_dropped() {
    let catalog = temp_file(
        "annotation-slip.json",
        r#"[{"name":"a","annotation":{"readOnlyHint":true}}]"#,
    );
    let e = fails(&["render", "--index-only", "--catalog", &catalog]);
    assert!(
        e.contains("[0]: unknown key \"annotation\"; did you mean \"annotations\"?"),
        "{e}"
    );
}

/// A pattern written with brackets as a character class could match no tool: refused at load,
/// saying why, in permission rules as in defer rules.
#[test]
fn a_pattern_with_brackets_is_refused() {
    for (section, key) in [
        (
            "[permissions]\ndeny = [\"^mcp__git__git_[lc]*\"]\n",
            "[permissions] deny[0] \"^mcp__git__git_[lc]*\": ",
        ),
        (
            "[defer]\nrules = [\"Defer(^mcp__git__git_[lc])\"]\n",
            "[defer] rules[0]: rule \"Defer(^mcp__git__git_[lc])\": ",
        ),
    ] {
        let cfg = temp_file("brackets.toml", section);
        let e = fails(&["explain", "mcp__git__git_log", "--config", &cfg]);
        assert!(
            e.contains(key) && e.contains("has '[', which no tool name holds: patterns are globs"),
            "{e}"
        );
    }
}

/// `-` reads standard input for eval's queries and search's batch, and messages call it `stdin`.
#[test]
fn queries_and_batches_read_from_stdin_are_named_stdin() {
    let line = "{\"query\": \"commit changes\", \"gold\": [\"git_commit\"]}\n";
    let out = run_with_stdin(&["eval", "--queries", "-"], line);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("1 query over ") && text.contains(" (stdin)"),
        "{text}"
    );
    let out = run_with_stdin(&["search", "--batch", "-"], line);
    let v: Value = serde_json::from_slice(&out.stdout).expect("one json line");
    assert_eq!(v["line"], 1);
    assert_eq!(v["hits"][0]["name"], "mcp__git__git_commit", "{v}");
    for (args, says) in [
        (
            vec!["eval", "--queries", "-"],
            "toolshelf: error: stdin: no queries",
        ),
        (
            vec!["search", "--batch", "-"],
            "toolshelf: error: stdin holds no requests",
        ),
    ] {
        let out = run_with_stdin(&args, "\n");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

// --- `search` query handling: server listings among several intents, folded `server:` values,
// names next to punctuation, `+term` on canonical names and a capped limit.

/// `toolshelf search ARGS --json`, after checking it succeeded.
fn search_json(args: &[&str]) -> Value {
    let mut all = vec!["search"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(&ok(&all)).expect("json")
}

/// The names of the hits the text lists (`hits` of `--json`), in order.
fn listed(v: &Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["name"].as_str().expect("name").to_owned())
        .collect()
}

/// A catalog with `brave-search` and `github` servers, and another server with a search tool.
fn hosted() -> String {
    temp_file(
        "hosted.json",
        r#"{"servers": [
            {"name": "brave-search", "description": "Web search",
             "tools": [{"name": "brave_web_search", "description": "Search the web"},
                       {"name": "brave_local_search", "description": "Search for places nearby"}]},
            {"name": "github", "description": "Code hosting",
             "tools": [{"name": "search_code", "description": "Search code in repositories"},
                       {"name": "create_issue", "description": "Open an issue"}]},
            {"name": "notes", "description": "Notebook",
             "tools": [{"name": "search", "description": "Search notes"}]}
        ]}"#,
    )
}

#[test]
fn server_listings_among_several_queries_each_list_their_server() {
    let v = search_json(&["-q", "server:git", "-q", "server:time"]);
    let names = listed(&v);
    assert!(
        names.iter().any(|n| n.starts_with("mcp__git__")),
        "{}",
        v["text"]
    );
    assert!(
        names.iter().any(|n| n.starts_with("mcp__time__")),
        "{}",
        v["text"]
    );
    assert_eq!(
        names[..2],
        ["mcp__git__git_add", "mcp__time__convert_time"],
        "{}",
        v["text"]
    );
    // With an intent of words, the git listing keeps its place.
    let v = search_json(&["-q", "server:git", "-q", "current time"]);
    let names = listed(&v);
    assert_eq!(names[0], "mcp__git__git_add", "{}", v["text"]);
    assert!(
        names.iter().any(|n| n.starts_with("mcp__time__")),
        "{}",
        v["text"]
    );
}

#[test]
fn a_listing_of_several_servers_takes_each_in_turn() {
    let v = search_json(&["-k", "5", "-q", "server:git server:time"]);
    assert_eq!(
        listed(&v),
        [
            "mcp__git__git_add",
            "mcp__time__convert_time",
            "mcp__git__git_branch",
            "mcp__time__get_current_time",
            "mcp__git__git_checkout"
        ],
        "{}",
        v["text"]
    );
}

#[test]
fn server_values_are_folded() {
    let v = search_json(&["-q", "server:sequential_thinking"]);
    assert_eq!(
        listed(&v),
        ["mcp__sequential-thinking__sequentialthinking"],
        "{}",
        v["text"]
    );
    assert!(
        !v["text"].as_str().expect("text").contains("Note: "),
        "{}",
        v["text"]
    );
    let catalog = hosted();
    for q in ["server:brave_search", "server:brave", "server:Brave-Search"] {
        let v = search_json(&["--catalog", &catalog, "-q", q]);
        assert_eq!(
            listed(&v),
            [
                "mcp__brave-search__brave_local_search",
                "mcp__brave-search__brave_web_search"
            ],
            "{q}: {}",
            v["text"]
        );
    }
    // A value that names no server is searched for as a word.
    let text = ok(&["search", "--catalog", &catalog, "-q", "server:repositories"]);
    assert!(
        text.starts_with("Note: \"server:repositories\" names no server"),
        "{text}"
    );
    assert!(text.contains("mcp__github__search_code"), "{text}");
}

#[test]
fn a_name_next_to_punctuation_is_still_a_name() {
    for (q, name) in [
        ("use read_text_file.", "mcp__filesystem__read_text_file"),
        ("git_status.", "mcp__git__git_status"),
        ("git_status?", "mcp__git__git_status"),
        ("`git_status`", "mcp__git__git_status"),
        ("read_text_file()", "mcp__filesystem__read_text_file"),
        (
            "get_current_time(timezone='Asia/Tokyo')",
            "mcp__time__get_current_time",
        ),
    ] {
        let v = search_json(&["-q", q]);
        assert_eq!(v["hits"][0]["name"], name, "{q}: {}", v["text"]);
        assert_eq!(
            v["hits"][0]["reason"], "exact name in the query",
            "{q}: {}",
            v["text"]
        );
    }
}

#[test]
fn a_plus_term_matches_the_server_part_of_the_name() {
    let catalog = hosted();
    let v = search_json(&["--catalog", &catalog, "-q", "+search +github"]);
    let text = v["text"].as_str().expect("text");
    assert!(!text.contains("Note: "), "{text}");
    assert_eq!(listed(&v), ["mcp__github__search_code"], "{text}");
}

#[test]
fn a_capped_limit_is_noted() {
    let text = ok(&["search", "-k", "100", "-q", "file"]);
    let notes: Vec<&str> = text.lines().filter(|l| l.starts_with("Note: ")).collect();
    assert_eq!(
        notes,
        ["Note: the limit 100 was capped at 10, the most one search returns."],
        "{text}"
    );
    let text = ok(&["search", "-k", "10", "-q", "file"]);
    assert!(!text.contains("Note: "), "{text}");
}

#[test]
fn a_query_given_twice_is_searched_and_said_once() {
    let once = ok(&["search", "--ranker", "bm25", "-q", "read file"]);
    let twice = ok(&[
        "search",
        "--ranker",
        "bm25",
        "-q",
        "read file",
        "-q",
        "READ  File",
    ]);
    assert_eq!(twice, once);
    assert!(once.contains("Tools matching \"read file\" ("), "{once}");
}

/// The bundled example's reminders show their `search_hint` queries as "the queries that find
/// the tools": each one, searched as the model would search it, finds a tool the reminder is
/// about (one its `unless_used` names) in the top 5, in English and in Chinese.
#[test]
fn every_search_hint_of_the_bundled_example_finds_its_tools() {
    let text = std::fs::read_to_string(example("toolshelf.toml")).expect("example config");
    let config =
        toolshelf_core::Config::from_toml_str(&text, "toolshelf.toml").expect("example config");
    let mut checked = 0;
    for reminder in &config.reminders {
        let patterns: Vec<toolshelf_core::pattern::Pattern> = reminder
            .unless_used
            .iter()
            .map(|p| toolshelf_core::pattern::Pattern::new(p).expect("pattern"))
            .collect();
        for hint in &reminder.search_hint {
            let out = run(&["search", "-q", hint, "-k", "5", "--json"]);
            assert!(out.status.success(), "{hint}: {out:?}");
            let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
            let names: Vec<&str> = answer["hits"]
                .as_array()
                .expect("hits")
                .iter()
                .filter_map(|h| h["name"].as_str())
                .collect();
            assert!(
                names.iter().any(|n| patterns.iter().any(|p| p.matches(n))),
                "reminder {:?}: search_hint {hint:?} found {names:?}, none of {:?}",
                reminder.id,
                reminder.unless_used
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "the example has search hints to check");
}

/// Other keys of a queries line (an id, a category) are ignored; only slips of `query` and
/// `gold` are refused.
#[test]
fn eval_ignores_other_keys_of_a_line() {
    let path = temp_file(
        "eval-other-keys.jsonl",
        "{\"query\": \"commit changes\", \"gold\": [\"git_commit\"], \"id\": 7, \"category\": \"git\"}\n",
    );
    let v: Value = serde_json::from_str(&ok(&[
        "eval",
        "--ranker",
        "bm25",
        "--queries",
        &path,
        "--json",
    ]))
    .expect("json");
    assert_eq!(v["queries"], 1, "{v}");
}

/// A batch line that cannot be answered says what is wrong with it: the key missing, the key of
/// the wrong type and what it is, both spellings, or the known key an unknown one is a slip for.
#[test]
fn search_batch_lines_say_what_is_wrong() {
    for (line, says) in [
        (
            r#"{"query": 5}"#,
            "\"query\" is 5, not a string of words to search for",
        ),
        (
            r#"{"query": "a", "queries": ["b"]}"#,
            "give \"query\" or \"queries\", not both",
        ),
        (
            r#"{"qurey": "x"}"#,
            "unknown key \"qurey\"; did you mean \"query\"?",
        ),
        (
            r#"{"Queries": ["x"]}"#,
            "unknown key \"Queries\"; did you mean \"queries\"?",
        ),
        (
            r#"{"queries": "read file"}"#,
            "\"queries\" is \"read file\", not an array of strings",
        ),
        (
            r#"{"gold": ["Read"]}"#,
            "the line has no \"query\", \"queries\" or \"tool_names\"",
        ),
        (r#"["read"]"#, "the line is an array, not an object such as"),
        (
            r#"{"query": "read", "limt": 2}"#,
            "unknown key \"limt\"; did you mean \"limit\"?",
        ),
        (
            r#"{"query": "read", "limit": 0}"#,
            "\"limit\" is 0, not a whole number of at least 1",
        ),
        (
            r#"{"query": "read", "limit": "2"}"#,
            "\"limit\" is \"2\", not a whole number of at least 1",
        ),
        (
            r#"{"query": "read", "tool_names": ["Read"]}"#,
            "give \"tool_names\" or the queries, not both",
        ),
        (
            r#"{"tool_names": ["Read", 3]}"#,
            "tool_names[1] is 3, not a tool name",
        ),
        (r#"{"tool_names": [" "]}"#, "tool_names[0] is blank"),
        (r#"{"tool_names": []}"#, "tool_names is empty"),
        (
            r#"{"queries": []}"#,
            "queries is empty: give at least one entry, a string of words to search for",
        ),
    ] {
        let path = temp_file(
            "batch-says.jsonl",
            &format!("{{\"query\": \"read\"}}\n{line}\n"),
        );
        let (code, err) = status_and_err(&["search", "--ranker", "bm25", "--batch", &path]);
        assert_eq!(code, Some(2), "{line}: {err}");
        assert!(err.contains(&format!("{path}:2: {says}")), "{line}: {err}");
    }
    // Other keys, such as an eval set's gold, are ignored.
    let path = temp_file(
        "batch-other-keys.jsonl",
        "{\"query\": \"read file\", \"gold\": [\"Read\"], \"id\": 3}\n",
    );
    let out = ok(&["search", "--ranker", "bm25", "--batch", &path]);
    let line: Value = serde_json::from_str(out.trim()).expect("json line");
    assert_eq!(line["line"], 1, "{line}");
}

/// A batch line takes what `tool_search` takes: its own `limit`, and `tool_names`, answered as
/// `tool_search` answers them.
#[test]
fn search_batch_lines_take_limit_and_tool_names() {
    let path = temp_file(
        "batch-tool-search.jsonl",
        concat!(
            "{\"queries\": [\"read file\"], \"limit\": 2}\n",
            "{\"queries\": [\"read file\"]}\n",
            "{\"query\": \"read file\", \"limit\": 1}\n",
            "{\"tool_names\": [\"Read\", \"git_stauts\"]}\n",
        ),
    );
    // A name no visible tool has is a finding, as for `-n`: exit status 1, said on stderr once
    // every line is answered.
    let run_out = run(&[
        "search", "--ranker", "bm25", "--batch", &path, "--limit", "3",
    ]);
    assert_eq!(run_out.status.code(), Some(1));
    let err = String::from_utf8(run_out.stderr).expect("utf-8");
    assert!(
        err.contains("no visible tool is named \"git_stauts\" (line 4)"),
        "{err}"
    );
    let out = String::from_utf8(run_out.stdout).expect("utf-8");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let count = |v: &Value| v["hits"].as_array().map(Vec::len);
    assert_eq!(count(&lines[0]), Some(2), "a line's limit: {}", lines[0]);
    assert_eq!(
        count(&lines[1]),
        Some(3),
        "--limit when the line gives none"
    );
    assert_eq!(count(&lines[2]), Some(1), "{}", lines[2]);
    // Names are answered as `search -n` (and so tool_search) answers them.
    let direct: Value = serde_json::from_str(
        &String::from_utf8(
            run(&[
                "search",
                "--ranker",
                "bm25",
                "-n",
                "Read",
                "-n",
                "git_stauts",
                "--json",
            ])
            .stdout,
        )
        .expect("utf-8"),
    )
    .expect("json");
    assert_eq!(lines[3]["hits"][0]["name"], "Read", "{}", lines[3]);
    assert_eq!(lines[3]["hits"], direct["hits"], "{}", lines[3]);
    assert_eq!(lines[3]["unresolved"], serde_json::json!(["git_stauts"]));
}

/// `explain` prints what the catalog gives with its control characters escaped, as load errors
/// show them: an escape sequence cannot reach the terminal, a newline cannot forge a line.
#[test]
fn explain_escapes_control_characters_from_the_catalog() {
    let catalog = temp_file(
        "explain-escapes.json",
        r#"[{"name": "evil\u001b[31mRED", "description": "d"},
            {"name": "a\nb\u0000c\td\u202eE", "description": "d"},
            {"name": "plain", "description": "d"}]"#,
    );
    for (name, escaped) in [
        ("evil__31mRED", r"evil\u{1b}[31mRED"),
        ("a_b_c_d_E", r"a\nb\0c\td\u{202e}E"),
    ] {
        let text = ok(&["explain", "--catalog", &catalog, name]);
        assert!(
            !text
                .chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}' || c == '\u{fffd}'),
            "{text:?}"
        );
        assert!(
            text.contains(&format!("  original:  \"{escaped}\" (builtin)\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("  aliases:   {escaped} (deny and ask")),
            "{text}"
        );
        let lines = text.lines().count();
        let plain = ok(&["explain", "--catalog", &catalog, "plain"])
            .lines()
            .count();
        assert_eq!(lines, plain + 1, "one more line, aliases: {text}");
        // JSON carries the names as they are.
        let v: Value =
            serde_json::from_str(&ok(&["explain", "--catalog", &catalog, name, "--json"]))
                .expect("json");
        assert!(
            v["original_name"]
                .as_str()
                .is_some_and(|n| n.chars().any(char::is_control))
        );
    }
}

/// With `[authoring] enabled = true`, `tool_define` is in the catalog of every command, as it is
/// in a session's: listed in the index, explained, counted, and matched by its `[tools.NAME]`.
#[test]
fn authoring_puts_tool_define_in_every_command() {
    let config = temp_file(
        "authoring.toml",
        "[authoring]\nenabled = true\n[tools.tool_define]\ndescription_template = \"'Write a tool of your own.'\"\n",
    );
    let plain = temp_file("authoring-off.toml", "");
    let args = |config: &str| -> Vec<String> {
        vec![
            "--catalog".into(),
            example("catalog.json"),
            "--config".into(),
            config.into(),
        ]
    };
    let with = |command: &[&str], config: &str| -> Output {
        let mut a: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        a.extend(args(config));
        bin().args(&a).output().expect("run")
    };
    let out = with(&["render", "--index-only"], &config);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("matches no tool"), "{err}");
    let index = String::from_utf8(out.stdout).expect("utf-8");
    assert!(index.lines().any(|l| l == "tool_define"), "{index}");
    // The tools render lists are the ones a replayed session is sent, byte for byte.
    let transcript = temp_file("authoring.jsonl", "{\"user\": \"hi\"}\n");
    let out = with(&["replay", "--transcript", &transcript], &config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: Value = serde_json::from_slice(&out.stdout).expect("body");
    let rendered: Value =
        serde_json::from_slice(&with(&["render"], &config).stdout).expect("render");
    assert_eq!(body["tools"], rendered);
    // explain knows it, with its template's description decided as any deferred tool.
    let out = with(&["explain", "tool_define", "--json"], &config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["final"], "deferred", "{v}");
    // search finds it with the description its template renders.
    let out = with(&["search", "-n", "tool_define"], &config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Write a tool of your own."),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // ledger counts one more deferred tool.
    let ledger = |config: &str| -> Value {
        serde_json::from_slice(&with(&["ledger", "--json"], config).stdout).expect("ledger")
    };
    let (on, off) = (ledger(&config), ledger(&plain));
    assert_eq!(
        on["tools_total"].as_u64(),
        off["tools_total"].as_u64().map(|n| n + 1)
    );
    assert_eq!(
        on["deferred"].as_u64(),
        off["deferred"].as_u64().map(|n| n + 1)
    );
}

/// `explain` suggests for a name no tool has what `search -n` (and so `tool_names`) suggests.
#[test]
fn explain_suggests_what_search_by_name_suggests() {
    for written in ["gitt", "git_stauts"] {
        let out = run(&["explain", written, "--json"]);
        assert_eq!(out.status.code(), Some(1), "{written}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
        let out = run(&["search", "-n", written, "--json"]);
        let s: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
        let names: Vec<Value> = s["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .chain(s["also_matching"].as_array().expect("also"))
            .map(|h| h["name"].clone())
            .collect();
        assert!(!names.is_empty(), "{written}: {s}");
        assert_eq!(v["suggestions"], Value::Array(names), "{written}");
    }
    let e = fails(&["explain", "gitt"]);
    assert!(e.contains("mcp__git__git_commit"), "{e}");
}

/// A name found with case and separators ignored is no exact name, and its reason says so.
#[test]
fn a_name_found_ignoring_case_and_separators_says_so() {
    let catalog = temp_file(
        "folded-names.json",
        r#"[{"name": "Read-It", "description": "a"}, {"name": "read_it", "description": "b"}, {"name": "other", "description": "c"}]"#,
    );
    let v: Value = serde_json::from_str(&ok(&[
        "search",
        "--catalog",
        &catalog,
        "--ranker",
        "bm25",
        "-n",
        "readit",
        "--json",
    ]))
    .expect("json");
    let reasons: Vec<&str> = v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["reason"].as_str().expect("reason"))
        .collect();
    assert_eq!(reasons.len(), 2, "{v}");
    for r in reasons {
        assert_eq!(r, "name with case and separators ignored", "{v}");
    }
    let v: Value = serde_json::from_str(&ok(&[
        "search",
        "--catalog",
        &catalog,
        "--ranker",
        "bm25",
        "-n",
        "read_it",
        "--json",
    ]))
    .expect("json");
    assert_eq!(v["hits"][0]["reason"], "exact name", "{v}");
}
