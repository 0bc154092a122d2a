//! End-to-end tests of `toolshelf proxy` with real harnesses: Claude Code (Anthropic Messages) and
//! Qwen Code (OpenAI Chat Completions) run non-interactively with their base URL at the proxy,
//! which sits in front of a scripted model API on loopback (`fixtures/scripted_upstream.py`). The
//! upstream plays the model's turns and records every request it receives, so the assertions read
//! what the model was sent: the frozen tool list, the searches the proxy answered itself, and the
//! tool results the harness produced by running its own tools.
//!
//! What the harnesses send (Claude Code 2.1.328, Qwen Code 0.24.4, in this set-up):
//!
//! - Claude Code: every model request carries its twelve tools: eleven built-ins with full
//!   schemas (`Read`, `Bash`, `Edit`, `Write`, `Agent`, `ToolSearch`, ...) and
//!   `DeferredToolPlaceholder` with `defer_loading: true`; its other built-ins are named in a
//!   message as reachable through its own `ToolSearch`. The `defer_loading` mark is Anthropic's own
//!   deferral, so by default the proxy passes these requests through as sent; with
//!   `[proxy] take_over_deferral = true` it rewrites them. Its one side request is
//!   `HEAD /api/hello`, which carries no tools and passes through.
//! - Qwen Code: every main request carries ten function tools (`read_file`, `glob`,
//!   `grep_search`, `agent`, its own `tool_search` and `tool_call`, ...), none with
//!   `defer_loading`, so the proxy rewrites them. After the answer it may send a side request of
//!   its own, a memory-extraction subagent with six tools of its own (`read_file`,
//!   `run_shell_command`, ...; it skips the extraction on conditions of its own, such as memory
//!   pressure, so a run may have none); the proxy rewrites that one too, in a session of its own.
//!   The scripted upstream tells the two apart by the system prompt (`main_system`), since
//!   through the proxy both carry the same two meta-tools.
//!
//! The harnesses are installed by `scripts/install-clients.sh`; when one is missing these tests
//! fail and say so, they never skip. Every wait polls with a generous deadline; the assertions are
//! about what happens, never about how fast.

mod common;

use common::harness::*;
use common::*;
use serde_json::{Value, json};

const PROMPT: &str = "Read the note file and tell me the marker it holds.";
const FINAL: &str = "The note holds the marker.";

/// The marker the note holds: only a real read of that file can bring it to the model.
fn marker(tag: &str) -> String {
    format!("MARKER-{tag}-{}-5c1e07", std::process::id())
}

/// A scratch directory with `files/note.txt` holding [`marker`]; returns the note's path.
fn setup(tag: &str) -> (Scratch, String) {
    let s = Scratch::new(&format!("proxy-client-{tag}"));
    let note = s.write("files/note.txt", &format!("{}\n", marker(tag)));
    (s, note)
}

/// Claude Code with `ANTHROPIC_BASE_URL` at `base_url`. Its non-essential traffic is left on
/// (telemetry, error reporting and updates are off), so its side request reaches the base URL.
fn claude_at(s: &Scratch, keep: &[u32], base_url: &str) -> Run {
    claude_code(
        s,
        keep,
        PROMPT,
        &[],
        &[("ANTHROPIC_BASE_URL", base_url.to_owned())],
    )
}

/// The requests the upstream received, in order.
fn requests(upstream: &Upstream) -> Vec<Value> {
    upstream
        .records()
        .into_iter()
        .filter(|r| r["kind"] == "request")
        .collect()
}

/// `tool_search`'s description in an upstream request.
fn index_of(request: &Value) -> String {
    find_tool(request, "tool_search")
        .unwrap_or_else(|| panic!("no tool_search in {:?}", tool_names(request)))["description"]
        .as_str()
        .expect("description")
        .to_owned()
}

/// The names listed in an index's `<available_deferred_tools>` block.
fn indexed(index: &str) -> Vec<String> {
    let start = index
        .find("<available_deferred_tools>")
        .unwrap_or_else(|| panic!("no <available_deferred_tools> in {index}"));
    index[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("</available_deferred_tools>"))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// Every main request carries the frozen surface: `tool_search` and `defer_execute` and nothing
/// else, byte for byte the same list each time, no tool marked `defer_loading`. Returns the
/// names the index lists.
fn assert_frozen_surface(turns: &[Value]) -> Vec<String> {
    let first = &turns[0];
    for t in turns {
        assert_eq!(
            tool_names(t),
            ["tool_search", "defer_execute"],
            "request {} does not carry the frozen surface",
            t["seq"]
        );
        assert_eq!(
            t["body"]["tools"].to_string(),
            first["body"]["tools"].to_string(),
            "the tool list of request {} differs from the first one's",
            t["seq"]
        );
    }
    assert!(
        !first["body"]["tools"].to_string().contains("defer_loading"),
        "{}",
        first["body"]["tools"]
    );
    indexed(&index_of(first))
}

/// Every request the upstream received is accounted for by the proxy, as a round of a request
/// it rewrote or as a request it passed through, and the proxy counted no error. Returns its
/// totals.
fn assert_accounted(upstream: &Upstream, proxy: &ProxyProc) -> Value {
    let totals = proxy.status()["totals"].clone();
    let rounds = totals["rounds"].as_u64().expect("rounds");
    let passed = totals["passed"].as_u64().expect("passed");
    assert_eq!(
        requests(upstream).len() as u64,
        rounds + passed,
        "the upstream's requests are not the proxy's rounds plus what it passed through: {totals}"
    );
    assert_eq!(totals["errors"], 0, "{totals}\n{}", proxy.log());
    totals
}

/// The tool calls Claude Code's own transcript holds, as `(name, id)`: what the harness was
/// handed to run.
fn claude_calls(s: &Scratch) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(s.path("claude-config/projects"))];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                files.push(p);
            }
        }
    }
    assert!(!files.is_empty(), "Claude Code wrote no transcript");
    let mut calls = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f).expect("transcript").lines() {
            let r: Value = serde_json::from_str(line).expect("transcript line is JSON");
            if r["type"] != "assistant" {
                continue;
            }
            for b in r["message"]["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_use" {
                    calls.push((
                        b["name"].as_str().expect("name").to_owned(),
                        b["id"].as_str().expect("id").to_owned(),
                    ));
                }
            }
        }
    }
    calls
}

// --- Claude Code, toolshelf taking over ---------------------------------------------------------

/// A reminder whose intent is a word of the prompt.
const REMINDER: &str = "Notes are plain text files.";

/// The reminder the user's words fired on the first request is in every later request too, in
/// the same conversation entry with the same bytes: the proxy puts back what it injected when it
/// rebuilds the conversation, although Claude Code resends the entry it follows in another shape
/// (its last message carries a cache mark, so a string content goes as one text block).
fn assert_reminded_in_place(turns: &[Value]) {
    let carrying: Vec<(usize, String)> = turns
        .iter()
        .map(|t| {
            let entries = t["body"]["messages"].as_array().expect("messages");
            let at: Vec<usize> = (0..entries.len())
                .filter(|&i| entries[i].to_string().contains(REMINDER))
                .collect();
            assert_eq!(
                at.len(),
                1,
                "request {} does not carry the reminder once: {entries:#?}",
                t["seq"]
            );
            (at[0], entries[at[0]].to_string())
        })
        .collect();
    for c in &carrying[1..] {
        assert_eq!(c, &carrying[0], "the reminder moved or changed");
    }
}

/// With `take_over_deferral` the proxy rewrites Claude Code's requests although they carry a
/// `defer_loading` tool: the upstream sees only `tool_search` (its index listing Claude Code's
/// tools, `Read` among them) and `defer_execute`, the same bytes on every request. The model
/// searches (the proxy answers, Claude Code never sees it), then calls `defer_execute` for
/// `Read`; Claude Code receives an ordinary `Read` call with the same id, runs it, and the file's
/// content reaches the model as that call's result. The proxy rebuilds the conversation on the
/// next request, with the search and a reminder it injected in it.
#[test]
fn claude_code_through_the_proxy_taking_over_deferral() {
    let (s, note) = setup("claude-takeover");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"text": "Let me find a tool for that.", "tool_uses": [{"name": "tool_search",
                "input": {"queries": ["read a file", "读取文件"]}}]},
            {"tool_uses": [{"name": "defer_execute", "input": {
                "tool_name": "Read", "params": {"file_path": note}}}]},
            {"text": FINAL}
        ]}),
    );
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        &format!(
            "[proxy]\ntake_over_deferral = true\n\n[[reminders]]\nid = \"notes\"\n\
             category = \"note files\"\nmessage = {REMINDER:?}\nintents = [\"marker\"]\n"
        ),
        &[],
    );
    let run = claude_at(&s, &[upstream.child.id(), proxy.pid()], &proxy.url);

    let turns = upstream.played(3);
    let listed = assert_frozen_surface(&turns);
    assert_reminded_in_place(&turns);
    for name in ["Read", "Bash", "Edit", "Write", "ToolSearch"] {
        assert!(
            listed.iter().any(|n| n == name),
            "{name} is not in the index: {listed:?}"
        );
    }

    let answers = upstream.answers();
    let search_id = call_id(&answers, 0, "tool_search");
    let searched = result_of(&turns, &search_id);
    assert!(
        searched.contains(r#"defer_execute {"tool_name":"Read""#),
        "the search did not offer Read: {searched}"
    );
    let read_id = call_id(&answers, 1, "defer_execute");
    let read = result_of(&turns, &read_id);
    assert!(
        read.contains(&marker("claude-takeover")),
        "the file's content did not reach the model: {read}"
    );
    // The last request still holds the search round, which Claude Code never saw.
    assert_eq!(result_of(&turns[2..], &search_id), searched);

    let calls = claude_calls(&s);
    assert_eq!(
        calls,
        [("Read".to_owned(), read_id)],
        "Claude Code was handed other calls than the one Read"
    );

    let result = claude_result(&run);
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], FINAL, "{result}");

    let totals = assert_accounted(&upstream, &proxy);
    assert_eq!(totals["rewritten"], 2, "{totals}");
    assert_eq!(totals["rounds"], 3, "{totals}");
    assert_eq!(totals["searches"], 1, "{totals}");
    assert_eq!(totals["refused"], 0, "{totals}");
    let log = proxy.log();
    assert!(
        log.contains("turn=1 rounds=2 searches=1"),
        "the proxy log does not show the search:\n{log}"
    );
    let second = log
        .lines()
        .find(|l| l.contains(" turn=2 "))
        .unwrap_or_else(|| panic!("the proxy did not book a second request:\n{log}"));
    assert!(
        second.contains("rounds=1 searches=0") && second.ends_with("prefix=kept"),
        "the second request did not continue the first one's prefix: {second}"
    );
    let side: Vec<Value> = requests(&upstream)
        .into_iter()
        .filter(|r| r["main"] != true)
        .collect();
    assert!(
        side.iter()
            .any(|r| r["method"] == "HEAD" && r["path"] == "/api/hello"),
        "Claude Code's HEAD /api/hello did not pass through: {side:#?}"
    );
    for r in &side {
        assert_eq!(r["tool_names"], json!([]), "a side request with tools: {r}");
    }
}

// --- Claude Code, the provider's deferral left alone --------------------------------------------

/// A request body with what differs between two runs of the same conversation taken out: the
/// session in `metadata`, the ids the upstream gave the calls (numbered in order), the date.
fn comparable(body: &Value, ids: &[String]) -> String {
    let mut body = body.clone();
    if let Some(m) = body.as_object_mut() {
        m.shift_remove("metadata");
    }
    let mut text = body.to_string();
    for (n, id) in ids.iter().enumerate() {
        text = text.replace(id.as_str(), &format!("CALL-{n}"));
    }
    const DATE: &str = "Today's date is ";
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find(DATE) {
        let end = (i + DATE.len() + 10).min(rest.len());
        out.push_str(&rest[..i + DATE.len()]);
        out.push_str("DATE");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The ids of every call the upstream made, in order.
fn all_call_ids(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r["kind"] == "response")
        .flat_map(|r| r["tool_uses"].as_array().cloned().unwrap_or_default())
        .map(|u| u["id"].as_str().expect("id").to_owned())
        .collect()
}

/// By default a request that uses Anthropic's own deferral (Claude Code marks a tool
/// `defer_loading: true`) passes through untouched. The same conversation is run twice in the
/// same directory, once straight at the upstream and once through the proxy: the upstream
/// receives the same requests, bodies equal but for the session id and the call ids, and the
/// conversation completes with the file read by Claude Code's `Read`.
#[test]
fn claude_code_with_its_own_deferral_passes_through_the_proxy() {
    let (s, note) = setup("claude-pass");
    let script = json!({"match": ["Read"], "steps": [
        {"tool_uses": [{"name": "Read", "input": {"file_path": note}}]},
        {"text": FINAL}
    ]});
    let reference = {
        let upstream = Upstream::start(&s, &script);
        let run = claude_at(&s, &[upstream.child.id()], &upstream.url());
        assert_eq!(claude_result(&run)["result"], FINAL);
        upstream.played(2);
        upstream.records()
    };
    std::fs::remove_file(s.path("upstream.jsonl")).expect("remove the reference log");

    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let run = claude_at(&s, &[upstream.child.id(), proxy.pid()], &proxy.url);

    let turns = upstream.played(2);
    let first = &turns[0];
    let deferred: Vec<Value> = first["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter(|t| t["defer_loading"] == true)
        .map(|t| t["name"].clone())
        .collect();
    assert!(
        !deferred.is_empty(),
        "Claude Code marked no tool defer_loading, so this test shows nothing: {:?}",
        tool_names(first)
    );
    for t in &turns {
        let names = tool_names(t);
        assert!(
            names.contains(&"Read".to_owned())
                && !names.contains(&"tool_search".to_owned())
                && !names.contains(&"defer_execute".to_owned()),
            "the tools were rewritten: {names:?}"
        );
    }
    let answers = upstream.answers();
    let read = result_of(&turns, &call_id(&answers, 0, "Read"));
    assert!(read.contains(&marker("claude-pass")), "{read}");
    let result = claude_result(&run);
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], FINAL, "{result}");

    let through = upstream.records();
    let (ref_ids, ids) = (all_call_ids(&reference), all_call_ids(&through));
    let shape = |records: &[Value], ids: &[String]| -> Vec<String> {
        records
            .iter()
            .filter(|r| r["kind"] == "request")
            .map(|r| {
                format!(
                    "{} {} {}",
                    r["method"],
                    r["path"],
                    comparable(&r["body"], ids)
                )
            })
            .collect()
    };
    let (want, got) = (shape(&reference, &ref_ids), shape(&through, &ids));
    assert_eq!(want.len(), got.len(), "{want:#?}\n{got:#?}");
    for (w, g) in want.iter().zip(&got) {
        assert!(
            w == g,
            "a request reached the upstream changed:\nwithout the proxy: {}\nthrough it:        {}",
            head_of(w),
            head_of(g)
        );
    }

    let totals = assert_accounted(&upstream, &proxy);
    assert_eq!(totals["rewritten"], 0, "{totals}");
    assert_eq!(totals["passed"], totals["requests"], "{totals}");
    assert!(
        proxy
            .log()
            .contains("passing through a request that uses the provider's own deferral"),
        "{}",
        proxy.log()
    );
}

/// The first 400 characters of a long text, for a failure message.
fn head_of(s: &str) -> String {
    s.chars().take(400).collect()
}

// --- Qwen Code ----------------------------------------------------------------------------------

/// Qwen Code's tools carry no `defer_loading`, so the proxy rewrites its requests: the upstream
/// sees `tool_search` (its index listing `read_file` and the rest, Qwen Code's own `tool_search`
/// under another name) and `defer_execute`, the same bytes every time. The model searches, then
/// calls `defer_execute` for `read_file`; Qwen Code runs its own `read_file` and the file's
/// content reaches the model as the result of that call id. A side request Qwen Code sends with
/// tools of its own (its memory extractor) is rewritten in a session of its own and never taken
/// for a turn of the conversation.
#[test]
fn qwen_code_through_the_proxy() {
    let (s, note) = setup("qwen");
    let upstream = Upstream::start(
        &s,
        &json!({"main_system": ["You are Qwen Code"], "steps": [
            {"tool_uses": [{"name": "tool_search",
                "input": {"queries": ["read a file", "读取文件"]}}]},
            {"tool_uses": [{"name": "defer_execute", "input": {
                "tool_name": "read_file", "params": {"file_path": note}}}]},
            {"text": FINAL}
        ]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let (run, _) = qwen_code(
        &s,
        &[upstream.child.id(), proxy.pid()],
        PROMPT,
        json!({}),
        &[("OPENAI_BASE_URL", format!("{}/v1", proxy.url))],
    );

    let turns = upstream.played(3);
    assert!(turns.iter().all(|t| t["api"] == "openai"), "{turns:#?}");
    let listed = assert_frozen_surface(&turns);
    for name in ["read_file", "glob", "grep_search", "tool_call"] {
        assert!(
            listed.iter().any(|n| n == name),
            "{name} is not in the index: {listed:?}"
        );
    }
    assert!(
        listed.iter().any(|n| n.starts_with("tool_search_")),
        "Qwen Code's own tool_search is not in the index under another name: {listed:?}"
    );

    let answers = upstream.answers();
    let searched = result_of(&turns, &call_id(&answers, 0, "tool_search"));
    assert!(
        searched.contains(r#"defer_execute {"tool_name":"read_file""#),
        "the search did not offer read_file: {searched}"
    );
    let read = result_of(&turns, &call_id(&answers, 1, "defer_execute"));
    assert!(
        read.contains(&marker("qwen")),
        "the file's content did not reach the model: {read}"
    );
    let result = qwen_result(&run);
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], FINAL, "{result}");

    // Side requests: without tools they pass through; with tools of their own (the memory
    // extractor) they are rewritten with an index of their own, in a session of their own.
    let side: Vec<Value> = requests(&upstream)
        .into_iter()
        .filter(|r| r["main"] != true)
        .collect();
    let mut subagents = 0;
    for r in side.iter().filter(|r| r["tool_names"] != json!([])) {
        subagents += 1;
        assert_eq!(tool_names(r), ["tool_search", "defer_execute"], "{r}");
        let its_own = indexed(&index_of(r));
        assert_ne!(
            its_own, listed,
            "a side request got the conversation's index"
        );
    }

    let totals = assert_accounted(&upstream, &proxy);
    assert_eq!(totals["searches"], 1, "{totals}");
    assert_eq!(totals["refused"], 0, "{totals}");
    let log = proxy.log();
    assert!(
        log.contains("turn=1 rounds=2 searches=1"),
        "the proxy log does not show the search:\n{log}"
    );
    let second = log
        .lines()
        .find(|l| l.contains(" turn=2 "))
        .unwrap_or_else(|| panic!("the proxy did not book a second request:\n{log}"));
    assert!(
        second.contains("rounds=1 searches=0") && second.ends_with("prefix=kept"),
        "the second request did not continue the first one's prefix: {second}"
    );
    let sessions: std::collections::BTreeSet<&str> = log
        .lines()
        .filter(|l| l.contains(" turn="))
        .filter_map(|l| l.split(" session=").nth(1)?.split(' ').next())
        .collect();
    assert_eq!(
        sessions.len(),
        1 + subagents,
        "the conversation and each side request with tools do not have a session each:\n{log}"
    );
}
