//! End-to-end tests of what the model is told when something goes wrong around a call: a late,
//! unreadable answer to a call already abandoned (at its timeout, or cancelled), servers that are
//! down beside what a search finds, and reminders after calls that were refused; what a client
//! is told of a call whose params cannot be read; a stop with many HTTP sessions open; HTTP
//! servers that go down or forget the session, a server that fails many times, a tool list that
//! changes during start-up, servers' own child processes at exit and on SIGTERM, the status
//! resource's type, and which file an error about a server in the way of script tools blames.
//! The real `toolshelf serve` binary in front of fixture servers, driven by rmcp's client over
//! stdio and HTTP, or by hand.

mod common;

use common::*;
use serde_json::{Value, json};

/// The status of server `name` in the `toolshelf://status` resource.
async fn server_status(client: &Client, name: &str) -> Value {
    status(client).await["servers"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no status for {name}"))
}

/// A gateway in front of `late_server.py` as server `late`, with a call timeout of `timeout`
/// seconds, and the file its stderr goes to.
async fn late_gateway(s: &Scratch, timeout: u64) -> (Client, std::path::PathBuf) {
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.late]\ncommand = \"python3\"\nargs = [{:?}]\ncall_timeout_secs = {timeout}\n\
             [execute]\nrequire_search = false\n{}",
            fixture("late_server.py"),
            files_sections(s)
        ),
    );
    let log = s.0.join("stderr.log");
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--config", &config])
        .env("TOOLSHELF_LOG", "warn");
    (stdio_client_logged(cmd, &log).await, log)
}

/// An answer that comes after its call was abandoned at the timeout, when the next call is
/// waiting, fails nobody even when it cannot be read: over the size limit (its id read from the
/// line's start), or broken JSON without an id. The next call gets its own answer, from the same
/// process, and the log says what was dropped. The call timeout leaves the call after the 17 MiB
/// answer time to read it on a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_unreadable_answer_is_blamed_on_no_other_call() {
    let s = Scratch::new("late-answer");
    let (client, log) = late_gateway(&s, 3).await;
    ok(&exec(&client, "mcp__late__echo", json!({"n": 0})).await);
    let pid = server_status(&client, "late").await["pid"].clone();
    assert!(pid.is_u64(), "{pid}");

    for (n, kind) in [(1, "big"), (2, "broken")] {
        let late = err(&exec(&client, "mcp__late__late", json!({"kind": kind, "mb": 17})).await);
        assert!(
            late.starts_with("mcp__late__late did not answer within 3s"),
            "{late}"
        );
        // Its answer comes now, before this call's own.
        assert_eq!(
            ok(&exec(&client, "mcp__late__echo", json!({"n": n})).await),
            format!("{{\"n\":{n}}}"),
            "after the {kind} answer"
        );
    }
    let cancels = ok(&exec(&client, "mcp__late__cancels", json!({})).await);
    let cancels: Vec<Value> = serde_json::from_str(&cancels).expect("a JSON list");
    assert_eq!(
        cancels.len(),
        2,
        "both late calls were abandoned: {cancels:?}"
    );
    assert_eq!(
        server_status(&client, "late").await["pid"],
        pid,
        "the server was not restarted"
    );
    client.cancel().await.expect("close");

    assert_eq!(s.outcomes_of("mcp__late__echo"), ["ok", "ok", "ok"]);
    assert_eq!(s.outcomes_of("mcp__late__late"), ["timeout", "timeout"]);
    let logged = std::fs::read_to_string(&log).expect("stderr");
    assert!(
        logged.contains(&format!(
            "server \"late\" sent a reply of 17.0 MiB, over the 16 MiB limit (it answers request {}, which was abandoned); ignored",
            cancels[0]
        )) && logged.contains(
            "sent a reply that is not valid JSON: the text ends where a value should be (is it cut short?) (column 11) \
             (its id cannot be read, and it may answer a request already abandoned); ignored"
        ),
        "{logged}"
    );
}

/// A call abandoned at its timeout is forgotten one call timeout later, though the server never
/// answers it (the MCP specification says it should not): a reply without a readable id then
/// fails the only call waiting at once, with what was wrong, instead of leaving it to time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_call_that_is_never_answered_is_forgotten() {
    let s = Scratch::new("never-answered");
    let (client, log) = late_gateway(&s, 1).await;
    let hung = err(&exec(&client, "mcp__late__hang", json!({})).await);
    assert!(
        hung.starts_with("mcp__late__hang did not answer within 1s"),
        "{hung}"
    );
    // What the model can do, and what only the operator can.
    assert!(
        hung.contains(
            "If the tool may have been busy, retry once; otherwise try a smaller request"
        ) && hung.ends_with(
            "or tell the user: the operator can raise call_timeout_secs for this tool's \
                 server in the toolshelf configuration."
        ),
        "{hung}"
    );
    // The server saw the cancellation; wait until it is longer ago than the call had waited.
    wait_for("the abandoned call to be forgotten", || async {
        let since = ok(&exec(&client, "mcp__late__since_cancel", json!({})).await);
        serde_json::from_str::<Value>(&since)
            .ok()
            .and_then(|v| v.as_f64())
            .is_some_and(|secs| secs > 2.0)
    })
    .await;
    let broken = err(&exec(&client, "mcp__late__broken", json!({})).await);
    assert!(
        broken.starts_with(
            "mcp__late__broken failed: server \"late\" sent a reply that is not valid JSON: "
        ) && broken.ends_with("; the call was abandoned"),
        "{broken}"
    );
    client.cancel().await.expect("close");
    assert_eq!(s.outcomes_of("mcp__late__hang"), ["timeout"]);
    assert_eq!(
        s.outcomes_of("mcp__late__broken"),
        ["error"],
        "not a timeout"
    );
    let logged = std::fs::read_to_string(&log).expect("stderr");
    assert!(
        !logged.contains("it may answer a request already abandoned"),
        "{logged}"
    );
}

/// A call the client cancels is still expected to be answered for one call timeout, not only for
/// as long again as it had waited: an unreadable answer without an id that comes seconds after
/// the cancellation is dropped as maybe the cancelled call's, and the call waiting then gets its
/// own answer, from the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_unreadable_answer_to_a_cancelled_call_is_blamed_on_no_other_call() {
    let s = Scratch::new("cancelled-late");
    let (client, log) = late_gateway(&s, 600).await;
    ok(&exec(&client, "mcp__late__echo", json!({"n": 0})).await);
    let pid = server_status(&client, "late").await["pid"].clone();
    let sent = std::time::Instant::now();
    let late = start_call(
        &client,
        "defer_execute",
        json!({"tool_name": "mcp__late__late", "params": {"kind": "broken"}}),
    )
    .await;
    let probe = |tool: &'static str| {
        let client = &client;
        async move { ok(&exec(client, tool, json!({})).await) }
    };
    wait_for("the server to hold the late call", || async {
        probe("mcp__late__held").await != "null"
    })
    .await;
    late.cancel(Some("the test cancels it".into()))
        .await
        .expect("cancel");
    wait_for("the cancellation to reach the server", || async {
        probe("mcp__late__cancels").await != "[]"
    })
    .await;
    // The call waited at most this long before it was cancelled: wait longer than that after
    // the cancellation.
    let waited = sent.elapsed().as_secs_f64();
    wait_for(
        "the cancellation to be longer ago than the call had waited",
        || async {
            let since: Value = serde_json::from_str(&probe("mcp__late__since_cancel").await)
                .expect("a JSON number");
            since.as_f64().is_some_and(|secs| secs > waited + 1.0)
        },
    )
    .await;
    // The broken line comes first, then this call's answer.
    assert_eq!(
        ok(&exec(&client, "mcp__late__echo", json!({"n": 1})).await),
        "{\"n\":1}"
    );
    assert_eq!(
        server_status(&client, "late").await["pid"],
        pid,
        "the server was not restarted"
    );
    client.cancel().await.expect("close");
    assert_eq!(s.outcomes_of("mcp__late__echo"), ["ok", "ok"]);
    assert_eq!(s.outcomes_of("mcp__late__late"), ["cancelled"]);
    let logged = std::fs::read_to_string(&log).expect("stderr");
    assert!(
        logged.contains(
            "sent a reply that is not valid JSON: the text ends where a value should be (is it cut short?) (column 11) \
             (its id cannot be read, and it may answer a request already abandoned); ignored"
        ),
        "{logged}"
    );
}

/// The tools of a notebook server: listing and adding notes.
fn notebook() -> Value {
    json!([
        tool(
            "list_notes",
            "List every note in the notebook.",
            json!({"type": "object"})
        ),
        tool(
            "add_note",
            "Add a note to the notebook.",
            json!({"type": "object"})
        ),
    ])
}

/// A search names the servers that are down whatever it finds, not only when it finds nothing:
/// a server whose tools are not known on every search but an exact lookup that found every name,
/// and a failed server whose known tools the answer shows. A server the rules hide is never
/// named, and no server's stderr reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_that_finds_something_names_the_servers_that_are_down() {
    let s = Scratch::new("down-found");
    let marker = s.path("boom-fails");
    let notes = notebook();
    let boom = json!([
        tool("crash", "Crash.", json!({"type": "object"})),
        tool(
            "mail_notes",
            "Mail the notes to someone.",
            json!({"type": "object"})
        ),
    ]);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.mail]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'fatal: missing API_KEY' >&2; exit 3\"]\n\
             restart_delay_secs = 600\n\
             [servers.secretdb]\ncommand = \"sh\"\nargs = [\"-c\", \"exit 3\"]\nrestart_delay_secs = 600\n\
             [permissions]\ndeny = [\"^mcp__secretdb__\"]\n\
             [execute]\nrequire_search = false\n{}{}{}",
            named_server("notes", &notes, ""),
            named_server_failing_while("boom", &boom, Some(&marker), ""),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    wait_for("mail to fail, notes and boom to start", || async {
        server_status(&client, "mail").await["state"] == "failed"
            && server_status(&client, "notes").await["state"] == "ready"
            && server_status(&client, "boom").await["state"] == "ready"
    })
    .await;
    let says = "Server \"mail\" is not running (initialize failed: the server exited with status 3), so its tools are not known; it is restarted in the background.";
    let found = ok(&search(&client, json!({"queries": ["list notes"]})).await);
    assert!(
        found.contains("1. mcp__notes__list_notes") && found.ends_with(&format!("\n{says}")),
        "{found}"
    );
    // An exact lookup is about the names it gives.
    let exact = ok(&search(&client, json!({"tool_names": ["mcp__notes__list_notes"]})).await);
    assert!(!exact.contains("mail"), "{exact}");
    let partly = ok(&search(
        &client,
        json!({"tool_names": ["mcp__notes__list_notes", "mcp__mail__send_mail"]}),
    )
    .await);
    assert!(partly.ends_with(&format!("\n{says}")), "{partly}");
    for seen in [&found, &partly] {
        assert!(
            !seen.contains("secretdb") && !seen.contains("API_KEY"),
            "{seen}"
        );
    }

    // boom's tools are known; once it is down, an answer that shows one says so.
    std::fs::write(&marker, "").expect("make boom fail to restart");
    err(&exec(&client, "mcp__boom__crash", json!({})).await);
    wait_for("a search to say that boom is down", || async {
        let r = ok(&search(&client, json!({"queries": ["mail notes"]})).await);
        assert!(!r.contains("s3cret"), "{r}");
        r.contains("mcp__boom__mail_notes")
            && r.lines().any(|l| {
                l.starts_with("Server \"boom\" is not running (")
                && l.contains("exited with status")
                && l.ends_with(
                    "); it is restarted in the background, and calls of its tools fail until then.",
                )
            })
    })
    .await;
    let notes_only = ok(&search(&client, json!({"tool_names": ["mcp__notes__add_note"]})).await);
    assert!(!notes_only.contains("boom"), "{notes_only}");
    client.cancel().await.expect("close");
}

/// The note on a failed server comes with any answer that names one of its tools, not only with
/// one that shows its schema: a tool on one line, or named after "Also matching".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_that_names_a_tool_of_a_failed_server_says_it_is_down() {
    let s = Scratch::new("down-named");
    let notes = notebook();
    let boom = json!([
        tool("crash", "Crash.", json!({"type": "object"})),
        tool(
            "archive_notes",
            "Archive old notes.",
            json!({"type": "object"})
        ),
    ]);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[servers.boom]\ncommand = \"python3\"\nargs = {}\nrestart_delay_secs = 600\n\
             [search]\nfull_schemas = 1\n[execute]\nrequire_search = false\n{}",
            named_server("notes", &notes, ""),
            Value::from(vec![
                fixture("named_server.py"),
                "boom".into(),
                boom.to_string()
            ]),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    err(&exec(&client, "mcp__boom__crash", json!({})).await);
    wait_for("boom to fail", || async {
        server_status(&client, "boom").await["state"] == "failed"
    })
    .await;
    let down = |text: &str| {
        text.lines().any(|l| {
            l.starts_with("Server \"boom\" is not running (the server exited with status 1")
                && l.ends_with(
                    "); it is restarted in the background, and calls of its tools fail until then.",
                )
        })
    };
    let also = ok(&search(&client, json!({"queries": ["list notes"], "limit": 1})).await);
    assert!(
        also.lines()
            .any(|l| l.starts_with("Also matching") && l.contains("mcp__boom__archive_notes"))
            && down(&also),
        "{also}"
    );
    let line = ok(&search(&client, json!({"queries": ["list notes"], "limit": 3})).await);
    assert!(
        line.lines()
            .any(|l| l.starts_with("2. mcp__boom__archive_notes: ")
                || l.starts_with("3. mcp__boom__archive_notes: "))
            && down(&line),
        "{line}"
    );
    // A search that names none of its tools says nothing of it.
    let none = ok(&search(&client, json!({"tool_names": ["mcp__notes__add_note"]})).await);
    assert!(!none.contains("boom"), "{none}");
    client.cancel().await.expect("close");
}

/// A reminder whose trigger is a call of a tool fires when that tool ran, not when the call was
/// refused (not loaded yet, denied by a hook): the refusal leaves it for the call that runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reminders_fire_after_calls_that_ran_not_after_refusals() {
    let s = Scratch::new("reminder-refused");
    let notes = json!([
        tool(
            "add_note",
            "Add a note to the notebook.",
            json!({"type": "object"})
        ),
        tool(
            "list_notes",
            "List every note in the notebook.",
            json!({"type": "object"})
        ),
    ]);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[defer]\ndefault = true\n\
             [[hooks.pre_call]]\ncommand = \"sh\"\nargs = [\"-c\", \"if grep -q refuse-me; then echo 'not this one' >&2; exit 2; fi\"]\n\
             tools = \"^mcp__notes__add_note$\"\n\
             [[reminders]]\nid = \"docs\"\ncategory = \"document tools\"\n\
             message = \"Notes often go with a document.\"\nsearch_hint = [\"write document\"]\n\
             after_tools = [\"^mcp__notes__add_note$\"]\n{}",
            named_server("notes", &notes, ""),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let reminder = "Notes often go with a document.";
    let not_loaded = err(&exec(&client, "mcp__notes__add_note", json!({"text": "a"})).await);
    assert!(
        not_loaded.contains("\"tool_name\":\"mcp__notes__add_note\"")
            && !not_loaded.contains(reminder),
        "{not_loaded}"
    );
    let denied = err(&exec(
        &client,
        "mcp__notes__add_note",
        json!({"text": "refuse-me"}),
    )
    .await);
    assert!(
        denied.contains("not this one") && !denied.contains(reminder),
        "{denied}"
    );
    let ran = ok(&exec(&client, "mcp__notes__add_note", json!({"text": "b"})).await);
    assert!(
        ran.contains("\"tool\":\"add_note\"") && ran.contains(reminder),
        "{ran}"
    );
    client.cancel().await.expect("close");
    let outcomes: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["tool"] == "mcp__notes__add_note")
        .map(|r| r["outcome"].clone())
        .collect();
    assert_eq!(outcomes, ["not_loaded", "denied_by_hook", "ok"]);
}

/// A `tools/call` whose params cannot be read as a call's (`arguments` not an object, `name`
/// missing or not a string, no params at all) is answered -32602 (invalid params) naming the
/// field, not -32601 (method not found), over stdio and over HTTP; a good call still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_params_that_cannot_be_read_is_told_which_field_is_wrong() {
    let s = Scratch::new("bad-params");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}",
            named_server("notes", &notebook(), ""),
            files_sections(&s)
        ),
    );
    let cases = [
        (
            Some(json!({"name": "tool_search", "arguments": "list notes"})),
            "Invalid params: \"arguments\" of tools/call must be an object (the tool's parameters), not a string",
        ),
        (
            Some(json!({"name": "tool_search", "arguments": ["list notes"]})),
            "Invalid params: \"arguments\" of tools/call must be an object (the tool's parameters), not an array",
        ),
        (
            Some(json!({"arguments": {"queries": ["list notes"]}})),
            "Invalid params: tools/call has no \"name\" (the tool's name, a string)",
        ),
        (
            Some(json!({"name": 7, "arguments": {}})),
            "Invalid params: \"name\" of tools/call must be a string (the tool's name), not a number",
        ),
        (
            None,
            "Invalid params: tools/call has no params; it takes an object with \"name\" (the tool's name, a string)",
        ),
    ];
    let request = |id: usize, params: &Option<Value>| {
        let mut r = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call"});
        if let Some(p) = params {
            r["params"] = p.clone();
        }
        r
    };
    let good = json!({"name": "tool_search", "arguments": {"queries": ["list notes"]}});
    let found = |answer: &Value| {
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("mcp__notes__list_notes"))
    };

    let mut raw = RawStdio::start(&config);
    for (id, (params, says)) in cases.iter().enumerate() {
        raw.send(&request(id, params));
        let answer = raw.answer(&json!(id));
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(answer["error"]["message"], *says, "{answer}");
    }
    raw.send(&request(99, &Some(good.clone())));
    let answer = raw.answer(&json!(99));
    assert!(found(&answer), "{answer}");
    drop(raw);

    let (_gateway, url) = http_gateway(&config);
    let session = open_raw_session(&url).await;
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    for (id, (params, says)) in cases.iter().enumerate() {
        let body = request(id, params).to_string();
        let r = raw_http(&url, "POST", &headers, body.as_bytes()).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            sse_messages(&r.body),
            [json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": says}})],
            "{r:?}"
        );
    }
    let body = request(99, &Some(good)).to_string();
    let r = raw_http(&url, "POST", &headers, body.as_bytes()).await;
    let answers = sse_messages(&r.body);
    assert!(answers.len() == 1 && found(&answers[0]), "{r:?}");
}

/// SIGTERM stops `serve --http` with more sessions open than it ends at once (16): every one of
/// them is ended (its end recorded, its `session_end` hook run) and the gateway exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_http_server_ends_more_sessions_than_it_ends_at_once() {
    const SESSIONS: usize = 20;
    let s = Scratch::new("http-stop-many");
    let ended = s.path("ended");
    std::fs::create_dir_all(&ended).expect("a directory for the hooks");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}[[hooks.session_end]]\ncommand = \"sh\"\nargs = [\"-c\", {:?}]\n",
            named_server("notes", &notebook(), ""),
            files_sections(&s),
            format!("cat > \"$(mktemp -p {ended:?} end.XXXXXX)\"")
        ),
    );
    let (mut gateway, url) = http_gateway(&config);
    let mut clients = Vec::new();
    for _ in 0..SESSIONS {
        let client = http_client(&url, TestClient::default()).await;
        ok(&search(&client, json!({"queries": ["list notes"]})).await);
        clients.push(client);
    }
    signal(gateway.id(), "TERM");
    exit_of(
        &mut gateway,
        120,
        &format!("on SIGTERM with {SESSIONS} sessions open"),
    )
    .await;
    let audit = s.audit();
    let sessions = |outcome: &str| -> std::collections::BTreeSet<String> {
        audit
            .iter()
            .filter(|r| r["kind"] == "session" && r["outcome"] == outcome)
            .map(|r| r["session"].to_string())
            .collect()
    };
    assert_eq!(sessions("start").len(), SESSIONS, "{audit:#?}");
    assert_eq!(sessions("end"), sessions("start"), "{audit:#?}");
    let hooks = std::fs::read_dir(&ended)
        .expect("the hooks' directory")
        .count();
    assert_eq!(hooks, SESSIONS, "a session_end hook per session");
    // The clients stayed connected until the gateway was gone.
    drop(clients);
}

/// A streamable HTTP MCP server with sessions, on 127.0.0.1 at the port given: one tool, `echo`,
/// which answers HTTP 500 for the text `fail500` and a tool's own error about a session for
/// `tool-session-error`.
/// A request naming a session it does not know (one from before it restarted) is answered 400
/// with a JSON-RPC error: with the request's id and -32001 "Session not found" (`400-id`), or
/// without an id (`400-bare`, as the reference "everything" server answers).
const SESSION_HTTP_SERVER: &str = r#"
import json, sys, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
PORT, LOST = int(sys.argv[1]), sys.argv[2]
sessions = set()
TOOLS = [{"name": "echo", "description": "Echo the text back.",
          "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, obj=None, sid=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(code)
        if obj is not None: self.send_header("Content-Type", "application/json")
        if sid: self.send_header("Mcp-Session-Id", sid)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self): self.reply(405)
    def do_DELETE(self): self.reply(200)
    def do_POST(self):
        m = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        sid, method, mid = self.headers.get("Mcp-Session-Id"), m.get("method"), m.get("id")
        if method == "initialize":
            sid = uuid.uuid4().hex; sessions.add(sid)
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "web", "version": "0"}}}, sid)
        if sid not in sessions:
            if LOST == "400-id":
                return self.reply(400, {"jsonrpc": "2.0", "id": mid,
                                        "error": {"code": -32001, "message": "Session not found"}})
            return self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32000, "message": "Bad Request: No valid session ID provided"}})
        if mid is None: return self.reply(202)
        if method == "tools/list":
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
        if method == "tools/call":
            said = (m["params"].get("arguments") or {}).get("text")
            if said == "fail500":
                body = b"Internal Server Error"
                self.send_response(500); self.send_header("Content-Length", str(len(body)))
                self.end_headers(); return self.wfile.write(body)
            if said == "tool-session-error":
                return self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {
                    "code": -32000, "message": "No browser session is open; call browser_open first"}})
            text = "echo " + str(said)
            return self.reply(200, {"jsonrpc": "2.0", "id": mid,
                                    "result": {"content": [{"type": "text", "text": text}]}})
        if method == "ping": return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {}})
        self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
server = ThreadingHTTPServer(("127.0.0.1", PORT), H)
print("ready", flush=True)
server.serve_forever()
"#;

/// [`SESSION_HTTP_SERVER`] on `port`, answering an unknown session as `lost` says; returns once
/// it listens.
fn session_http_server(s: &Scratch, port: u16, lost: &str) -> Reaped {
    let script = s.write("session_http_server.py", SESSION_HTTP_SERVER);
    let mut child = std::process::Command::new("python3")
        .args([script.as_str(), &port.to_string(), lost])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the HTTP server");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("read its first line");
    assert_eq!(line.trim(), "ready", "the HTTP server did not start");
    Reaped(child)
}

/// A gateway in front of an HTTP server `web` at `port`.
async fn http_server_gateway(s: &Scratch, port: u16) -> Client {
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nrestart_delay_secs = 1\n\
             call_timeout_secs = 5\n[execute]\nrequire_search = false\n{}",
            files_sections(s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    wait_for("web to be ready", || async {
        server_status(&client, "web").await["state"] == "ready"
    })
    .await;
    client
}

/// An HTTP server that goes down is marked failed at the first call that cannot reach it (told
/// in words, naming the server, without the library's type names) and is reconnected once it is
/// back; the first server answers a stale session without an id, which names no call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_goes_down_is_reconnected_when_it_is_back() {
    let s = Scratch::new("http-down");
    let port = closed_port();
    let server = session_http_server(&s, port, "400-bare");
    let client = http_server_gateway(&s, port).await;
    assert_eq!(
        ok(&exec(&client, "mcp__web__echo", json!({"text": "one"})).await),
        "echo one"
    );
    drop(server);
    let down = err(&exec(&client, "mcp__web__echo", json!({"text": "two"})).await);
    assert!(
        down.contains("server \"web\"")
            && down.contains("cannot connect to 127.0.0.1:")
            && !down.contains("rmcp::")
            && !down.contains("reqwest"),
        "{down}"
    );
    wait_for("web to be marked failed", || async {
        server_status(&client, "web").await["state"] == "failed"
    })
    .await;
    let _server = session_http_server(&s, port, "400-bare");
    wait_for("calls of web to work again", || async {
        exec(&client, "mcp__web__echo", json!({"text": "three"}))
            .await
            .is_error
            != Some(true)
    })
    .await;
    assert_eq!(server_status(&client, "web").await["state"], "ready");
    client.cancel().await.expect("close");
}

/// An HTTP server that restarts between two calls no longer knows the gateway's session: its
/// answer (400, with the call's id and -32001 "Session not found", or with no id at all) fails
/// the call at once and has the gateway connect again, so later calls work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_lost_the_session_is_reconnected() {
    for lost in ["400-id", "400-bare"] {
        let s = Scratch::new(&format!("http-session-{lost}"));
        let port = closed_port();
        let server = session_http_server(&s, port, lost);
        let client = http_server_gateway(&s, port).await;
        assert_eq!(
            ok(&exec(&client, "mcp__web__echo", json!({"text": "one"})).await),
            "echo one"
        );
        drop(server);
        let _server = session_http_server(&s, port, lost);
        let first = exec(&client, "mcp__web__echo", json!({"text": "two"})).await;
        if first.is_error == Some(true) {
            let says = text(&first);
            assert!(
                says.contains("server \"web\"") && !says.contains("rmcp::"),
                "{lost}: {says}"
            );
        }
        wait_for(&format!("calls of web to work again ({lost})"), || async {
            exec(&client, "mcp__web__echo", json!({"text": "three"}))
                .await
                .is_error
                != Some(true)
        })
        .await;
        client.cancel().await.expect("close");
    }
}

/// An HTTP server that answers one call with an error status, or with a tool's own error that
/// speaks of a session, is still there: the call fails, the connection stays, and the next call
/// goes through at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_answering_an_error_keeps_its_connection() {
    let s = Scratch::new("http-error-answers");
    let port = closed_port();
    let _server = session_http_server(&s, port, "400-id");
    let client = http_server_gateway(&s, port).await;
    for bad in ["fail500", "tool-session-error"] {
        let failed = exec(&client, "mcp__web__echo", json!({"text": bad})).await;
        assert_eq!(failed.is_error, Some(true), "{bad}: {}", text(&failed));
        let next = exec(&client, "mcp__web__echo", json!({"text": "next"})).await;
        assert_eq!(ok(&next), "echo next", "{bad}");
    }
    let status = server_status(&client, "web").await;
    assert_eq!(
        (status["state"].as_str(), status["failures_total"].as_u64()),
        (Some("ready"), Some(0)),
        "{status}"
    );
    client.cancel().await.expect("close");
}

/// A server whose tools are not known and whose start keeps failing is still restarted in the
/// background after many failures, as the model is told, so it comes back once it can start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_failed_many_times_is_still_restarted() {
    let s = Scratch::new("many-failures");
    let marker = s.path("quits-fails");
    std::fs::write(&marker, "").expect("make quits fail");
    let tools = json!([tool(
        "echo",
        "Echo the arguments.",
        json!({"type": "object"})
    )]);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[execute]\nrequire_search = false\n{}",
            named_server_failing_while("quits", &tools, Some(&marker), ""),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    wait_for("quits to fail six times", || async {
        server_status(&client, "quits").await["failures_total"]
            .as_u64()
            .is_some_and(|n| n >= 6)
    })
    .await;
    let note = text(&exec(&client, "mcp__quits__echo", json!({})).await);
    assert!(
        note.contains("Server \"quits\" is not running")
            && note.contains("it is restarted in the background"),
        "{note}"
    );
    std::fs::remove_file(&marker).expect("let quits start");
    // Back: ready, with its tools listed (the list comes after the start).
    wait_for("quits to be back", || async {
        let status = server_status(&client, "quits").await;
        status["state"] == "ready" && status["tools"].as_u64().is_some_and(|n| n >= 1)
    })
    .await;
    let called = ok(&exec(&client, "mcp__quits__echo", json!({})).await);
    assert!(called.contains("\"server\":\"quits\""), "{called}");
    client.cancel().await.expect("close");
}

/// A call of a tool whose server has just come back does not beat the catalog to it: the server
/// reads as ready before the gateway has rebuilt its catalog with the tools it listed (a
/// rebuild that takes a while here, next to a server of 20,000 tools), and the call waits for
/// that rebuild rather than being told no tool has the name.
#[tokio::test]
async fn a_call_as_its_server_comes_back_waits_for_the_catalog_to_hold_its_tools() {
    let s = Scratch::new("back-before-rebuild");
    let marker = s.path("quits-fails");
    std::fs::write(&marker, "").expect("make quits fail");
    let many: Vec<Value> = (0..20_000)
        .map(|i| {
            tool(
                &format!("lookup_record_{i}"),
                &format!("Look up record {i} of the archive by its key, with its history."),
                json!({"type": "object", "properties": {"key": {"type": "string"}}}),
            )
        })
        .collect();
    let big = s.write("big.json", &Value::from(many).to_string());
    let echo = json!([tool(
        "echo",
        "Echo the arguments.",
        json!({"type": "object"})
    )]);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}[execute]\nrequire_search = false\n{}",
            format_args!(
                "[servers.big]\ncommand = \"python3\"\nargs = [{:?}, \"big\", {:?}]\n",
                fixture("named_server.py"),
                format!("@{big}")
            ),
            named_server_failing_while("quits", &echo, Some(&marker), ""),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    wait_for("big to be listed and quits to fail", || async {
        server_status(&client, "big").await["tools"].as_u64() == Some(20_000)
            && server_status(&client, "quits").await["failures_total"]
                .as_u64()
                .is_some_and(|n| n >= 1)
    })
    .await;
    std::fs::remove_file(&marker).expect("let quits start");
    wait_for("quits to be ready", || async {
        server_status(&client, "quits").await["state"] == "ready"
    })
    .await;
    let called = text(&exec(&client, "mcp__quits__echo", json!({})).await);
    assert!(called.contains("\"server\":\"quits\""), "{called}");
    client.cancel().await.expect("close");
}

/// A stdio MCP server whose first `tools/list` is answered only after its second (the re-list
/// after the `notifications/tools/list_changed` it sends right after start-up, for a tool it
/// registered late): the older list must not replace the newer.
const LATE_CHANGE_SERVER: &str = r#"
import json, sys, threading, time
lock = threading.Lock()
second_answered = threading.Event()
lists = [0]
tools = [{"name": "echo", "description": "Echo.", "inputSchema": {"type": "object"}}]
def send(m):
    with lock:
        sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def handle(m):
    mid, method, p = m.get("id"), m.get("method"), m.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": p.get("protocolVersion"),
              "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {"name": "lc", "version": "0"}}})
    elif method == "notifications/initialized":
        time.sleep(0.2)
        tools.append({"name": "late", "description": "Registered late.", "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    elif method == "tools/list":
        with lock:
            lists[0] += 1; n = lists[0]; snapshot = list(tools)
        if n == 1:
            second_answered.wait(20); time.sleep(0.5)
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": snapshot}})
        if n == 2: second_answered.set()
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "called"}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
for line in sys.stdin:
    if line.strip():
        threading.Thread(target=handle, args=(json.loads(line),), daemon=True).start()
"#;

/// A tool list that changes while the server starts is not lost: the list asked for after
/// `notifications/tools/list_changed` wins over the start's own, older list, which was answered
/// after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_changed_during_start_up_is_kept() {
    let s = Scratch::new("late-change");
    let script = s.write("late_change.py", LATE_CHANGE_SERVER);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.lc]\ncommand = \"python3\"\nargs = [{script:?}]\n\
             [execute]\nrequire_search = false\n{}",
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    // Runs once the start is done, its own list written.
    wait_for("lc to answer a call", || async {
        exec(&client, "mcp__lc__echo", json!({})).await.is_error != Some(true)
    })
    .await;
    wait_for("the late tool to be known", || async {
        ok(&search(&client, json!({"tool_names": ["mcp__lc__late"]})).await)
            .starts_with("1. mcp__lc__late\n")
    })
    .await;
    assert_eq!(
        ok(&exec(&client, "mcp__lc__late", json!({})).await),
        "called"
    );
    client.cancel().await.expect("close");
}

/// A server run through a wrapper (`sh -c`) whose own child lives on: the config, and the file
/// the background process's pid is written to.
fn wrapped_server(s: &Scratch) -> (String, String) {
    let pidfile = s.path("sleeper.pid");
    let script = format!(
        "sleep 1000 & echo $! > {pidfile:?}; exec python3 {:?} notes {:?}",
        fixture("named_server.py"),
        notebook().to_string()
    );
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.notes]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n\
             [execute]\nrequire_search = false\n{}",
            files_sections(s)
        ),
    );
    (config, pidfile)
}

/// The wrapper's own child, by the pid [`wrapped_server`] wrote, killed when dropped.
fn sleeper(pidfile: &str) -> KillOnDrop {
    let pid = std::fs::read_to_string(pidfile).expect("the pid file");
    KillOnDrop(pid.trim().to_owned())
}

/// Whether the audit log holds a session's end record.
fn a_session_ended(s: &Scratch) -> bool {
    s.audit()
        .iter()
        .any(|r| r["kind"] == "session" && r["outcome"] == "end")
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Kills process `pid`, if the test failed and left it.
struct KillOnDrop(String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.0])
            .status();
    }
}

/// The processes a stdio server started itself are stopped with it when the gateway exits: the
/// whole process group, not only the process the gateway started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_server_started_is_stopped_when_the_gateway_exits() {
    let s = Scratch::new("group-exit");
    let (config, pidfile) = wrapped_server(&s);
    let client = stdio_client(&config, TestClient::default()).await;
    ok(&exec(&client, "mcp__notes__list_notes", json!({})).await);
    let sleeper = sleeper(&pidfile);
    assert!(!gone(&sleeper.0), "the background process runs");
    client.cancel().await.expect("close");
    wait_for("the server's own child to be stopped", || async {
        gone(&sleeper.0)
    })
    .await;
}

/// SIGTERM to a stdio gateway ends its session (recorded) and stops its servers' process groups
/// before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_a_stdio_gateway_stops_its_servers_and_ends_the_session() {
    let s = Scratch::new("group-sigterm");
    let (config, pidfile) = wrapped_server(&s);
    let (client, gateway) = stdio_gateway(&config, TestClient::default(), |_| {}).await;
    ok(&exec(&client, "mcp__notes__list_notes", json!({})).await);
    let sleeper = sleeper(&pidfile);
    signal(gateway, "TERM");
    wait_for("the gateway to exit", || async {
        gone(&gateway.to_string())
    })
    .await;
    wait_for("the server's own child to be stopped", || async {
        gone(&sleeper.0)
    })
    .await;
    assert!(a_session_ended(&s), "{:#?}", s.audit());
    drop(client);
}

/// SIGHUP (a terminal closing) stops an HTTP gateway as SIGTERM does: its session ends
/// (recorded), its servers' process groups are stopped, and it exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_stops_the_http_gateway_like_sigterm() {
    let s = Scratch::new("group-sighup");
    let (config, pidfile) = wrapped_server(&s);
    let (mut gateway, url) = http_gateway(&config);
    let client = http_client(&url, TestClient::default()).await;
    ok(&exec(&client, "mcp__notes__list_notes", json!({})).await);
    let sleeper = sleeper(&pidfile);
    signal(gateway.id(), "HUP");
    let exited = exit_of(&mut gateway, 60, "on SIGHUP").await;
    assert!(exited.success(), "a clean stop on SIGHUP: {exited:?}");
    wait_for("the server's own child to be stopped", || async {
        gone(&sleeper.0)
    })
    .await;
    assert!(a_session_ended(&s), "{:#?}", s.audit());
    drop(client);
}

/// A gateway that cannot listen on its HTTP address (another one has it) exits before it
/// starts a server: the audit log they share gets no record of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_whose_port_is_taken_starts_no_server() {
    let s = Scratch::new("port-taken");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[execute]\nrequire_search = false\n{}",
            named_server("notes", &notebook(), ""),
            files_sections(&s)
        ),
    );
    let (_first, url) = http_gateway(&config);
    let client = http_client(&url, TestClient::default()).await;
    ok(&exec(&client, "mcp__notes__list_notes", json!({})).await);
    let before = s.audit();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    // Its configuration has a server the first one's has not (so none of its tools is cached,
    // and it would start at once), and the same audit log.
    let other = s.write(
        "other.toml",
        &format!(
            "{}{}",
            named_server("other", &notebook(), ""),
            files_sections(&s)
        ),
    );
    let second = std::process::Command::new(TOOLSHELF)
        .args(["serve", "--config", &other, "--http", &addr])
        .env("TOOLSHELF_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the second gateway");
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{said}");
    assert!(said.contains(&format!("cannot listen on {addr}")), "{said}");
    assert!(!said.contains("starting"), "{said}");
    assert_eq!(s.audit(), before, "the second gateway wrote no record");
    drop(client);
}

/// A status file whose pid now belongs to another process (its gateway was killed, and the pid
/// reused) is no running gateway: `toolshelf status` lists the live one only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_file_whose_pid_was_reused_is_no_running_gateway() {
    let s = Scratch::new("status-pid-reused");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}",
            named_server("notes", &notebook(), ""),
            files_sections(&s)
        ),
    );
    let (gateway, _url) = http_gateway(&config);
    let own = format!("-{}.json", gateway.id());
    let cache = std::path::PathBuf::from(s.path("cache"));
    let mut file = None;
    wait_for("the gateway's status file", || {
        file = std::fs::read_dir(&cache).ok().and_then(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| p.to_string_lossy().ends_with(&own))
        });
        let found = file.is_some();
        async move { found }
    })
    .await;
    let file = file.expect("found");
    // A process of someone else's under a pid that a status file names.
    let mut other = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .expect("spawn sleep");
    let mut status: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
    status["pid"] = json!(other.id());
    let stale = file
        .to_string_lossy()
        .replace(&own, &format!("-{}.json", other.id()));
    std::fs::write(&stale, status.to_string()).expect("write the stale file");
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &config, "--json"])
        .output()
        .expect("status");
    let _ = other.kill();
    let _ = other.wait();
    let listed: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let pids: Vec<&Value> = listed["gateways"]
        .as_array()
        .expect("gateways")
        .iter()
        .map(|g| &g["pid"])
        .collect();
    assert_eq!(pids, [&json!(gateway.id())], "{listed:#}");
    assert!(
        !std::path::Path::new(&stale).exists(),
        "the stale file is removed"
    );
}

/// `toolshelf://status` is JSON, as its listing says; an unknown method is named in its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_resource_is_json_and_an_unknown_method_is_named() {
    let s = Scratch::new("status-mime");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}",
            named_server("notes", &notebook(), ""),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let listed = client.list_all_resources().await.expect("resources/list");
    assert_eq!(listed[0].mime_type.as_deref(), Some("application/json"));
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "toolshelf://status",
        ))
        .await
        .expect("read toolshelf://status");
    let rmcp::model::ResourceContents::TextResourceContents { mime_type, .. } = &read.contents[0]
    else {
        panic!("status is text")
    };
    assert_eq!(mime_type.as_deref(), Some("application/json"));
    client.cancel().await.expect("close");

    let mut raw = RawStdio::start(&config);
    raw.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "foo/bar"}));
    let answer = raw.answer(&json!(5));
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    assert_eq!(
        answer["error"]["message"], "Method not found: foo/bar",
        "{answer}"
    );
}

/// Path of the installed `mcp-server-everything`; panics with the fix when it is missing.
fn everything_server() -> String {
    let p = common::harness::home_cache("TOOLSHELF_MCP_PREFIX", "toolshelf-mcp")
        .join("npm/node_modules/.bin/mcp-server-everything");
    assert!(
        p.exists(),
        "{} is not installed: run `bash scripts/install-mcp-servers.sh` (or `bash scripts/test`, which runs it) first",
        p.display()
    );
    p.display().to_string()
}

/// `tools/call` of `defer_execute` running the long-running tool of `server` (an everything
/// server: four steps, each followed by a progress notification when the call has a token), with
/// `meta` as the request's `_meta`.
fn long_running_call(id: u64, server: &str, meta: Option<Value>) -> Value {
    let mut params = json!({
        "name": "defer_execute",
        "arguments": {
            "tool_name": format!("mcp__{server}__trigger-long-running-operation"),
            "params": {"duration": 1, "steps": 4},
        },
    });
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// Checks that `messages` are the four progress notifications of the long-running tool with
/// the client's `token`, then the call's answer (request `id`, the tool's own result), and
/// nothing else.
fn assert_progress_then_result(messages: &[Value], token: &str, id: u64) {
    let (answer, progress) = messages.split_last().expect("messages");
    let text = answer["result"]["content"][0]["text"].as_str();
    assert!(
        answer["id"] == id
            && text.is_some_and(|t| t.starts_with("Long running operation completed")),
        "the call's result comes last: {messages:#?}"
    );
    // Numbers as numbers: the gateway may write 1 as 1.0.
    let seen: Vec<(String, Value, Option<f64>, Option<f64>)> = progress
        .iter()
        .map(|m| {
            let p = &m["params"];
            (
                m["method"].as_str().unwrap_or_default().to_owned(),
                p["progressToken"].clone(),
                p["progress"].as_f64(),
                p["total"].as_f64(),
            )
        })
        .collect();
    let expected: Vec<(String, Value, Option<f64>, Option<f64>)> = (1..=4)
        .map(|i| {
            (
                "notifications/progress".to_owned(),
                json!(token),
                Some(f64::from(i)),
                Some(4.0),
            )
        })
        .collect();
    assert_eq!(
        seen, expected,
        "the server's progress, with the client's own token, before the result: {messages:#?}"
    );
}

/// The messages a stdio gateway writes up to and including the answer to request `id`.
fn stdio_messages_until(lines: &std::sync::mpsc::Receiver<String>, id: u64) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut messages = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no answer to request {id} ({e}); got {messages:#?}"));
        let message: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let done = message["id"] == id;
        messages.push(message);
        if done {
            return messages;
        }
    }
}

/// A client that calls a tool with `_meta.progressToken`, through `defer_execute`, is sent the
/// server's `notifications/progress` for that call with its own token (what clients that extend
/// their request timeout on progress wait for), each before the call's result and none after it,
/// over stdio and over HTTP; a call without a token gets none, and two sessions calling at once
/// each get only their own call's progress. The real everything server's long-running tool, run
/// over stdio and over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_of_a_call_reaches_its_client_with_the_clients_token() {
    use std::io::{BufRead, Write};
    let s = Scratch::new("progress");
    let port = closed_port();
    let _everything_http = Reaped(
        std::process::Command::new(everything_server())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn the everything server over HTTP"),
    );
    wait_for("the everything server to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.everything]\ncommand = {:?}\nargs = [\"stdio\"]\n\
             [servers.everything_http]\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
             [execute]\nrequire_search = false\n{}",
            everything_server(),
            files_sections(&s)
        ),
    );

    // Over stdio, by hand: every line the gateway writes is seen, in order.
    let mut child = std::process::Command::new(TOOLSHELF)
        .args(["serve", "--config", &config])
        .env("TOOLSHELF_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn toolshelf serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let _gateway = Reaped(child);
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut send = |message: &Value| {
        writeln!(stdin, "{message}").expect("write a message");
        stdin.flush().expect("flush");
    };
    send(&serde_json::from_str::<Value>(RAW_INITIALIZE).expect("JSON"));
    stdio_messages_until(&lines, 41);
    send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(&long_running_call(
        1,
        "everything",
        Some(json!({"progressToken": "tok-1"})),
    ));
    assert_progress_then_result(&stdio_messages_until(&lines, 1), "tok-1", 1);
    // Without a token: no progress, and nothing left over from the call before.
    send(&long_running_call(2, "everything", None));
    let untokened = stdio_messages_until(&lines, 2);
    assert_eq!(untokened.len(), 1, "only the result: {untokened:#?}");

    // Over HTTP, two sessions at once (one calling each server): each call's event stream has
    // its own progress.
    let (_http, url) = http_gateway(&config);
    let (a, b) = tokio::join!(open_raw_session(&url), open_raw_session(&url));
    let post = |session: String, id: u64, server: &'static str, token: &'static str| {
        let url = url.clone();
        async move {
            let headers = [
                ("Mcp-Session-Id", session.as_str()),
                ("MCP-Protocol-Version", "2025-06-18"),
            ];
            let meta = json!({"progressToken": token});
            let body = long_running_call(id, server, Some(meta)).to_string();
            let r = raw_http(&url, "POST", &headers, body.as_bytes()).await;
            assert_eq!(r.status, 200, "{r:?}");
            sse_messages(&r.body)
        }
    };
    let (in_a, in_b) = tokio::join!(
        post(a, 7, "everything", "tok-a"),
        post(b, 8, "everything_http", "tok-b")
    );
    assert_progress_then_result(&in_a, "tok-a", 7);
    assert_progress_then_result(&in_b, "tok-b", 8);
}

/// The server `scripts` is taken by a configuration's script tools; the error about a server
/// already named so blames the file that defines it: the `--mcp-config` file when it came from
/// there, the configuration for its own `[servers.scripts]`.
#[test]
fn a_server_in_the_way_of_script_tools_is_blamed_on_the_file_that_defines_it() {
    let s = Scratch::new("scripts-taken");
    s.write(
        "tools/hello.star",
        "description = \"Say hello.\"\ndef run(params):\n    return \"hi\"\n",
    );
    let tools = "[tools.hello]\nscript = \"tools/hello.star\"\n[cache]\nenabled = false\n";
    let config = s.write("s.toml", tools);
    let mcp = s.write(
        "m.json",
        &json!({"mcpServers": {"scripts": {"command": "python3"}}}).to_string(),
    );
    let own = s.write(
        "own.toml",
        &format!("{tools}[servers.scripts]\ncommand = \"python3\"\n"),
    );
    let stderr = |args: &[&str]| {
        let out = std::process::Command::new(TOOLSHELF)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("toolshelf");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for command in ["status", "serve"] {
        let said = stderr(&[command, "--config", &config, "--mcp-config", &mcp]);
        assert!(
            said.contains(&format!(
                "{mcp}: mcpServers.scripts is taken by script tools ([tools.NAME] script in {config})"
            )) && !said.contains("[servers.scripts]"),
            "{command}: {said}"
        );
        let said = stderr(&[command, "--config", &own]);
        assert!(
            said.contains(&format!(
                "{own}: [servers.scripts] is taken by script tools"
            )),
            "{command}: {said}"
        );
    }
}

/// A server that runs the gateway again on its own configuration (the client's toolshelf entry
/// in an mcp.json the gateway reuses) would start gateways without end: the inner gateway
/// refuses to start, and the outer one reports that server failed, saying why. (The wrapper
/// stops the chain at depth 2 should the refusal not come.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_as_its_own_server_refuses_to_start() {
    let s = Scratch::new("fronts-itself");
    let path = s.path("toolshelf.toml");
    let wrapper = "d=${DEPTH:-0}; if [ \"$d\" -ge 2 ]; then echo 'depth guard' >&2; exit 7; fi; \
                   DEPTH=$((d+1)) exec \"$0\" serve --config \"$1\"";
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}[servers.again]\ncommand = \"sh\"\nargs = [\"-c\", {wrapper:?}, {TOOLSHELF:?}, {path:?}]\n",
            files_sections(&s),
            named_server("a", &json!([tool("ping", "Answer pong.", json!({"type": "object"}))]), ""),
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    // The reason with the server's stderr is the operator's: `toolshelf status`, not the
    // client's status resource.
    let operator_sees = || {
        let out = std::process::Command::new(TOOLSHELF)
            .args(["status", "--config", &config, "--json"])
            .output()
            .expect("status");
        let status: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let gateways = status["gateways"].as_array().cloned().unwrap_or_default();
        std::iter::once(&status)
            .chain(gateways.iter())
            .flat_map(|g| g["servers"].as_array().into_iter().flatten())
            .any(|s| {
                s["name"] == "again"
                    && s["reason"].as_str().is_some_and(|r| {
                        r.contains("was started by a gateway of the same configuration")
                    })
            })
    };
    wait_for("the inner gateway to refuse to start", || async {
        operator_sees()
    })
    .await;
    wait_for("the other server to be ready", || async {
        server_status(&client, "a").await["state"] == "ready"
    })
    .await;
    client.cancel().await.expect("close");
}
