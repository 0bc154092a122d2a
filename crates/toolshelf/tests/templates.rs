//! Description templates through the real gateway: each MCP session's frozen list is rendered for
//! that session, equal inputs give equal bytes, and a failing template fails the first list.

mod common;

use common::*;
use serde_json::{Value, json};

fn config(s: &Scratch, template: &str) -> String {
    format!(
        "{}[tools.\"mcp__docs__read\"]\ndescription_template = {template:?}\n\
         [defer]\nrules = [\"NoDefer(^mcp__docs__read$)\"]\n\
         [template]\nworkspace = \"/src/shop\"\n{}",
        named_server(
            "docs",
            &json!([
                tool("read", "Read a page.", json!({"type": "object"})),
                tool("write", "Write a page.", json!({"type": "object"}))
            ]),
            "description = \"Documentation pages.\"\n\
             description_template = \"part(pkg.description, 'of', session.workspace)\""
        ),
        files_sections(s)
    )
}

async fn listed(cfg: &str) -> Vec<Value> {
    let client = stdio_client(cfg, TestClient::default()).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    client.cancel().await.expect("close");
    tools
        .into_iter()
        .map(|t| serde_json::to_value(t).expect("json"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_gets_its_rendering_and_equal_sessions_equal_bytes() {
    let s = Scratch::new("templates");
    let cfg = s.write(
        "toolshelf.toml",
        &config(
            &s,
            "part(pkg.description, 'Client:', session.client, tag('ws', session.workspace))",
        ),
    );
    let first = listed(&cfg).await;
    let second = listed(&cfg).await;
    assert_eq!(
        serde_json::to_string(&first).expect("json"),
        serde_json::to_string(&second).expect("json"),
        "two sessions with equal inputs list the same bytes"
    );
    let read = first
        .iter()
        .find(|t| t["name"] == "docs__read")
        .expect("the resident tool");
    assert_eq!(
        read["description"],
        "Read a page. Client: toolshelf-e2e <ws>/src/shop</ws>"
    );
    let search = first
        .iter()
        .find(|t| t["name"] == "tool_search")
        .expect("tool_search");
    let index = search["description"].as_str().expect("text");
    assert!(
        index.contains("mcp__docs: Documentation pages. of /src/shop\n  write"),
        "the group header is rendered too: {index}"
    );
}

/// A template that fails only when it runs (here on one tool's values) fails the first list of
/// the session it runs for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_fails_its_render_fails_the_first_list() {
    let s = Scratch::new("templates-bad");
    let cfg = s.write(
        "toolshelf.toml",
        &config(&s, "a = pkg.description\na + len(pkg.params)"),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    let e = client
        .list_all_tools()
        .await
        .expect_err("the list fails")
        .to_string();
    assert!(
        e.contains("tool \"mcp__docs__read\": description template line 2"),
        "{e}"
    );
    client.cancel().await.expect("close");
}

/// A template that would fail every session's render, whatever the session (a per-turn value, a
/// stub, a `pkg` name nothing fills in), stops the gateway at start, as a syntax error does,
/// naming each fault; it does not start a gateway whose every session fails.
#[test]
fn a_template_that_fails_whatever_the_session_stops_the_gateway_at_start() {
    let s = Scratch::new("templates-refused");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[tools.\"mcp__docs__write\"]\ndescription_template = \"part(pkg.description, pkg.nosuch)\"\n",
            config(&s, "a = pkg.description\na + str(turn.number)")
        ),
    );
    let (code, _, stderr) = toolshelf(&["serve", "--config", &cfg]);
    assert_eq!(code, Some(2), "{stderr}");
    for fault in [
        "[tools.\"mcp__docs__read\"]: description template line 2: reads turn.number",
        "[tools.\"mcp__docs__write\"]: description template line 1: pkg.nosuch",
        "every session would fail to start",
    ] {
        assert!(stderr.contains(fault), "{fault:?} in {stderr}");
    }
    // Fixed, it starts: the check names only what no session could render.
    let fixed = s.write(
        "fixed.toml",
        &config(&s, "part(pkg.description, session.client)"),
    );
    let (code, _, stderr) = toolshelf(&["status", "--config", &fixed, "--json"]);
    assert!(!stderr.contains("every session would fail"), "{stderr}");
    assert_ne!(code, Some(2), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_tools_search_hit_and_refusal_show_its_sessions_rendering() {
    let s = Scratch::new("templates-search");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[tools.\"mcp__docs__write\"]\n\
             description_template = \"part(pkg.description, 'Client:', session.client)\"\n",
            config(&s, "pkg.description")
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    client.list_all_tools().await.expect("tools/list");
    // A refusal that attaches the tool's definition shows the session's rendering too.
    let refused = err(&exec(&client, "mcp__docs__write", json!({})).await);
    assert!(
        refused.contains("schema had not been loaded")
            && refused.contains(r#""description":"Write a page. Client: toolshelf-e2e""#),
        "{refused}"
    );
    let hit = ok(&search(&client, json!({"tool_names": ["mcp__docs__write"]})).await);
    assert!(
        hit.contains("Write a page. Client: toolshelf-e2e"),
        "the rendered description, not the catalog's: {hit}"
    );
    client.cancel().await.expect("close");
}

fn toolshelf(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(TOOLSHELF)
        .args(args)
        .output()
        .expect("run toolshelf");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A script tool's helper that `run` calls may use what scripts get; one the top level calls
/// runs in the template environment and is refused.
#[test]
fn check_template_passes_a_script_whose_helper_uses_http() {
    let s = Scratch::new("templates-helper");
    let body = "schema = {\"properties\": {\"path\": {\"type\": \"string\"}}}\n\n\
                def fetch(path):\n    return http.get(\"http://127.0.0.1:9\" + path)\n\n\
                def run(params):\n    return fetch(params[\"path\"])[\"body\"]\n";
    let file = s.write(
        "helper.star",
        &format!("description = \"Fetches a path.\"\n{body}"),
    );
    let (code, out, err) = toolshelf(&["check-template", &file]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.ends_with("helper.star: ok; renders to:\nFetches a path.\n"),
        "{out}"
    );
    let file = s.write(
        "eager.star",
        &format!("description = \"Fetches \" + fetch(\"/name\")\n{body}"),
    );
    let (code, out, err) = toolshelf(&["check-template", &file]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("eager.star: script line 5: uses http, which a script's top level cannot"),
        "{out}"
    );
}

/// A stub in a function that never runs does not stand in for the error that stopped a render:
/// `check-template` and `render` report that error (`render` with exit status 2, not the 1 of a
/// refused access).
#[test]
fn the_error_a_template_stopped_at_is_reported_not_a_stub_it_never_used() {
    let s = Scratch::new("templates-stale");
    let unused = "def later():\n    return time.now()\n";
    let file = s.write("stale.star", &format!("{unused}x = {{}}\nx[\"missing\"]\n"));
    let (code, out, err) = toolshelf(&["check-template", &file]);
    assert_eq!(
        code,
        Some(1),
        "the unused stub is still a finding: {out}{err}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with("stale.star: description template line 2: uses time, which a description template cannot: a description must be the same bytes for the whole session"), "{out}");
    assert!(
        lines[1].ends_with(
            "stale.star: description template line 4: failed: Key `\"missing\"` was not found"
        ),
        "{out}"
    );
    let catalog = s.write(
        "catalog.json",
        r#"{"servers": [{"name": "git", "description": "Git.", "tools": [{"name": "git_log", "description": "Show log."}]}]}"#,
    );
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[tools.\"mcp__git__git_log\"]\ndescription_template = {:?}\n",
            format!("{unused}{{}}[\"k\"]\n")
        ),
    );
    let (code, out, err) = toolshelf(&["render", "--catalog", &catalog, "--config", &config]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("tool \"mcp__git__git_log\": description template line 3: failed: Key `\"k\"` was not found"),
        "{err}"
    );
}

/// A script tool's file is checked as the scripts server defines it, not only rendered: a file
/// the gateway would list as unavailable is refused with the gateway's reason.
#[test]
fn check_template_refuses_a_script_file_the_gateway_refuses() {
    let s = Scratch::new("templates-script-file");
    let run = "def run(params):\n    return 1\n";
    for (file, source, says) in [
        (
            "bad_type.star",
            format!(
                "description = \"d\"\nschema = {{\"properties\": {{\"a\": {{\"type\": \"strng\"}}}}}}\n{run}"
            ),
            "bad_type.star: script: `schema` is not a valid JSON Schema (at /properties/a/type: ",
        ),
        (
            "array.star",
            format!("description = \"d\"\nschema = {{\"type\": \"array\"}}\n{run}"),
            "array.star: script: failed: `schema` must describe an object (\"type\": \"object\"), found \"type\": \"array\"",
        ),
        (
            "no_schema.star",
            format!("description = \"d\"\n{run}"),
            "no_schema.star: script: failed: a script must set `schema = {...}`",
        ),
        (
            "rebound.star",
            format!("description = \"d\"\nschema = {{}}\n{run}run = 3\n"),
            "rebound.star: script line 5: failed: `run` is an int, not a function: a script must define `def run(params): ...`",
        ),
    ] {
        let path = s.write(file, &source);
        let (code, out, err) = toolshelf(&["check-template", &path]);
        assert_eq!(code, Some(1), "{file}: {out}{err}");
        assert!(out.contains(says), "{file}: {out}");
    }
}

/// A value nested deep at run time (`x = [x]` in a loop), which `repr` walks one level at a
/// time, is rendered on a stack that holds the deepest value the template's heap allows: the
/// render gives its text, and past the heap it is an error naming the limit; never a stack
/// overflow that aborts the process (the gateway's or the proxy's, every session with it).
#[test]
fn a_value_nested_deep_at_run_time_renders_or_names_the_limit() {
    let s = Scratch::new("templates-deep-value");
    let file = s.write(
        "deep.star",
        "x = []\nfor i in range(150000):\n    x = [x]\ndescription = part(\"Nests\", str(len(repr(x))))\n",
    );
    let (code, out, err) = toolshelf(&["check-template", &file]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.ends_with("deep.star: ok; renders to:\nNests 300002\n"),
        "{out}"
    );
    let file = s.write(
        "deeper.star",
        "x = ()\nfor i in range(2000000):\n    x = (x, 1)\ndescription = str(len(str(x)))\n",
    );
    let (code, out, err) = toolshelf(&["check-template", &file]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("deeper.star: description template: stopped: the memory limit of 16777216 bytes of Starlark heap was reached"),
        "{out}"
    );
}

/// `check-template` on a script tool's file says what it finds in a script's terms, each once:
/// a stub at the top level as the definition refuses it, one in `run` as the runner would.
#[test]
fn check_template_says_a_scripts_findings_in_a_scripts_terms_once_each() {
    let s = Scratch::new("templates-script-terms");
    let file = s.write(
        "s.star",
        "description = \"x\" + str(time.now())\nschema = {}\ndef run(p):\n    return uuid()\n",
    );
    let (code, out, err) = toolshelf(&["check-template", &file]);
    assert_eq!(code, Some(1), "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].ends_with("s.star: script line 1: uses time, which a script's top level cannot: it is read once, when the tool is defined, and is as pure as a description template (call time inside run, which has it)"),
        "{out}"
    );
    assert!(
        lines[1].ends_with("s.star: script line 4: uses uuid, which a script's run cannot: of the outside world it has time, random and http only"),
        "{out}"
    );
    assert!(lines[2].ends_with("s.star: 2 refused accesses"), "{out}");
}
