//! End-to-end tests of `toolshelf proxy`'s own rules, with plain HTTP requests (the SDK and
//! harness tests are elsewhere): sessions that survive a restart, what happens to a request it
//! cannot rewrite, refusals answered inside the loop, tools that appear mid-conversation, and
//! pass-through of everything it does not rewrite. The upstream is the scripted model API.

mod common;

use std::process::Command;

use common::{
    HEADERS, ProxyProc, Scratch, Upstream, abandon, anthropic_tool, chat_tools, closed_port,
    curl_messages, post, responses_tools, tools,
};
use serde_json::{Value, json};

/// A client turn against the proxy's Anthropic endpoint: sends the conversation, appends the
/// answer and, for each tool call, a result; returns the answer.
fn turn(proxy: &ProxyProc, tools: &[Value], messages: &mut Vec<Value>) -> Value {
    let body = json!({"model": "m", "max_tokens": 256, "system": "You help.", "tools": tools,
                      "messages": messages});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    let results: Vec<Value> = answer["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| json!({"type": "tool_result", "tool_use_id": b["id"], "content": format!("result of {}", b["name"])}))
        .collect();
    if !results.is_empty() {
        messages.push(json!({"role": "user", "content": results}));
    }
    answer
}

fn calls(answer: &Value) -> Vec<(String, Value)> {
    answer["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| {
                    (
                        b["name"].as_str().unwrap_or("").to_owned(),
                        b["input"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The last tool result a scripted request carried back to the model.
fn last_result(turn: &Value) -> Value {
    turn["tool_results"]
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .expect("a result")
}

/// Each scripted request's conversation starts with the previous one's, entry for entry, and
/// the tool list never changes.
fn assert_prefix_kept(upstream: &Upstream) {
    let turns = upstream.turns();
    for pair in turns.windows(2) {
        let (a, b) = (&pair[0]["body"], &pair[1]["body"]);
        assert_eq!(
            a["tools"].to_string(),
            b["tools"].to_string(),
            "the tool list changed"
        );
        let (ma, mb) = (
            a["messages"].as_array().expect("messages"),
            b["messages"].as_array().expect("messages"),
        );
        assert!(mb.len() >= ma.len(), "the conversation shrank");
        for (i, (x, y)) in ma.iter().zip(mb).enumerate() {
            assert_eq!(
                x.to_string(),
                y.to_string(),
                "messages[{i}] changed between requests"
            );
        }
    }
}

fn search_then_read_script() -> Value {
    json!({"steps": [
        {"text": "Looking.", "tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "notes.txt"}}}]},
        {"text": "Read it."},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "other.txt"}}}]},
        {"text": "Read that too."}
    ]})
}

#[test]
fn a_session_kept_in_files_survives_a_restart_of_the_proxy() {
    let s = Scratch::new("proxy-restart");
    let upstream = Upstream::start(&s, &search_then_read_script());
    let config = "[proxy]\npersist_sessions = true\n";
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    {
        let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
        let a = turn(&proxy, &tools(), &mut messages);
        assert_eq!(
            calls(&a),
            [(
                "mcp__fs__read_file".to_owned(),
                json!({"path": "notes.txt"})
            )]
        );
        turn(&proxy, &tools(), &mut messages);
    } // killed
    messages.push(json!({"role": "user", "content": "and other.txt"}));
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let a = turn(&proxy, &tools(), &mut messages);
    assert_eq!(
        calls(&a),
        [(
            "mcp__fs__read_file".to_owned(),
            json!({"path": "other.txt"})
        )],
        "the tool stays active across the restart: no new search needed"
    );
    turn(&proxy, &tools(), &mut messages);
    upstream.played(5);
    assert_prefix_kept(&upstream);
    // The rebuilt conversation still holds the search round the first proxy answered.
    let last = &upstream.turns()[4]["body"]["messages"];
    assert!(
        last.to_string().contains("\"name\":\"tool_search\""),
        "the recorded search round is put back after the restart: {last}"
    );
}

/// A cache mark the client puts at the end of an assistant turn stays at the end of the turn
/// the proxy puts back in its place (which holds the upstream's own calls, not the client's).
#[test]
fn a_cache_mark_on_a_recorded_turn_stays_at_its_end() {
    let s = Scratch::new("proxy-cache-mark");
    let upstream = Upstream::start(&s, &search_then_read_script());
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    turn(&proxy, &tools(), &mut messages);
    let assistant = messages[1]["content"]
        .as_array_mut()
        .and_then(|blocks| blocks.last_mut())
        .expect("the assistant turn has a block");
    assistant["cache_control"] = json!({"type": "ephemeral"});
    turn(&proxy, &tools(), &mut messages);
    upstream.played(3);
    let sent = upstream.turns()[2]["body"]["messages"].clone();
    let put_back = sent
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .find(|m| m.to_string().contains("notes.txt"))
        .unwrap_or_else(|| panic!("the recorded turn is put back: {sent}"));
    let last = put_back["content"]
        .as_array()
        .and_then(|b| b.last())
        .expect("a block");
    assert_eq!(last["type"], "tool_use", "{put_back}");
    assert_eq!(
        last["cache_control"],
        json!({"type": "ephemeral"}),
        "{put_back}"
    );
}

#[test]
fn a_request_that_cannot_be_rewritten_fails_closed_under_rules_and_open_without() {
    let s = Scratch::new("proxy-fail");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "fine"}], "match": ["Read"]}));
    let mut dup = tools();
    dup.push(dup[0].clone());
    let body = json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}],
                      "tools": dup});
    // Whatever governs calls or the tool list: rules, a default other than allow, call hooks.
    for (config, governing) in [
        ("[permissions]\ndeny = [\"Bash\"]\n", "[permissions] rules"),
        (
            "[permissions]\ndefault = \"deny\"\n",
            "[permissions] default = \"deny\"",
        ),
        (
            "[[hooks.post_call]]\ncommand = \"true\"\n",
            "[hooks] post_call",
        ),
    ] {
        let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
        let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
        assert_eq!(status, 400, "{config}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("\"Read\"") && message.contains("twice"),
            "names the tool: {message}"
        );
        assert!(upstream.records().is_empty(), "nothing went upstream");
        let log = proxy.log();
        assert!(
            log.contains(&format!("refused (fail-closed: {governing} in force)")),
            "{log}"
        );
    }
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}");
    let sent = &upstream.records()[0];
    assert_eq!(sent["body"], body, "passed through exactly as sent");
    assert_eq!(
        sent["headers"]["x-api-key"],
        Value::Null,
        "(credentials are not logged by the upstream fixture)"
    );
    assert!(proxy.log().contains("fail-open"), "{}", proxy.log());
}

/// The tools of a client that defers on its own (as Claude Code does): one marked
/// `defer_loading`, beside the provider's tool-search tool.
fn self_deferring_tools() -> Vec<Value> {
    let mut list = tools();
    list[2]["defer_loading"] = json!(true);
    list.push(json!({"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}));
    list
}

/// A request that uses the provider's own deferral is taken over when rules are in force, so
/// they hold: the model's call of a denied tool is answered to the model, never handed to the
/// client, and the denied tool is not sent upstream.
#[test]
fn a_request_that_defers_on_its_own_still_meets_the_rules() {
    let s = Scratch::new("proxy-own-deferral-rules");
    let script = json!({"match": ["tool_search", "Read"], "steps": [
        {"tool_uses": [{"name": "mcp__fs__write_file", "input": {"path": "a", "content": "x"}}]},
        {"text": "Not allowed."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[permissions]\ndeny = [\"^mcp__fs__write_file$\"]\n",
        &[],
    );
    let mut messages = vec![json!({"role": "user", "content": "write a"})];
    let answer = turn(&proxy, &self_deferring_tools(), &mut messages);
    assert!(
        calls(&answer).is_empty(),
        "no call reaches the client: {answer}"
    );
    let turns = upstream.turns();
    assert_eq!(turns.len(), 2, "{turns:#?}");
    let sent = turns[0]["tool_names"].to_string();
    assert!(
        !sent.contains("mcp__fs__write_file") && !sent.contains("tool_search_tool_regex"),
        "{sent}"
    );
    let refused = last_result(&turns[1]);
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        !proxy.log().contains("take_over_deferral = false"),
        "no warning when the rules hold: {}",
        proxy.log()
    );
}

/// Without rules, hooks or a mode, such a request passes through exactly as sent; with rules
/// and `take_over_deferral = false` it does too, and the proxy says at start-up, once, what it
/// leaves unapplied to it.
#[test]
fn a_request_that_defers_on_its_own_passes_through_without_rules_or_when_told_to() {
    let s = Scratch::new("proxy-own-deferral-pass");
    let script = json!({"match": ["tool_search", "Read"], "steps": [
        {"tool_uses": [{"name": "mcp__fs__write_file", "input": {"path": "a", "content": "x"}}]},
        {"tool_uses": [{"name": "mcp__fs__write_file", "input": {"path": "a", "content": "x"}}]}
    ]});
    let upstream = Upstream::start(&s, &script);
    let body = json!({"model": "m", "max_tokens": 64, "tools": self_deferring_tools(),
                      "messages": [{"role": "user", "content": "write a"}]});
    for (config, warned) in [
        ("", false),
        (
            "[proxy]\ntake_over_deferral = false\n[permissions]\ndeny = [\"^mcp__fs__write_file$\"]\n",
            true,
        ),
    ] {
        let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
        let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            calls(&answer),
            [(
                "mcp__fs__write_file".to_owned(),
                json!({"path": "a", "content": "x"})
            )],
            "{config}"
        );
        let sent = upstream.turns().last().cloned().expect("a request");
        assert_eq!(
            sent["body"], body,
            "passed through exactly as sent: {config}"
        );
        assert_eq!(proxy.status()["totals"]["passed"], 1, "{config}");
        let log = proxy.log();
        let warning = "take_over_deferral = false: requests that use the provider's own deferral";
        assert_eq!(log.matches(warning).count(), usize::from(warned), "{log}");
        if warned {
            assert!(log.contains("[permissions] rules"), "{log}");
        }
    }
}

/// Hooks of events the proxy does not run are named at start-up, once, not silently ignored.
/// A description template that would fail every request's render stops the proxy at start,
/// naming the template and its line, as it stops the gateway.
#[test]
fn a_template_no_request_could_render_stops_the_proxy_at_start() {
    let s = Scratch::new("proxy-template-fault");
    let config = s.write(
        "proxy.toml",
        "[tools.Read]\ndescription_template = \"x = 1\\nstr(turn.messages)\"\n",
    );
    let out = Command::new(common::TOOLSHELF)
        .args(["proxy", "--listen", "127.0.0.1:0", "--config", &config])
        .env("XDG_CACHE_HOME", s.path("cache"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the proxy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[tools.\"Read\"]: description template line 2: reads turn.messages")
            && stderr.contains("no request could be rewritten"),
        "{stderr}"
    );
}

#[test]
fn hooks_the_proxy_does_not_run_are_named_at_start() {
    let s = Scratch::new("proxy-unrun-hooks");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let config = "[[hooks.post_search]]\ncommand = \"/bin/true\"\n\
                  [[hooks.session_end]]\ncommand = \"/bin/true\"\n\
                  [[hooks.session_start]]\ncommand = \"/bin/true\"\n\
                  [[hooks.post_call]]\ncommand = \"/bin/true\"\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let log = proxy.log();
    let warning =
        "[hooks] session_start, session_end: the proxy does not run hooks of these events";
    assert_eq!(log.matches(warning).count(), 1, "{log}");
    assert!(!log.contains("post_search"), "{log}");
}

/// `post_search` hooks see the searches the proxy answers, as the gateway's do: one adds
/// guidance, one that withholds a result leaves its tools unloaded.
#[test]
fn post_search_hooks_see_and_may_withhold_the_proxys_searches() {
    let s = Scratch::new("proxy-post-search");
    let events = s.path("events.jsonl");
    let hook = s.write(
        "hook.sh",
        &format!(
            r#"#!/bin/sh
event=$(cat)
printf '%s\n' "$event" >> {events}
case "$event" in
  *git*) echo "no git today" >&2; exit 2 ;;
  *) echo '{{"guidance": "prefer small files"}}' ;;
esac
"#
        ),
    );
    Command::new("chmod")
        .args(["+x", &hook])
        .status()
        .expect("chmod");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["write file"]}}]},
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__git__git_status"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__git__git_status", "params": {"repo_path": "."}}}]},
        {"text": "Done."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config =
        format!("[proxy]\nmax_search_rounds = 5\n[[hooks.post_search]]\ncommand = {hook:?}\n");
    let proxy = ProxyProc::start(&s, &upstream.url(), &config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "status"})];
    let answer = turn(&proxy, &tools(), &mut messages);
    assert!(calls(&answer).is_empty(), "{answer}");
    let (found, is_error) = upstream.last_result(1);
    assert!(
        !is_error && found.contains("mcp__fs__write_file") && found.ends_with("prefer small files"),
        "{found}"
    );
    let (withheld, is_error) = upstream.last_result(2);
    assert!(is_error, "{withheld}");
    assert_eq!(
        withheld,
        "The search result was withheld by a hook: no git today"
    );
    let (refused, is_error) = upstream.last_result(3);
    assert!(
        is_error && refused.contains("not been loaded"),
        "the withheld search loaded nothing: {refused}"
    );
    let seen: Vec<Value> = std::fs::read_to_string(&events)
        .expect("events")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an event"))
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["event"], "post_search");
    assert_eq!(seen[0]["search"], json!({"queries": ["write file"]}));
    assert_eq!(seen[1]["loaded"], json!(["mcp__git__git_status"]));
}

#[test]
fn refused_calls_are_answered_to_the_model_and_never_reach_the_client() {
    let s = Scratch::new("proxy-refuse");
    let script = json!({"steps": [
        // Not searched yet: refused with the schema attached, which loads the tool.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "a"}}}]},
        // Loaded now, but a required parameter is missing.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "a"}}}]},
        // Denied by a rule: refused as denied though not loaded, since loading would not help.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__git__git_status", "params": {"repo_path": "."}}}]},
        // Right.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "a", "content": "x"}}}]},
        {"text": "Written."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config =
        "[proxy]\nmax_search_rounds = 5\n[permissions]\ndeny = [\"mcp__git__git_status(*)\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "write a"})];
    let a = turn(&proxy, &tools(), &mut messages);
    assert_eq!(
        calls(&a),
        [(
            "mcp__fs__write_file".to_owned(),
            json!({"path": "a", "content": "x"})
        )],
        "the client sees only the call that passed"
    );
    let results: Vec<Value> = [1, 2, 3]
        .iter()
        .map(|&i| last_result(&upstream.turns()[i]))
        .collect();
    for r in &results {
        assert_eq!(r["is_error"], true, "{r}");
    }
    let text = |i: usize| {
        results[i]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        text(0).contains("\"content\""),
        "the schema comes with the first refusal: {}",
        text(0)
    );
    assert!(
        text(1).contains("content"),
        "the missing parameter is named: {}",
        text(1)
    );
    assert!(
        text(2).contains("deny[0]") && text(2).contains("forbids this call"),
        "the rule is named: {}",
        text(2)
    );
    assert!(
        !text(2).contains("not been loaded") && !text(2).contains("\"repo_path\""),
        "no schema is sent for a denied call: {}",
        text(2)
    );
    let status = proxy.status();
    assert_eq!(status["totals"]["refused"], 3, "{status}");
    turn(&proxy, &tools(), &mut messages);
    assert_prefix_kept(&upstream);
    // One session, one spelling in the log: the refusals' lines name it as the requests' do.
    let log = proxy.log();
    assert_eq!(log.matches(" call refused ").count(), 3, "{log}");
    let spellings: std::collections::BTreeSet<&str> = log
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("session="))
        .collect();
    assert_eq!(spellings.len(), 1, "{spellings:?}\n{log}");
    assert!(
        spellings.iter().all(|k| k.len() == "r:".len() + 12),
        "{spellings:?}"
    );
}

/// The proxy records each search and call it decides; a call it hands to the client is
/// `handed`. With the log required (the default), a log that cannot be written lets no call
/// reach the client until it can be written again, which its first record then says.
#[test]
fn calls_handed_to_the_client_are_audited_and_stop_while_the_log_cannot_be_written() {
    let s = Scratch::new("proxy-audit");
    let read = |path: &str| {
        json!({"tool_uses": [{"name": "defer_execute",
                              "input": {"tool_name": "mcp__fs__read_file", "params": {"path": path}}}]})
    };
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        read("notes.txt"),
        {"text": "Read it."},
        read("other.txt"),
        {"text": "Cannot."},
        read("third.txt"),
        {"text": "Read that too."}
    ]});
    let upstream = Upstream::start(&s, &script);
    // Relative to the configuration's directory.
    let config = "[audit]\npath = \"logs/audit.jsonl\"\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "read notes"})];
    let a = turn(&proxy, &tools(), &mut messages);
    assert_eq!(calls(&a).len(), 1, "{a}");
    turn(&proxy, &tools(), &mut messages);
    // A file where the log's directory was: the path cannot be opened.
    std::fs::remove_dir_all(s.path("logs")).expect("rm");
    s.write("logs", "");
    messages.push(json!({"role": "user", "content": "read other"}));
    let a = turn(&proxy, &tools(), &mut messages);
    assert!(calls(&a).is_empty(), "no call reaches the client: {a}");
    let refused = last_result(&upstream.turns()[4]);
    let text = refused["content"].as_str().unwrap_or_default();
    assert!(
        refused["is_error"] == true
            && text.starts_with("mcp__fs__read_file was not run:")
            && text.contains("audit log cannot be written")
            && text.contains("logs/audit.jsonl"),
        "{refused}"
    );
    let status = proxy.status();
    assert_eq!(status["audit"]["dropped"], 1, "{status}");
    assert!(status["audit"]["error"].is_string(), "{status}");
    let overview = || {
        let out = Command::new("curl")
            .args(["-sS", &format!("{}/ui", proxy.url)])
            .output()
            .expect("curl");
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let page = overview();
    assert!(
        page.contains("<p id=\"audit\" class=\"broken\">Audit log: ")
            && page.contains("is failing (required"),
        "{page}"
    );
    std::fs::remove_file(s.path("logs")).expect("clear the way");
    messages.push(json!({"role": "user", "content": "read the third"}));
    let a = turn(&proxy, &tools(), &mut messages);
    assert_eq!(
        calls(&a),
        [(
            "mcp__fs__read_file".to_owned(),
            json!({"path": "third.txt"})
        )]
    );
    turn(&proxy, &tools(), &mut messages);
    let audit = s.audit_at("logs/audit.jsonl");
    let seen: Vec<(&str, &str)> = audit
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or("-"),
                r["outcome"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("audit", "recovered"), ("call", "handed")],
        "the new file holds what came after: {audit:#?}"
    );
    assert!(
        audit[0]["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("1 records were lost")),
        "{audit:#?}"
    );
    assert_eq!(audit[1]["params"], json!({"path": "third.txt"}));
    assert!(proxy.status()["audit"]["error"].is_null());
    assert!(
        overview().contains("<p id=\"audit\" class=\"kept\">Audit log: "),
        "the overview says the log is written again"
    );
}

/// A search's record names the tools it loaded; the record of the call handed over names its
/// target, params and how it was made; both name the session by its id in the status.
#[test]
fn the_proxys_audit_records_name_what_was_searched_loaded_and_handed() {
    let s = Scratch::new("proxy-audit-records");
    let script = json!({"steps": [
        {"text": "Looking.", "tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        // Misspelt: refused, and recorded as the call of the tool it names.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "parms": {"path": "notes.txt"}}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "notes.txt"}}}]},
        {"text": "Read it."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[audit]\npath = \"audit.jsonl\"\n[proxy]\nmax_search_rounds = 5\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "read notes"})];
    turn(&proxy, &tools(), &mut messages);
    let audit = s.audit();
    assert_eq!(audit.len(), 3, "{audit:#?}");
    let (search, bad, call) = (&audit[0], &audit[1], &audit[2]);
    assert_eq!(
        (
            &bad["kind"],
            &bad["outcome"],
            &bad["via"],
            &bad["requested"]
        ),
        (
            &json!("refused"),
            &json!("bad_arguments"),
            &json!("defer_execute"),
            &json!("mcp__fs__read_file")
        ),
        "{bad}"
    );
    assert_eq!(
        bad["tool"], "mcp__fs__read_file",
        "the tool it names: {bad}"
    );
    assert_eq!(
        (&search["kind"], &search["outcome"]),
        (&json!("search"), &json!("ok"))
    );
    assert_eq!(search["params"], json!({"queries": ["read file"]}));
    let loaded: Vec<&str> = search["loaded"]
        .as_array()
        .expect("loaded")
        .iter()
        .filter_map(|h| h["name"].as_str())
        .collect();
    assert!(loaded.contains(&"mcp__fs__read_file"), "{search}");
    assert_eq!(
        (&call["kind"], &call["outcome"], &call["via"]),
        (&json!("call"), &json!("handed"), &json!("defer_execute"))
    );
    assert_eq!(
        (&call["tool"], &call["requested"], &call["params"]),
        (
            &json!("mcp__fs__read_file"),
            &json!("mcp__fs__read_file"),
            &json!({"path": "notes.txt"})
        )
    );
    assert!(call.get("hooks").is_none(), "{call}");
    let id = &proxy.status()["recent_sessions"][0]["id"];
    assert!(id.is_string());
    assert_eq!((&search["session"], &call["session"]), (id, id));
}

/// A hook that fails is recorded as a `hook_error` with its report, before the record of the
/// call it ran for, as in the gateway.
#[test]
fn a_failing_hook_is_recorded_before_the_call_it_ran_for() {
    let s = Scratch::new("proxy-audit-hook");
    let upstream = Upstream::start(&s, &search_then_read_script());
    let config = "[audit]\npath = \"audit.jsonl\"\n\
                  [[hooks.pre_call]]\ncommand = \"sh\"\nargs = [\"-c\", \"exit 1\"]\non_error = \"allow\"\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "read notes"})];
    let a = turn(&proxy, &tools(), &mut messages);
    assert_eq!(calls(&a).len(), 1, "allowed on error: {a}");
    let audit = s.audit();
    let kinds: Vec<&str> = audit.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(kinds, ["search", "hook_error", "call"], "{audit:#?}");
    assert_eq!(audit[1]["tool"], "mcp__fs__read_file");
    assert!(
        audit[1]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("pre_call[0]") && d.contains("exit status 1")),
        "{}",
        audit[1]
    );
    assert_eq!(audit[1]["session"], audit[2]["session"]);
}

/// A required log whose write fails only when written (a full disk: the file opens) loses the
/// record of the call that found it; that call is not handed to the client either.
#[test]
#[cfg(target_os = "linux")]
fn a_call_whose_record_cannot_be_written_does_not_reach_the_client() {
    let s = Scratch::new("proxy-audit-full");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "Read", "input": {"file_path": "notes.txt"}}]},
        {"text": "Cannot."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[audit]\npath = \"/dev/full\"\n[defer]\nrules = [\"NoDefer(^Read$)\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "read notes"})];
    let a = turn(&proxy, &tools(), &mut messages);
    assert!(calls(&a).is_empty(), "{a}");
    let refused = last_result(&upstream.turns()[1]);
    let text = refused["content"].as_str().unwrap_or_default();
    assert!(
        refused["is_error"] == true
            && text.starts_with("Read was not run:")
            && text.contains("No space left on device"),
        "{refused}"
    );
}

#[test]
fn a_tool_that_appears_mid_conversation_is_searchable_and_announced_without_changing_the_list() {
    let s = Scratch::new("proxy-new-tool");
    let script = json!({"steps": [
        {"text": "Hello."},
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["calendar event"]}}]},
        {"text": "Found it."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    turn(&proxy, &tools(), &mut messages);
    let mut more = tools();
    more.push(anthropic_tool(
        "mcp__cal__create_event",
        "Create a calendar event.",
        json!({"title": {"type": "string"}}),
        &["title"],
    ));
    more.reverse(); // and in another order
    messages.push(json!({"role": "user", "content": "add an event"}));
    turn(&proxy, &more, &mut messages);
    let turns = upstream.played(3);
    assert_eq!(
        turns[0]["body"]["tools"], turns[1]["body"]["tools"],
        "the frozen list is sent again"
    );
    let second = turns[1]["body"]["messages"].to_string();
    assert!(
        second.contains("new: mcp__cal__create_event"),
        "the change is announced: {second}"
    );
    let found = &turns[2]["tool_results"][0]["content"];
    assert!(
        found
            .as_str()
            .unwrap_or_default()
            .contains("mcp__cal__create_event"),
        "the new tool is searchable: {found}"
    );
    assert_prefix_kept(&upstream);
}

/// A deferred client tool whose schema is not valid JSON Schema is warned about once, however
/// many tool arrays carry it; a resident one goes to the provider as sent, which judges it.
#[test]
fn a_deferred_tool_with_a_broken_schema_is_warned_about_once() {
    let s = Scratch::new("proxy-schema");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "One."}, {"text": "Two."}]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let broken = json!({"type": "object", "properties": {"p": {"type": 42}}});
    let mut first = tools();
    first.push(
        json!({"name": "mcp__fs__odd", "description": "a wrong type",
                      "input_schema": broken}),
    );
    first.push(
        json!({"name": "Odd", "description": "resident, a wrong type",
                      "input_schema": broken, "defer_loading": false}),
    );
    first.push(json!({"name": "mcp__fs__bare", "description": "no schema at all"}));
    first.push(json!({"description": "no name at all", "input_schema": {"type": "object"}}));
    let mut second = first.clone();
    second.push(anthropic_tool(
        "mcp__fs__extra",
        "another tool, so another shelf",
        json!({}),
        &[],
    ));
    for list in [&first, &second] {
        let mut messages = vec![json!({"role": "user", "content": "hello"})];
        turn(&proxy, list, &mut messages);
    }
    let sent = &upstream.turns()[0]["body"]["tools"];
    assert!(
        sent.as_array()
            .expect("tools")
            .iter()
            .any(|t| t["name"] == "Odd"),
        "Odd is resident: {sent}"
    );
    let log = proxy.log();
    assert_eq!(
        log.matches("tool \"mcp__fs__odd\": its input schema is not a valid JSON Schema (at /properties/p/type")
            .count(),
        1,
        "{log}"
    );
    assert!(!log.contains("tool \"Odd\""), "{log}");
    for says in [
        "\"mcp__fs__bare\" has no input_schema",
        "] has no name; it is passed along as sent",
    ] {
        assert_eq!(log.matches(says).count(), 1, "{says}\n{log}");
    }
}

/// A request that fails gets its log line too, saying why: an error the upstream answered, and
/// an upstream nobody listens at.
#[test]
fn a_failed_request_is_logged_with_the_reason() {
    let s = Scratch::new("proxy-failed");
    let upstream = Upstream::start(&s, &json!({"steps": [{"status": 529}, {"status": 500}]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let body = json!({"model": "m", "max_tokens": 8, "tools": tools(),
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, _) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 529);
    // Two tools of one name cannot be rewritten: the request passes through, and fails there.
    // (Named tool_search, so that the scripted upstream plays its next step.)
    let t = anthropic_tool("tool_search", "the client's own", json!({}), &[]);
    let twice = json!({"model": "m", "max_tokens": 8, "tools": [t, t],
                       "messages": [{"role": "user", "content": "hi"}]});
    let (status, _) = post(&format!("{}/v1/messages", proxy.url), &twice, &HEADERS);
    assert_eq!(status, 500);
    let (status, _) = post(
        &format!("{}/v1/messages", proxy.url),
        &json!("not an object"),
        &HEADERS,
    );
    assert_eq!(status, 400);
    let log = proxy.log();
    for says in [
        format!(
            "failed: upstream {}/v1/messages answered 529 Overloaded\n",
            upstream.url()
        ),
        format!(
            "passing a request through failed: upstream {}/v1/messages answered 500 Internal Server Error",
            upstream.url()
        ),
        "failed: the request body must be a JSON object".to_owned(),
    ] {
        assert!(log.contains(&says), "{says}\n{log}");
    }
    assert_eq!(proxy.status()["totals"]["errors"], 3, "{}", proxy.status());
    let closed_port = closed_port();
    let s = Scratch::new("proxy-unreachable");
    let proxy = ProxyProc::start(&s, &format!("http://127.0.0.1:{closed_port}"), "", &[]);
    let (status, _) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 502);
    let log = proxy.log();
    assert!(
        log.contains(&format!(
            "failed: upstream http://127.0.0.1:{closed_port}/v1/messages"
        )) && log.contains("Connection refused"),
        "{log}"
    );
}

#[test]
fn requests_without_tools_and_other_endpoints_pass_through_byte_for_byte() {
    let s = Scratch::new("proxy-pass");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let body =
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "title?"}]});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(
        (status, answer["content"][0]["text"].as_str()),
        (200, Some("OK"))
    );
    let (status, count) = post(
        &format!("{}/v1/messages/count_tokens?beta=true", proxy.url),
        &body,
        &HEADERS,
    );
    assert_eq!(status, 200);
    assert!(count["input_tokens"].as_u64().is_some(), "{count}");
    let records: Vec<Value> = upstream
        .records()
        .into_iter()
        .filter(|r| r["kind"] == "request")
        .collect();
    let paths: Vec<&str> = records.iter().filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(
        paths,
        ["/v1/messages", "/v1/messages/count_tokens?beta=true"]
    );
    for r in &records {
        assert_eq!(r["body"], body, "passed as sent: {r}");
        assert_eq!(
            r["headers"]["anthropic-version"], "2023-06-01",
            "headers go along"
        );
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())",
            &format!("{}/v1/models", proxy.url),
        ])
        .output()
        .expect("python3");
    let models: Value = serde_json::from_slice(&out.stdout).expect("models JSON");
    assert_eq!(models["data"][0]["id"], "scripted-model");
    let status = proxy.status();
    assert_eq!(status["totals"]["passed"], 3, "{status}");
    assert_eq!(status["totals"]["rewritten"], 0);
}

#[test]
fn pre_call_hooks_rewrite_and_deny_calls_before_the_client_sees_them() {
    let s = Scratch::new("proxy-hooks");
    let hook = s.write(
        "hook.sh",
        r#"#!/bin/sh
event=$(cat)
case "$event" in
  *git_status*) echo "status is off limits here" >&2; exit 2 ;;
  *write_file*) echo '{"params": {"path": "sandbox/a", "content": "x"}}' ;;
esac
"#,
    );
    Command::new("chmod")
        .args(["+x", &hook])
        .status()
        .expect("chmod");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__fs__write_file", "mcp__git__git_status"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__git__git_status", "params": {"repo_path": "."}}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "a", "content": "x"}}}]},
        {"text": "Done."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = format!("[[hooks.pre_call]]\ncommand = {hook:?}\n");
    let proxy = ProxyProc::start(&s, &upstream.url(), &config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "write a"})];
    let a = turn(&proxy, &tools(), &mut messages);
    assert_eq!(
        calls(&a),
        [(
            "mcp__fs__write_file".to_owned(),
            json!({"path": "sandbox/a", "content": "x"})
        )],
        "the client runs the call as the hook rewrote it"
    );
    let turns = upstream.turns();
    let denied = last_result(&turns[2]);
    assert_eq!(denied["is_error"], true, "{denied}");
    assert!(
        denied["content"]
            .as_str()
            .unwrap_or_default()
            .contains("status is off limits here"),
        "the hook's reason reaches the model: {denied}"
    );
}

/// A tool the proxy passes along as sent (a type the client runs itself, a provider's server
/// tool) is still governed: a deny rule that names it takes it out of the list sent upstream.
#[test]
fn a_deny_rule_holds_on_tools_passed_along_as_sent() {
    let s = Scratch::new("proxy-typed");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "Done."}]}));
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[permissions]\ndeny = [\"^bash$\"]\n",
        &[],
    );
    let mut list = tools();
    list.push(json!({"type": "bash_20250124", "name": "bash"}));
    list.push(json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 3}));
    let mut messages = vec![json!({"role": "user", "content": "clean up"})];
    turn(&proxy, &list, &mut messages);
    let sent: Vec<String> = upstream.turns()[0]["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert!(!sent.contains(&"bash".to_owned()), "{sent:?}");
    assert!(sent.contains(&"web_search".to_owned()), "{sent:?}");
    let log = proxy.log();
    assert!(
        log.contains("the client's tool \"bash\" is not sent upstream: [permissions] deny[0]"),
        "{log}"
    );
}

/// A call of a tool passed along as sent meets the permission rules on its arguments: the
/// model is answered for the call a rule denies, and the client gets the one it allows.
#[test]
fn a_rule_on_arguments_holds_on_calls_of_tools_passed_along() {
    let s = Scratch::new("proxy-typed-args");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "bash", "input": {"command": "rm -rf /"}}]},
        {"tool_uses": [{"name": "bash", "input": {"command": "ls"}}]}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[permissions]\ndeny = [\"^bash(command=rm *)\"]\n",
        &[],
    );
    let mut list = tools();
    list.push(json!({"type": "bash_20250124", "name": "bash"}));
    let mut messages = vec![json!({"role": "user", "content": "clean up"})];
    let answer = turn(&proxy, &list, &mut messages);
    assert_eq!(
        calls(&answer),
        [("bash".to_owned(), json!({"command": "ls"}))],
        "the client gets only the allowed call"
    );
    let refused = last_result(&upstream.turns()[1]);
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        refused["content"]
            .as_str()
            .unwrap_or_default()
            .contains("deny[0]"),
        "the rule is named: {refused}"
    );
}

/// A `tool_choice` that forces a deferred tool forces `defer_execute` upstream, and
/// `defer_execute` runs only that tool this turn: the client gets the call it forced.
#[test]
fn a_forced_deferred_tool_is_the_only_one_defer_execute_runs() {
    let s = Scratch::new("proxy-forced");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "a", "content": "x"}}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "a"}}}]}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let body = json!({"model": "m", "max_tokens": 64, "tools": tools(),
                      "tool_choice": {"type": "tool", "name": "mcp__fs__read_file"},
                      "messages": [{"role": "user", "content": "read a"}]});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        calls(&answer),
        [("mcp__fs__read_file".to_owned(), json!({"path": "a"}))],
        "the client gets the tool it forced"
    );
    let turns = upstream.turns();
    assert_eq!(
        turns[0]["body"]["tool_choice"],
        json!({"type": "tool", "name": "defer_execute"})
    );
    let refused = last_result(&turns[1]);
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        refused["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with(
                "This turn's tool_choice allows defer_execute only with tool_name \"mcp__fs__read_file\""
            ),
        "{refused}"
    );
}

/// A forced deferred tool is shown to the model with the request, and loaded: the model's first
/// call of it reaches the client in one round, and the next request keeps the prefix.
#[test]
fn a_forced_deferred_tool_is_shown_and_its_first_call_goes_through() {
    let s = Scratch::new("proxy-forced-shown");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "a"}}}]},
        {"text": "Read."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut messages = vec![json!({"role": "user", "content": "read a"})];
    let body = json!({"model": "m", "max_tokens": 64, "tools": tools(),
                      "tool_choice": {"type": "tool", "name": "mcp__fs__read_file"},
                      "messages": messages});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        calls(&answer),
        [("mcp__fs__read_file".to_owned(), json!({"path": "a"}))],
        "the first call is the client's: {answer}"
    );
    let first = upstream.turns()[0]["body"]["messages"].to_string();
    assert!(
        first.contains("tool_choice asks for a call of \\\"mcp__fs__read_file\\\" now")
            && first.contains("Read the complete contents of a file as text."),
        "the definition reaches the model: {first}"
    );
    let id = answer["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "tool_use"))
        .map(|b| b["id"].clone())
        .expect("a call");
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": id, "content": "data"}]}));
    let body = json!({"model": "m", "max_tokens": 64, "tools": tools(), "messages": messages});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}");
    upstream.played(2);
    assert_prefix_kept(&upstream);
}

/// The Responses API's string `input` is the user's message: it reaches the model, and two
/// conversations that start with different strings are two sessions.
#[test]
fn a_responses_string_input_is_the_first_message() {
    let s = Scratch::new("proxy-responses-string");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [{"text": "Sunny."}, {"text": "Rainy."}]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let tools = responses_tools();
    let url = format!("{}/v1/responses", proxy.url);
    for question in ["Weather in Paris?", "Weather in Rome?"] {
        let (status, answer) = post(
            &url,
            &json!({"model": "m", "tools": tools, "input": question}),
            &[("authorization", "Bearer k")],
        );
        assert_eq!(status, 200, "{answer}");
    }
    let turns = upstream.turns();
    for (turn, question) in turns.iter().zip(["Weather in Paris?", "Weather in Rome?"]) {
        assert_eq!(
            turn["body"]["input"],
            json!([{"role": "user", "content": question}]),
            "{turn}"
        );
    }
    let log = proxy.log();
    let sessions: std::collections::BTreeSet<&str> = log
        .lines()
        .filter_map(|l| l.split("session=").nth(1))
        .filter_map(|rest| rest.split(' ').next())
        .collect();
    assert_eq!(sessions.len(), 2, "{log}");
}

#[test]
fn a_responses_conversation_chained_by_id_continues_from_the_last_upstream_round() {
    let s = Scratch::new("proxy-responses-chain");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "x"}}}]},
        {"text": "Read."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let tools = responses_tools();
    let url = format!("{}/v1/responses", proxy.url);
    let (status, first) = post(
        &url,
        &json!({"model": "m", "tools": tools, "input": [{"role": "user", "content": "read x"}]}),
        &[("authorization", "Bearer k")],
    );
    assert_eq!(status, 200, "{first}");
    let call = first["output"]
        .as_array()
        .and_then(|o| o.iter().find(|i| i["type"] == "function_call"))
        .cloned()
        .unwrap_or_else(|| panic!("a function call: {first}"));
    assert_eq!(call["name"], "mcp__fs__read_file");
    let (status, second) = post(
        &url,
        &json!({"model": "m", "tools": tools, "previous_response_id": first["id"],
                "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "data"}]}),
        &[("authorization", "Bearer k")],
    );
    assert_eq!(status, 200, "{second}");
    let turns = upstream.played(3);
    let last_round_id = upstream.answers()[1]["seq"].clone();
    assert_ne!(
        turns[2]["body"]["previous_response_id"], first["id"],
        "the upstream continues from its own last response, not the one the client was shown"
    );
    assert!(
        turns[2]["body"]["previous_response_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("resp_")),
        "{} (round {last_round_id})",
        turns[2]["body"]
    );
    assert_eq!(turns[2]["tool_results"][0]["id"], call["call_id"]);
    // A chained request sends only its new items: that is no break of the prefix.
    let status = proxy.status();
    assert_eq!(status["totals"]["prefix_breaks"], 0, "{status}");
}

/// `GET url` with headers; returns the status.
fn get_status(url: &str, headers: &[(&str, &str)]) -> u16 {
    http("GET", url, headers).0
}

/// `METHOD url` with headers (urllib sends them as given, `Host` included); returns the status
/// and the `Set-Cookie` header, if any.
fn http(method: &str, url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let hs: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
        .collect();
    let out = Command::new("python3")
        .args([
            "-c",
            "import json,sys,urllib.request,urllib.error\n\
r = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]), method=sys.argv[3])\n\
try:\n    a = urllib.request.urlopen(r, timeout=30)\n\
except urllib.error.HTTPError as e:\n    a = e\n\
print(json.dumps([a.status if hasattr(a, 'status') else a.code, a.headers.get('Set-Cookie') or '']))",
            url,
            &Value::Object(hs).to_string(),
            method,
        ])
        .output()
        .expect("python3");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (
        v[0].as_u64().expect("status") as u16,
        v[1].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn the_dashboard_needs_a_token_off_loopback_and_is_open_on_it() {
    let s = Scratch::new("proxy-ui-token");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let local = ProxyProc::start(&s, &upstream.url(), "", &[]);
    assert_eq!(get_status(&format!("{}/ui", local.url), &[]), 200);
    drop(local);
    // Its URL's Host, 0.0.0.0, is not loopback: it is listed.
    let listed = "[http]\nallowed_hosts = [\"0.0.0.0\"]\n";
    let open = ProxyProc::start(&s, &upstream.url(), listed, &["--listen", "0.0.0.0:0"]);
    assert_eq!(
        get_status(&format!("{}/ui", open.url), &[]),
        403,
        "no token configured: not served"
    );
    drop(open);
    let guarded = ProxyProc::start(
        &s,
        &upstream.url(),
        &format!("{listed}[ui]\ntoken = \"sesame\"\n"),
        &["--listen", "0.0.0.0:0"],
    );
    let ui = format!("{}/ui", guarded.url);
    assert_eq!(get_status(&ui, &[]), 401);
    assert_eq!(get_status(&ui, &[("authorization", "Bearer wrong")]), 401);
    assert_eq!(get_status(&ui, &[("authorization", "Bearer sesame")]), 200);
    // One visit with the token in the URL opens the pages, links and live updates that follow,
    // which a browser cannot give a bearer header.
    let (status, cookie) = http("GET", &format!("{ui}?token=sesame"), &[]);
    assert_eq!(status, 200);
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().expect("name=value");
    assert_eq!(
        get_status(&format!("{ui}/catalog"), &[("cookie", pair)]),
        200
    );
    assert_eq!(
        get_status(
            &format!("{ui}/catalog"),
            &[("cookie", "toolshelf_ui_token=wrong")]
        ),
        401
    );
    // The status and the metrics name sessions and tools: behind the same token here, with or
    // without a trailing slash.
    for page in [
        "toolshelf/status",
        "metrics",
        "toolshelf/status/",
        "metrics/",
    ] {
        let url = format!("{}/{page}", guarded.url);
        assert_eq!(get_status(&url, &[]), 401, "{page}");
        assert_eq!(
            get_status(&url, &[("authorization", "Bearer sesame")]),
            200,
            "{page}"
        );
    }
    // The API itself is not behind the dashboard's token.
    assert_eq!(get_status(&format!("{}/v1/models", guarded.url), &[]), 200);
    let out = Command::new("curl")
        .args(["-sS", "-H", "authorization: Bearer sesame"])
        .arg(format!("{}/toolshelf/status", guarded.url))
        .output()
        .expect("curl");
    let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let passed = status["totals"]["passed"].clone();
    drop(guarded);

    // The proxy's own pages are read with GET (and HEAD, as HTTP asks of whatever answers GET:
    // uptime probes use it) only, never forwarded upstream as API calls, and only for a loopback
    // Host (a page of another site reaching the port by DNS rebinding is refused).
    let local = ProxyProc::start(&s, &upstream.url(), "", &[]);
    for page in ["ui", "toolshelf/status", "metrics"] {
        assert_eq!(
            http("HEAD", &format!("{}/{page}", local.url), &[]).0,
            200,
            "HEAD {page}"
        );
    }
    for (method, page) in [
        ("POST", "ui/catalog"),
        ("DELETE", "toolshelf/status"),
        ("PUT", "metrics"),
        ("POST", "toolshelf/status/"),
        ("POST", "metrics/"),
    ] {
        assert_eq!(
            http(method, &format!("{}/{page}", local.url), &[]).0,
            405,
            "{method} {page}"
        );
    }
    for page in ["ui", "toolshelf/status", "metrics"] {
        let url = format!("{}/{page}", local.url);
        assert_eq!(
            get_status(&url, &[("host", "attacker.example")]),
            403,
            "{page}"
        );
        assert_eq!(get_status(&url, &[("host", "localhost:1")]), 200, "{page}");
    }
    assert_eq!(
        local.status()["totals"]["passed"],
        0,
        "nothing was forwarded"
    );
    assert_eq!(passed, 1, "the /v1/models request only");
}

/// The status and the metrics, reached with the token in the URL and naming sessions and tools,
/// are never stored by a browser or a cache on the way.
#[test]
fn the_status_and_the_metrics_are_never_stored() {
    let s = Scratch::new("proxy-status-no-store");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[http]\nallowed_hosts = [\"0.0.0.0\"]\n[ui]\ntoken = \"sesame\"\n",
        &["--listen", "0.0.0.0:0"],
    );
    for page in ["toolshelf/status", "metrics"] {
        let out = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-D", "-"])
            .arg(format!("{}/{page}?token=sesame", proxy.url))
            .output()
            .expect("curl");
        let head = String::from_utf8_lossy(&out.stdout);
        assert!(head.starts_with("HTTP/1.1 200"), "{page}: {head}");
        let cache: Vec<&str> = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.eq_ignore_ascii_case("cache-control"))
            .map(|(_, v)| v.trim())
            .collect();
        assert_eq!(cache, ["no-store"], "{page}: {head}");
    }
}

/// A session key may hold any header text (spaces, `/`, `?`, `#`, a `/timeline` of its own): the
/// overview links it percent-encoded and the session page finds its turns.
#[test]
fn a_session_page_is_found_whatever_its_key_holds() {
    let s = Scratch::new("proxy-ui-keys");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "Hello."}]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let name = "a b/c?d#e%f/timeline";
    let mut headers = HEADERS.to_vec();
    headers.push(("x-toolshelf-session", name));
    let body = json!({"model": "m", "max_tokens": 64, "system": "You help.", "tools": tools(),
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}");
    let out = Command::new("curl")
        .args(["-sS", &format!("{}/ui", proxy.url)])
        .output()
        .expect("curl");
    let overview = String::from_utf8_lossy(&out.stdout);
    let href = overview
        .split("href=\"")
        .filter_map(|r| r.split('"').next())
        .find(|h| h.starts_with("/ui/sessions/"))
        .unwrap_or_else(|| panic!("a session link: {overview}"))
        .to_owned();
    assert!(
        !href["/ui/sessions/".len()..].contains(['/', ' ', '?', '#']),
        "{href}"
    );
    let out = Command::new("curl")
        .args(["-sS", &format!("{}{href}/timeline", proxy.url)])
        .output()
        .expect("curl");
    let timeline = String::from_utf8_lossy(&out.stdout);
    assert!(
        timeline.contains("<tr class=\"turn\"><td>1</td>"),
        "{href}: {timeline}"
    );
}

/// One Messages request with `tools` and `messages` from a client calling itself `agent`
/// (its User-Agent); the answer, which must be a 200.
fn send_as(proxy: &ProxyProc, tools: &[Value], messages: &[Value], agent: &str) -> Value {
    let body = json!({"model": "m", "max_tokens": 64, "system": "You help.", "tools": tools,
                      "messages": messages});
    let mut headers = HEADERS.to_vec();
    headers.push(("user-agent", agent));
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    answer
}

#[test]
fn description_templates_render_once_per_conversation_for_its_client() {
    let s = Scratch::new("proxy-templates");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"text": "One."},
            // A deferred tool's template shows in the definition a refusal attaches and in its
            // search hit, rendered for this session.
            {"tool_uses": [{"name": "defer_execute",
                            "input": {"tool_name": "mcp__git__git_status", "params": {}}}]},
            {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__git__git_status"]}}]},
            {"text": "Two."}
        ]}),
    );
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[defer]\nrules = [\"NoDefer(^Read$)\"]\n\
         [template]\nworkspace = \"/src/shop\"\n\
         [tools.Read]\ndescription_template = \"part(pkg.description, 'Client:', session.client, 'in', session.workspace)\"\n\
         [tools.mcp__git__git_status]\ndescription_template = \"part(pkg.description, 'For', session.client)\"\n",
        &[],
    );
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    let send = |messages: &Vec<Value>, agent: &str| send_as(&proxy, &tools(), messages, agent);
    let answer = send(&messages, "e2e-agent/1.0");
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": "again"}));
    // A later request of the same conversation reuses the frozen list, whatever it says now.
    send(&messages, "another-agent/2.0");
    let turns = upstream.played(4);
    let refused = turns[2]["tool_results"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        refused.contains("schema had not been loaded")
            && refused.contains(
                r#""description":"Show the working tree status of a repository. For e2e-agent/1.0""#
            ),
        "{refused}"
    );
    let hit = turns[3]["tool_results"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        hit.contains("Show the working tree status of a repository. For e2e-agent/1.0"),
        "{hit}"
    );
    let read = turns[0]["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "Read")
        .expect("Read is resident")
        .clone();
    assert_eq!(
        read["description"],
        "Read a file from the local filesystem. Client: e2e-agent/1.0 in /src/shop"
    );
    assert_eq!(turns[0]["body"]["tools"], turns[1]["body"]["tools"]);
    assert_prefix_kept(&upstream);
}

/// A turn that ends in text keeps the search rounds the proxy answered in it, and two turns with
/// the same reply keep their own: each request's conversation begins with the previous one's,
/// and no call id is sent twice. In Chat Completions the client gets one message whose texts the
/// proxy joined with a blank line; in both formats "Which city?" comes twice, once plain and once
/// after a search.
#[test]
fn turns_ending_in_text_keep_their_own_search_rounds() {
    for api in ["anthropic", "chat"] {
        for opening in [None, Some("Let me look.")] {
            let what = format!("{api}, opening {opening:?}");
            let s = Scratch::new(&format!("proxy-text-turns-{api}-{}", opening.is_some()));
            let mut search = json!({"tool_uses": [{"name": "tool_search",
                                                   "input": {"queries": ["read file"]}}]});
            if let Some(t) = opening {
                search["text"] = t.into();
            }
            let upstream = Upstream::start(
                &s,
                &json!({"steps": [{"text": "Which city?"}, search, {"text": "Which city?"},
                                  {"text": "Noted."}]}),
            );
            let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
            let (path, tools): (&str, Vec<Value>) = match api {
                "anthropic" => ("/v1/messages", tools()),
                _ => (
                    "/v1/chat/completions",
                    tools()
                        .iter()
                        .map(|t| {
                            json!({"type": "function", "function": {
                            "name": t["name"], "description": t["description"],
                            "parameters": t["input_schema"]}})
                        })
                        .collect(),
                ),
            };
            let mut messages = vec![json!({"role": "user", "content": "weather?"})];
            for next in ["the weather, please", "Paris"] {
                let body = json!({"model": "m", "max_tokens": 64, "tools": tools,
                                  "messages": messages});
                let (status, answer) = post(&format!("{}{path}", proxy.url), &body, &HEADERS);
                assert_eq!(status, 200, "{what}: {answer}\nproxy log:\n{}", proxy.log());
                let reply = match api {
                    "anthropic" => json!({"role": "assistant", "content": answer["content"]}),
                    _ => json!({"role": "assistant",
                                "content": answer["choices"][0]["message"]["content"]}),
                };
                messages.push(reply);
                messages.push(json!({"role": "user", "content": next}));
            }
            let body = json!({"model": "m", "max_tokens": 64, "tools": tools,
                              "messages": messages});
            let (status, answer) = post(&format!("{}{path}", proxy.url), &body, &HEADERS);
            assert_eq!(status, 200, "{what}: {answer}");
            let turns = upstream.played(4);
            assert_prefix_kept(&upstream);
            let last = turns[3]["body"]["messages"].to_string();
            let searches = last.matches("\"name\":\"tool_search\"").count();
            assert_eq!(searches, 1, "{what}: the search is put back once: {last}");
        }
    }
}

#[test]
fn a_tool_the_client_adds_mid_conversation_is_found_with_its_template_rendered_for_the_session() {
    let s = Scratch::new("proxy-late-template");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"text": "One."},
            {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__jira__create_issue"]}}]},
            {"text": "Two."}
        ]}),
    );
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[tools.mcp__jira__create_issue]\n\
         description_template = \"part(pkg.description, 'Filed for', session.client)\"\n",
        &[],
    );
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    let send = |tools: &Vec<Value>, messages: &Vec<Value>, agent: &str| {
        send_as(&proxy, tools, messages, agent)
    };
    let answer = send(&tools(), &messages, "e2e-agent/1.0");
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": "file a bug"}));
    let mut more = tools();
    more.push(anthropic_tool(
        "mcp__jira__create_issue",
        "Create an issue in a Jira project.",
        json!({"summary": {"type": "string"}}),
        &["summary"],
    ));
    // The session's values are its first request's, whatever this one says of its client.
    send(&more, &messages, "another-agent/2.0");
    let turns = upstream.played(3);
    let hit = turns[2]["tool_results"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        hit.contains("Create an issue in a Jira project. Filed for e2e-agent/1.0"),
        "{hit}\nproxy log:\n{}",
        proxy.log()
    );
    assert_eq!(turns[0]["body"]["tools"], turns[1]["body"]["tools"]);
    assert_prefix_kept(&upstream);
}

/// Every route, the API's included, meets the listener's Host and Origin checks: a page of
/// another site that reaches the port by DNS rebinding (its Host and Origin are its own name)
/// cannot drive the model, which would run script tools in the proxy. Loopback values pass, and
/// so do those `[http]` lists; a refused API request gets its API's error shape.
#[test]
fn api_routes_accept_only_loopback_and_listed_hosts_and_origins() {
    let s = Scratch::new("proxy-hosts");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let port = proxy.url.rsplit(':').next().expect("port").to_owned();
    let foreign = format!("evil.example:{port}");
    let origin = format!("http://{foreign}");
    let title = json!({"model": "m", "max_tokens": 8,
                       "messages": [{"role": "user", "content": "title?"}]});
    let rewritten = json!({"model": "m", "max_tokens": 8, "tools": tools(),
                           "messages": [{"role": "user", "content": "hi"}]});
    fn with<'a>(extra: &[(&'static str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut h: Vec<(&str, &str)> = HEADERS.to_vec();
        h.extend(extra.iter().copied());
        h
    }
    let says_host = format!(
        "Host \"{foreign}\" is not allowed; toolshelf accepts loopback hosts and those in [http] allowed_hosts"
    );
    let (status, body) = post(
        &format!("{}/v1/messages", proxy.url),
        &rewritten,
        &with(&[("host", &foreign)]),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "permission_error", "message": says_host}})
    );
    let (status, body) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        &[
            ("authorization", "Bearer k"),
            ("host", &foreign),
            ("origin", &origin),
        ],
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "permission_error", "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "Origin \"{origin}\" is not allowed; toolshelf accepts loopback origins and those in [http] allowed_origins"
        )
    );
    // A foreign origin alone, and a route passed through, are refused alike.
    let (status, body) = post(
        &format!("{}/v1/responses", proxy.url),
        &json!({"model": "m", "input": "hi"}),
        &[("origin", "https://evil.example")],
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "permission_error", "{body}");
    assert_eq!(
        get_status(&format!("{}/v1/models", proxy.url), &[("host", &foreign)]),
        403
    );
    assert!(
        upstream.records().is_empty(),
        "nothing refused went upstream: {:?}",
        upstream.records()
    );
    assert!(
        proxy
            .log()
            .contains(&format!("refused POST /v1/messages: {says_host}")),
        "{}",
        proxy.log()
    );
    // Loopback names and origins pass.
    for extra in [
        [
            ("host", format!("localhost:{port}")),
            ("origin", "http://localhost:5173".to_owned()),
        ],
        [
            ("host", format!("[::1]:{port}")),
            ("origin", "https://127.0.0.1".to_owned()),
        ],
    ] {
        let extra: Vec<(&'static str, &str)> =
            extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, body) = post(&format!("{}/v1/messages", proxy.url), &title, &with(&extra));
        assert_eq!(status, 200, "{extra:?}: {body}");
    }
    drop(proxy);

    // Listed hosts and origins pass too.
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[http]\nallowed_hosts = [\"evil.example\"]\nallowed_origins = [\"https://app.example.com\"]\n",
        &[],
    );
    let port = proxy.url.rsplit(':').next().expect("port").to_owned();
    let listed = format!("evil.example:{port}");
    let (status, body) = post(
        &format!("{}/v1/messages", proxy.url),
        &title,
        &with(&[("host", &listed), ("origin", "https://app.example.com")]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], "OK");
    let (status, body) = post(
        &format!("{}/v1/messages", proxy.url),
        &title,
        &with(&[("host", &listed), ("origin", "https://other.example.com")]),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        get_status(
            &format!("{}/toolshelf/status", proxy.url),
            &[("host", &listed)]
        ),
        200
    );
}

/// A `user:password@` in an upstream URL (sent as basic authentication) is shown as `…@`: in the
/// start-up line, the status, the dashboard, the log and the errors clients receive.
#[test]
fn an_upstream_password_is_never_shown() {
    let s = Scratch::new("proxy-userinfo");
    let port = closed_port();
    let secret = "sk-UPSTREAMSECRET123";
    let proxy = ProxyProc::start(
        &s,
        &format!("http://proxyuser:{secret}@127.0.0.1:{port}"),
        "",
        &[],
    );
    let shown = format!("http://…@127.0.0.1:{port}");
    let rewritten = json!({"model": "m", "max_tokens": 8, "tools": tools(),
                           "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post(&format!("{}/v1/messages", proxy.url), &rewritten, &HEADERS);
    assert_eq!(status, 502, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("upstream {shown}/v1/messages: ")),
        "{body}"
    );
    let (status, body) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        &[("authorization", "Bearer k")],
    );
    assert_eq!(status, 502, "{body}");
    let passed = json!({"model": "m", "max_tokens": 8,
                        "messages": [{"role": "user", "content": "title?"}]});
    let (status, passed) = post(&format!("{}/v1/messages", proxy.url), &passed, &HEADERS);
    assert_eq!(status, 502, "{passed}");
    let status_doc = proxy.status();
    assert_eq!(status_doc["upstreams"]["anthropic"], shown.as_str());
    let ui = Command::new("curl")
        .args(["-sS", &format!("{}/ui", proxy.url)])
        .output()
        .expect("curl");
    let ui = String::from_utf8_lossy(&ui.stdout).into_owned();
    assert!(ui.contains(&format!("127.0.0.1:{port}")), "{ui}");
    let log = proxy.log();
    assert!(
        log.contains(&format!("(anthropic → {shown}, openai → {shown})")),
        "{log}"
    );
    assert!(
        log.contains(&format!("failed: upstream {shown}/v1/messages")),
        "{log}"
    );
    for (what, text) in [
        ("the first error", message.to_owned()),
        ("the second error", body.to_string()),
        ("the passed-through error", passed.to_string()),
        ("the status", status_doc.to_string()),
        ("the dashboard", ui),
        ("the log", log),
    ] {
        assert!(!text.contains(secret), "{what}: {text}");
    }
}

/// The live prefix check compares what `toolshelf prefix-check` compares: a request that changes
/// the model, or on Anthropic `tool_choice` or `thinking`, cannot use the previous request's
/// cache, whatever its messages.
#[test]
fn a_change_of_model_or_cache_setting_breaks_the_prefix() {
    let s = Scratch::new("proxy-prefix-settings");
    let steps: Vec<Value> = (0..5)
        .map(|k| json!({"text": format!("answer {k}")}))
        .collect();
    let upstream = Upstream::start(&s, &json!({ "steps": steps }));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let url = format!("{}/v1/messages", proxy.url);
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    let mut breaks = Vec::new();
    for (model, extra) in [
        ("m", json!({})),
        ("m", json!({})),
        ("other-model", json!({})),
        ("other-model", json!({"tool_choice": {"type": "any"}})),
        (
            "other-model",
            json!({"tool_choice": {"type": "any"}, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
        ),
    ] {
        let mut body = json!({"model": model, "max_tokens": 64, "system": "You help.",
                              "tools": tools(), "messages": messages});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let (status, answer) = post(&url, &body, &HEADERS);
        assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
        messages.push(json!({"role": "assistant", "content": answer["content"]}));
        messages.push(json!({"role": "user", "content": "go on"}));
        breaks.push(proxy.status()["totals"]["prefix_breaks"].clone());
    }
    assert_eq!(breaks, [0, 0, 1, 2, 3], "{}", proxy.log());
}

const BEARER: [(&str, &str); 1] = [("authorization", "Bearer k")];

/// `GET url`; returns the status and the body.
fn get(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("a status line");
    (status.trim().parse().expect("a status"), body.to_owned())
}

/// A request for several choices cannot be served by one conversation's tool rounds: it is
/// refused, naming `n`, streamed or not, and nothing goes upstream. One without tools, which
/// the proxy passes along as sent, still goes.
#[test]
fn a_chat_request_for_several_choices_is_refused_naming_n() {
    let s = Scratch::new("proxy-chat-n");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "one"}]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let url = format!("{}/v1/chat/completions", proxy.url);
    for stream in [false, true] {
        let body = json!({"model": "m", "n": 2, "stream": stream, "tools": chat_tools(),
                          "messages": [{"role": "user", "content": "hi"}]});
        let (status, answer) = post(&url, &body, &BEARER);
        assert_eq!(status, 400, "stream {stream}: {answer}");
        assert_eq!(answer["error"]["param"], "n", "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("\"n\": 2 asks for 2 choices") && message.contains("one choice"),
            "{message}"
        );
    }
    assert!(
        upstream.records().is_empty(),
        "nothing went upstream: {:?}",
        upstream.records()
    );
    assert_eq!(proxy.status()["totals"]["errors"], 2);
    let body = json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "title?"}]});
    let (status, answer) = post(&url, &body, &BEARER);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(upstream.records()[0]["body"]["n"], 2);
    let body = json!({"model": "m", "n": 1, "tools": chat_tools(),
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = post(&url, &body, &BEARER);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "one");
}

/// Some OpenAI-compatible servers stream tool call pieces without an `index`: two calls of one
/// round stay two calls, each answered.
#[test]
fn streamed_chat_calls_without_an_index_stay_apart() {
    let s = Scratch::new("proxy-chat-no-index");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"no_index": true, "tool_uses": [
                {"name": "tool_search", "input": {"queries": ["read file"]}},
                {"name": "tool_search", "input": {"queries": ["git status"]}}]},
            {"no_index": true, "text": "Found both."}
        ]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let body = json!({"model": "m", "stream": true, "tools": chat_tools(),
                      "messages": [{"role": "user", "content": "find them"}]});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &BEARER,
    );
    assert_eq!(status, 200, "{answer}");
    let sse = answer.as_str().unwrap_or_default();
    assert!(sse.contains("Found both."), "{sse}\n{}", proxy.log());
    assert!(
        !sse.contains("tool_calls"),
        "no call reaches the client: {sse}"
    );
    let turns = upstream.played(2);
    let ids: Vec<Value> = upstream.answers()[0]["tool_uses"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|u| u["id"].clone())
        .collect();
    let answered: Vec<Value> = turns[1]["tool_results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(answered, ids, "each search answered under its own id");
}

/// Two requests of one session in flight at once: the second write merges the first's, and the
/// status shows the merged figures, not those of one request.
#[test]
fn the_status_shows_a_shared_session_as_stored_after_a_merge() {
    let s = Scratch::new("proxy-merged-figures");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [{"text": "A", "await_main": 2}, {"text": "B", "await_main": 2}]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let url = format!("{}/v1/messages", proxy.url);
    std::thread::scope(|scope| {
        for k in 0..2 {
            let url = &url;
            scope.spawn(move || {
                let mut headers = HEADERS.to_vec();
                headers.push(("x-toolshelf-session", "shared"));
                let body = json!({"model": "m", "max_tokens": 64, "tools": tools(),
                                  "messages": [{"role": "user", "content": format!("conversation {k}")}]});
                let (status, answer) = post(url, &body, &headers);
                assert_eq!(status, 200, "{answer}");
            });
        }
    });
    let status = proxy.status();
    assert_eq!(status["totals"]["store_conflicts"], 1, "{status}");
    let session = status["recent_sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["key"] == "h:shared"))
        .unwrap_or_else(|| panic!("the session is listed: {status}"));
    assert_eq!(session["figures"]["requests"], 2, "{session}");
    assert_eq!(session["figures"]["rounds"], 2, "{session}");
}

/// Every counter has a sample from the first scrape, before anything moved it.
#[test]
fn every_counter_has_a_sample_from_the_start() {
    let s = Scratch::new("proxy-metrics-zero");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let (status, text) = get(&format!("{}/metrics", proxy.url));
    assert_eq!(status, 200, "{text}");
    for sample in [
        "toolshelf_proxy_requests_total 0",
        "toolshelf_proxy_requests_rewritten_total 0",
        "toolshelf_proxy_requests_passed_total 0",
        "toolshelf_proxy_request_errors_total 0",
        "toolshelf_proxy_upstream_rounds_total 0",
        "toolshelf_proxy_tool_tokens_saved_total 0",
        "toolshelf_proxy_prefix_breaks_total 0",
        "toolshelf_proxy_store_errors_total 0",
        "toolshelf_proxy_store_conflicts_total 0",
        "toolshelf_proxy_upstream_tokens_total{kind=\"input\"} 0",
        "toolshelf_proxy_upstream_tokens_total{kind=\"cache_creation\"} 0",
        "toolshelf_proxy_calls_total{outcome=\"forwarded\"} 0",
        "toolshelf_proxy_calls_total{outcome=\"refused\"} 0",
        "toolshelf_proxy_calls_total{outcome=\"ran\"} 0",
        "toolshelf_proxy_refused_calls_total{reason=\"not_loaded\"} 0",
        "toolshelf_proxy_refused_calls_total{reason=\"denied\"} 0",
        "toolshelf_proxy_searches_total{outcome=\"ok\"} 0",
        "toolshelf_proxy_searches_total{outcome=\"no_match\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == sample),
            "{sample} not in:\n{text}"
        );
    }
}

/// The proxy's own paths are answered by the proxy with or without a trailing slash, and however
/// the path spells them, and one it does not have is a 404 of its own: none is forwarded
/// upstream with the client's headers.
#[test]
fn the_proxys_own_paths_are_never_forwarded() {
    let s = Scratch::new("proxy-own-paths");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let (status, body) = get(&format!("{}/toolshelf/status/", proxy.url));
    assert_eq!(status, 200, "{body}");
    let parsed: Value = serde_json::from_str(&body).expect("status JSON");
    assert!(parsed["totals"].is_object(), "{body}");
    let (status, body) = get(&format!("{}/metrics/", proxy.url));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("# TYPE toolshelf_proxy_requests_total counter"),
        "{body}"
    );
    for path in [
        "/toolshelf",
        "/toolshelf/",
        "/toolshelf/nothing",
        "/metrics/x",
    ] {
        let (status, body) = get(&format!("{}{path}", proxy.url));
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("not forwarded upstream"), "{path}: {body}");
    }
    // However the path spells them: repeated slashes, dot segments, percent-escapes (sent as
    // written, which curl does with --path-as-is).
    let as_is = |path: &str| {
        let out = Command::new("curl")
            .args(["-sS", "--path-as-is", "-w", "\n%{http_code}"])
            .arg(format!("{}{path}", proxy.url))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').expect("a status line");
        (
            status.trim().parse::<u16>().expect("a status"),
            body.to_owned(),
        )
    };
    for (path, says) in [
        ("//toolshelf/status", "\"totals\""),
        ("/v1/../toolshelf/status", "\"totals\""),
        ("/toolshelf%2Fstatus", "\"totals\""),
        ("//ui", "<html"),
        ("/v1/../ui", "<html"),
        ("/ui%2Fcatalog", "<html"),
        ("//metrics", "toolshelf_proxy_requests_total"),
        ("/v1/../metrics", "toolshelf_proxy_requests_total"),
        ("/metrics%2F", "toolshelf_proxy_requests_total"),
    ] {
        let (status, body) = as_is(path);
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    for path in [
        "//toolshelf/nothing",
        "/v1/../toolshelf/nothing",
        "/toolshelf%2Fnothing",
        "//metrics/x",
        "/v1/%2e%2e/metrics/x",
        "/metrics%2Fx",
    ] {
        let (status, body) = as_is(path);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("not forwarded upstream"), "{path}: {body}");
    }
    for path in ["//ui/nothing", "/v1/../ui/nothing", "/ui%2Fnothing"] {
        let (status, body) = as_is(path);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("no such dashboard page"), "{path}: {body}");
    }
    assert!(
        upstream.records().is_empty(),
        "nothing was forwarded: {:?}",
        upstream.records()
    );
    assert_eq!(proxy.status()["totals"]["passed"], 0);
}

/// An upstream flag that cannot be one says which client paths are appended to it: those of the
/// flag's API.
#[test]
fn a_bad_upstream_flag_names_the_paths_of_its_api() {
    for (flag, paths, other) in [
        ("--anthropic-upstream", "(/v1/messages)", "/v1/chat"),
        (
            "--openai-upstream",
            "(/v1/chat/completions or /v1/responses)",
            "/v1/messages",
        ),
    ] {
        for url in ["http://127.0.0.1:9?x=1", "http://127.0.0.1:9/v1"] {
            let out = Command::new(common::TOOLSHELF)
                .args(["proxy", "--listen", "127.0.0.1:0", flag, url])
                .output()
                .expect("toolshelf");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{flag} {url}: {err}");
            assert!(
                err.contains(&format!("the client's path {paths} is appended to it"))
                    && !err.contains(other),
                "{flag} {url}: {err}"
            );
        }
    }
}

/// A session header may be long (its file name stays within what a file system takes, and the
/// log shows it cut) or any UTF-8 text (it names the session as it is); one that is not UTF-8 is
/// refused rather than ignored.
#[test]
fn any_session_name_names_its_session() {
    let s = Scratch::new("proxy-session-names");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[proxy]\npersist_sessions = true\n",
        &[],
    );
    let url = format!("{}/v1/messages", proxy.url);
    let send = |name: &str| {
        let mut headers = HEADERS.to_vec();
        headers.push(("x-toolshelf-session", name));
        let body = json!({"model": "m", "max_tokens": 64, "tools": tools(),
                          "messages": [{"role": "user", "content": "hi"}]});
        post(&url, &body, &headers)
    };
    let long = "a/".repeat(3000);
    for _ in 0..2 {
        let (status, answer) = send(&long);
        assert_eq!(status, 200, "{answer}");
    }
    // urllib sends a header's characters as Latin-1 bytes: these are the UTF-8 of "ünïcödé".
    let utf8: String = "ünïcödé".bytes().map(char::from).collect();
    let (status, answer) = send(&utf8);
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = send("\u{ff}bad");
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("x-toolshelf-session header is not UTF-8"),
        "{message}"
    );

    let log = proxy.log();
    assert!(!log.contains("cannot write session file"), "{log}");
    assert!(
        log.lines().all(|l| l.len() < 1000),
        "a long key is cut in the log:\n{log}"
    );
    let status = proxy.status();
    let keys: Vec<&str> = status["recent_sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|s| s["key"].as_str())
        .collect();
    assert!(keys.contains(&"h:ünïcödé"), "{keys:?}");
    let long_shown = keys
        .iter()
        .find(|k| k.starts_with("h:a/a/"))
        .unwrap_or_else(|| panic!("{keys:?}"));
    assert!(long_shown.chars().count() <= 64, "{long_shown}");
    assert_eq!(keys, ["h:ünïcödé", long_shown], "the most recent first");
    let requests = status["recent_sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["key"] == *long_shown))
        .map(|s| s["figures"]["requests"].clone());
    assert_eq!(requests, Some(json!(2)), "one session, two requests");
    let dir = std::path::Path::new(&s.path("cache")).join("toolshelf/proxy-sessions");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.len() <= 200), "{names:?}");
}

/// A session key's control characters, a tab among them, are escaped where the key is shown:
/// the log line and the status.
#[test]
fn a_session_keys_control_characters_are_shown_escaped() {
    let s = Scratch::new("proxy-session-tab");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut headers = HEADERS.to_vec();
    headers.push(("x-toolshelf-session", "tab\there"));
    let body = json!({"model": "m", "max_tokens": 64, "tools": tools(),
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}");
    let log = proxy.log();
    assert!(log.contains(r"session=h:tab\u{9}here turn=1 "), "{log}");
    assert!(!log.contains('\t'), "no raw tab in the log:\n{log}");
    let status = proxy.status();
    assert_eq!(
        status["recent_sessions"][0]["key"], r"h:tab\u{9}here",
        "{status}"
    );
}

/// A client that goes away before its answer is whole (a cancelled turn, a client timeout),
/// streamed or not, gets its request booked all the same: one log line with its session and
/// turn, `abandoned` in the status and the metrics (not `errors`: nothing failed), and the
/// upstream rounds it made, the one in flight too.
#[test]
fn a_request_its_client_abandons_is_logged_and_counted() {
    let s = Scratch::new("proxy-abandoned");
    let search =
        json!({"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]});
    let late = json!({"text": "too late", "hang": 4});
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [{"text": "ready"}, search, late, search, late]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    // A first request builds the shelf for these tools, which takes a while in a debug build.
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    turn(&proxy, &tools(), &mut messages);
    // The streamed request is booked when its task finds the client gone, once the upstream
    // answers the round in flight.
    abandon(&proxy, false, "notes (false)", "1.5", 1);
    let totals = abandon(&proxy, true, "notes (true)", "1.5", 2);
    assert_eq!(
        (
            &totals["abandoned"],
            &totals["errors"],
            &totals["rounds"],
            &totals["searches"]
        ),
        (&json!(2), &json!(0), &json!(5), &json!(2)),
        "{totals}\n{}",
        proxy.log()
    );
    let log = proxy.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" abandoned: the client went away before the answer was whole, after 2 upstream rounds"))
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("session=r:") && l.contains(" turn=1 ")),
        "{lines:#?}"
    );
    let metrics = Command::new("curl")
        .args(["-sS", &format!("{}/metrics", proxy.url)])
        .output()
        .expect("curl");
    assert!(
        String::from_utf8_lossy(&metrics.stdout)
            .lines()
            .any(|l| l == "toolshelf_proxy_requests_abandoned_total 2"),
        "{}",
        String::from_utf8_lossy(&metrics.stdout)
    );
}

/// `[proxy] stream_hold_secs` bounds how long a stream's status waits for its first output,
/// whether or not the upstream is sending; 0 sends it at once, as the upstream's came. A 429,
/// 2 s late, on the round after a search the model made without a word: with the default hold
/// the client gets the 429 itself; with 0, or with 1 (which runs out while the upstream is
/// silent), the stream had started (200) and the 429 arrives as the format's error event.
#[test]
fn stream_hold_secs_bounds_the_wait_for_a_streams_status() {
    let search =
        json!({"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]});
    let limited = json!({"status": 429, "headers": {"retry-after": "3"}, "hang": 2,
        "body": {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}});
    for (config, status) in [
        ("", 429),
        ("[proxy]\nstream_hold_secs = 0\n", 200),
        ("[proxy]\nstream_hold_secs = 1\n", 200),
    ] {
        let s = Scratch::new(&format!("proxy-hold-{}", config.len()));
        let upstream = Upstream::start(&s, &json!({"steps": [search, limited]}));
        let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
        let body = json!({"model": "m", "max_tokens": 8, "stream": true, "tools": tools(),
                          "messages": [{"role": "user", "content": "read my notes"}]});
        let out = curl_messages(&proxy, &body, &["-sS", "-N", "-i"])
            .output()
            .expect("curl");
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        let head = out.lines().next().unwrap_or_default();
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{config:?}: {out}"
        );
        if status == 429 {
            assert!(
                out.to_ascii_lowercase().contains("retry-after: 3")
                    && out.contains("\"rate_limit_error\""),
                "{out}"
            );
        } else {
            assert!(
                out.contains("event: error") && out.contains("\"rate_limit_error\""),
                "{out}"
            );
        }
    }
}

/// A client that left while the round in flight then fails (the upstream times out) left
/// first: its request is abandoned, not an error.
#[test]
fn a_failure_after_the_client_left_is_booked_as_abandoned() {
    let s = Scratch::new("proxy-gone-then-failed");
    let search =
        json!({"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]});
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [{"text": "ready"}, search, {"text": "late", "hang": 6}]}),
    );
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[proxy]\nupstream_timeout_secs = 3\n",
        &[],
    );
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    turn(&proxy, &tools(), &mut messages);
    let totals = abandon(&proxy, true, "read my notes", "1", 1);
    assert_eq!(
        (&totals["abandoned"], &totals["errors"]),
        (&json!(1), &json!(0)),
        "{totals}\n{}",
        proxy.log()
    );
}

/// A client that leaves a stream that has started is noticed in the rounds that show it
/// nothing (searches the proxy answers): no further round goes upstream for it.
#[test]
fn no_round_goes_upstream_for_a_client_that_left_a_started_stream() {
    let s = Scratch::new("proxy-gone-quiet");
    let search = |text: Option<&str>, delay: f64| {
        let mut step = json!({"tool_uses": [{"name": "tool_search",
                                              "input": {"queries": ["read file"]}}],
                              "event_delay": delay});
        if let Some(t) = text {
            step["text"] = json!(t);
        }
        step
    };
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [{"text": "ready"}, search(Some("Looking."), 0.0),
                          search(None, 0.5), search(None, 0.5), {"text": "done"}]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    turn(&proxy, &tools(), &mut messages);
    let totals = abandon(&proxy, true, "read my notes", "1", 1);
    assert_eq!(totals["abandoned"], 1, "{totals}\n{}", proxy.log());
    // The warm-up, the round that showed text, and the quiet round the client left in.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mains = upstream.turns().len();
    assert_eq!(mains, 3, "{:#?}", upstream.turns());
}

/// The request `a_stopping_proxy_*` keep in flight: a turn whose upstream answer is `hang`
/// seconds away; returns the thread that sends it (its status and answer) once the upstream has
/// it.
fn request_in_flight(
    proxy: &ProxyProc,
    upstream: &Upstream,
) -> std::thread::JoinHandle<(u16, Value)> {
    let url = format!("{}/v1/messages", proxy.url);
    let body = json!({"model": "m", "max_tokens": 256, "tools": tools(),
                      "messages": [{"role": "user", "content": "hello"}]});
    let sent = std::thread::spawn(move || post(&url, &body, &HEADERS));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !upstream.records().iter().any(|r| r["kind"] == "request") {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never reached the upstream; proxy log:\n{}",
            proxy.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    sent
}

/// SIGTERM, like Ctrl-C, stops the proxy only once the requests in flight are answered, and its
/// log says it is draining them.
#[test]
fn a_stopping_proxy_answers_the_requests_in_flight_on_sigterm_and_ctrl_c() {
    for sig in ["TERM", "INT"] {
        let s = Scratch::new(&format!("proxy-drain-{sig}"));
        let upstream = Upstream::start(&s, &json!({"steps": [{"text": "late", "hang": 3}]}));
        let mut proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
        let sent = request_in_flight(&proxy, &upstream);
        proxy.signal(sig);
        let (status, answer) = sent.join().expect("the request's thread");
        assert_eq!(status, 200, "SIG{sig}: {answer}\n{}", proxy.log());
        assert_eq!(answer["content"][0]["text"], "late", "SIG{sig}: {answer}");
        let exited = proxy.exited();
        assert!(exited.success(), "SIG{sig}: {exited:?}\n{}", proxy.log());
        let log = proxy.log();
        assert!(
            log.contains("stopping on a signal: answering the 1 request in flight first"),
            "SIG{sig}: {log}"
        );
    }
}

/// A second Ctrl-C or SIGTERM while the proxy drains its requests stops it at once, with exit
/// status 1 and the number of requests dropped, so a supervisor can tell it from a clean stop.
#[test]
fn a_second_signal_stops_a_draining_proxy_at_once() {
    for sig in ["INT", "TERM"] {
        let s = Scratch::new(&format!("proxy-drain-twice-{sig}"));
        let upstream = Upstream::start(&s, &json!({"steps": [{"text": "late", "hang": 300}]}));
        let mut proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
        let _sent = request_in_flight(&proxy, &upstream);
        proxy.signal(sig);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !proxy.log().contains("stopping on a signal") {
            assert!(
                std::time::Instant::now() < deadline,
                "SIG{sig}: no word of the stop:\n{}",
                proxy.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        proxy.signal(sig);
        // `exited` gives up after a minute, long before the upstream answers.
        let exited = proxy.exited();
        assert_eq!(exited.code(), Some(1), "SIG{sig}: {}", proxy.log());
        assert!(
            proxy.log().contains(
                "toolshelf: error: stopped by a second signal: 1 request in flight dropped"
            ),
            "SIG{sig}: {}",
            proxy.log()
        );
    }
}

/// A configured `[ui] token` is required on a loopback listener too (a reverse proxy in front
/// makes it reachable by others), and the start-up line names the dashboard only where it is
/// served.
#[test]
fn the_dashboard_token_holds_on_loopback_and_the_start_up_line_is_true() {
    let s = Scratch::new("proxy-token-loopback");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let guarded = ProxyProc::start(
        &s,
        &upstream.url(),
        "[http]\nallowed_hosts = [\"px.internal\"]\n[ui]\ntoken = \"sesame\"\n",
        &[],
    );
    for page in ["ui", "metrics", "toolshelf/status"] {
        let url = format!("{}/{page}", guarded.url);
        for host in [None, Some(("host", "px.internal"))] {
            let headers: Vec<(&str, &str)> = host.into_iter().collect();
            let (status, _) = http("GET", &url, &headers);
            assert_eq!(status, 401, "{page} {host:?}");
            let mut with = headers.clone();
            with.push(("authorization", "Bearer sesame"));
            let (status, _) = http("GET", &url, &with);
            assert_eq!(status, 200, "{page} {host:?}");
        }
    }
    assert!(
        guarded
            .log()
            .contains(&format!("dashboard at {}/ui", guarded.url)),
        "{}",
        guarded.log()
    );
    drop(guarded);
    let open = ProxyProc::start(
        &s,
        &upstream.url(),
        "[http]\nallowed_hosts = [\"0.0.0.0\"]\n",
        &["--listen", "0.0.0.0:0"],
    );
    let log = open.log();
    assert!(!log.contains("dashboard at"), "{log}");
    assert!(
        log.contains("no dashboard on this address without [ui] token"),
        "{log}"
    );
}

/// A client whose own tools are plainly named (its index's built-in names, never dropped) and
/// too many for `[defer] index_budget_chars` gets the block over its budget: the proxy says so
/// in its log, once, as `render` says it on stderr.
#[test]
fn an_index_over_its_budget_is_warned_about_once() {
    let s = Scratch::new("proxy-index-budget");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "One."}, {"text": "Two."}]}));
    let config = "[defer]\ndefault = true\nindex_budget_chars = 400\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let many: Vec<Value> = (0..40)
        .map(|i| {
            anthropic_tool(
                &format!("enterprise_resource_operation_{i:02}"),
                "Runs one operation of the enterprise resource system.",
                json!({"id": {"type": "string"}}),
                &[],
            )
        })
        .collect();
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    turn(&proxy, &many, &mut messages);
    messages.push(json!({"role": "user", "content": "again"}));
    turn(&proxy, &many, &mut messages);
    let log = proxy.log();
    let warned = log
        .lines()
        .filter(|l| {
            l.contains("the deferred index is ")
                && l.contains("characters, over its budget of 400 ([defer] index_budget_chars)")
                && l.contains("built-in names")
        })
        .count();
    assert_eq!(warned, 1, "{log}");
}
