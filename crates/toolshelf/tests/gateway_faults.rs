//! End-to-end tests of what the model is told when something goes wrong around a call: a late,
//! unreadable answer to a call already abandoned (at its timeout, or cancelled), servers that are
//! down beside what a search finds, and reminders after calls that were refused; what a client
//! is told of a call whose params cannot be read; and a stop with many HTTP sessions open. The
//! real `toolshelf serve` binary in front of fixture servers, driven by rmcp's client over stdio
//! and HTTP, or by hand.

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
/// process, and the log says what was dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_unreadable_answer_is_blamed_on_no_other_call() {
    let s = Scratch::new("late-answer");
    let (client, log) = late_gateway(&s, 1).await;
    ok(&exec(&client, "mcp__late__echo", json!({"n": 0})).await);
    let pid = server_status(&client, "late").await["pid"].clone();
    assert!(pid.is_u64(), "{pid}");

    for (n, kind) in [(1, "big"), (2, "broken")] {
        let late = err(&exec(&client, "mcp__late__late", json!({"kind": kind, "mb": 17})).await);
        assert!(
            late.starts_with("mcp__late__late did not answer within 1s"),
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
    let term = std::process::Command::new("kill")
        .args(["-TERM", &gateway.id().to_string()])
        .status()
        .expect("run kill");
    assert!(term.success());
    // A guard against a hang, not a measure of speed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while gateway.try_wait().expect("poll the gateway").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway did not exit on SIGTERM with {SESSIONS} sessions open"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
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
