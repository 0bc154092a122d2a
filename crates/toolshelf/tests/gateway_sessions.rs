//! End-to-end tests of a gateway session's life: calls the client cancels or leaves behind,
//! `session_start` hooks before the first call, hooks whose replacement result is not a result,
//! the end of every HTTP session when the server is stopped, a call slow to check that holds no
//! other session, a signal before the handshake, requests whose params are not an object, and
//! the deletion of a session the server does not have. The real `toolshelf serve` binary in
//! front of `fixtures/test_server.py`, driven by rmcp's client over stdio and HTTP.

mod common;

use common::*;
use rmcp::RoleClient;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::{PeerRequestOptions, RequestHandle};
use serde_json::{Value, json};

/// The test server, with a call timeout far beyond any test.
fn test_server() -> String {
    format!(
        "[servers.test]\ncommand = \"python3\"\nargs = [{:?}]\ncall_timeout_secs = 600\n[execute]\nrequire_search = false\n",
        fixture("test_server.py")
    )
}

/// Writes the configuration of the test server, `s`'s files and `hooks` (see [`hook`]),
/// returning its path.
fn gateway_config(s: &Scratch, hooks: &[String]) -> String {
    let mut text = test_server() + &files_sections(s);
    for h in hooks {
        text.push_str(h);
    }
    s.write("toolshelf.toml", &text)
}

/// A hook running `script` with `sh -c`, with more of its section in `extra`.
fn hook(event: &str, script: &str, extra: &str) -> String {
    format!("[[hooks.{event}]]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n{extra}")
}

/// Starts `defer_execute` of the test server's `sleep` for `secs` seconds, without waiting for
/// its answer.
async fn start_sleep(client: &Client, secs: u64) -> RequestHandle<RoleClient> {
    let Value::Object(args) = json!({"tool_name": "mcp__test__sleep", "params": {"secs": secs}})
    else {
        unreachable!()
    };
    let call =
        CallToolRequest::new(CallToolRequestParams::new("defer_execute").with_arguments(args));
    client
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(call),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("send the call")
}

/// What the test server's `sleeping` or `cancels` lists: request ids it received.
async fn server_list(client: &Client, tool: &str) -> Vec<Value> {
    let r = exec(client, tool, json!({})).await;
    ok(&r);
    let first = r.content[0].as_text().expect("text").text.clone();
    serde_json::from_str(&first).unwrap_or_else(|e| panic!("{tool} answered {first:?}: {e}"))
}

/// Waits until the test server has received `n` `sleep` calls; returns the last one's id.
async fn nth_sleep(client: &Client, n: usize) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let ids = server_list(client, "mcp__test__sleeping").await;
        if let Some(id) = ids.get(n - 1) {
            return id.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for sleep call {n} to reach the server"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A call the client cancels is abandoned: the server is sent `notifications/cancelled`, no
/// `post_call` hook sees a result, and the audit says `cancelled`. A call still running when the
/// client disconnects is abandoned too, and recorded before the session's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_the_client_cancels_are_abandoned() {
    let s = Scratch::new("cancel");
    let post = s.path("post_call.log");
    let config = gateway_config(
        &s,
        &[hook(
            "post_call",
            &format!("cat >> {post:?}; echo >> {post:?}"),
            "tools = \"^mcp__test__sleep$\"\n",
        )],
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let call = start_sleep(&client, 30).await;
    let id = nth_sleep(&client, 1).await;
    call.cancel(Some("the test cancels it".into()))
        .await
        .expect("cancel");
    wait_for("the cancellation to reach the server", || async {
        server_list(&client, "mcp__test__cancels")
            .await
            .contains(&id)
    })
    .await;
    wait_for("the call's audit record", || async {
        !s.calls_of("mcp__test__sleep").is_empty()
    })
    .await;
    let record = &s.calls_of("mcp__test__sleep")[0];
    assert_eq!(
        (&record["outcome"], &record["detail"]),
        (
            &json!("cancelled"),
            &json!("mcp__test__sleep was abandoned: the client cancelled the call")
        ),
        "{record}"
    );
    assert!(
        !std::path::Path::new(&post).exists(),
        "no post_call hook ran: {:?}",
        std::fs::read_to_string(&post)
    );

    // The client leaves with a call running.
    let _left = start_sleep(&client, 30).await;
    nth_sleep(&client, 2).await;
    client.cancel().await.expect("close");
    wait_for("the session's end", || async {
        s.audit()
            .iter()
            .any(|r| r["kind"] == "session" && r["outcome"] == "end")
    })
    .await;
    let audit = s.audit();
    let left = audit
        .iter()
        .position(|r| r["kind"] == "call" && r["tool"] == "mcp__test__sleep" && r != record)
        .unwrap_or_else(|| panic!("the call left running is audited: {audit:#?}"));
    assert_eq!(
        (&audit[left]["outcome"], &audit[left]["detail"]),
        (
            &json!("cancelled"),
            &json!("mcp__test__sleep was abandoned: its session ended")
        )
    );
    let end = audit
        .iter()
        .position(|r| r["kind"] == "session" && r["outcome"] == "end")
        .expect("end");
    assert!(
        left < end,
        "the call is recorded before the end: {audit:#?}"
    );
    assert!(
        !std::path::Path::new(&post).exists(),
        "no post_call hook ran"
    );
}

/// A change notice is told on a result that reaches the model: a call the client cancelled
/// does not use it up, and the session's next result carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_leaves_the_change_notice_for_the_next_result() {
    let s = Scratch::new("cancel-notice");
    let config = gateway_config(&s, &[]);
    let (_gateway, url) = http_gateway(&config);
    let watched = http_client(&url, TestClient::default()).await;
    let other = http_client(&url, TestClient::default()).await;
    let sleeping = start_sleep(&watched, 30).await;
    let id = nth_sleep(&other, 1).await;
    // Another session changes the tools, and sees the catalog catch up.
    ok(&exec(&other, "mcp__test__add_tool", json!({"name": "newbie"})).await);
    wait_for("the new tool", || async {
        text(&search(&other, json!({"tool_names": ["mcp__test__newbie"]})).await)
            .contains("1. mcp__test__newbie")
    })
    .await;
    sleeping
        .cancel(Some("the test cancels it".into()))
        .await
        .expect("cancel");
    wait_for("the cancelled call's audit record", || async {
        !s.calls_of("mcp__test__sleep").is_empty()
    })
    .await;
    wait_for("the cancellation to reach the server", || async {
        server_list(&other, "mcp__test__cancels")
            .await
            .contains(&id)
    })
    .await;
    let next = ok(&exec(&watched, "mcp__test__ping", json!({})).await);
    assert!(
        next.contains("the available tools changed; new: mcp__test__newbie"),
        "{next}"
    );
}

/// Over HTTP, deleting the session abandons its calls at once: the server is told, the audit
/// says `cancelled`, and the session's end follows. The call would end within the 5 s rmcp
/// lets a closed session's calls run on, so a call left to run would be audited `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_http_session_abandons_its_calls() {
    let s = Scratch::new("cancel-http");
    let config = gateway_config(&s, &[]);
    let (mut gateway, url) = http_gateway(&config);
    let leaving = http_client(&url, TestClient::default()).await;
    let observer = http_client(&url, TestClient::default()).await;
    let _call = start_sleep(&leaving, 3).await;
    let id = nth_sleep(&observer, 1).await;
    // Closing an rmcp HTTP client deletes its session.
    leaving.cancel().await.expect("close");
    wait_for("the call's audit record", || async {
        !s.calls_of("mcp__test__sleep").is_empty()
    })
    .await;
    let record = &s.calls_of("mcp__test__sleep")[0];
    assert_eq!(
        (&record["outcome"], &record["detail"]),
        (
            &json!("cancelled"),
            &json!("mcp__test__sleep was abandoned: its session ended")
        ),
        "{record}"
    );
    wait_for("the cancellation to reach the server", || async {
        server_list(&observer, "mcp__test__cancels")
            .await
            .contains(&id)
    })
    .await;
    let ended = |r: &Value| {
        r["kind"] == "session" && r["outcome"] == "end" && r["session"] == record["session"]
    };
    wait_for("the deleted session's end", || async {
        s.audit().iter().any(ended)
    })
    .await;
    let audit = s.audit();
    let call = audit.iter().position(|r| r == record).expect("the call");
    let end = audit.iter().position(ended).expect("the end");
    assert!(
        call < end,
        "the call is recorded before the end: {audit:#?}"
    );
    observer.cancel().await.expect("close");
    gateway.kill().expect("stop gateway");
    let _ = gateway.wait();
}

/// A session's calls and searches wait for its `session_start` hooks: the slow hook finishes
/// before the first call's `pre_call` hook and the first search's `post_search` hook run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_calls_wait_for_session_start_hooks() {
    let s = Scratch::new("start-first");
    let log = s.path("order.log");
    let mark = |what: &str| format!("cat > /dev/null; echo {what} >> {log:?}");
    let config = gateway_config(
        &s,
        &[
            hook(
                "session_start",
                &format!("sleep 5; {}", mark("session_start")),
                "",
            ),
            hook("pre_call", &mark("pre_call"), ""),
            hook("post_search", &mark("post_search"), ""),
        ],
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let (called, searched) = tokio::join!(
        exec(&client, "mcp__test__ping", json!({})),
        search(&client, json!({"tool_names": ["mcp__test__ping"]})),
    );
    assert_eq!(ok(&called), "pong");
    ok(&searched);
    let order = std::fs::read_to_string(&log).expect("the hooks' log");
    let order: Vec<&str> = order.lines().collect();
    assert_eq!(order[0], "session_start", "{order:?}");
    assert_eq!(order.len(), 3, "{order:?}");
    client.cancel().await.expect("close");
}

/// A `post_call` or `post_search` hook whose `result` is not a `CallToolResult` has failed, and
/// its `on_error` decides: `deny` withholds the result, `allow` keeps it. Either way the failure
/// names the hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_replacement_result_is_a_hook_failure() {
    let s = Scratch::new("bad-result");
    let bad = r#"cat > /dev/null; echo '{"result": {"content": "not a list"}}'"#;
    let config = gateway_config(
        &s,
        &[
            hook(
                "post_call",
                bad,
                "tools = \"^mcp__test__echo$\"\non_error = \"deny\"\n",
            ),
            hook(
                "post_call",
                bad,
                "tools = \"^mcp__test__ping$\"\non_error = \"allow\"\n",
            ),
            hook("post_search", bad, "on_error = \"deny\"\n"),
        ],
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let failure = |i: usize, event: &str| {
        format!(
            "hook {event}[{i}] \"sh\" failed: its \"result\" is not an MCP CallToolResult: invalid type: string \"not a list\", expected a sequence"
        )
    };
    let hook_errors = || -> Vec<Value> {
        s.audit()
            .into_iter()
            .filter(|r| r["kind"] == "hook_error")
            .map(|r| r["detail"].clone())
            .collect()
    };

    let withheld = err(&exec(&client, "mcp__test__echo", json!({"message": "secret"})).await);
    assert_eq!(
        withheld,
        format!(
            "mcp__test__echo ran, but a post_call hook withheld its result: {}",
            toolshelf_core::hook::FAILED_CLOSED
        ),
        "the model reads that the hook failed, not how"
    );
    assert_eq!(hook_errors(), [json!(failure(0, "post_call"))]);

    assert_eq!(
        ok(&exec(&client, "mcp__test__ping", json!({})).await),
        "pong"
    );
    assert_eq!(hook_errors()[1], json!(failure(1, "post_call")));

    let search = err(&search(&client, json!({"tool_names": ["mcp__test__ping"]})).await);
    assert_eq!(
        search,
        format!(
            "The search result was withheld by a hook: {}",
            toolshelf_core::hook::FAILED_CLOSED
        )
    );
    assert_eq!(hook_errors()[2], json!(failure(0, "post_search")));
    client.cancel().await.expect("close");
}

/// SIGTERM stops `serve --http` only after every open session has ended: its call in flight
/// abandoned and recorded, its end recorded, its `session_end` hooks run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_http_server_ends_every_session() {
    let s = Scratch::new("http-stop");
    // Each session_end hook writes a file of its own: the two run at once.
    let ended = s.path("ended");
    std::fs::create_dir_all(&ended).expect("a directory for the hooks");
    let config = gateway_config(
        &s,
        &[hook(
            "session_end",
            &format!("cat > \"$(mktemp -p {ended:?} end.XXXXXX)\""),
            "",
        )],
    );
    let (mut gateway, url) = http_gateway(&config);
    let busy = http_client(&url, TestClient::default()).await;
    let idle = http_client(&url, TestClient::default()).await;
    assert_eq!(ok(&exec(&idle, "mcp__test__ping", json!({})).await), "pong");
    let _call = start_sleep(&busy, 30).await;
    nth_sleep(&idle, 1).await;
    signal(gateway.id(), "TERM");
    exit_of(&mut gateway, 60, "on SIGTERM").await;
    let audit = s.audit();
    let started: Vec<&Value> = audit
        .iter()
        .filter(|r| r["kind"] == "session" && r["outcome"] == "start")
        .map(|r| &r["session"])
        .collect();
    assert_eq!(started.len(), 2, "{audit:#?}");
    for session in started {
        assert!(
            audit.iter().any(|r| r["kind"] == "session"
                && r["outcome"] == "end"
                && &r["session"] == session),
            "session {session} ended: {audit:#?}"
        );
    }
    let call = audit
        .iter()
        .position(|r| r["kind"] == "call" && r["tool"] == "mcp__test__sleep")
        .unwrap_or_else(|| panic!("the call in flight is audited: {audit:#?}"));
    assert_eq!(
        audit[call]["detail"],
        "mcp__test__sleep was abandoned: its session ended"
    );
    let end = audit
        .iter()
        .position(|r| {
            r["kind"] == "session"
                && r["outcome"] == "end"
                && r["session"] == audit[call]["session"]
        })
        .expect("its end");
    assert!(call < end, "the call is recorded before the end");
    let hooks: Vec<Value> = std::fs::read_dir(&ended)
        .expect("the hooks' directory")
        .map(|f| {
            let text = std::fs::read_to_string(f.expect("an entry").path()).expect("a file");
            serde_json::from_str(&text).expect("an event")
        })
        .collect();
    assert_eq!(hooks.len(), 2, "a session_end hook per session: {hooks:?}");
    assert!(hooks.iter().all(|e| e["event"] == "session_end"));
    // Both clients stayed connected until the gateway was gone.
    drop((busy, idle));
}

/// SIGTERM to a stdio gateway abandons its call in flight because its session ended: the client
/// sent no cancellation, and the audit log says so as it does over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_a_stdio_gateway_abandons_its_call_as_its_session_ended() {
    // The signal races the request's own cancellation: a few rounds.
    for round in 0..3 {
        let s = Scratch::new(&format!("stdio-stop-{round}"));
        let config = gateway_config(&s, &[]);
        let (client, gateway) = stdio_gateway(&config, TestClient::default(), |_| {}).await;
        let _call = start_sleep(&client, 30).await;
        nth_sleep(&client, 1).await;
        signal(gateway, "TERM");
        wait_for("the gateway to exit", || async { process_gone(gateway) }).await;
        let audit = s.audit();
        let call = audit
            .iter()
            .find(|r| r["kind"] == "call" && r["tool"] == "mcp__test__sleep")
            .unwrap_or_else(|| panic!("the call in flight is audited: {audit:#?}"));
        assert_eq!(
            call["detail"], "mcp__test__sleep was abandoned: its session ended",
            "round {round}: {audit:#?}"
        );
        drop(client);
    }
}

/// Runs `toolshelf serve` over stdio, writes `messages` (one JSON-RPC message a line), closes
/// its stdin and waits for it to exit.
fn stdio_then_eof(config: &str, messages: &[Value]) {
    use std::io::Write;
    let mut gateway = Reaped(
        std::process::Command::new(TOOLSHELF)
            .args(["serve", "--config", config])
            .env("TOOLSHELF_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn toolshelf serve"),
    );
    let mut stdin = gateway.stdin.take().expect("stdin");
    for m in messages {
        writeln!(stdin, "{m}").expect("write a message");
    }
    drop(stdin);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while gateway.try_wait().expect("poll the gateway").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway did not exit when its stdin closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The handshake of a raw stdio client.
fn handshake() -> [Value; 2] {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}
        }}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

/// A client that closes stdin right after its handshake still gets a start and then an end: the
/// end waits for the `session_start` hooks (here one that waits, until its timeout, for a file
/// only the `session_end` hook writes), and the gateway exits only after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_closed_right_after_its_handshake_ends_after_its_start() {
    let s = Scratch::new("start-then-end");
    let log = s.path("order.log");
    let released = s.path("released");
    let config = gateway_config(
        &s,
        &[
            hook(
                "session_start",
                &format!(
                    "cat > /dev/null; echo start >> {log:?}; while [ ! -e {released:?} ]; do sleep 0.1; done; echo started >> {log:?}"
                ),
                "timeout_secs = 3\n",
            ),
            hook(
                "session_end",
                &format!("cat > /dev/null; touch {released:?}; echo end >> {log:?}"),
                "",
            ),
        ],
    );
    stdio_then_eof(&config, &handshake());
    let audit = s.audit();
    let seen: Vec<String> = audit
        .iter()
        .filter(|r| r["kind"] == "session" || r["kind"] == "hook_error")
        .map(|r| match r["kind"].as_str() {
            Some("session") => format!("session {}", r["outcome"].as_str().unwrap_or("?")),
            _ => r["detail"]
                .as_str()
                .unwrap_or("?")
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" "),
        })
        .collect();
    assert_eq!(
        seen,
        ["session start", "hook session_start[0]", "session end"],
        "{audit:#?}"
    );
    let order = std::fs::read_to_string(&log).expect("the hooks' log");
    assert_eq!(order.lines().collect::<Vec<_>>(), ["start", "end"]);
}

/// A call that is abandoned is no use of its tool: it does not refresh the tool's activation,
/// so the tool expires as if the call had never been made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_does_not_keep_its_tool_loaded() {
    let s = Scratch::new("cancel-expiry");
    let running = s.path("running");
    let config = s.write(
        "toolshelf.toml",
        &[
            format!(
                "[servers.test]\ncommand = \"python3\"\nargs = [{:?}]\ncall_timeout_secs = 600\n[session]\nactivation_ttl_calls = 1\n",
                fixture("test_server.py")
            ),
            files_sections(&s),
            hook(
                "pre_call",
                &format!("cat > /dev/null; touch {running:?}"),
                "tools = \"^mcp__test__sleep$\"\n",
            ),
        ]
        .concat(),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["mcp__test__sleep"]})).await); // turn 1
    let call = start_sleep(&client, 30).await; // turn 2
    wait_for("the call to pass its pre_call hook", || async {
        std::path::Path::new(&running).exists()
    })
    .await;
    ok(&search(&client, json!({"tool_names": ["mcp__test__ping"]})).await); // turn 3
    call.cancel(Some("the test cancels it".into()))
        .await
        .expect("cancel");
    wait_for("the cancelled call's audit record", || async {
        !s.calls_of("mcp__test__sleep").is_empty()
    })
    .await;
    // Turn 4: last used at turn 1 (its search), so expired.
    let e = err(&exec(&client, "mcp__test__sleep", json!({"secs": 0})).await);
    assert!(
        e.starts_with("mcp__test__sleep was not run: its schema was loaded in this session but the tool has not been used for 3 tool calls"),
        "{e}"
    );
    client.cancel().await.expect("close");
}

/// A second SIGTERM while the server waits for its sessions' ends stops it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_the_http_server_at_once() {
    let s = Scratch::new("http-stop-twice");
    let ending = s.path("ending");
    let config = gateway_config(
        &s,
        &[hook(
            "session_end",
            &format!("cat > /dev/null; touch {ending:?}; exec sleep 300"),
            "timeout_secs = 300\n",
        )],
    );
    let (mut gateway, url) = http_gateway(&config);
    let client = http_client(&url, TestClient::default()).await;
    assert_eq!(
        ok(&exec(&client, "mcp__test__ping", json!({})).await),
        "pong"
    );
    let term = || {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &gateway.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
    };
    term();
    wait_for("the session_end hook to run", || async {
        std::path::Path::new(&ending).exists()
    })
    .await;
    term();
    exit_of(&mut gateway, 60, "on the second SIGTERM").await;
    drop(client);
}

/// A model-written tool whose schema costs minutes of CPU to check a call against (a
/// backtracking pattern on each of thousands of properties): while one session's call of it is
/// being checked, another session opens, lists and searches. The check runs off the async
/// workers, so even a gateway with a single one serves the other session meanwhile.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_check_of_one_sessions_call_holds_no_other_session() {
    let s = Scratch::new("slow-check");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}[authoring]\nenabled = true\nkeep_dir = \"\"\n",
            test_server(),
            files_sections(&s)
        ),
    );
    // One async worker: work a request did on it instead of the blocking pool would hold every
    // other session's requests.
    let (gateway, url) =
        common::http_gateway_with(&config, "127.0.0.1:0", &[("TOKIO_WORKER_THREADS", "1")]);
    let slow = http_client(&url, TestClient::default()).await;
    ok(&search(&slow, json!({"tool_names": ["tool_define"]})).await);
    let (definition, params) = common::slow_definition();
    let defined = ok(&exec(&slow, "tool_define", definition).await);
    assert!(defined.contains("Defined slow"), "{defined}");
    let before = common::cpu_ticks(gateway.id());
    let call = start_call(
        &slow,
        "defer_execute",
        json!({"tool_name": "slow", "params": params}),
    )
    .await;
    let checking = tokio::spawn(call.await_response());
    // Seconds of CPU since the call went out: the gateway is working on it. (Linux counts
    // /proc's times in USER_HZ, 100 a second.)
    let ticks_per_second = 100;
    wait_for("the gateway to work on the slow call", || async {
        common::cpu_ticks(gateway.id()) >= before + 3 * ticks_per_second
    })
    .await;
    let other = async {
        let other = http_client(&url, TestClient::default()).await;
        let names = list_names(&other).await;
        let found = ok(&search(&other, json!({"tool_names": ["mcp__test__echo"]})).await);
        other.cancel().await.expect("close");
        (names, found)
    };
    let (names, found) = tokio::time::timeout(std::time::Duration::from_secs(60), other)
        .await
        .expect("another session is served while the slow call is being checked");
    assert!(names.contains(&"tool_search".to_owned()), "{names:?}");
    assert!(found.contains("mcp__test__echo"), "{found}");
    assert!(
        !checking.is_finished(),
        "the slow call was still being checked"
    );
    checking.abort();
    drop(gateway);
}

/// Whether process `pid` is gone: no such process, or one that has exited and waits to be
/// reaped (a container's first process may never reap what is passed to it).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Kills process `pid` when dropped, so that a failed test leaves nothing running.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !process_gone(self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .status();
        }
    }
}

/// SIGTERM before any client's `initialize` (the servers are started at start-up) stops the
/// stdio gateway as one after the handshake does: it exits with status 0, and what a server's
/// wrapper started (here a `sleep` beside the server, in its process group) is gone with it.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_before_the_handshake_stops_the_servers_and_what_they_started() {
    let s = Scratch::new("term-before-init");
    let pid_file = s.path("sleep.pid");
    let script = format!(
        "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > \"$0\"; exec python3 {:?}",
        fixture("test_server.py")
    );
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.wrapped]\ncommand = \"sh\"\nargs = {}\n{}",
            json!(["-c", script, pid_file]),
            files_sections(&s)
        ),
    );
    let mut gateway = Reaped(
        std::process::Command::new(TOOLSHELF)
            .args(["serve", "--config", &config])
            .env("TOOLSHELF_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn toolshelf serve"),
    );
    // The server is ready (its status file says so): started, with its process group known.
    let status_file = format!("-{}.json", gateway.id());
    let cache = s.path("cache");
    wait_for("the server to be ready", || async {
        std::fs::read_dir(&cache)
            .into_iter()
            .flatten()
            .flatten()
            .any(|f| {
                let name = f.file_name().to_string_lossy().into_owned();
                name.starts_with("status-")
                    && name.ends_with(&status_file)
                    && std::fs::read_to_string(f.path())
                        .ok()
                        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                        .is_some_and(|v| v["servers"][0]["state"] == "ready")
            })
    })
    .await;
    let sleep: u32 = std::fs::read_to_string(&pid_file)
        .expect("the wrapper wrote its child's pid")
        .trim()
        .parse()
        .expect("a pid");
    let _sleep = KillOnDrop(sleep);
    assert!(!process_gone(sleep), "the wrapper's child runs");

    signal(gateway.id(), "TERM");
    let exited = exit_of(&mut gateway, 60, "on SIGTERM").await;
    assert!(
        exited.success(),
        "the gateway stops cleanly on SIGTERM before the handshake: {exited:?}"
    );
    wait_for("the wrapper's child to be gone", || async {
        process_gone(sleep)
    })
    .await;
}

/// A request whose params are not an object (JSON-RPC allows an array; MCP's methods take an
/// object, and the MCP library cannot read such a message at all) is answered -32602 (invalid
/// params) with its id, naming the params, over stdio: before, it was answered -32600 without
/// an id, and the client waited for its answer forever. The session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_params_are_not_an_object_is_answered_with_its_id_over_stdio() {
    let s = Scratch::new("params-array-stdio");
    let config = gateway_config(&s, &[]);
    let mut raw = RawStdio::start(&config);
    for (id, method, params, says) in params_not_an_object() {
        raw.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = raw.answer(&id);
        assert_eq!(
            answer,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": says}})
        );
    }
    raw.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}));
    assert_eq!(raw.answer(&json!(99))["result"], json!({}));
}

/// Requests with params that are not an object, and what they are answered.
fn params_not_an_object() -> [(Value, &'static str, Value, &'static str); 4] {
    [
        (
            json!(8),
            "tools/call",
            json!([1]),
            "Invalid params: the params of tools/call must be an object with \"name\" (the tool's name, a string), not an array",
        ),
        (
            json!("nine"),
            "tools/call",
            json!("x"),
            "Invalid params: the params of tools/call must be an object with \"name\" (the tool's name, a string), not a string",
        ),
        (
            json!(10),
            "resources/read",
            json!(["toolshelf://status"]),
            "Invalid params: the params of resources/read must be an object with \"uri\" (the resource's URI, a string), not an array",
        ),
        (
            json!(11),
            "tools/list",
            json!([]),
            "Invalid params: the params of tools/list must be an object, not an array",
        ),
    ]
}

/// Over HTTP the same requests get the same -32602 with their id, as a JSON body with status
/// 200 (as the gateway's other invalid-params answers), not a 400 saying the body is not
/// JSON-RPC; one of a session the server does not have gets 404 as any other request of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_params_are_not_an_object_is_answered_with_its_id_over_http() {
    let s = Scratch::new("params-array-http");
    let config = gateway_config(&s, &[]);
    let (_gateway, url) = http_gateway(&config);
    let session = open_raw_session(&url).await;
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    for (id, method, params, says) in params_not_an_object() {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let r = raw_http(&url, "POST", &headers, body.to_string().as_bytes()).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            r.json(),
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": says}}),
            "{r:?}"
        );
    }
    let body = json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": [1]});
    let r = raw_http(
        &url,
        "POST",
        &[
            ("Mcp-Session-Id", "no-such-session"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (404, "Not Found: Session not found")
    );
    // The session goes on.
    let body = json!({"jsonrpc": "2.0", "id": 13, "method": "ping"});
    let r = raw_http(&url, "POST", &headers, body.to_string().as_bytes()).await;
    assert_eq!(
        sse_messages(&r.body),
        [json!({"jsonrpc": "2.0", "id": 13, "result": {}})]
    );
}

/// `DELETE /mcp` of a session the server does not have (never opened, or deleted already) is
/// answered 404, as a POST or GET of it is (the MCP specification's answer for a session that
/// has ended), not 202; deleting an open session is still 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_the_server_does_not_have_is_not_found() {
    let s = Scratch::new("delete-unknown");
    let config = gateway_config(&s, &[]);
    let (_gateway, url) = http_gateway(&config);
    let delete = |id: String| {
        let url = url.clone();
        async move {
            raw_http(
                &url,
                "DELETE",
                &[
                    ("Mcp-Session-Id", &id),
                    ("MCP-Protocol-Version", "2025-06-18"),
                ],
                b"",
            )
            .await
        }
    };
    let never = delete("never-opened".into()).await;
    assert_eq!(
        (never.status, never.body.as_str()),
        (404, "Not Found: Session not found")
    );
    let session = open_raw_session(&url).await;
    // Ended: 204, which the Python SDK reads as done (it warns on rmcp's 202).
    assert_eq!(delete(session.clone()).await.status, 204);
    let again = delete(session).await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (404, "Not Found: Session not found")
    );
}
