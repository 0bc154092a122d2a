//! Catalog input and name lookup, through the real binary: the typo fallback of an exact-name
//! lookup, misspelt keys, where a JSON error is, and how an unknown mode is reported.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolshelf"))
        .args(args)
        .output()
        .expect("run toolshelf")
}

/// The exit status and standard error of a run.
fn status_and_err(args: &[&str]) -> (Option<i32>, String) {
    let out = run(args);
    (
        out.status.code(),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// A scratch directory for this process's files.
fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolshelf-catalog-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn temp_file(name: &str, content: &str) -> String {
    let p = dir().join(name);
    std::fs::write(&p, content).expect("write");
    p.display().to_string()
}

/// The names of `search -n NAME --json`'s hits, in rank order, on the bundled example.
fn named_hits(name: &str) -> Vec<String> {
    let out = run(&["search", "-n", name, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{name} is no tool's name");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["name"].as_str().expect("name").to_owned())
        .collect()
}

#[test]
fn a_name_that_names_a_server_lists_that_servers_tools_first() {
    // The filesystem server's `read_*` tools before the built-in `Read`, which is only the tool
    // segment.
    for written in ["mcp__filesystem__read", "filesystem__read"] {
        let hits = named_hits(written);
        assert!(hits.len() >= 4, "{written}: {hits:?}");
        assert!(
            hits[..4]
                .iter()
                .all(|h| h.starts_with("mcp__filesystem__read_")),
            "{written}: {hits:?}"
        );
    }
    // A server alone lists its tools, and is no typo of `Edit`.
    for written in ["mcp__git", "mcp__git__"] {
        let hits = named_hits(written);
        assert!(!hits.is_empty(), "{written}");
        assert!(
            hits.iter().all(|h| h.starts_with("mcp__git__")),
            "{written}: {hits:?}"
        );
    }
    // explain's suggestions come from the same ordering.
    let out = run(&["explain", "mcp__filesystem__read", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    assert_eq!(v["suggestions"][0], "mcp__filesystem__read_file", "{v}");
    assert!(
        !v["suggestions"]
            .as_array()
            .expect("suggestions")
            .iter()
            .take(4)
            .any(|s| s == "Read"),
        "{v}"
    );
}

#[test]
fn a_key_one_letter_off_or_with_two_letters_swapped_is_refused() {
    for (file, key, meant) in [
        ("slip_tag.json", "tag", "tags"),
        ("slip_titel.json", "titel", "title"),
    ] {
        let catalog = temp_file(
            file,
            &format!(
                r#"[{{"name":"a","description":"x","input_schema":{{"type":"object"}},"{key}":["billing"]}}]"#
            ),
        );
        let (code, err) = status_and_err(&["render", "--catalog", &catalog]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "{catalog}: [0]: unknown key \"{key}\"; did you mean \"{meant}\"?"
            )),
            "{err}"
        );
    }
    // The keys MCP, Anthropic and OpenAI tool items carry load without a word.
    let catalog = temp_file(
        "shapes.json",
        r#"[
            {"name": "mcp", "title": "M", "description": "d", "inputSchema": {"type": "object"},
             "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true},
             "_meta": {"k": 1}, "icons": [], "execution": {"taskSupport": "optional"}},
            {"type": "custom", "name": "anthropic", "input_schema": {"type": "object"},
             "cache_control": {"type": "ephemeral"}, "strict": true, "input_examples": [{}],
             "allowed_callers": ["direct"], "eager_input_streaming": true, "defer_loading": true},
            {"type": "function", "function": {"name": "chat", "parameters": {"type": "object"},
             "strict": false}},
            {"type": "function", "name": "responses", "parameters": {"type": "object"}, "strict": true}
        ]"#,
    );
    let (code, err) = status_and_err(&["render", "--catalog", &catalog]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("unknown key"), "{err}");
}

/// One tool of a minified catalog, as a one-line JSON object.
fn minified_tool(i: usize) -> String {
    format!(
        r#"{{"name":"t{i}","description":"Does thing {i}","inputSchema":{{"type":"object","properties":{{"q":{{"type":"string"}}}}}}}}"#
    )
}

#[test]
fn a_json_error_says_which_item_and_shows_the_text_there() {
    // A comma left out between two tools of a catalog minified to one line.
    let text = format!(
        r#"{{"servers":[{{"name":"docs","tools":[{},{},{}{},{}]}}]}}"#,
        minified_tool(0),
        minified_tool(1),
        minified_tool(2),
        minified_tool(3),
        minified_tool(4)
    );
    let column = text.find(r#"{"name":"t3""#).expect("t3") + 1;
    let catalog = temp_file("minified.json", &text);
    let (code, err) = status_and_err(&["render", "--catalog", &catalog]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            r#"{catalog}: not valid JSON: expected `,` or `]` at line 1 column {column}, after servers[0].tools[2]: …"#
        )) && err.contains(r#"{"type":"string"}}}}<HERE>{"name":"t3","description":"Does…"#),
        "{err}"
    );
    // A schema nested 120 properties deep: the limit, the path into it, the text there.
    let mut schema = String::from(r#"{"type": "string"}"#);
    for _ in 0..120 {
        schema = format!(r#"{{"type": "object", "properties": {{"p": {schema}}}}}"#);
    }
    let catalog = temp_file(
        "deep120.json",
        &format!(r#"[{{"name": "deep", "input_schema": {schema}}}]"#),
    );
    let (code, err) = status_and_err(&["render", "--catalog", &catalog]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{catalog}: not valid JSON: nested more than 127 levels deep, the most that is read"
        )) && err.contains(
            ", in [0].input_schema.properties.p.properties.p.properties.p… (127 levels down): …"
        ) && err.contains(r#""properties": <HERE>{"p": "#),
        "{err}"
    );
}

#[test]
fn an_unknown_mode_without_any_modes_says_there_are_none() {
    let catalog = temp_file("one.json", r#"[{"name": "a", "description": "x"}]"#);
    let (code, err) = status_and_err(&["render", "--catalog", &catalog, "--mode", "g"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "unknown mode \"g\": no modes are defined (modes come from [modes.NAME] in the configuration)"
        ) && !err.contains("defined modes: none"),
        "{err}"
    );
    // With modes defined, they are listed.
    let (code, err) = status_and_err(&["render", "--mode", "g"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("unknown mode \"g\"; defined modes: ask, files, review"),
        "{err}"
    );
}
