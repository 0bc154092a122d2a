//! The proxy's own tools end to end: `[tools.NAME] script` tools and the tools the model writes
//! with `tool_define`, run by the real `toolshelf proxy` in runner processes, with the round
//! trip hidden from the client as a search is. The upstream is the scripted model API.

mod common;

use common::{ProxyProc, Scratch, Upstream, messages_turn, tools};
use serde_json::{Value, json};

fn turn(proxy: &ProxyProc, messages: &mut Vec<Value>) -> Value {
    messages_turn(proxy, &tools(), messages)
}

/// Every scripted request continues the previous one: same tool list, earlier messages kept.
fn assert_prefix_kept(upstream: &Upstream) {
    let turns = upstream.turns();
    for pair in turns.windows(2) {
        let (a, b) = (&pair[0]["body"], &pair[1]["body"]);
        assert_eq!(a["tools"], b["tools"], "the tool list changed");
        let (ma, mb) = (
            a["messages"].as_array().expect("messages"),
            b["messages"].as_array().expect("messages"),
        );
        if mb.len() < ma.len() {
            continue; // another conversation
        }
        for (i, (x, y)) in ma.iter().zip(mb).enumerate() {
            assert_eq!(x, y, "messages[{i}] changed between requests");
        }
    }
}

fn no_calls(answer: &Value) {
    let blocks = answer["content"].as_array().expect("content");
    assert!(
        blocks.iter().all(|b| b["type"] != "tool_use"),
        "the client sees no call of the proxy's own tools: {answer}"
    );
}

const WORD_COUNT: &str = r#"
description = part("Count the words of a text, for", pkg.team, ".")
schema = {
    "properties": {"text": {"type": "string", "description": "The text."}},
    "required": ["text"],
}

def run(params):
    return {"words": len(params["text"].split())}
"#;

const SPIN: &str = r#"
description = "Counts for ever."
schema = {}

def run(params):
    n = 0
    for i in range(1000000000):
        n += 1
    return n
"#;

#[test]
fn the_proxy_runs_script_tools_itself_under_the_same_rules_and_limits() {
    let s = Scratch::new("proxy-scripts");
    s.write("wc.star", WORD_COUNT);
    s.write("spin.star", SPIN);
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["count the words of a text"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__word_count", "params": {"text": "one two three"}}}]},
        // A required parameter missing: refused before any script runs.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__word_count", "params": {}}}]},
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__scripts__spin", "mcp__scripts__erase"]}}]},
        // Stopped by the step limit; the proxy lives on.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__spin", "params": {}}}]},
        // Denied by a permission rule on the script tool's name.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__erase", "params": {"text": "x"}}}]},
        // An `ask` rule: the client never sees the call, so nobody can be asked: refused.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__careful", "params": {"text": "x"}}}]},
        {"text": "Three words."},
        {"text": "Still here."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[proxy]\nmax_search_rounds = 8\n\
                  [template.vars]\nteam = \"docs\"\n\
                  [scripts]\nmax_steps = 100000\n\
                  [permissions]\ndeny = [\"mcp__scripts__erase(*)\"]\n\
                  ask = [\"mcp__scripts__careful(*)\"]\n\
                  [tools.word_count]\nscript = \"wc.star\"\n\
                  [tools.careful]\nscript = \"wc.star\"\n\
                  [tools.erase]\nscript = \"wc.star\"\n\
                  [tools.spin]\nscript = \"spin.star\"\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages =
        vec![json!({"role": "user", "content": "how many words in 'one two three'?"})];
    let a = turn(&proxy, &mut messages);
    no_calls(&a);
    assert!(a.to_string().contains("Three words."), "{a}");
    let turns = upstream.played(8);
    // The index heads the script tools' group as the gateway does.
    let index = turns[0]["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "tool_search")
        .and_then(|t| t["description"].as_str())
        .expect("tool_search")
        .to_owned();
    assert!(
        index
            .contains("\nmcp__scripts: Tools defined by Starlark scripts of this configuration.\n"),
        "{index}"
    );
    // The search found the script tool with its rendered description.
    let (found, _) = upstream.last_result(1);
    assert!(found.contains("mcp__scripts__word_count"), "{found}");
    assert!(
        found.contains("Count the words of a text, for docs ."),
        "{found}"
    );
    assert_eq!(upstream.last_result(2), ("{\"words\":3}".to_owned(), false));
    let (missing, is_error) = upstream.last_result(3);
    assert!(is_error && missing.contains("text"), "{missing}");
    let (spun, is_error) = upstream.last_result(5);
    assert!(
        is_error
            && spun.contains("mcp__scripts__spin")
            && spun.contains("CPU-step limit of 100000"),
        "the limit and the tool are named: {spun}"
    );
    let (denied, is_error) = upstream.last_result(6);
    assert!(
        is_error && denied.contains("mcp__scripts__erase"),
        "{denied}"
    );
    let (asked, is_error) = upstream.last_result(7);
    assert!(
        is_error
            && asked.starts_with("mcp__scripts__careful was not run: it needs the user's approval")
            && asked.contains("toolshelf runs this tool itself")
            && !asked.contains("words"),
        "{asked}"
    );
    // Script tools are deferred: the frozen list holds the client's resident tools and the
    // meta-tools only.
    let names: Vec<&str> = turns[0]["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!names.iter().any(|n| n.contains("scripts")), "{names:?}");
    let status = proxy.status();
    assert_eq!(status["totals"]["refused"], 3, "{status}");
    // Each search and call has its record in the audit log (by default in the cache
    // directory), as the gateway writes them.
    let audit = s.audit_at("cache/toolshelf/audit.jsonl");
    let seen: Vec<(&str, &str, &str)> = audit
        .iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap_or("-");
            (field("kind"), field("tool"), field("outcome"))
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("search", "-", "ok"),
            ("call", "mcp__scripts__word_count", "ok"),
            ("refused", "mcp__scripts__word_count", "invalid"),
            ("search", "-", "ok"),
            ("call", "mcp__scripts__spin", "tool_error"),
            ("refused", "mcp__scripts__erase", "denied"),
            ("refused", "mcp__scripts__careful", "not_approved"),
        ],
        "{audit:#?}"
    );
    let session = &status["recent_sessions"][0]["id"];
    for r in &audit {
        assert_eq!(&r["session"], session, "{r}");
    }
    assert_eq!(audit[0]["loaded"][0]["name"], "mcp__scripts__word_count");
    assert_eq!(audit[0]["loaded"][0]["server"], "scripts");
    assert_eq!(audit[1]["params"], json!({"text": "one two three"}));
    assert_eq!(
        (
            &audit[1]["via"],
            &audit[1]["requested"],
            &audit[1]["server"]
        ),
        (
            &json!("defer_execute"),
            &json!("mcp__scripts__word_count"),
            &json!("scripts")
        )
    );
    assert!(
        audit[5]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("deny[0]")),
        "{}",
        audit[5]
    );
    // The next request puts the hidden rounds back byte for byte.
    messages.push(json!({"role": "user", "content": "still there?"}));
    turn(&proxy, &mut messages);
    upstream.played(9);
    assert_prefix_kept(&upstream);
}

/// A script tool whose script could not be defined is found by a search, which says it cannot
/// be called and why instead of offering a call; a call of it still gets that reason.
#[test]
fn the_proxys_search_does_not_offer_a_call_of_an_unavailable_script_tool() {
    let s = Scratch::new("proxy-scripts-unavailable");
    s.write(
        "bad.star",
        "description = 'x' + str(turn.number)\nschema = {}\ndef run(p):\n    return 1\n",
    );
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__scripts__bad"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__bad", "params": {}}}]},
        {"text": "It is broken."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[tools.bad]\nscript = \"bad.star\"\n",
        &[],
    );
    let mut messages = vec![json!({"role": "user", "content": "use bad"})];
    no_calls(&turn(&proxy, &mut messages));
    upstream.played(3);
    let why = "script tool \"mcp__scripts__bad\" (bad.star): script line 1: reads turn.number";
    let (found, is_error) = upstream.last_result(1);
    assert!(
        !is_error
            && found.contains(&format!(
                "   cannot be called: this script tool is unavailable: its script could not be defined ({why}"
            ))
            && !found.contains("call: "),
        "{found}"
    );
    let (called, is_error) = upstream.last_result(2);
    assert!(is_error && called.contains(why), "{called}");
}

const SHOUT: &str = "def run(params):\n    return params[\"text\"].upper() + \"!\"\n";

fn define(name: &str, script: &str) -> Value {
    json!({"name": "defer_execute", "input": {"tool_name": "tool_define", "params": {
        "name": name, "description": "Shout a text back, in capitals.",
        "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "script": script}}})
}

#[test]
fn a_tool_the_model_defines_runs_in_its_session_only_and_leaves_the_prefix_alone() {
    let s = Scratch::new("proxy-authoring");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}]},
        {"tool_uses": [define("shout", SHOUT)]},
        // Searchable at once, and runs.
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["shout a text in capitals"]}}]},
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "shout", "params": {"text": "hi"}}}]},
        // Over [authoring] max_tools.
        {"tool_uses": [define("whisper", SHOUT)]},
        {"text": "HI!"},
        // The next request of the same conversation: still there.
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "shout", "params": {"text": "again"}}}]},
        {"text": "AGAIN!"},
        // Another conversation: not its tool.
        {"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "shout", "params": {"text": "no"}}}]},
        {"text": "No such tool."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\nmax_tools = 1\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "make a shouting tool"})];
    let a = turn(&proxy, &mut messages);
    no_calls(&a);
    let turns = upstream.played(6);
    let index = turns[0]["body"]["tools"].to_string();
    assert!(
        index.contains("tool_define"),
        "tool_define is in the index from the start"
    );
    let (defined, is_error) = upstream.last_result(2);
    assert!(!is_error && defined.contains("Defined shout"), "{defined}");
    let (found, _) = upstream.last_result(3);
    assert!(
        found.contains("shout") && found.contains("Shout a text back"),
        "{found}"
    );
    assert_eq!(upstream.last_result(4), ("HI!".to_owned(), false));
    let (over, is_error) = upstream.last_result(5);
    assert!(is_error && over.contains("[authoring] max_tools"), "{over}");
    // The same conversation, next request: the tool is announced once and still runs.
    messages.push(json!({"role": "user", "content": "again"}));
    let a = turn(&proxy, &mut messages);
    no_calls(&a);
    let turns = upstream.played(8);
    let announced = turns[6]["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(announced.contains("shout"), "{announced}");
    assert_eq!(upstream.last_result(7), ("AGAIN!".to_owned(), false));
    assert_prefix_kept(&upstream);
    // Another conversation does not have it.
    let mut other = vec![json!({"role": "user", "content": "shout no"})];
    turn(&proxy, &mut other);
    upstream.played(10);
    let (refused, is_error) = upstream.last_result(9);
    assert!(is_error && refused.contains("shout"), "{refused}");
    assert!(!refused.contains("NO!"), "{refused}");
}

/// A reminder whose `after_tools` names a tool the proxy runs itself fires when the proxy ran it:
/// on that call's result, which the model reads in the next round, and after the client's next
/// entry while it is shown. A refused call (invalid params, a deny rule) fires nothing and leaves
/// the rule's cooldown for the call that then runs.
#[test]
fn a_tool_the_proxy_runs_fires_its_after_tools_reminder_and_a_refused_call_does_not() {
    let s = Scratch::new("proxy-script-reminder");
    s.write("wc.star", WORD_COUNT);
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search",
                        "input": {"tool_names": ["mcp__scripts__word_count", "mcp__scripts__erase"]}}]},
        // A required parameter missing.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__word_count", "params": {}}}]},
        // Denied by a permission rule.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__erase", "params": {"text": "x"}}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__word_count", "params": {"text": "one two"}}}]},
        {"text": "Two words."},
        {"text": "Still two."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[proxy]\nmax_search_rounds = 8\n\
                  [template.vars]\nteam = \"docs\"\n\
                  [permissions]\ndeny = [\"mcp__scripts__erase(*)\"]\n\
                  [tools.word_count]\nscript = \"wc.star\"\n\
                  [tools.erase]\nscript = \"wc.star\"\n\
                  [[reminders]]\nid = \"charts\"\ncategory = \"word charts\"\n\
                  message = \"Counted words chart well; a colleague would draw them.\"\n\
                  after_tools = [\"^mcp__scripts__\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "how many words in 'one two'?"})];
    let a = turn(&proxy, &mut messages);
    no_calls(&a);
    upstream.played(5);
    let reminder = "<system-reminder>\nCounted words chart well; a colleague would draw them.\n</system-reminder>";
    for (step, what) in [(2, "invalid params"), (3, "a deny rule")] {
        let (refused, is_error) = upstream.last_result(step);
        assert!(
            is_error && !refused.contains("system-reminder"),
            "a call refused for {what} fires nothing: {refused}"
        );
    }
    let (ran, is_error) = upstream.last_result(4);
    assert!(!is_error, "{ran}");
    assert_eq!(ran, format!("{{\"words\":2}}\n\n{reminder}"));
    // Shown for its ttl_turns (2): after the client's next entry too.
    messages.push(json!({"role": "user", "content": "thanks"}));
    turn(&proxy, &mut messages);
    let turns = upstream.played(6);
    let last = turns[5]["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(last.contains("Counted words chart well"), "{last}");
    assert_prefix_kept(&upstream);
}

/// A process killed when dropped, a failed assertion included.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A host whose every GET takes `secs` before it answers: a slow dictionary for a script tool.
/// Its process (killed when dropped) and its port.
fn slow_host(secs: f64) -> (Killed, u16) {
    use std::io::BufRead as _;
    let script = format!(
        "import time, sys\n\
         from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler\n\
         class H(BaseHTTPRequestHandler):\n\
         \x20   def do_GET(self):\n\
         \x20       time.sleep({secs})\n\
         \x20       b = b'meaning'\n\
         \x20       self.send_response(200); self.send_header('content-length', str(len(b)))\n\
         \x20       self.end_headers(); self.wfile.write(b)\n\
         \x20   def log_message(self, *a): pass\n\
         s = ThreadingHTTPServer(('127.0.0.1', 0), H)\n\
         print(s.server_address[1], flush=True)\n\
         s.serve_forever()\n"
    );
    let mut child = std::process::Command::new("python3")
        .args(["-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the host's port");
    (Killed(child), line.trim().parse().expect("a port"))
}

/// A client that goes away while the proxy runs a script tool inside its request (the round
/// came back, the proxy is working on it): that round counts once, and no further round goes
/// upstream, streamed or not.
#[test]
fn a_client_that_leaves_while_a_script_tool_runs_costs_no_further_round() {
    let s = Scratch::new("proxy-scripts-leave");
    let (_host, port) = slow_host(3.0);
    s.write(
        "slow.star",
        &format!(
            "description = \"Look up a word in the slow dictionary\"\n\
             schema = {{\"properties\": {{\"word\": {{\"type\": \"string\"}}}}, \"required\": [\"word\"]}}\n\n\
             def run(params):\n    return http.get(\"http://127.0.0.1:{port}/word\")[\"body\"]\n"
        ),
    );
    let search = json!({"tool_uses": [{"name": "tool_search",
                                       "input": {"tool_names": ["mcp__scripts__slowlookup"]}}]});
    let run = json!({"tool_uses": [{"name": "defer_execute",
        "input": {"tool_name": "mcp__scripts__slowlookup", "params": {"word": "x"}}}]});
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [{"text": "ready"}, search, run, search, run, {"text": "never"}]}),
    );
    let config = format!(
        "[scripts]\nallow_hosts = [\"127.0.0.1:{port}\"]\n[tools.slowlookup]\nscript = \"slow.star\"\n"
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), &config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    turn(&proxy, &mut messages);
    for (n, stream) in [(1, false), (2, true)] {
        let totals = common::abandon(&proxy, stream, &format!("look up x ({stream})"), "1.5", n);
        // The warm-up's round, then two rounds a request: the search, and the call the
        // script answers.
        assert_eq!(
            (&totals["abandoned"], &totals["rounds"]),
            (&json!(n), &json!(1 + 2 * n)),
            "stream {stream}: {totals}\n{}",
            proxy.log()
        );
    }
    // The script's run outlasts the client; wait it out, then count what went upstream.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(upstream.turns().len(), 5, "{:#?}", upstream.turns());
}

/// A `pre_call` hook's rewrite of a call the proxy runs itself is in its audit record as in the
/// gateway's: `params` are those the script got, `requested_params` the model's.
#[test]
fn a_rewritten_call_of_a_script_tool_is_recorded_with_both_params() {
    let s = Scratch::new("proxy-scripts-rewrite");
    s.write("wc.star", WORD_COUNT);
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__scripts__word_count"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__scripts__word_count", "params": {"text": "one"}}}]},
        {"text": "Five."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = "[template.vars]\nteam = \"docs\"\n\
                  [tools.word_count]\nscript = \"wc.star\"\n\
                  [[hooks.pre_call]]\ncommand = \"sh\"\n\
                  args = [\"-c\", \"echo '{\\\"params\\\": {\\\"text\\\": \\\"a b c d e\\\"}}'\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut messages = vec![json!({"role": "user", "content": "count"})];
    turn(&proxy, &mut messages);
    assert_eq!(upstream.last_result(2), ("{\"words\":5}".to_owned(), false));
    let audit = s.audit_at("cache/toolshelf/audit.jsonl");
    let call = audit
        .iter()
        .find(|r| r["kind"] == "call")
        .unwrap_or_else(|| panic!("{audit:#?}"));
    assert_eq!(call["params"], json!({"text": "a b c d e"}), "{call}");
    assert_eq!(call["requested_params"], json!({"text": "one"}), "{call}");
    assert_eq!(call["hooks"], json!(["params_rewritten"]), "{call}");
}
