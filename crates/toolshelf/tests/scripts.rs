//! Script tools end to end: `[tools.NAME] script` through the real `toolshelf serve`, an rmcp
//! client, search, validation, permissions and the audit log, and the limits under attack.

mod common;

use common::*;
use serde_json::{Value, json};

/// An HTTP server on 127.0.0.1 that answers every GET with `hello PATH`; returns its port.
async fn hello_server() -> u16 {
    serve(|request| {
        let path = String::from_utf8_lossy(request)
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_owned();
        let body = format!("hello {path}");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
    .await
}

/// An HTTP server on 127.0.0.1 that reads each request's head and writes what `answer` makes of
/// it; returns its port.
async fn serve(answer: impl Fn(&[u8]) -> Vec<u8> + Copy + Send + 'static) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        // Bounded: the tests make a handful of requests.
        for _ in 0..32 {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = sock.write_all(&answer(&got)).await;
            });
        }
    });
    port
}

const LOOKUP: &str = r#"
description = part("Look up a word on the", pkg.team, "dictionary service.")
schema = {
    "properties": {"word": {"type": "string", "description": "The word."}},
    "required": ["word"],
}

def run(params):
    r = http.get(pkg.base + "/words/" + params["word"])
    return {"status": r["status"], "body": r["body"], "stamped": len(time.iso()) == 20}
"#;

const SPIN: &str = r#"
description = "Counts for ever."
schema = {}

def run(params):
    n = 0
    for i in range(1000000000):
        for j in range(1000000000):
            n += 1
    return n
"#;

const GREEDY: &str = r#"
description = "Keeps everything."
schema = {}

def run(params):
    kept = []
    for i in range(100000000):
        kept.append("x" * 1000 + str(i))
    return len(kept)
"#;

const HUGE: &str = r#"
description = "One huge string."
schema = {"properties": {"n": {"type": "integer"}}}

def run(params):
    return len("a" * params.get("n", 2000000000))
"#;

// Starlark folds this constant while compiling, so the limit is reached while the script is
// being defined.
const FOLDED: &str = r#"
description = "One huge constant."
schema = {}

def run(params):
    return len("a" * 2000000000)
"#;

const DEEP: &str = r#"
description = "Recurses."
schema = {}

def down(n):
    return down(n + 1)

def run(params):
    return down(0)
"#;

const ESCAPE: &str = r#"
description = "Calls a host it may not."
schema = {}

def run(params):
    return http.get("http://example.com/exfiltrate")["body"]
"#;

const NEST: &str = r#"
description = "Nests a list in itself n times."
schema = {"properties": {"n": {"type": "integer"}}, "required": ["n"]}

def run(params):
    x = 1
    for i in range(params["n"]):
        x = [x]
    return x
"#;

fn config(s: &Scratch, port: u16) -> String {
    for (file, src) in [
        ("tools/nest.star", NEST),
        ("tools/lookup.star", LOOKUP),
        ("tools/spin.star", SPIN),
        ("tools/greedy.star", GREEDY),
        ("tools/huge.star", HUGE),
        ("tools/folded.star", FOLDED),
        ("tools/deep.star", DEEP),
        ("tools/escape.star", ESCAPE),
    ] {
        s.write(file, src);
    }
    format!(
        r#"[tools.lookup]
script = "tools/lookup.star"
[tools.spin]
script = "tools/spin.star"
[tools.greedy]
script = "tools/greedy.star"
[tools.huge]
script = "tools/huge.star"
[tools.folded]
script = "tools/folded.star"
[tools.deep]
script = "tools/deep.star"
[tools.escape]
script = "tools/escape.star"
[tools.nest]
script = "tools/nest.star"

[scripts]
allow_hosts = ["127.0.0.1:{port}"]
max_steps = 200000
max_heap_mb = 16
max_memory_mb = 1536
max_call_depth = 100
timeout_secs = 60

[template.vars]
team = "payments"
base = "http://127.0.0.1:{port}"

[permissions]
deny = ["mcp__scripts__lookup(word=secret*)"]

{}"#,
        files_sections(s)
    )
}

fn scripts_pid(status: &Value) -> Option<u64> {
    status["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "scripts")?["pid"]
        .as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_tools_run_through_the_gateway_and_their_limits_hold() {
    let s = Scratch::new("scripts");
    let port = hello_server().await;
    let cfg = s.write("toolshelf.toml", &config(&s, port));
    let client = stdio_client(&cfg, TestClient::default()).await;

    // The group is in the index, and search finds a script tool by its description.
    let tools = client.list_all_tools().await.expect("tools/list");
    let search_tool = tools
        .iter()
        .find(|t| t.name == "tool_search")
        .expect("tool_search");
    let index = search_tool.description.as_deref().unwrap_or_default();
    assert!(
        index.contains("mcp__scripts: Tools defined by Starlark scripts")
            && index.contains("  lookup"),
        "{index}"
    );
    let found = ok(&search(&client, json!({"queries": ["dictionary word"]})).await);
    assert!(found.contains("mcp__scripts__lookup"), "{found}");
    assert!(
        found.contains("Look up a word on the payments dictionary service."),
        "the description was rendered from the script: {found}"
    );
    ok(&search(
        &client,
        json!({"tool_names": [
            "mcp__scripts__lookup", "mcp__scripts__spin", "mcp__scripts__greedy",
            "mcp__scripts__huge", "mcp__scripts__deep", "mcp__scripts__escape",
            "mcp__scripts__folded"
        ]}),
    )
    .await);

    // A call: the script's HTTP request reaches the allowed host, its dict is the result.
    let r = ok(&exec(&client, "mcp__scripts__lookup", json!({"word": "tea"})).await);
    let v: Value = serde_json::from_str(&r).expect("JSON result");
    assert_eq!(
        v,
        json!({"status": 200, "body": "hello /words/tea", "stamped": true})
    );
    // Validation and permissions are the gateway's, as for any tool.
    let e = err(&exec(&client, "mcp__scripts__lookup", json!({})).await);
    assert!(e.contains("word"), "{e}");
    let e = err(&exec(
        &client,
        "mcp__scripts__lookup",
        json!({"word": "secretword"}),
    )
    .await);
    assert!(e.contains("forbids this call"), "{e}");

    let before = scripts_pid(&status(&client).await).expect("scripts server running");

    // Each attack is stopped with an error naming the limit.
    for (tool, says) in [
        (
            "mcp__scripts__spin",
            "stopped: the CPU-step limit of 200000 function calls and loop iterations was reached",
        ),
        (
            "mcp__scripts__greedy",
            "stopped: the memory limit of 16777216 bytes of Starlark heap was reached",
        ),
        (
            "mcp__scripts__huge",
            "stopped: the memory limit of 1536 MiB ([scripts] max_memory_mb) was reached",
        ),
        (
            "mcp__scripts__folded",
            "stopped: the memory limit of 1536 MiB ([scripts] max_memory_mb) was reached",
        ),
        (
            "mcp__scripts__deep",
            "stopped: the call-depth limit of 100 nested calls was reached",
        ),
        (
            "mcp__scripts__escape",
            "http.get: host example.com:80 is not in [scripts] allow_hosts (127.0.0.1:",
        ),
    ] {
        let e = err(&exec(&client, tool, json!({})).await);
        assert!(
            e.contains(says) && e.contains(&format!("script tool {tool:?}")),
            "{tool}: {e}"
        );
    }

    // Everything survived: the same scripts server, and a good call still works.
    assert_eq!(scripts_pid(&status(&client).await), Some(before));
    let r = ok(&exec(&client, "mcp__scripts__lookup", json!({"word": "again"})).await);
    assert!(r.contains("hello /words/again"), "{r}");
    client.cancel().await.expect("close");

    let calls: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "call")
        .collect();
    assert_eq!(calls.len(), 8, "{calls:?}");
    assert!(calls.iter().all(|c| c["server"] == "scripts"));
    let outcomes: Vec<&str> = calls
        .iter()
        .map(|c| c["outcome"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        outcomes,
        [
            "ok",
            "tool_error",
            "tool_error",
            "tool_error",
            "tool_error",
            "tool_error",
            "tool_error",
            "ok"
        ]
    );
}

/// A result is written as JSON and read back by the scripts server, which reads at most 128
/// levels: a run that returns a value nested deeper than 100 levels is an error naming the tool
/// and the limit, whatever the depth (past a few hundred levels the runner itself used to
/// overflow its stack), and the scripts server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_nested_too_deep_is_an_error_naming_the_limit() {
    let s = Scratch::new("scripts-nest");
    let cfg = s.write("toolshelf.toml", &config(&s, 9));
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["mcp__scripts__nest"]})).await);
    let before = scripts_pid(&status(&client).await).expect("scripts server running");
    let r = ok(&exec(&client, "mcp__scripts__nest", json!({"n": 100})).await);
    assert_eq!(r, format!("{}1{}", "[".repeat(100), "]".repeat(100)));
    for n in [101, 127, 200, 300, 5000] {
        let e = err(&exec(&client, "mcp__scripts__nest", json!({"n": n})).await);
        assert!(
            e.starts_with("script tool \"mcp__scripts__nest\" (tools/nest.star): script: stopped: run returned a value that nests more than 100 levels deep"),
            "{n}: {e}"
        );
    }
    assert_eq!(scripts_pid(&status(&client).await), Some(before));
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_does_not_define_itself_is_listed_as_unavailable() {
    let s = Scratch::new("scripts-bad");
    s.write(
        "bad.star",
        "description = 'x' + str(turn.number)\nschema = {}\ndef run(p):\n    return 1\n",
    );
    s.write(
        "good.star",
        "description = 'Says hi.'\nschema = {}\ndef run(p):\n    return 'hi'\n",
    );
    s.write(
        "run2.star",
        "description = 'Two.'\nschema = {}\ndef run(a, b):\n    return 1\n",
    );
    s.write(
        "badschema.star",
        "description = 'Odd.'\nschema = {'properties': {'a': {'type': 'nosuchtype'}}}\ndef run(p):\n    return 1\n",
    );
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "[tools.bad]\nscript = \"bad.star\"\n[tools.good]\nscript = \"good.star\"\n[tools.run2]\nscript = \"run2.star\"\n\
             [tools.badschema]\nscript = \"badschema.star\"\n{}",
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    // A forbidden read at the top level, a `run` that cannot take the params, a schema no call
    // could be checked against.
    for (tool, why) in [
        (
            "mcp__scripts__bad",
            "script tool \"mcp__scripts__bad\" (bad.star): script line 1: reads turn.number",
        ),
        (
            "mcp__scripts__run2",
            "script tool \"mcp__scripts__run2\" (run2.star): script line 3: failed: a script must define `def run(params): ...`, a function of one argument; its `run` needs 2 arguments",
        ),
        (
            "mcp__scripts__badschema",
            "script tool \"mcp__scripts__badschema\" (badschema.star): script: `schema` is not a valid JSON Schema (at /properties/a/type: ",
        ),
    ] {
        // Found, but not offered for a call: the hit says why none can work.
        let found = ok(&search(&client, json!({"tool_names": [tool]})).await);
        assert!(
            found.contains(&format!(
                "   cannot be called: this script tool is unavailable: its script could not be defined ({why}"
            )) && !found.contains("call: "),
            "{found}"
        );
        let e = err(&exec(&client, tool, json!({})).await);
        assert!(
            e.contains(why) && !e.contains("description_template") && !e.contains("server"),
            "{e}"
        );
    }
    // The status names each unavailable script with why, as `toolshelf status` shows it.
    let st = status(&client).await;
    let warnings: Vec<&str> = st["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(Value::as_str)
        .filter(|w| w.starts_with("script tool "))
        .collect();
    assert_eq!(warnings.len(), 3, "{st}");
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "script tool mcp__scripts__bad is unavailable: script tool \"mcp__scripts__bad\" (bad.star): script line 1: reads turn.number"
        )),
        "{warnings:?}"
    );
    // The other script is unaffected.
    ok(&search(&client, json!({"tool_names": ["mcp__scripts__good"]})).await);
    assert_eq!(
        ok(&exec(&client, "mcp__scripts__good", json!({})).await),
        "hi"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_template_value_is_not_served_from_the_cache() {
    let s = Scratch::new("scripts-cache-key");
    s.write(
        "echo.star",
        "description = 'Echo for ' + pkg.team\nschema = {}\ndef run(p):\n    return 'x'\n",
    );
    let config = |team: &str| {
        s.write(
            "toolshelf.toml",
            &format!(
                "[tools.echo]\nscript = \"echo.star\"\n[template.vars]\nteam = \"{team}\"\n{}",
                files_sections(&s)
            ),
        )
    };
    for team in ["payments", "billing"] {
        let client = stdio_client(&config(team), TestClient::default()).await;
        let found = ok(&search(&client, json!({"tool_names": ["mcp__scripts__echo"]})).await);
        assert!(
            found.contains(&format!("Echo for {team}")),
            "{team}: {found}"
        );
        client.cancel().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_slow_to_define_leave_the_others_listed() {
    // Four scripts that spin while being defined, each stopped at 8 s: one after another they
    // would outlast any fixed start-up wait of 30 s.
    let s = Scratch::new("scripts-slow-define");
    let spin_at_top = "description = 'Never done.'\nschema = {}\nn = 0\nfor i in range(1000000000):\n    for j in range(1000000000):\n        n += 1\ndef run(p):\n    return n\n";
    let mut tools = String::new();
    for k in 0..4 {
        s.write(&format!("slow{k}.star"), spin_at_top);
        tools.push_str(&format!("[tools.slow{k}]\nscript = \"slow{k}.star\"\n"));
    }
    s.write(
        "good.star",
        "description = 'Says hi.'\nschema = {}\ndef run(p):\n    return 'hi'\n",
    );
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{tools}[tools.good]\nscript = \"good.star\"\n\
             [scripts]\nmax_steps = 1000000000000\ntimeout_secs = 8\n{}",
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["mcp__scripts__good"]})).await);
    assert_eq!(
        ok(&exec(&client, "mcp__scripts__good", json!({})).await).trim(),
        "hi",
        "the good script is defined and runs"
    );
    let found = ok(&search(&client, json!({"tool_names": ["mcp__scripts__slow0"]})).await);
    assert!(
        found.contains("this script tool is unavailable")
            && found.contains("the time limit of 8 s ([scripts] timeout_secs)"),
        "{found}"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_past_its_time_is_killed_and_the_next_call_runs() {
    let s = Scratch::new("scripts-slow");
    s.write("slow.star", SPIN);
    s.write(
        "quick.star",
        "description = 'Quick.'\nschema = {}\ndef run(p):\n    return str(random.randint(1, 1))\n",
    );
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "[tools.slow]\nscript = \"slow.star\"\n[tools.quick]\nscript = \"quick.star\"\n\
             [scripts]\nmax_steps = 1000000000000\ntimeout_secs = 2\n{}",
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(
        &client,
        json!({"tool_names": ["mcp__scripts__slow", "mcp__scripts__quick"]}),
    )
    .await);
    let started = std::time::Instant::now();
    let e = err(&exec(&client, "mcp__scripts__slow", json!({})).await);
    assert!(
        e.contains("stopped: the time limit of 2 s ([scripts] timeout_secs) was reached"),
        "{e}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(
        ok(&exec(&client, "mcp__scripts__quick", json!({})).await),
        "1"
    );
    client.cancel().await.expect("close");
}

/// Processes whose environment holds `mark`.
fn marked_processes(mark: &str) -> Vec<String> {
    let needle = format!("TOOLSHELF_TEST_MARK={mark}");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
        .map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).replace('\0', " ")
        })
        .collect()
}

#[test]
fn a_running_script_does_not_outlive_its_gateway() {
    use std::io::{BufRead as _, Write as _};
    let s = Scratch::new("scripts-orphan");
    s.write("slow.star", SPIN);
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "[tools.slow]\nscript = \"slow.star\"\n\
             [scripts]\nmax_steps = 1000000000000\ntimeout_secs = 600\n{}",
            files_sections(&s)
        ),
    );
    let mark = format!("orphan-{}", std::process::id());
    // A client that ends by closing the gateway's stdin, so that the gateway shuts down on its
    // own and stops its scripts server.
    let mut gateway = std::process::Command::new(TOOLSHELF)
        .args(["serve", "--config", &cfg])
        .env("TOOLSHELF_LOG", "warn")
        .env("TOOLSHELF_TEST_MARK", &mark)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn toolshelf serve");
    let mut stdin = gateway.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(gateway.stdout.take().expect("stdout"));
    let mut send = |v: Value| writeln!(stdin, "{v}").expect("write");
    let mut answer = |id: u64| loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "the gateway ended"
        );
        let v: Value = serde_json::from_str(&line).expect("json");
        if v["id"] == id {
            return v;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    );
    answer(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "tool_search", "arguments": {"tool_names": ["mcp__scripts__slow"]}}}),
    );
    answer(2);
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "defer_execute", "arguments": {"tool_name": "mcp__scripts__slow", "params": {}}}}),
    );
    let runner = || {
        marked_processes(&mark)
            .iter()
            .any(|p| p.contains("__script-run"))
    };
    for _ in 0..100 {
        if runner() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        runner(),
        "the run is under way: {:?}",
        marked_processes(&mark)
    );
    drop(stdin);
    let status = gateway.wait().expect("the gateway ends");
    assert!(status.success(), "{status}");
    let mut left = marked_processes(&mark);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = marked_processes(&mark);
    }
    assert!(left.is_empty(), "still running: {left:?}");
}

/// A `tool_define` call's params.
fn definition(name: &str, script: &str) -> Value {
    json!({"name": name, "description": "Shout a text back, in capitals.",
           "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
           "script": script})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_the_model_defines_in_the_gateway_is_its_sessions_alone() {
    let s = Scratch::new("gateway-authoring");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            // A relative keep_dir is the configuration file's directory's.
            "{}[authoring]\nenabled = true\nmax_tools = 1\nmax_script_bytes = 200\nkeep_dir = \"authored\"\n\
             [scripts]\nallow_hosts = [\"127.0.0.1:9\"]\nmax_result_bytes = 1000\n{}",
            named_server(
                "notes",
                &json!([tool("add_note", "Add a note.", json!({"type": "object"}))]),
                ""
            ),
            files_sections(&s)
        ),
    );
    let (mut child, url) = http_gateway(&cfg);
    let one = http_client(&url, TestClient::default()).await;
    let other = http_client(&url, TestClient::default()).await;
    let list_before = serde_json::to_string(&one.list_all_tools().await.expect("tools/list"))
        .expect("list as JSON");
    let index = list_before.clone();
    assert!(index.contains("tool_define"), "tool_define is in the index");

    ok(&search(&one, json!({"tool_names": ["tool_define"]})).await);
    let shout = "def run(params):\n    return params[\"text\"].upper() + \"!\"\n";
    let defined = ok(&exec(&one, "tool_define", definition("shout", shout)).await);
    assert!(defined.contains("Defined shout"), "{defined}");
    assert!(
        defined.contains("new: shout"),
        "announced on the result: {defined}"
    );
    // Searchable at once, and it runs in a runner process.
    let found = ok(&search(&one, json!({"queries": ["shout text capitals"]})).await);
    assert!(found.contains("shout"), "{found}");
    assert_eq!(ok(&exec(&one, "shout", json!({"text": "hi"})).await), "HI!");
    let e = err(&exec(&one, "shout", json!({})).await);
    assert!(e.contains("text"), "validated against its schema: {e}");
    // The limits.
    let e = err(&exec(&one, "tool_define", definition("whisper", shout)).await);
    assert!(e.contains("[authoring] max_tools"), "{e}");
    // Found by meaning too, as every other tool is once the embedding ranker is ready: a Chinese
    // request ("capital letters") shares no word with its English description.
    let by_meaning = |t: &str| t.contains("1. shout") && t.contains("related by meaning");
    wait_for("a meaning-based hit for the session's own tool", || {
        let one = &one;
        async move { by_meaning(&text(&search(one, json!({"queries": ["大写字母"]})).await)) }
    })
    .await;
    // The frozen list did not change by one byte.
    let list_after = serde_json::to_string(&one.list_all_tools().await.expect("tools/list"))
        .expect("list as JSON");
    assert_eq!(list_before, list_after);
    // Another session does not have it.
    ok(&search(&other, json!({"tool_names": ["tool_define"]})).await);
    let e = err(&exec(&other, "shout", json!({"text": "no"})).await);
    assert!(e.contains("shout") && !e.contains("NO!"), "{e}");
    let big = format!("{shout}#{}\n", "x".repeat(300));
    let e = err(&exec(&other, "tool_define", definition("loud", &big)).await);
    assert!(e.contains("[authoring] max_script_bytes is 200"), "{e}");
    // The model's code reaches only the hosts of [authoring] allow_hosts, not those the
    // operator allowed vetted script tools; and no result is larger than max_result_bytes.
    let fetch = "def run(params):\n    if params[\"text\"] == \"big\":\n        return \"x\" * 5000\n    return http.get(\"http://127.0.0.1:9/\")\n";
    ok(&exec(&other, "tool_define", definition("fetch", fetch)).await);
    let e = err(&exec(&other, "fetch", json!({"text": "get"})).await);
    assert!(
        e.contains("host 127.0.0.1:9 is not in [authoring] allow_hosts"),
        "{e}"
    );
    let e = err(&exec(&other, "fetch", json!({"text": "big"})).await);
    assert!(
        e.contains("more than [scripts] max_result_bytes (1000)") && !e.contains("xxxx"),
        "{e}"
    );
    one.cancel().await.expect("close");
    other.cancel().await.expect("close");
    let _ = child.kill();
    let _ = child.wait();

    // Each tool was kept as a script-tool file; the operator promotes one to every session.
    let mut kept: Vec<std::path::PathBuf> = std::fs::read_dir(s.path("authored"))
        .expect("the keep directory")
        .flat_map(|d| std::fs::read_dir(d.expect("entry").path()).expect("session directory"))
        .map(|f| f.expect("file").path())
        .collect();
    kept.sort_by_key(|p| p.file_name().map(|n| n.to_owned()));
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept[0].ends_with("fetch.star"), "{kept:?}");
    kept.remove(0);
    assert!(kept[0].ends_with("shout.star"), "{kept:?}");
    let promoted = s.write(
        "promoted.toml",
        &format!(
            "[tools.shout]\nscript = {:?}\n{}",
            kept[0].display().to_string(),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&promoted, TestClient::default()).await;
    let found = ok(&search(&client, json!({"queries": ["shout text capitals"]})).await);
    assert!(found.contains("mcp__scripts__shout"), "{found}");
    assert!(found.contains("Shout a text back, in capitals."), "{found}");
    assert_eq!(
        ok(&exec(&client, "mcp__scripts__shout", json!({"text": "all"})).await),
        "ALL!"
    );
    client.cancel().await.expect("close");
}

/// A definition whose script's top level could not be read as a script tool's (a clock, a
/// per-turn value, a failure) is refused at once, naming the tool and the line, keeps no file and
/// takes no `max_tools` place: every call of it would fail, and its kept file would not load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_whose_top_level_cannot_run_is_refused_and_takes_no_place() {
    let s = Scratch::new("gateway-authoring-top-level");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[authoring]\nenabled = true\nmax_tools = 1\nkeep_dir = \"authored\"\n{}",
            named_server(
                "notes",
                &json!([tool("add_note", "Add a note.", json!({"type": "object"}))]),
                ""
            ),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["tool_define"]})).await);
    let run = "def run(params):\n    return 1\n";
    for (name, top, says) in [
        (
            "toptime",
            "x = time.now()\n",
            "tool_define \"toptime\": script line 1: uses time, which a script's top level cannot: it is read once, when the tool is defined, and is as pure as a description template (call time inside run, which has it); fix the script and define the tool again",
        ),
        (
            "topturn",
            "x = turn.number\n",
            "tool_define \"topturn\": script line 1: reads turn.number, a per-turn value, which a tool's script cannot read: a tool is defined once and called from any turn (take what a call needs as a param; pkg.* and session.* hold the fixed values); fix the script and define the tool again",
        ),
        (
            "topfail",
            "fail(\"boom\")\n",
            "tool_define \"topfail\": script line 1: failed: fail: boom; fix the script and define the tool again",
        ),
    ] {
        let e = err(&exec(
            &client,
            "tool_define",
            definition(name, &format!("{top}{run}")),
        )
        .await);
        assert_eq!(e, says);
        let e = err(&exec(&client, name, json!({"text": "x"})).await);
        assert!(!e.contains("script line"), "{name} is not defined: {e}");
    }
    // Nor does `defer_loading` beside a definition, refused saying why a defined tool has none.
    let mut deferred = definition("deferred", run);
    deferred["defer_loading"] = json!(false);
    let e = err(&exec(&client, "tool_define", deferred).await);
    assert!(
        e.contains("- at /defer_loading: \"defer_loading\" is not an argument of tool_define: a tool you define always goes on the shelf")
            && !e.contains("Additional properties"),
        "{e}"
    );
    // None of them took the one place max_tools allows.
    let defined = ok(&exec(&client, "tool_define", definition("fine", run)).await);
    assert!(defined.contains("Defined fine"), "{defined}");
    assert_eq!(ok(&exec(&client, "fine", json!({"text": "x"})).await), "1");
    client.cancel().await.expect("close");
    let kept: Vec<String> = std::fs::read_dir(s.path("authored"))
        .expect("the keep directory")
        .flat_map(|d| std::fs::read_dir(d.expect("entry").path()).expect("session directory"))
        .map(|f| f.expect("file").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept, ["fine.star"]);
}

/// Two definitions of one session made at once are checked side by side, and the second to be
/// kept is judged against the first: of two of one name one is defined and the other refused, and
/// of two names where `max_tools` leaves one place, one. The session's tools stay usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_made_at_once_are_judged_against_each_other() {
    let s = Scratch::new("gateway-authoring-at-once");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[authoring]\nenabled = true\nmax_tools = 2\nkeep_dir = \"\"\n{}",
            named_server(
                "notes",
                &json!([tool("add_note", "Add a note.", json!({"type": "object"}))]),
                ""
            ),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["tool_define"]})).await);
    let shout = "def run(params):\n    return params[\"text\"].upper() + \"!\"\n";
    let (a, b) = tokio::join!(
        exec(&client, "tool_define", definition("shout", shout)),
        exec(&client, "tool_define", definition("shout", shout)),
    );
    let outcomes = [a.is_error == Some(true), b.is_error == Some(true)];
    assert_eq!(
        outcomes.iter().filter(|e| **e).count(),
        1,
        "one defined, one refused: {} / {}",
        text(&a),
        text(&b)
    );
    let refused = if outcomes[0] { text(&a) } else { text(&b) };
    assert!(refused.contains("\"shout\""), "{refused}");
    assert_eq!(
        ok(&exec(&client, "shout", json!({"text": "hi"})).await),
        "HI!"
    );
    // One place is left; two new names are offered it at once.
    let (a, b) = tokio::join!(
        exec(&client, "tool_define", definition("yell", shout)),
        exec(&client, "tool_define", definition("holler", shout)),
    );
    let outcomes = [a.is_error == Some(true), b.is_error == Some(true)];
    assert_eq!(
        outcomes.iter().filter(|e| **e).count(),
        1,
        "one defined, one refused: {} / {}",
        text(&a),
        text(&b)
    );
    let (kept, refused) = if outcomes[0] {
        ("holler", text(&a))
    } else {
        ("yell", text(&b))
    };
    assert!(refused.contains("[authoring] max_tools"), "{refused}");
    assert_eq!(ok(&exec(&client, kept, json!({"text": "hi"})).await), "HI!");
    assert_eq!(
        ok(&exec(&client, "shout", json!({"text": "yo"})).await),
        "YO!"
    );
    client.cancel().await.expect("close");
}

/// A script of 15,336 bytes (under the default `[authoring] max_script_bytes`) that nests 15,000
/// unary minuses deep on one statement continued over 100 lines by `\` and CRLF.
fn continued_with_crlf() -> String {
    format!(
        "def run(params):\n    return 1\nx = {}1\n",
        format!("{}\\\r\n", "-".repeat(150)).repeat(100)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_nested_past_the_bound_is_refused_and_the_gateway_goes_on() {
    let s = Scratch::new("gateway-authoring-deep");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[authoring]\nenabled = true\nkeep_dir = \"\"\n{}",
            named_server(
                "notes",
                &json!([tool("add_note", "Add a note.", json!({"type": "object"}))]),
                ""
            ),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["tool_define"]})).await);
    let deep = continued_with_crlf();
    assert_eq!(deep.len(), 15_336);
    for (name, script, says) in [
        (
            "deep",
            deep.as_str(),
            "tool_define \"deep\": script line 4: does not parse: it nests more than 200 levels deep",
        ),
        (
            "chain",
            &format!(
                "def run(params):\n    return {}\"\"\n",
                "\"\"or".repeat(4000)
            ),
            "tool_define \"chain\": script line 2: does not parse: it nests more than 200 levels deep",
        ),
        (
            "lambdas",
            &format!(
                "def run(params):\n    return 1\nx = {}1\n",
                "lambda a,b:".repeat(1450)
            ),
            "tool_define \"lambdas\": script line 3: does not parse: it nests more than 200 levels deep",
        ),
        (
            "formatted",
            &format!(
                "def run(params):\n    return f\"{{{}1}}\"\n",
                "-".repeat(15000)
            ),
            "tool_define \"formatted\": script line 2: does not parse: f-strings (f\"...\") are not supported; build the text with + or %",
        ),
        (
            "twice",
            "def run(params):\n    return dict(kind=\"a\" kind=\"b\")\n",
            "tool_define \"twice\": script line 2, column 26: does not parse: ",
        ),
    ] {
        let e = err(&exec(&client, "tool_define", definition(name, script)).await);
        assert!(e.contains(says), "{name}: {e}");
    }
    // The gateway is still there: the same session defines a tool and runs it.
    let shout = "def run(params):\r\n    return params[\"text\"].upper() + \\\r\n        \"!\"\r\n";
    ok(&exec(&client, "tool_define", definition("shout", shout)).await);
    assert_eq!(
        ok(&exec(&client, "shout", json!({"text": "hi"})).await),
        "HI!"
    );
    client.cancel().await.expect("close");
}

/// A `tool_define` call's audit record keeps the whole definition however its script is padded:
/// with `keep_dir = ""` it is the only record of what the tool runs. The same params sent to a
/// server's tool are shortened as any params.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_is_audited_whole() {
    let s = Scratch::new("gateway-authoring-audit");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[authoring]\nenabled = true\nkeep_dir = \"\"\n{}",
            named_server(
                "notes",
                &json!([tool("add_note", "Add a note.", json!({"type": "object"}))]),
                ""
            ),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(
        &client,
        json!({"tool_names": ["tool_define", "mcp__notes__add_note"]}),
    )
    .await);
    let script = format!(
        "# {}\ndef run(params):\n    return params[\"text\"].upper() + \"!\"\n",
        "padding ".repeat(520)
    );
    let params = definition("shout", &script);
    assert!(params.to_string().len() > 4096);
    ok(&exec(&client, "tool_define", params.clone()).await);
    assert_eq!(
        ok(&exec(&client, "shout", json!({"text": "hi"})).await),
        "HI!"
    );
    exec(&client, "mcp__notes__add_note", params.clone()).await;
    client.cancel().await.expect("close");

    let defined = s.calls_of("tool_define");
    assert_eq!(defined.len(), 1, "{defined:?}");
    assert_eq!(defined[0]["params"], params);
    let noted = s.calls_of("mcp__notes__add_note");
    assert_eq!(noted.len(), 1, "{noted:?}");
    assert_eq!(
        noted[0]["params"]["_truncated_bytes"],
        json!(params.to_string().len()),
        "{noted:?}"
    );
    let cut = noted[0]["params"]["script"].as_str().unwrap_or_default();
    assert!(
        cut.ends_with(" characters)") && !cut.contains("upper"),
        "{cut}"
    );
}

const FAILS_LONG: &str = r#"
description = "Fails with a long message."
schema = {}

def run(params):
    fail("E" * 5000000)
"#;

const MISSES_A_LONG_KEY: &str = r#"
description = "Looks up a long key that is not there."
schema = {}

def run(params):
    return {}["K" * 5000000]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_longer_than_max_result_bytes_is_cut() {
    let s = Scratch::new("scripts-long-error");
    s.write("fails.star", FAILS_LONG);
    s.write("misses.star", MISSES_A_LONG_KEY);
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "[tools.fails]\nscript = \"fails.star\"\n[tools.misses]\nscript = \"misses.star\"\n\
             [scripts]\nmax_result_bytes = 1000\n[authoring]\nenabled = true\nkeep_dir = \"\"\n{}",
            files_sections(&s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(
        &client,
        json!({"tool_names": ["tool_define", "mcp__scripts__fails", "mcp__scripts__misses"]}),
    )
    .await);
    let boom = "def run(params):\n    fail(\"M\" * 5000000)\n";
    ok(&exec(&client, "tool_define", definition("boom", boom)).await);
    for (tool, params, starts) in [
        (
            "mcp__scripts__fails",
            json!({}),
            "script tool \"mcp__scripts__fails\" (fails.star): script line 6: failed: fail: EEEE",
        ),
        (
            "mcp__scripts__misses",
            json!({}),
            "script tool \"mcp__scripts__misses\" (misses.star): script line 6: failed: Key `\"KKKK",
        ),
        (
            "boom",
            json!({"text": "x"}),
            "model-authored tool \"boom\": script line 2: failed: fail: MMMM",
        ),
    ] {
        let e = err(&exec(&client, tool, params).await);
        assert!(
            e.len() <= 1000
                && e.starts_with(starts)
                && e.ends_with(" bytes, more than [scripts] max_result_bytes (1000) allows]")
                && e.contains(" [cut: the error is 5000"),
            "{tool}: {} bytes: {}…{}",
            e.len(),
            &e[..e.len().min(200)],
            &e[e.len().saturating_sub(200)..]
        );
    }
    client.cancel().await.expect("close");
}

/// An HTTP server on 127.0.0.1 that answers every request with `head` (status line and
/// headers, as raw bytes) and, as the body, the request's own head; returns its port.
async fn raw_server(head: &'static [u8]) -> u16 {
    serve(move |request| {
        let mut answer = head.to_vec();
        answer.extend_from_slice(
            format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                request.len()
            )
            .as_bytes(),
        );
        answer.extend_from_slice(request);
        answer
    })
    .await
}

const FETCH_HEADERS: &str = r#"
description = "Fetches a page with the headers given."
schema = {"properties": {"hdr": {"type": "object"}}}

def run(params):
    r = http.get(pkg.base + "/h", headers=params.get("hdr"))
    return {"status": r["status"], "headers": r["headers"], "body": r["body"]}
"#;

/// A gateway serving `fetch` (FETCH_HEADERS) against a `raw_server(head)`.
async fn fetch_gateway(s: &Scratch, head: &'static [u8]) -> Client {
    let port = raw_server(head).await;
    s.write("fetch.star", FETCH_HEADERS);
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "[tools.fetch]\nscript = \"fetch.star\"\n\
             [scripts]\nallow_hosts = [\"127.0.0.1:{port}\"]\n\
             [template.vars]\nbase = \"http://127.0.0.1:{port}\"\n{}",
            files_sections(s)
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["mcp__scripts__fetch"]})).await);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_response_headers_keep_repeated_and_latin_1_values() {
    let s = Scratch::new("scripts-response-headers");
    let client = fetch_gateway(
        &s,
        b"HTTP/1.1 200 OK\r\n\
          Set-Cookie: a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT\r\n\
          X-Latin: caf\xe9\r\n\
          Vary: Accept\r\n\
          Set-Cookie: b=2\r\n\
          X-Utf8: caf\xc3\xa9\r\n\
          Vary: Cookie\r\n",
    )
    .await;
    let r = ok(&exec(&client, "mcp__scripts__fetch", json!({})).await);
    let v: Value = serde_json::from_str(&r).expect("JSON result");
    let headers = v["headers"].as_object().expect("a dict of headers");
    // Repeated names are joined (Set-Cookie with a newline: its values hold commas), a value
    // that is not UTF-8 is read as Latin-1, and the names keep the order they first arrived in.
    assert_eq!(
        headers.iter().collect::<Vec<_>>(),
        [
            (
                &"set-cookie".to_owned(),
                &json!("a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT\nb=2")
            ),
            (&"x-latin".to_owned(), &json!("caf\u{e9}")),
            (&"vary".to_owned(), &json!("Accept, Cookie")),
            (&"x-utf8".to_owned(), &json!("caf\u{e9}")),
            (&"content-length".to_owned(), &headers["content-length"]),
            (&"connection".to_owned(), &json!("close")),
        ],
        "{r}"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_http_does_not_allow_is_refused_naming_it() {
    let s = Scratch::new("scripts-bad-request-headers");
    let client = fetch_gateway(&s, b"HTTP/1.1 200 OK\r\n").await;
    for (hdr, says) in [
        (
            json!({"Accept": "x", "Bad Name": "v"}),
            "script line 6: failed: http.get: header \"Bad Name\" is not a valid header name: a name is ASCII letters, digits and",
        ),
        (
            json!({"X-A": "line\r\nInjected: 1"}),
            "script line 6: failed: http.get: header \"X-A\" has a value with a control character (CR/LF): a value is one line",
        ),
        (
            json!({"X-B": "a\u{0}b"}),
            "script line 6: failed: http.get: header \"X-B\" has a value with a control character (U+0000)",
        ),
        (
            json!({"X-C": 1}),
            "script line 6: failed: http.get: header \"X-C\" must be a string, found a number",
        ),
    ] {
        let e = err(&exec(&client, "mcp__scripts__fetch", json!({"hdr": hdr})).await);
        assert!(
            e.starts_with("script tool \"mcp__scripts__fetch\" (fetch.star): ")
                && e.contains(says)
                && !e.contains("Injected"),
            "{hdr}: {e}"
        );
    }
    // A valid header is sent as given, a value beyond ASCII as its UTF-8 bytes.
    let r = ok(&exec(
        &client,
        "mcp__scripts__fetch",
        json!({"hdr": {"X-Name": "Zo\u{eb}", "X-Tab": "a\tb"}}),
    )
    .await);
    let v: Value = serde_json::from_str(&r).expect("JSON result");
    let sent = v["body"].as_str().unwrap_or_default().to_ascii_lowercase();
    assert!(
        sent.contains("x-name: zo\u{eb}\r\n") && sent.contains("x-tab: a\tb\r\n"),
        "{r}"
    );
    client.cancel().await.expect("close");
}

/// A script file that cannot be read stops the gateway at start, named by its `[tools.NAME]`
/// (no `[servers.scripts]` the user never wrote), with the line and byte of text that is not
/// UTF-8.
#[test]
fn a_script_file_that_cannot_be_read_is_named_with_where_it_fails() {
    let s = Scratch::new("scripts-unreadable");
    let mut bad = b"description = \"x\"\nschema = {}\n# caf".to_vec();
    bad.push(0xff);
    std::fs::write(s.path("bad.star"), bad).expect("write");
    for (section, expected) in [
        (
            "[tools.gone]\nscript = \"missing.star\"\n",
            "[tools.\"gone\"] script ".to_owned()
                + &s.path("missing.star")
                + ": cannot read it: there is no such file",
        ),
        (
            "[tools.bad]\nscript = \"bad.star\"\n",
            "[tools.\"bad\"] script ".to_owned()
                + &s.path("bad.star")
                + ":3: not valid UTF-8 (byte 35 of the file)",
        ),
    ] {
        let cfg = s.write(
            "toolshelf.toml",
            &format!("{section}{}", files_sections(&s)),
        );
        let out = std::process::Command::new(TOOLSHELF)
            .args(["serve", "--config", &cfg])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run toolshelf");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&expected), "{expected:?} in {stderr}");
        assert!(!stderr.contains("[servers.scripts]"), "{stderr}");
    }
}
