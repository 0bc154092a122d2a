//! Model-written tools in the proxy at their edges: a proxy with authoring off over a session
//! whose model wrote tools, result hooks on the calls the proxy runs itself, a client tool that
//! takes a model-written tool's name, redefinition, the dashboard's index, and a call slow to check
//! that holds no other request. The real `toolshelf proxy` against the scripted model API.

mod common;

use common::{
    HEADERS, ProxyProc, Reaped, Scratch, TOOLSHELF, Upstream, anthropic_tool, messages_turn, post,
    tools,
};
use serde_json::{Value, json};

fn turn(proxy: &ProxyProc, messages: &mut Vec<Value>) -> Value {
    messages_turn(proxy, &tools(), messages)
}

/// The last message of scripted turn `i`'s request, as text.
fn last_message(upstream: &Upstream, i: usize) -> String {
    upstream.turns()[i]["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(Value::to_string)
        .unwrap_or_default()
}

fn no_calls(answer: &Value) {
    let blocks = answer["content"].as_array().expect("content");
    assert!(
        blocks.iter().all(|b| b["type"] != "tool_use"),
        "the client sees no call: {answer}"
    );
}

fn define(name: &str, description: &str, script: &str) -> Value {
    json!({"name": "defer_execute", "input": {"tool_name": "tool_define", "params": {
        "name": name, "description": description,
        "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "script": script}}})
}

fn run(name: &str, text: &str) -> Value {
    json!({"name": "defer_execute", "input": {"tool_name": name, "params": {"text": text}}})
}

const SHOUT: &str = "def run(params):\n    return params[\"text\"].upper() + \"!\"\n";

const WORD_COUNT: &str = r#"
description = "Count the words of a text."
schema = {"properties": {"text": {"type": "string"}}, "required": ["text"]}

def run(params):
    return {"words": len(params["text"].split())}
"#;

#[test]
fn with_authoring_off_a_sessions_model_written_tools_are_kept_but_neither_found_nor_run() {
    let s = Scratch::new("proxy-authoring-off");
    s.write("wc.star", WORD_COUNT);
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}]},
        {"tool_uses": [define("shout", "Shout a text back, in capitals.", SHOUT)]},
        {"text": "Defined."},
        // The same session, served by a proxy with authoring off.
        {"tool_uses": [run("shout", "hi")]},
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["shout a text back in capitals"]}}]},
        {"text": "Off here."},
        // Authoring on again: the tool was kept.
        {"tool_uses": [run("shout", "back")]},
        {"text": "BACK!"}
    ]});
    let upstream = Upstream::start(&s, &script);
    let on =
        "[proxy]\nmax_search_rounds = 8\npersist_sessions = true\n[authoring]\nenabled = true\n";
    let off = "[proxy]\nmax_search_rounds = 8\npersist_sessions = true\n[authoring]\nenabled = false\n\
               [tools.word_count]\nscript = \"wc.star\"\n";
    let mut messages = vec![json!({"role": "user", "content": "make a shouting tool"})];
    {
        let a = ProxyProc::start(&s, &upstream.url(), on, &[]);
        turn(&a, &mut messages);
        upstream.played(3);
    }
    messages.push(json!({"role": "user", "content": "shout hi"}));
    {
        let b = ProxyProc::start(&s, &upstream.url(), off, &[]);
        no_calls(&turn(&b, &mut messages));
        upstream.played(6);
    }
    let told = last_message(&upstream, 3);
    assert!(!told.contains("new: shout"), "not announced: {told}");
    let (refused, is_error) = upstream.last_result(4);
    assert!(
        is_error
            && refused.contains("model-written tools are turned off on this proxy")
            && !refused.contains("HI!"),
        "{refused}"
    );
    let (found, _) = upstream.last_result(5);
    assert!(
        !found.contains("Shout a text back") && !found.contains("already active"),
        "not searchable: {found}"
    );
    messages.push(json!({"role": "user", "content": "again"}));
    let a = ProxyProc::start(&s, &upstream.url(), on, &[]);
    no_calls(&turn(&a, &mut messages));
    upstream.played(8);
    assert_eq!(upstream.last_result(7), ("BACK!".to_owned(), false));
}

const HOOK: &str = r#"#!/usr/bin/env python3
import json, sys
ev = json.load(sys.stdin)
open(sys.argv[1], "a").write(json.dumps(ev) + "\n")
tool = ev.get("tool")
if ev["event"] == "post_call" and tool == "mcp__scripts__word_count":
    print("the word count is secret", file=sys.stderr)
    sys.exit(2)
if ev["event"] == "post_call" and tool == "shout":
    print(json.dumps({"result": {"content": [{"type": "text", "text": "REDACTED"}]}}))
if ev["event"] == "post_call" and tool == "leak":
    print(json.dumps({"result": "not a result"}))
"#;

#[test]
fn post_call_hooks_see_the_calls_the_proxy_runs_itself() {
    let s = Scratch::new("proxy-authoring-hooks");
    s.write("wc.star", WORD_COUNT);
    let hook = s.write("hook.py", HOOK);
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let events = s.path("events.jsonl");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define", "mcp__scripts__word_count"]}}]},
        {"tool_uses": [define("shout", "Shout a text back.", SHOUT)]},
        {"tool_uses": [define("leak", "Echo a text.", "def run(params):\n    return 'SECRET ' + params['text']\n")]},
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "mcp__scripts__word_count", "params": {"text": "a b"}}}]},
        {"tool_uses": [run("shout", "hi")]},
        {"tool_uses": [run("leak", "x")]},
        {"text": "done"}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = format!(
        "[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\n\
         [tools.word_count]\nscript = \"wc.star\"\n\
         [[hooks.post_call]]\ncommand = \"{hook}\"\nargs = [\"{events}\"]\non_error = \"deny\"\n"
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), &config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    no_calls(&turn(&proxy, &mut messages));
    upstream.played(7);
    let (withheld, is_error) = upstream.last_result(4);
    assert!(
        is_error
            && withheld.contains("a post_call hook withheld its result: the word count is secret")
            && !withheld.contains("words"),
        "{withheld}"
    );
    assert_eq!(upstream.last_result(5), ("REDACTED".to_owned(), false));
    let (failed, is_error) = upstream.last_result(6);
    assert!(
        is_error
            && failed.contains(toolshelf_core::hook::FAILED_CLOSED)
            && !failed.contains("SECRET"),
        "a replacement that is no result is the hook's failure, and on_error = deny: {failed}"
    );
    let seen: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    let shout = seen
        .iter()
        .find(|e| e["tool"] == "shout")
        .unwrap_or_else(|| panic!("{seen:?}"));
    assert_eq!(shout["result"]["content"][0]["text"], "HI!");
    assert_eq!(shout["params"]["text"], "hi");
}

/// The model defines `lookup`; then (the client now sends a tool of that name: another tool,
/// whose schema the model never saw) it calls `lookup`.
fn lookup_script() -> Value {
    json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}]},
        {"tool_uses": [define("lookup", "Shout a text back.", SHOUT)]},
        {"text": "Defined."},
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "lookup", "params": {"target": "x"}}}]},
        {"text": "Not loaded."}
    ]})
}

/// The client's tools with a `lookup` of its own.
fn tools_with_client_lookup() -> Vec<Value> {
    let mut with_lookup = tools();
    with_lookup.push(anthropic_tool(
        "lookup",
        "DELETE everything under a target.",
        json!({"target": {"type": "string"}}),
        &["target"],
    ));
    with_lookup
}

/// The call of `lookup` (scripted turn 3) was refused with the client's tool's schema.
fn assert_client_lookup_loaded_first(upstream: &Upstream) {
    let (refused, is_error) = upstream.last_result(4);
    assert!(
        is_error && refused.contains("DELETE everything"),
        "the client's tool is loaded (its schema shown) before a call of it runs: {refused}"
    );
}

#[test]
fn a_client_tool_that_takes_a_model_written_tools_name_is_announced_and_must_be_loaded() {
    let s = Scratch::new("proxy-authoring-shadow");
    let upstream = Upstream::start(&s, &lookup_script());
    let config = "[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "make a lookup tool"})];
    turn(&proxy, &mut messages);
    upstream.played(3);
    let with_lookup = tools_with_client_lookup();
    messages.push(json!({"role": "user", "content": "look it up"}));
    no_calls(&messages_turn(&proxy, &with_lookup, &mut messages));
    upstream.played(5);
    let told = last_message(&upstream, 3);
    assert!(
        told.contains("replaces the tool \\\"lookup\\\" you wrote"),
        "{told}"
    );
    assert_client_lookup_loaded_first(&upstream);
}

/// The same on a proxy with authoring off, where the model's tool is not on the shelf: the
/// activation the model's own definition made does not pass to the client's tool.
#[test]
fn with_authoring_off_a_client_tool_that_takes_a_model_written_tools_name_must_be_loaded() {
    let s = Scratch::new("proxy-authoring-off-shadow");
    let upstream = Upstream::start(&s, &lookup_script());
    let on =
        "[proxy]\nmax_search_rounds = 8\npersist_sessions = true\n[authoring]\nenabled = true\n";
    let off =
        "[proxy]\nmax_search_rounds = 8\npersist_sessions = true\n[authoring]\nenabled = false\n";
    let mut messages = vec![json!({"role": "user", "content": "make a lookup tool"})];
    {
        let a = ProxyProc::start(&s, &upstream.url(), on, &[]);
        turn(&a, &mut messages);
        upstream.played(3);
    }
    let with_lookup = tools_with_client_lookup();
    messages.push(json!({"role": "user", "content": "look it up"}));
    let b = ProxyProc::start(&s, &upstream.url(), off, &[]);
    no_calls(&messages_turn(&b, &with_lookup, &mut messages));
    upstream.played(5);
    assert_client_lookup_loaded_first(&upstream);
}

#[test]
fn a_model_written_tool_is_redefined_in_place() {
    let s = Scratch::new("proxy-authoring-redefine");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}]},
        {"tool_uses": [define("echo", "Echo a text.", "def run(params):\n    return params['text']\n")]},
        {"tool_uses": [define("echo", "Echo a text twice.", "def run(params):\n    return params['text'] * 2\n")]},
        {"tool_uses": [run("echo", "ab")]},
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["echo a text"]}}]},
        {"text": "done"}
    ]});
    let upstream = Upstream::start(&s, &script);
    // One tool at most: the redefinition does not count again. A relative keep_dir is the
    // configuration file's directory's.
    let config = "[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\nmax_tools = 1\nkeep_dir = \"kept\"\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "make an echo tool"})];
    no_calls(&turn(&proxy, &mut messages));
    upstream.played(6);
    let (redefined, is_error) = upstream.last_result(3);
    assert!(
        !is_error && redefined.contains("Replaced your earlier tool \"echo\""),
        "{redefined}"
    );
    assert_eq!(upstream.last_result(4), ("abab".to_owned(), false));
    let (found, _) = upstream.last_result(5);
    assert!(found.contains("Echo a text twice."), "{found}");
    // The kept file is the latest definition.
    let kept: Vec<std::path::PathBuf> = std::fs::read_dir(s.path("kept"))
        .expect("keep_dir beside the configuration")
        .map(|d| d.expect("entry").path().join("echo.star"))
        .collect();
    assert_eq!(kept.len(), 1, "one session: {kept:?}");
    let file = std::fs::read_to_string(&kept[0]).expect("the kept tool");
    assert!(file.contains("Echo a text twice."), "{file}");
}

#[test]
fn the_dashboard_index_is_the_one_the_model_sees() {
    let s = Scratch::new("proxy-authoring-ui");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}]},
        {"tool_uses": [define("shout", "Shout a text back.", SHOUT)]},
        {"text": "Defined."},
        {"text": "Still here."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "make a tool"})];
    turn(&proxy, &mut messages);
    messages.push(json!({"role": "user", "content": "and now?"}));
    turn(&proxy, &mut messages);
    let turns = upstream.played(4);
    let page = std::process::Command::new("curl")
        .args(["-sS", &format!("{}/ui/index", proxy.url)])
        .output()
        .expect("curl");
    let page = String::from_utf8_lossy(&page.stdout);
    let index = page
        .split("<pre id=\"index\">")
        .nth(1)
        .and_then(|p| p.split("</pre>").next())
        .unwrap_or_else(|| panic!("{page}"));
    assert!(index.contains("tool_define"), "{index}");
    assert!(!index.contains("shout"), "{index}");
    // The index the model was sent on the last request holds no model-written tool either.
    assert!(!turns[3]["body"]["tools"].to_string().contains("shout"));
}

/// A script of 15,336 bytes (under the default `[authoring] max_script_bytes`) that nests 15,000
/// unary minuses deep on one statement continued over 100 lines by `\` and CRLF.
fn continued_with_crlf() -> String {
    format!(
        "def run(params):\n    return 1\nx = {}1\n",
        format!("{}\\\r\n", "-".repeat(150)).repeat(100)
    )
}

const FAILS_LONG: &str = r#"
description = "Fails with a long message."
schema = {}

def run(params):
    fail("E" * 5000000)
"#;

#[test]
fn a_deep_definition_is_refused_and_long_errors_are_cut_in_the_proxy() {
    let s = Scratch::new("proxy-authoring-deep");
    s.write("fails.star", FAILS_LONG);
    let mut deferred = define("deferred", "Sets defer_loading.", SHOUT);
    deferred["input"]["params"]["defer_loading"] = json!(false);
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define", "mcp__scripts__fails"]}}]},
        {"tool_uses": [define("deep", "Nests deep.", &continued_with_crlf())]},
        {"tool_uses": [deferred]},
        {"tool_uses": [define("boom", "Fails long.", "def run(params):\n    fail('M' * 5000000)\n")]},
        {"tool_uses": [run("boom", "x")]},
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "mcp__scripts__fails", "params": {}}}]},
        {"text": "done"}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\n\
                  [scripts]\nmax_result_bytes = 1000\n[tools.fails]\nscript = \"fails.star\"\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "make tools"})];
    no_calls(&turn(&proxy, &mut messages));
    upstream.played(7);
    let (refused, is_error) = upstream.last_result(2);
    assert!(
        is_error
            && refused.contains(
                "tool_define \"deep\": script line 4: does not parse: it nests more than 200 levels deep"
            ),
        "{refused}"
    );
    // `defer_loading` beside a definition is refused saying why a defined tool has none.
    let (refused, is_error) = upstream.last_result(3);
    assert!(
        is_error
            && refused.contains("- at /defer_loading: \"defer_loading\" is not an argument of tool_define: a tool you define always goes on the shelf")
            && !refused.contains("Additional properties"),
        "{refused}"
    );
    for (i, starts) in [
        (
            5,
            "model-authored tool \"boom\": script line 2: failed: fail: MMMM",
        ),
        (
            6,
            "script tool \"mcp__scripts__fails\" (fails.star): script line 6: failed: fail: EEEE",
        ),
    ] {
        let (e, is_error) = upstream.last_result(i);
        assert!(
            is_error
                && e.len() <= 1000
                && e.starts_with(starts)
                && e.ends_with(" bytes, more than [scripts] max_result_bytes (1000) allows]"),
            "{} bytes: {}",
            e.len(),
            &e[..e.len().min(300)]
        );
    }
}

/// `toolshelf proxy` with `config` in front of `upstream`, on a runtime of one async worker: work
/// a request does on the worker instead of the blocking pool holds every other request. Returns
/// the child and its URL.
fn one_worker_proxy(s: &Scratch, upstream: &str, config: &str) -> (Reaped, String) {
    let config = s.write("proxy.toml", config);
    let stderr = s.path("proxy.stderr");
    let child = std::process::Command::new(TOOLSHELF)
        .args(["proxy", "--listen", "127.0.0.1:0", "--config", &config])
        .args([
            "--anthropic-upstream",
            upstream,
            "--openai-upstream",
            upstream,
        ])
        .env("XDG_CACHE_HOME", s.path("cache"))
        .env("TOKIO_WORKER_THREADS", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("spawn toolshelf proxy");
    let mut child = Reaped(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        if let Some((line, _)) = log
            .split("proxy listening on ")
            .nth(1)
            .and_then(|rest| rest.split_once('\n'))
        {
            let url = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            return (child, url);
        }
        let exited = child.try_wait().expect("poll the proxy");
        assert!(
            exited.is_none() && std::time::Instant::now() < deadline,
            "the proxy did not start ({exited:?}); stderr:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A model-written tool whose schema costs minutes of CPU to check a call against (a
/// backtracking pattern on each of thousands of properties): while the proxy checks a call of
/// it, another request goes through. The check runs off the async workers, so even a proxy with
/// a single one serves the other request meanwhile.
#[cfg(target_os = "linux")]
#[test]
fn a_slow_check_of_one_call_holds_no_other_request() {
    let s = Scratch::new("proxy-slow-check");
    let (definition, params) = common::slow_definition();
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}]},
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "tool_define", "params": definition}}]},
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "slow", "params": params}}]},
        {"text": "done"}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\nkeep_dir = \"\"\n";
    let (proxy, url) = one_worker_proxy(&s, &upstream.url(), config);
    let messages = format!("{url}/v1/messages");
    let slow = {
        let (messages, tools) = (messages.clone(), tools());
        std::thread::spawn(move || {
            let body = json!({"model": "m", "max_tokens": 256, "tools": tools,
                              "messages": [{"role": "user", "content": "make a slow tool"}]});
            post(&messages, &body, &HEADERS)
        })
    };
    // The model's call of the tool is at the proxy, and the proxy has spent seconds of CPU on it
    // since. (Linux counts /proc's times in USER_HZ, 100 a second.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !upstream.answers().iter().any(|a| a["step"] == 2) {
        assert!(
            std::time::Instant::now() < deadline,
            "the model's call of slow was never sent"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let before = common::cpu_ticks(proxy.id());
    while common::cpu_ticks(proxy.id()) < before + 300 {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy did not work on the slow call"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Another conversation (without tools, passed through as sent) is answered meanwhile.
    let other = json!({"model": "m", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hello"}]});
    let (status, answer) = post(&messages, &other, &HEADERS);
    assert_eq!(
        status, 200,
        "another request is answered while the slow call is being checked: {answer}"
    );
    assert!(!slow.is_finished(), "the slow call was still being checked");
    drop(proxy);
    let _ = slow.join();
}
