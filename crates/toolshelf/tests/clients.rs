//! End-to-end tests with real MCP clients: Claude Code and Qwen Code run non-interactively with
//! `toolshelf serve` as their only MCP server (in front of the real time and filesystem servers),
//! against a scripted model API on loopback (`fixtures/scripted_upstream.py`) that plays the
//! model's turns and records every request the client sends. The assertions read that record: what
//! the client put in `tools` (and what it held back behind its own tool search), and that a
//! file's content reached the model as a tool result.
//!
//! The clients are installed by `scripts/install-clients.sh`, the servers by
//! `scripts/install-mcp-servers.sh` (`scripts/test` runs both); when either is missing these tests
//! fail and say so, they never skip. Every wait polls with a generous deadline; the assertions are
//! about what happens, never about how fast.

mod common;

use std::process::{Command, Stdio};

use common::harness::*;
use common::*;
use serde_json::{Value, json};

/// Path of an installed MCP server; panics with the fix when it is missing.
fn server_bin(rel: &str) -> String {
    let p = home_cache("TOOLSHELF_MCP_PREFIX", "toolshelf-mcp").join(rel);
    assert!(
        p.exists(),
        "{} is not installed: run `bash scripts/install-mcp-servers.sh` (or `bash scripts/test`, which runs it) first",
        p.display()
    );
    p.display().to_string()
}

/// The marker the test file holds: only a real read of that file can bring it to the model.
fn marker(tag: &str) -> String {
    format!("MARKER-{tag}-{}-7f3a91", std::process::id())
}

/// A scratch directory with `files/note.txt` holding [`marker`], and a gateway configuration in
/// front of the time server (pinned by a rule) and the filesystem server (on `files/`).
fn setup(tag: &str, gateway_section: &str) -> (Scratch, String, String) {
    let s = Scratch::new(&format!("client-{tag}"));
    let note = s.write("files/note.txt", &format!("{}\n", marker(tag)));
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{gateway_section}\
             [servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"Etc/UTC\"]\n\
             [servers.filesystem]\ncommand = {:?}\nargs = [{:?}]\n\
             [defer]\nrules = [\"NoDefer(^mcp__time__)\"]\n{}",
            server_bin("venv/bin/mcp-server-time"),
            server_bin("npm/node_modules/.bin/mcp-server-filesystem"),
            s.path("files"),
            files_sections(&s),
        ),
    );
    std::fs::create_dir_all(s.path("home")).expect("home dir");
    (s, config, note)
}

/// The gateway the client started served it a session (the audit log says so); when not, the
/// failure carries what `toolshelf status` says of the configuration.
fn assert_gateway_served(s: &Scratch, config: &str) {
    if s.audit().iter().any(|r| r["kind"] == "session") {
        return;
    }
    let status = Command::new(TOOLSHELF)
        .args(["status", "--config", config])
        .stdin(Stdio::null())
        .output()
        .expect("toolshelf status");
    panic!(
        "the gateway served the client no session; `toolshelf status --config {config}` says:\n{}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
}

fn assert_resident(request: &Value, name: &str) -> Value {
    let tool = find_tool(request, name)
        .unwrap_or_else(|| panic!("{name} is not in tools: {:?}", tool_names(request)));
    assert_ne!(
        tool["defer_loading"], true,
        "{name} is sent with defer_loading: true"
    );
    tool
}

/// How a client starts the gateway: `toolshelf serve --config CONFIG` over stdio.
fn gateway_command(config: &str) -> (String, Vec<String>) {
    (
        TOOLSHELF.to_owned(),
        vec!["serve".to_owned(), "--config".to_owned(), config.to_owned()],
    )
}

fn read_step(note: &str) -> Value {
    json!({"tool_uses": [{"name": "defer_execute", "input": {
        "tool_name": "mcp__filesystem__read_text_file", "params": {"path": note}}}]})
}

// --- Claude Code --------------------------------------------------------------------------------

fn claude(s: &Scratch, upstream: &Upstream, config: &str) -> Run {
    let (command, args) = gateway_command(config);
    let mcp = s.write(
        "mcp.json",
        &json!({"mcpServers": {"toolshelf": {"command": command, "args": args}}}).to_string(),
    );
    claude_code(
        s,
        &[upstream.child.id()],
        "Read the note file and tell me the marker it holds.",
        &[
            "--mcp-config",
            &mcp,
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__toolshelf",
        ],
        &[
            ("ANTHROPIC_BASE_URL", upstream.url()),
            ("MCP_CONNECTION_NONBLOCKING", "false".to_owned()),
            // Generous: the first turn waits for the gateway's tool list, however slow start-up is.
            ("MCP_TIMEOUT", "120000".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ],
    )
}

/// By default the gateway marks its meta-tools and pinned tools `anthropic/alwaysLoad`, so Claude
/// Code sends them in `tools` from the first turn instead of deferring them behind its own
/// ToolSearch; the pinned tool is named `time__get_current_time` by the gateway and so
/// `mcp__toolshelf__time__get_current_time` by Claude Code. The model searches, runs the deferred
/// `read_text_file` through `defer_execute` and calls the pinned tool directly: the file's
/// content and the time come back as tool results.
#[test]
fn claude_code_sends_the_gateway_tools_resident() {
    let (s, config, note) = setup("claude", "");
    let final_text = "The note holds the marker.";
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"text": "Let me find a tool for that.", "tool_uses": [{"name": "tool_search",
                "input": {"queries": ["read a text file", "读取文件"]}}]},
            read_step(&note),
            {"tool_uses": [{"name": "time__get_current_time", "input": {"timezone": "Etc/UTC"}}]},
            {"text": final_text}
        ]}),
    );
    let run = claude(&s, &upstream, &config);
    assert_gateway_served(&s, &config);

    let first = &upstream.first_turn();
    let search = assert_resident(first, "mcp__toolshelf__tool_search");
    let index = search["description"].as_str().expect("description");
    assert!(
        index.contains("<available_deferred_tools>") && index.contains("read_text_file"),
        "tool_search's description lacks the index: {index}"
    );
    assert_resident(first, "mcp__toolshelf__defer_execute");
    assert_resident(first, "mcp__toolshelf__time__get_current_time");
    let names = tool_names(first);
    assert!(
        !names.contains(&"mcp__toolshelf__mcp__time__get_current_time".to_owned()),
        "the pinned tool has its canonical name: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n.contains("read_text_file")),
        "a deferred tool is resident: {names:?}"
    );

    let turns = upstream.played(4);
    let answers = upstream.answers();
    let searched = result_of(&turns, &call_id(&answers, 0, "mcp__toolshelf__tool_search"));
    assert!(
        searched.contains("mcp__filesystem__read_text_file"),
        "{searched}"
    );
    let read = result_of(
        &turns,
        &call_id(&answers, 1, "mcp__toolshelf__defer_execute"),
    );
    assert!(
        read.contains(&marker("claude")),
        "the file's content did not reach the model: {read}"
    );
    let time = result_of(
        &turns,
        &call_id(&answers, 2, "mcp__toolshelf__time__get_current_time"),
    );
    assert!(time.contains("Etc/UTC"), "{time}");

    let calls: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "call")
        .collect();
    let via = |tool: &str| {
        calls
            .iter()
            .find(|c| c["tool"] == tool)
            .unwrap_or_else(|| panic!("no call of {tool} in the audit: {calls:?}"))["via"]
            .clone()
    };
    assert_eq!(via("mcp__filesystem__read_text_file"), "defer_execute");
    assert_eq!(via("mcp__time__get_current_time"), "direct");
    let result = claude_result(&run);
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], final_text, "{result}");
}

/// With `[gateway] always_load = false` Claude Code defers every tool of the gateway, meta-tools
/// and pinned ones alike: none is in `tools`, their names are listed in a message for Claude
/// Code's own `ToolSearch`, and a `select:` query through it loads them as `tool_reference`
/// results, after which they are sent with `defer_loading: true` (the API expands the referenced
/// ones). The model reaches the file only after that extra round trip.
#[test]
fn claude_code_defers_the_gateway_tools_without_always_load() {
    let (s, config, note) = setup("claude-deferred", "[gateway]\nalways_load = false\n");
    let final_text = "The note holds the marker.";
    let select = "select:mcp__toolshelf__tool_search,mcp__toolshelf__defer_execute";
    let upstream = Upstream::start(
        &s,
        &json!({"match": ["ToolSearch"], "steps": [
            {"tool_uses": [{"name": "ToolSearch", "input": {"query": select, "max_results": 5}}]},
            {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read a text file"]}}]},
            read_step(&note),
            {"text": final_text}
        ]}),
    );
    let run = claude(&s, &upstream, &config);
    assert_gateway_served(&s, &config);

    let first = &upstream.first_turn();
    let names = tool_names(first);
    assert!(names.contains(&"ToolSearch".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__toolshelf__")),
        "a gateway tool is in tools although always_load is off: {names:?}"
    );
    assert_listed_as_deferred(first);

    let turns = upstream.played(4);
    let answers = upstream.answers();
    let loaded = result_of(&turns, &call_id(&answers, 0, "ToolSearch"));
    assert!(
        loaded.contains("tool_reference") && loaded.contains("mcp__toolshelf__tool_search"),
        "{loaded}"
    );
    let second = &turns[1];
    for name in [
        "mcp__toolshelf__tool_search",
        "mcp__toolshelf__defer_execute",
    ] {
        let tool = find_tool(second, name)
            .unwrap_or_else(|| panic!("{name} is not in tools after ToolSearch loaded it"));
        assert_eq!(tool["defer_loading"], true, "{tool}");
    }
    let read = result_of(
        &turns,
        &call_id(&answers, 2, "mcp__toolshelf__defer_execute"),
    );
    assert!(read.contains(&marker("claude-deferred")), "{read}");
    assert_eq!(claude_result(&run)["result"], final_text);
}

// --- Qwen Code ----------------------------------------------------------------------------------

/// `qwen PROMPT --output-format json` with `~/.qwen/settings.json` naming the gateway (with
/// `"alwaysLoadTools": true` when asked) and the OpenAI-compatible API at the upstream.
fn qwen(s: &Scratch, upstream: &Upstream, config: &str, always_load_tools: bool) -> Run {
    let (command, args) = gateway_command(config);
    let mut server = json!({"command": command, "args": args, "trust": true});
    if always_load_tools {
        server["alwaysLoadTools"] = json!(true);
    }
    let (run, init) = qwen_code(
        s,
        &[upstream.child.id()],
        "Read the note file and tell me the marker it holds.",
        json!({"mcpServers": {"toolshelf": server}}),
        &[("OPENAI_BASE_URL", format!("{}/v1", upstream.url()))],
    );
    assert_eq!(
        init["mcp_servers"],
        json!([{"name": "toolshelf", "status": "connected"}]),
        "{init}"
    );
    run
}

/// Qwen Code ignores `_meta["anthropic/alwaysLoad"]`; its per-server `"alwaysLoadTools": true`
/// makes it declare the gateway's tools in every request, so the model searches with the
/// gateway's `tool_search` and reads the file through `defer_execute`.
#[test]
fn qwen_code_sends_the_gateway_tools_resident_with_always_load_tools() {
    let (s, config, note) = setup("qwen", "");
    let final_text = "The note holds the marker.";
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"text": "Let me find a tool for that.", "tool_uses": [{
                "name": "mcp__toolshelf__tool_search",
                "input": {"queries": ["read a text file", "读取文件"]}}]},
            {"tool_uses": [{"name": "mcp__toolshelf__defer_execute", "input": {
                "tool_name": "mcp__filesystem__read_text_file", "params": {"path": note}}}]},
            {"tool_uses": [{"name": "mcp__toolshelf__time__get_current_time",
                "input": {"timezone": "Etc/UTC"}}]},
            {"text": final_text}
        ]}),
    );
    let run = qwen(&s, &upstream, &config, true);
    assert_gateway_served(&s, &config);

    let first = &upstream.first_turn();
    assert_eq!(first["api"], "openai");
    let search = assert_resident(first, "mcp__toolshelf__tool_search");
    let index = search["description"].as_str().expect("description");
    assert!(
        index.contains("<available_deferred_tools>") && index.contains("read_text_file"),
        "tool_search's description lacks the index: {index}"
    );
    assert_resident(first, "mcp__toolshelf__defer_execute");
    assert_resident(first, "mcp__toolshelf__time__get_current_time");
    let names = tool_names(first);
    assert!(
        !names.contains(&"mcp__toolshelf__mcp__time__get_current_time".to_owned()),
        "the pinned tool has its canonical name: {names:?}"
    );

    let turns = upstream.played(4);
    let answers = upstream.answers();
    let read = result_of(
        &turns,
        &call_id(&answers, 1, "mcp__toolshelf__defer_execute"),
    );
    assert!(
        read.contains(&marker("qwen")),
        "the file's content did not reach the model: {read}"
    );
    let time = result_of(
        &turns,
        &call_id(&answers, 2, "mcp__toolshelf__time__get_current_time"),
    );
    assert!(time.contains("Etc/UTC"), "{time}");
    let result = qwen_result(&run);
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], final_text, "{result}");
}

/// Without `alwaysLoadTools` Qwen Code defers every MCP tool, the gateway's included (whatever
/// their `_meta` says): none is declared, their names are listed in a reminder, and the model
/// reaches them through Qwen Code's own `tool_search` (`select:` shows their schemas) and its
/// `tool_call` bridge, which runs the gateway's `tool_search` and then `defer_execute` for it.
#[test]
fn qwen_code_defers_the_gateway_tools_without_always_load_tools() {
    let (s, config, note) = setup("qwen-deferred", "");
    let final_text = "The note holds the marker.";
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"tool_uses": [{"name": "tool_search", "input": {
                "query": "select:mcp__toolshelf__tool_search,mcp__toolshelf__defer_execute"}}]},
            {"tool_uses": [{"name": "tool_call", "input": {
                "name": "mcp__toolshelf__tool_search", "arguments": {
                    "queries": ["read a text file"]}}}]},
            {"tool_uses": [{"name": "tool_call", "input": {
                "name": "mcp__toolshelf__defer_execute", "arguments": {
                    "tool_name": "mcp__filesystem__read_text_file", "params": {"path": note}}}}]},
            {"text": final_text}
        ]}),
    );
    let run = qwen(&s, &upstream, &config, false);
    assert_gateway_served(&s, &config);

    let first = &upstream.first_turn();
    let names = tool_names(first);
    assert!(
        names.contains(&"tool_search".to_owned()) && names.contains(&"tool_call".to_owned()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__toolshelf__")),
        "a gateway tool is declared without alwaysLoadTools: {names:?}"
    );
    assert_listed_as_deferred(first);
    let turns = upstream.played(4);
    let answers = upstream.answers();
    let schemas = result_of(&turns, &call_id(&answers, 0, "tool_search"));
    assert!(
        schemas.contains("mcp__toolshelf__tool_search")
            && schemas.contains("mcp__toolshelf__defer_execute"),
        "{schemas}"
    );
    let searched = result_of(&turns, &call_id(&answers, 1, "tool_call"));
    assert!(
        searched.contains("mcp__filesystem__read_text_file"),
        "{searched}"
    );
    let read = result_of(&turns, &call_id(&answers, 2, "tool_call"));
    assert!(read.contains(&marker("qwen-deferred")), "{read}");
    assert_eq!(qwen_result(&run)["result"], final_text);
}

/// The client left the gateway's tools out of `tools` and named them in a message, as it does with
/// the tools it defers behind its own search.
fn assert_listed_as_deferred(first: &Value) {
    let messages = first["body"]["messages"].to_string();
    for name in [
        "mcp__toolshelf__tool_search",
        "mcp__toolshelf__defer_execute",
        "mcp__toolshelf__time__get_current_time",
    ] {
        assert!(
            messages.contains(name),
            "{name} is not listed as a deferred tool"
        );
    }
}
