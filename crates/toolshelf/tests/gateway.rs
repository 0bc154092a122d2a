//! End-to-end tests of the gateway: the real `toolshelf serve` binary in front of real MCP
//! servers (npm: everything, filesystem, memory; PyPI: time, git) and a tiny standard-library
//! test server (`fixtures/test_server.py`: hangs, changes its tools, reports its pid), driven by
//! rmcp's client over stdio and streamable HTTP.
//!
//! The servers are installed by `scripts/install-mcp-servers.sh` (`scripts/test` runs it); when
//! they are missing these tests fail and say so, they never skip. Waiting for something that
//! happens in the background (a restart, a re-listed server) polls with a generous deadline: the
//! assertions are about what happens, never about how fast.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

fn prefix() -> PathBuf {
    std::env::var_os("TOOLSHELF_MCP_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/toolshelf-mcp")
        })
}

/// Path of an installed server; panics with the fix when it is missing.
fn server_bin(rel: &str) -> String {
    let p = prefix().join(rel);
    assert!(
        p.exists(),
        "{} is not installed: run `bash scripts/install-mcp-servers.sh` (or `bash scripts/test`, which runs it) first",
        p.display()
    );
    p.display().to_string()
}

fn test_server_section(call_timeout: u64) -> String {
    format!(
        "[servers.test]\ncommand = \"python3\"\nargs = [{:?}]\ncall_timeout_secs = {call_timeout}\nrestart_delay_secs = 3\n",
        fixture("test_server.py")
    )
}

async fn list_json(client: &Client) -> String {
    let tools = client.list_all_tools().await.expect("tools/list");
    serde_json::to_string(&tools).expect("json")
}

async fn statuses(client: &Client) -> Vec<Value> {
    status(client).await["servers"]
        .as_array()
        .expect("servers")
        .clone()
}

/// What `toolshelf status --json` says of the gateway running on `config`: the operator's view.
fn operator_status(config: &str) -> Value {
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", config, "--json"])
        .output()
        .expect("status");
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// The outcomes of server `name`'s audit records but `starting`, in order.
fn server_outcomes(audit: &[Value], name: &str) -> Vec<String> {
    audit
        .iter()
        .filter(|r| r["kind"] == "server" && r["server"] == name)
        .map(|r| r["outcome"].as_str().unwrap_or("").to_owned())
        .filter(|o| o != "starting")
        .collect()
}

async fn server_status(client: &Client, name: &str) -> Value {
    statuses(client)
        .await
        .into_iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no status for {name}"))
}

fn kill(pid: u64) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid}");
}

/// Everything over one stdio session with the real servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_gateway_with_real_servers() {
    let s = Scratch::new("stdio");
    let npm = |b: &str| server_bin(&format!("npm/node_modules/.bin/{b}"));
    let py = |b: &str| server_bin(&format!("venv/bin/{b}"));
    std::fs::create_dir_all(s.0.join("files")).expect("files dir");
    s.write("files/hello.txt", "hello from the e2e test\n");
    s.write("files/secret.txt", "do not read\n");
    let repo = s.path("repo");
    let git = |args: &[&str]| {
        let st = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo)
            .status()
            .expect("git");
        assert!(st.success(), "git {args:?}");
    };
    s.write("repo/README.md", "# scratch\n");
    git(&["-c", "init.defaultBranch=main", "init", "-q"]);
    let hook = s.write(
        "hook.sh",
        "#!/bin/sh\nevent=$(cat)\ncase \"$event\" in\n  *'\"tool\":\"mcp__everything__echo\"'*) echo 'echo is blocked by the test hook' >&2; exit 2;;\n  *'\"tool\":\"mcp__time__'*) echo '{\"guidance\": \"time-hook-guidance\"}';;\nesac\nexit 0\n",
    );
    std::process::Command::new("chmod")
        .args(["+x", &hook])
        .status()
        .expect("chmod");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.everything]\ncommand = {:?}\nargs = [\"stdio\"]\n\
             [servers.filesystem]\ncommand = {:?}\nargs = [{:?}]\n\
             [servers.memory]\ncommand = {:?}\nenv = {{ MEMORY_FILE_PATH = {:?} }}\n\
             [servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"Etc/UTC\"]\n\
             [servers.git]\ncommand = {:?}\nargs = [\"--repository\", {:?}]\n\
             {}\
             [defer]\nrules = [\"NoDefer(^mcp__time__)\"]\n\
             [permissions]\ndeny = [\"^mcp__git__git_reset$\", \"^mcp__filesystem__(*secret*)\"]\n\
             ask = [\"^mcp__filesystem__write_file$\"]\n\
             [[hooks.pre_call]]\ncommand = {hook:?}\n\
             {}",
            npm("mcp-server-everything"),
            npm("mcp-server-filesystem"),
            s.path("files"),
            npm("mcp-server-memory"),
            s.path("memory.jsonl"),
            py("mcp-server-time"),
            py("mcp-server-git"),
            repo,
            test_server_section(2),
            files_sections(&s),
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;

    // The list: resident time tools plus the meta-tools, byte-identical across lists.
    let first = list_json(&client).await;
    assert_eq!(
        first,
        list_json(&client).await,
        "tools/list must not change within a session"
    );
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("list")
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    // Pinned tools are named SERVER__TOOL (clients add their own prefix), and every listed tool
    // is marked always-load, so clients that defer MCP tools themselves keep these resident.
    assert_eq!(
        names,
        [
            "time__convert_time",
            "time__get_current_time",
            "tool_search",
            "defer_execute"
        ]
    );
    for t in client.list_all_tools().await.expect("list") {
        let meta = t.meta.as_ref().map(|m| m.0.clone()).unwrap_or_default();
        assert_eq!(
            meta.get("anthropic/alwaysLoad"),
            Some(&json!(true)),
            "{} is not marked always-load",
            t.name
        );
    }
    let short = ok(&call(
        &client,
        "time__get_current_time",
        json!({"timezone": "Etc/UTC"}),
    )
    .await);
    assert!(
        short.contains("Etc/UTC"),
        "a pinned tool answers to its listed name: {short}"
    );
    assert!(
        first.contains("\\n  create_entities\\n"),
        "the index names deferred tools: {first}"
    );
    assert!(
        first.contains("\\n  git_log\\n") && !first.contains("git_reset"),
        "an unconditional deny hides the tool"
    );
    for st in statuses(&client).await {
        assert_eq!(st["state"], "ready", "{st}");
    }

    // Exact search loads a schema; the call then runs.
    let found = ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__memory__create_entities"]}),
    )
    .await);
    assert!(
        found.contains("entities (array of object, required)")
            && found.contains("defer_execute {\"tool_name\":\"mcp__memory__create_entities\""),
        "{found}"
    );

    // Fuzzy search in Chinese and English finds deferred tools.
    let fuzzy = ok(&call(
        &client,
        "tool_search",
        json!({"queries": ["读取文件", "read text file"]}),
    )
    .await);
    assert!(fuzzy.contains("1. mcp__filesystem__read"), "{fuzzy}");
    let zh = ok(&call(&client, "tool_search", json!({"queries": ["天气预报"]})).await);
    assert!(zh.contains("1. mcp__test__forecast"), "{zh}");
    let created = exec(&client, "mcp__memory__create_entities", json!({"entities": [{"name": "toolshelf", "entityType": "project", "observations": ["fronts MCP servers"]}]})).await;
    assert!(ok(&created).contains("toolshelf"));

    // Not loaded: refused with the schema, and the refusal loads it (bare name resolves too).
    let refused = err(&exec(&client, "read_graph", json!({})).await);
    assert!(
        refused.contains("It is loaded now")
            && refused.contains("\"name\":\"mcp__memory__read_graph\""),
        "{refused}"
    );
    assert!(ok(&exec(&client, "read_graph", json!({})).await).contains("fronts MCP servers"));

    // A schema error lists the pointer and attaches the schema.
    let invalid = err(&exec(
        &client,
        "mcp__memory__create_entities",
        json!({"entities": [{"name": 3}]}),
    )
    .await);
    assert!(
        invalid.contains("at /entities/0/name") && invalid.contains("Expected schema:"),
        "{invalid}"
    );
    assert!(invalid.contains("\"required\""), "{invalid}");

    // Unknown and hidden names get the same answer; the hidden one is audited.
    let unknown = err(&exec(&client, "mcp__memory__read_grph", json!({})).await);
    assert!(
        unknown.contains("Closest names") && unknown.contains("mcp__memory__read_graph"),
        "{unknown}"
    );
    let hidden = err(&exec(&client, "mcp__git__git_reset", json!({"repo_path": repo})).await);
    assert!(
        hidden.starts_with("No tool named \"mcp__git__git_reset\" is available"),
        "{hidden}"
    );
    let searched = ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__git__git_reset"]}),
    )
    .await);
    assert!(
        !searched.contains("\"tool_name\":\"mcp__git__git_reset\""),
        "a hidden tool is never found: {searched}"
    );

    // Deny by argument glob; ask without elicitation support. A denied call of a tool not loaded
    // yet is refused as denied, without sending the model to load a schema it cannot use.
    let moved = err(&exec(
        &client,
        "mcp__filesystem__move_file",
        json!({"source": s.path("files/secret.txt"), "destination": s.path("files/out.txt")}),
    )
    .await);
    assert!(
        moved.contains("forbids this call") && !moved.contains("not been loaded"),
        "{moved}"
    );
    ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__filesystem__read_text_file", "mcp__filesystem__write_file"]}),
    )
    .await);
    let hello = exec(
        &client,
        "mcp__filesystem__read_text_file",
        json!({"path": s.path("files/hello.txt")}),
    )
    .await;
    assert!(ok(&hello).contains("hello from the e2e test"));
    let secret = err(&exec(
        &client,
        "mcp__filesystem__read_text_file",
        json!({"path": s.path("files/secret.txt")}),
    )
    .await);
    assert!(
        secret.contains("deny[1]") && secret.contains("forbids this call"),
        "{secret}"
    );
    let write = err(&exec(
        &client,
        "mcp__filesystem__write_file",
        json!({"path": s.path("files/new.txt"), "content": "x"}),
    )
    .await);
    assert!(
        write.contains("needs the user's approval") && write.contains("elicitation"),
        "{write}"
    );
    assert!(!s.0.join("files/new.txt").exists());

    // A hook blocks a call; a pinned tool called directly goes through the same hooks.
    ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__everything__echo"]}),
    )
    .await);
    let blocked = err(&exec(&client, "mcp__everything__echo", json!({"message": "hi"})).await);
    assert!(
        blocked.contains("echo is blocked by the test hook"),
        "{blocked}"
    );
    let time = ok(&call(
        &client,
        "mcp__time__get_current_time",
        json!({"timezone": "Etc/UTC"}),
    )
    .await);
    assert!(
        time.contains("time-hook-guidance") && time.contains("Etc/UTC"),
        "{time}"
    );
    let bad_time = err(&call(
        &client,
        "mcp__time__get_current_time",
        json!({"timezone": 5}),
    )
    .await);
    assert!(bad_time.contains("at /timezone"), "{bad_time}");

    // A hung call times out and the session (and that server) goes on.
    ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__test__hang", "mcp__test__ping", "mcp__test__add_tool"]}),
    )
    .await);
    let hung = err(&exec(&client, "mcp__test__hang", json!({})).await);
    assert!(hung.contains("did not answer within 2s"), "{hung}");
    assert_eq!(
        ok(&exec(&client, "mcp__test__ping", json!({})).await),
        "pong"
    );

    // Tools change mid-session: searchable at once, announced once, the list stays frozen.
    ok(&exec(&client, "mcp__test__add_tool", json!({"name": "late_tool"})).await);
    let mut texts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = call(
            &client,
            "tool_search",
            json!({"tool_names": ["mcp__test__late_tool"]}),
        )
        .await;
        texts.push(text(&r));
        if texts
            .last()
            .is_some_and(|t| t.contains("1. mcp__test__late_tool"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new tool never became searchable: {texts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let notices = texts
        .iter()
        .filter(|t| t.contains("the available tools changed; new: mcp__test__late_tool"))
        .count();
    assert_eq!(notices, 1, "the change is announced once: {texts:?}");
    assert_eq!(
        first,
        list_json(&client).await,
        "tools/list stays frozen after a tools change"
    );

    // A server killed mid-session: a clear error, then it is restarted and works again. The
    // schema is loaded again first: every call is a turn, the polling above takes as many as
    // the machine's speed makes it, and an expired schema would be answered before the server
    // is asked.
    ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__memory__read_graph"]}),
    )
    .await);
    let pid = server_status(&client, "memory").await["pid"]
        .as_u64()
        .expect("memory pid");
    kill(pid);
    wait_for("memory to be seen as failed", || async {
        server_status(&client, "memory").await["state"] == "failed"
    })
    .await;
    let reason = server_status(&client, "memory").await["reason"].clone();
    assert!(
        reason
            .as_str()
            .is_some_and(|r| r.starts_with("the server was killed by signal 9")),
        "how it ended, in plain words: {reason}"
    );
    let down = err(&exec(&client, "read_graph", json!({})).await);
    assert!(
        down.contains("not running") && down.contains("next restart attempt"),
        "{down}"
    );
    wait_for("memory to be restarted", || async {
        server_status(&client, "memory").await["state"] == "ready"
    })
    .await;
    assert_ne!(
        server_status(&client, "memory").await["pid"].as_u64(),
        Some(pid)
    );
    assert!(ok(&exec(&client, "read_graph", json!({})).await).contains("fronts MCP servers"));
    // The hub audits a state change after the server reports it: wait for the restart's record
    // before the session closes, as the gateway exits with it.
    wait_for("the restart to be audited", || async {
        server_outcomes(&s.audit(), "memory").len() >= 3
    })
    .await;

    client.cancel().await.expect("close");

    // The audit log has every kind of event, the hidden request included.
    let audit = s.audit();
    let has = |kind: &str, outcome: Option<&str>| {
        audit
            .iter()
            .any(|r| r["kind"] == kind && outcome.is_none_or(|o| r["outcome"] == o))
    };
    assert!(has("search", Some("ok")) && has("call", Some("ok")) && has("call", Some("timeout")));
    assert!(
        has("refused", Some("not_loaded"))
            && has("refused", Some("invalid"))
            && has("refused", Some("denied"))
    );
    assert!(has("refused", Some("denied_by_hook")) && has("refused", Some("not_approved")));
    let by_hook = audit
        .iter()
        .find(|r| r["outcome"] == "denied_by_hook")
        .expect("the hook's refusal");
    assert_eq!(
        by_hook["params"],
        json!({"message": "hi"}),
        "a refusal records the params the call came with: {by_hook}"
    );
    assert!(has("server", Some("failed")) && has("session", Some("start")));
    // The test server: ready once, then its tools changed (audited as such, not as a second
    // ready); memory: ready, failed when killed, ready again.
    assert_eq!(server_outcomes(&audit, "test"), ["ready", "tools_changed"]);
    assert_eq!(
        server_outcomes(&audit, "memory"),
        ["ready", "failed", "ready"]
    );
    let hidden = audit
        .iter()
        .find(|r| r["kind"] == "hidden")
        .expect("hidden request audited");
    assert_eq!(hidden["tool"], "mcp__git__git_reset");
    assert!(
        hidden["detail"]
            .as_str()
            .expect("detail")
            .contains("deny[0]")
    );
}

/// Several HTTP sessions at once, each with its own state; elicitation approves `ask` calls;
/// session hooks see each session start and end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sessions_have_their_own_state() {
    let s = Scratch::new("http");
    let script = s.write("hook.sh", HOOK_SH);
    let log = s.path("events.jsonl");
    let session_hooks = ["session_start", "session_end"]
        .map(|e| {
            format!("[[hooks.{e}]]\ncommand = \"sh\"\nargs = [{script:?}, \"session\", {log:?}]\n")
        })
        .concat();
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"Etc/UTC\"]\n{}\
             [permissions]\nask = [\"^mcp__test__ping$\", \"^mcp__test__echo$\"]\n{}{session_hooks}",
            server_bin("venv/bin/mcp-server-time"),
            test_server_section(5),
            files_sections(&s)
        ),
    );
    let (mut gateway, url) = http_gateway(&config);
    let approving = http_client(&url, TestClient::answering(true)).await;
    let declining = http_client(&url, TestClient::answering(false)).await;
    let plain = http_client(&url, TestClient::default()).await;

    let list = list_json(&approving).await;
    assert_eq!(
        list,
        list_json(&declining).await,
        "every session gets the same bytes"
    );
    assert_eq!(list, list_json(&plain).await);

    // Loading is per session.
    ok(&call(
        &approving,
        "tool_search",
        json!({"tool_names": ["mcp__time__convert_time", "mcp__test__ping"]}),
    )
    .await);
    let converted = ok(&exec(
        &approving,
        "mcp__time__convert_time",
        json!({"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
    )
    .await);
    assert!(converted.contains("Asia/Tokyo"), "{converted}");
    let other = err(&exec(
        &plain,
        "mcp__time__convert_time",
        json!({"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
    )
    .await);
    assert!(other.contains("It is loaded now"), "{other}");

    // ask: approved through elicitation, declined, or impossible without it.
    assert_eq!(
        ok(&exec(&approving, "mcp__test__ping", json!({})).await),
        "pong"
    );
    ok(&call(
        &declining,
        "tool_search",
        json!({"tool_names": ["mcp__test__ping"]}),
    )
    .await);
    assert!(err(&exec(&declining, "mcp__test__ping", json!({})).await).contains("did not approve"));
    ok(&call(
        &plain,
        "tool_search",
        json!({"tool_names": ["mcp__test__ping"]}),
    )
    .await);
    assert!(err(&exec(&plain, "mcp__test__ping", json!({})).await).contains("cannot ask the user"));

    // The user sees every argument: padding is shown as its length, invisible characters as
    // their code points; arguments too long to show in full are not asked about.
    ok(&call(
        &approving,
        "tool_search",
        json!({"tool_names": ["mcp__test__echo"]}),
    )
    .await);
    let padded = format!("users{}AND_ALSO\u{200b}DELETE_BACKUPS", " ".repeat(6000));
    ok(&exec(
        &approving,
        "mcp__test__echo",
        json!({"message": padded, "z_extra": "hidden tail"}),
    )
    .await);
    let asked = approving.service().asked.lock().expect("asked").clone();
    let question = asked.last().expect("asked about echo");
    assert!(
        question.starts_with("Allow the agent to run mcp__test__echo with these arguments?")
            && question.contains("users⟨6000 whitespace characters⟩AND_ALSO⟨U+200B⟩DELETE_BACKUPS")
            && question.contains("\"z_extra\": \"hidden tail\""),
        "{question}"
    );
    let long = err(&exec(
        &approving,
        "mcp__test__echo",
        json!({"message": "x".repeat(9000)}),
    )
    .await);
    assert!(
        long.contains("more than the 8000 an approval question shows in full"),
        "{long}"
    );
    assert_eq!(
        asked.len(),
        approving.service().asked.lock().expect("asked").len(),
        "not asked"
    );

    for c in [approving, declining, plain] {
        c.cancel().await.expect("close");
    }
    // Each session started and, once its client closed it, ended.
    let sessions = |event: &str| -> std::collections::BTreeSet<String> {
        hook_log(&log)
            .into_iter()
            .filter(|(_, e)| e["event"] == event)
            .map(|(_, e)| e["session"].as_str().expect("session").to_owned())
            .collect()
    };
    wait_for("three session_start hooks", || async {
        sessions("session_start").len() == 3
    })
    .await;
    wait_for("every session_end hook", || async {
        sessions("session_end") == sessions("session_start")
    })
    .await;
    gateway.kill().expect("stop gateway");
    let _ = gateway.wait();
}

/// A second start serves tools from the cache at once and starts the server on first use;
/// `catalog` and `status` work from an mcp.json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_catalog_and_status() {
    let s = Scratch::new("cache");
    let config = s.write(
        "toolshelf.toml",
        &format!("{}{}", test_server_section(5), files_sections(&s)),
    );
    // First run lists the server and fills the cache.
    let first = stdio_client(&config, TestClient::default()).await;
    let list = list_json(&first).await;
    assert_eq!(server_status(&first, "test").await["state"], "ready");
    first.cancel().await.expect("close");
    let cache_files: Vec<_> = std::fs::read_dir(s.0.join("cache"))
        .expect("cache dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("catalog-"))
        .collect();
    assert_eq!(cache_files.len(), 1, "one cache file per configuration");

    // Second run: same list, server not started until a call needs it.
    let second = stdio_client(&config, TestClient::default()).await;
    assert_eq!(list, list_json(&second).await);
    let st = server_status(&second, "test").await;
    assert_eq!(
        (st["state"].as_str(), st.get("pid")),
        (Some("cached"), None),
        "{st}"
    );
    ok(&call(
        &second,
        "tool_search",
        json!({"tool_names": ["mcp__test__pid"]}),
    )
    .await);
    let pid = ok(&exec(&second, "mcp__test__pid", json!({})).await);
    let st = server_status(&second, "test").await;
    assert_eq!(st["state"], "ready");
    assert_eq!(st["pid"].as_u64().map(|p| p.to_string()), Some(pid));

    // status sees the running gateway; its file follows the state changes as the hub handles them.
    let status_json = || {
        let out = std::process::Command::new(TOOLSHELF)
            .args(["status", "--config", &config, "--json"])
            .output()
            .expect("status");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("status JSON")
    };
    wait_for("the status file to show the server ready", || async {
        let v = status_json();
        assert_eq!(v["source"], "running");
        v["servers"][0]["state"] == "ready"
    })
    .await;
    second.cancel().await.expect("close");

    // catalog from an mcp.json prints the grouped form, which render reads: without the tools
    // the gateway skipped (a name listed twice by one server).
    let twice = json!([
        {"name": "read", "description": "read a blob", "inputSchema": {"type": "object"}},
        {"name": "read", "description": "the same name again", "inputSchema": {"type": "object"}}
    ]);
    let mcp = s.write(
        "mcp.json",
        &json!({"mcpServers": {
            "test": {"command": "python3", "args": [fixture("test_server.py")]},
            "dup": {"command": "python3", "args": [fixture("named_server.py"), "dup", twice.to_string()]},
            "broken": {"command": s.path("no-such-server")}
        }})
        .to_string(),
    );
    let out = std::process::Command::new(TOOLSHELF)
        .args(["catalog", "--mcp-config", &mcp])
        .env("XDG_CACHE_HOME", s.path("xdg"))
        .output()
        .expect("catalog");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("broken") && stderr.contains("no-such-server"),
        "{stderr}"
    );
    let catalog = s.write("catalog.json", &String::from_utf8_lossy(&out.stdout));
    let rendered = std::process::Command::new(TOOLSHELF)
        .args(["render", "--catalog", &catalog, "--index-only"])
        .output()
        .expect("render");
    let index = String::from_utf8_lossy(&rendered.stdout);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    assert!(
        index.contains("mcp__test: Test server for toolshelf's end-to-end tests.")
            && index.contains("  hang")
            && index.contains("mcp__dup"),
        "{index}"
    );

    // status without a running gateway probes the servers.
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--mcp-config", &mcp])
        .env("XDG_CACHE_HOME", s.path("xdg"))
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("started each server to check it"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("broken") && l.contains("failed") && l.contains("cannot run")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("test") && l.contains("ready")),
        "{table}"
    );
}

/// The hook script of the tests (`sh`: a Python hook costs a quarter second per run on a busy
/// machine, and every call runs several): `hook.sh ROLE LOG` appends `{"hook": ROLE, "event":
/// EVENT}` to LOG, then answers by its role and the call's `message` (`sleep` never answers).
const HOOK_SH: &str = r#"role=$1 log=$2
event=$(cat)
printf '{"hook":"%s","event":%s}\n' "$role" "$event" >> "$log"
case "$role:$event" in
  pre:*'"message":"rewrite me"'*)
    echo '{"params": {"message": "rewritten by pre_call", "added": 1}, "guidance": "pre_call guidance"}' ;;
  pre:*'"message":"break the params"'*)
    echo '{"params": {"message": 5}}' ;;
  open:*'"message":"open error"'*|closed:*'"message":"closed error"'*)
    echo "$role hook crashed" >&2; exit 1 ;;
  sleep:*)
    exec sleep 60 ;;
  post:*'"message":"not a result"'*)
    echo '{"result": {"content": "plain text is not a content list"}}' ;;
  post:*'"message":"withhold the result"'*)
    echo '{"decision": "deny", "reason": "the test hook withholds this result"}' ;;
  post:*'"message":"rewrite the result"'*)
    echo '{"result": {"content": [{"type": "text", "text": "result rewritten by post_call"}]}, "guidance": "post_call guidance"}' ;;
  failed:*)
    tool=$(printf '%s' "$event" | sed 's/.*"tool":"\([^"]*\)".*/\1/')
    printf '{"guidance": "call_failed guidance for %s"}\n' "$tool" ;;
  search:*'"queries":["withhold"]'*)
    echo '{"decision": "deny", "reason": "the test hook withholds this search"}' ;;
  search:*'"queries":["rewrite"]'*)
    echo '{"result": {"content": [{"type": "text", "text": "search result rewritten by post_search"}]}}' ;;
  search:*)
    echo '{"guidance": "post_search guidance"}' ;;
esac
"#;

/// Events the hooks of `hooks_on_every_event` logged, as `(role, event)`.
fn hook_log(path: &str) -> Vec<(String, Value)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("hook log line is JSON");
            (
                v["hook"].as_str().expect("role").to_owned(),
                v["event"].take(),
            )
        })
        .collect()
}

/// Every hook event over one stdio session: rewrites of params, results and search results,
/// guidance, call failures, session start and end, and hooks that fail open or closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_on_every_event() {
    let s = Scratch::new("hooks");
    let script = s.write("hook.sh", HOOK_SH);
    let log = s.path("events.jsonl");
    let hook = |event: &str, role: &str, extra: &str| {
        format!(
            "[[hooks.{event}]]\ncommand = \"sh\"\nargs = [{script:?}, {role:?}, {log:?}]\n{extra}"
        )
    };
    let config = s.write(
        "toolshelf.toml",
        &[
            test_server_section(3),
            files_sections(&s),
            "[execute]\nrequire_search = false\n".into(),
            hook("session_start", "session", ""),
            hook("session_end", "session", ""),
            hook(
                "pre_call",
                "pre",
                "tools = \"^mcp__test__echo$\"\non_error = \"deny\"\n",
            ),
            hook("pre_call", "open", "on_error = \"allow\"\n"),
            hook("pre_call", "closed", "on_error = \"deny\"\n"),
            // Hooks that always time out, kept to one tool each so that a loaded machine's slow
            // start of the others never meets a one-second limit.
            hook(
                "pre_call",
                "sleep",
                "tools = \"^mcp__test__ping$\"\ntimeout_secs = 1\non_error = \"allow\"\n",
            ),
            hook(
                "pre_call",
                "sleep",
                "tools = \"^mcp__test__pid$\"\ntimeout_secs = 1\non_error = \"deny\"\n",
            ),
            hook("post_call", "post", ""),
            hook("call_failed", "failed", ""),
            hook("post_search", "search", ""),
        ]
        .concat(),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let echo = |message: &str| exec(&client, "mcp__test__echo", json!({"message": message}));
    let events = |role: &str| -> Vec<Value> {
        hook_log(&log)
            .into_iter()
            .filter(|(r, _)| r == role)
            .map(|(_, e)| e)
            .collect()
    };

    // pre_call rewrites the params: the server receives the rewritten ones; guidance is appended.
    let rewritten = ok(&echo("rewrite me").await);
    assert!(
        rewritten.starts_with(r#"{"added":1,"message":"rewritten by pre_call"}"#)
            && rewritten.ends_with("\npre_call guidance"),
        "{rewritten}"
    );
    let pre = events("pre");
    assert_eq!(
        pre.last().expect("pre_call event"),
        &json!({"event": "pre_call", "session": pre[0]["session"], "tool": "mcp__test__echo",
                "server": "test", "original_tool": "echo", "via_defer_execute": true,
                "params": {"message": "rewrite me"}})
    );
    // The next hook in the chain sees the rewrite, and post_call sees what the server returned.
    assert_eq!(
        events("open").last().expect("open")["params"],
        json!({"message": "rewritten by pre_call", "added": 1})
    );
    let post = events("post");
    let post = post.last().expect("post_call event");
    assert_eq!(
        (&post["event"], &post["params"]["added"]),
        (&json!("post_call"), &json!(1))
    );
    assert_eq!(
        post["result"]["content"][0]["text"], r#"{"added":1,"message":"rewritten by pre_call"}"#,
        "{post}"
    );
    // A rewrite that breaks the schema is refused with the schema.
    let broken = err(&echo("break the params").await);
    assert!(
        broken.contains("pre_call hook rewrote its params") && broken.contains("at /message"),
        "{broken}"
    );

    // post_call rewrites the result and adds guidance.
    let result = ok(&echo("rewrite the result").await);
    assert_eq!(result, "result rewritten by post_call\npost_call guidance");
    assert_eq!(
        ok(&echo("plain").await),
        r#"{"message":"plain"}"#,
        "no hook answer, no change"
    );
    // A replacement that is not a CallToolResult is that hook's failure: reported, and with
    // on_error = "allow" the original kept.
    assert_eq!(
        ok(&echo("not a result").await),
        r#"{"message":"not a result"}"#
    );
    let audit = s.audit();
    let reported = audit
        .iter()
        .rev()
        .find(|r| r["kind"] == "hook_error")
        .expect("bad result reported");
    assert!(
        reported["tool"] == "mcp__test__echo"
            && reported["detail"].as_str().is_some_and(|d| d.starts_with(
                "hook post_call[0] \"sh\" failed: its \"result\" is not an MCP CallToolResult"
            )),
        "{reported}"
    );

    // call_failed: a timeout and a server error, with the tool and the error in the event.
    let hung = err(&exec(&client, "mcp__test__hang", json!({})).await);
    assert!(
        hung.contains("did not answer within 3s")
            && hung.ends_with("\ncall_failed guidance for mcp__test__hang"),
        "{hung}"
    );
    let failed = err(&exec(&client, "mcp__test__fail", json!({})).await);
    assert!(
        failed.contains("deliberate failure")
            && failed.ends_with("\ncall_failed guidance for mcp__test__fail"),
        "{failed}"
    );
    let failures = events("failed");
    assert_eq!(failures.len(), 2, "{failures:?}");
    for (e, tool, error) in [
        (&failures[0], "mcp__test__hang", "did not answer within 3s"),
        (&failures[1], "mcp__test__fail", "deliberate failure"),
    ] {
        assert_eq!(
            (&e["event"], &e["tool"], &e["server"], &e["params"]),
            (
                &json!("call_failed"),
                &json!(tool),
                &json!("test"),
                &json!({})
            ),
            "{e}"
        );
        assert!(
            e["error"].as_str().expect("error").contains(error) && e.get("result").is_none(),
            "{e}"
        );
    }
    assert!(
        events("post")
            .iter()
            .all(|e| e["tool"] != "mcp__test__hang" && e["tool"] != "mcp__test__fail"),
        "post_call runs only after calls that returned"
    );

    // post_search: sees the arguments, the loaded names and the result; adds guidance,
    // rewrites the result or withholds it.
    let args = json!({"tool_names": ["mcp__test__ping"]});
    let found = ok(&call(&client, "tool_search", args.clone()).await);
    assert!(
        found.contains("1. mcp__test__ping") && found.ends_with("\npost_search guidance"),
        "{found}"
    );
    let searched = events("search");
    let searched = searched.last().expect("post_search event");
    assert_eq!(
        (&searched["search"], &searched["loaded"]),
        (&args, &json!(["mcp__test__ping"])),
        "{searched}"
    );
    assert!(
        searched["result"]["content"][0]["text"]
            .as_str()
            .expect("search result text")
            .contains("1. mcp__test__ping"),
        "{searched}"
    );
    let rewritten = ok(&call(&client, "tool_search", json!({"queries": ["rewrite"]})).await);
    assert_eq!(rewritten, "search result rewritten by post_search");
    let withheld = err(&call(&client, "tool_search", json!({"queries": ["withhold"]})).await);
    assert!(
        withheld.contains("the test hook withholds this search"),
        "{withheld}"
    );
    let withheld = err(&echo("withhold the result").await);
    assert!(
        withheld.contains("the test hook withholds this result"),
        "{withheld}"
    );

    // The audit log says what the hooks changed: the params the tool got and the caller's, a
    // result replaced or withheld (and why), and a withheld search loads nothing.
    let audit = s.audit();
    let record = |kind: &str, what: &str, value: &str| -> Value {
        audit
            .iter()
            .find(|r| r["kind"] == kind && r["params"][what] == value)
            .unwrap_or_else(|| panic!("no {kind} record with {what} {value}: {audit:?}"))
            .clone()
    };
    let rewritten = record("call", "message", "rewritten by pre_call");
    assert_eq!(
        (
            &rewritten["hooks"],
            &rewritten["requested_params"],
            &rewritten["params"]
        ),
        (
            &json!(["params_rewritten"]),
            &json!({"message": "rewrite me"}),
            &json!({"message": "rewritten by pre_call", "added": 1})
        ),
        "{rewritten}"
    );
    let replaced = record("call", "message", "rewrite the result");
    assert_eq!(replaced["hooks"], json!(["result_replaced"]), "{replaced}");
    assert!(replaced.get("requested_params").is_none(), "{replaced}");
    let plain = record("call", "message", "plain");
    assert!(plain.get("hooks").is_none(), "{plain}");
    let kept = record("call", "message", "withhold the result");
    assert_eq!(
        (&kept["hooks"], &kept["detail"]),
        (
            &json!(["result_withheld"]),
            &json!("a hook withheld the result: the test hook withholds this result")
        ),
        "{kept}"
    );
    let search_audit = |query: &str| -> Value {
        audit
            .iter()
            .find(|r| r["kind"] == "search" && r["params"]["queries"] == json!([query]))
            .unwrap_or_else(|| panic!("no search record of {query}: {audit:?}"))
            .clone()
    };
    let replaced = search_audit("rewrite");
    assert_eq!(replaced["hooks"], json!(["result_replaced"]), "{replaced}");
    let kept = search_audit("withhold");
    assert_eq!(
        (&kept["hooks"], &kept["loaded"]),
        (&json!(["result_withheld"]), &json!([])),
        "{kept}"
    );
    assert!(
        kept["detail"]
            .as_str()
            .is_some_and(|d| d.ends_with("the test hook withholds this search")),
        "{kept}"
    );

    // Failing hooks: fail open lets the call through, fail closed refuses it; both are reported.
    let failed_hook = |i: usize, why: &str| format!("hook pre_call[{i}] \"sh\" failed: {why}");
    for (tool, message, answer, failure) in [
        (
            "mcp__test__echo",
            Some("open error"),
            Some(r#"{"message":"open error"}"#),
            failed_hook(1, "exit status 1: open hook crashed"),
        ),
        (
            "mcp__test__ping",
            None,
            Some("pong"),
            failed_hook(3, "timed out after 1s"),
        ),
        (
            "mcp__test__echo",
            Some("closed error"),
            None,
            failed_hook(2, "exit status 1: closed hook crashed"),
        ),
        (
            "mcp__test__pid",
            None,
            None,
            failed_hook(4, "timed out after 1s"),
        ),
    ] {
        let params = message.map_or(json!({}), |m| json!({"message": m}));
        let r = exec(&client, tool, params).await;
        match answer {
            Some(answer) => assert_eq!(ok(&r), answer),
            None => assert_eq!(
                err(&r),
                format!(
                    "{tool} was not run: a pre_call hook failed, and a failing hook blocks the call. This is a malfunction of the hook, not a decision about your call; tell the user."
                ),
                "the model reads that the hook failed, not how ({failure})"
            ),
        }
        let audit = s.audit();
        let reported = audit
            .iter()
            .rev()
            .find(|r| r["kind"] == "hook_error")
            .expect("hook failure audited");
        assert_eq!(
            (&reported["tool"], &reported["detail"]),
            (&json!(tool), &json!(failure)),
            "{reported}"
        );
    }
    assert!(
        s.audit()
            .iter()
            .any(|r| r["kind"] == "refused" && r["outcome"] == "denied_by_hook"),
        "fail-closed refusals are audited"
    );

    // session_start came with the session; session_end comes when the client disconnects.
    let session = pre[0]["session"].clone();
    // Its id is PID-STARTED-N: the gateway's start in Unix seconds keeps ids from repeating
    // across restarts of a process that always gets the same pid.
    let parts: Vec<u64> = session
        .as_str()
        .expect("session id")
        .split('-')
        .map(|p| p.parse().expect("numbers"))
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert!(
        parts.len() == 3 && parts[1] <= now && parts[1] + 3600 > now && parts[2] == 1,
        "{session}"
    );
    assert_eq!(
        events("session"),
        [json!({"event": "session_start", "session": session})]
    );
    client.cancel().await.expect("close");
    wait_for("the session_end hook", || async {
        events("session").len() == 2
    })
    .await;
    assert_eq!(
        events("session")[1],
        json!({"event": "session_end", "session": session})
    );
    assert!(
        s.audit()
            .iter()
            .any(|r| r["kind"] == "session" && r["outcome"] == "end" && r["session"] == session),
        "the end is audited"
    );
    assert!(
        hook_log(&log).iter().all(|(_, e)| e["session"] == session),
        "one session"
    );
}

/// With neither --config nor --mcp-config, the gateway commands run the bundled example, which
/// fronts every server the install script installs (the README's first command relies on it).
#[test]
fn the_bundled_example_fronts_every_installed_server() {
    server_bin("venv/bin/mcp-server-time");
    let cache = std::env::temp_dir().join(format!("toolshelf-bundled-{}", std::process::id()));
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--json"])
        .env("TOOLSHELF_MCP_PREFIX", prefix())
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run toolshelf status");
    let _ = std::fs::remove_dir_all(&cache);
    // No gateway runs: the servers are probed, and every one starts.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no server failed"), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("status json");
    let servers = v["servers"].as_array().expect("servers");
    let names: Vec<&str> = servers.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "everything",
            "fetch",
            "filesystem",
            "git",
            "memory",
            "sequential-thinking",
            "time"
        ]
    );
    for s in servers {
        assert_eq!(s["state"], "ready", "{s}");
        assert!(s["tools"].as_u64() > Some(0), "{s}");
    }
}

/// The gateway adds the embedding ranker in the background: a Chinese request for an English-
/// described tool, which BM25F alone cannot match, is found once it is ready, and the reason
/// says the hit came from meaning. The tool vectors are then cached beside the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semantic_search_through_the_gateway() {
    let s = Scratch::new("semantic");
    std::fs::create_dir_all(s.path("files")).expect("files dir");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.filesystem]\ncommand = {:?}\nargs = [{:?}]\n{}",
            server_bin("npm/node_modules/.bin/mcp-server-filesystem"),
            s.path("files"),
            files_sections(&s),
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let found = |t: &str| t.contains("related by meaning") && t.contains("mcp__filesystem__read");
    wait_for("a meaning-based hit for 读取文件内容", || {
        let client = &client;
        async move {
            let r = call(client, "tool_search", json!({"queries": ["读取文件内容"]})).await;
            found(&text(&r))
        }
    })
    .await;
    let last = text(&call(&client, "tool_search", json!({"queries": ["读取文件内容"]})).await);
    assert!(found(&last), "{last}");
    assert!(
        last.starts_with("Tools matching \"读取文件内容\""),
        "{last}"
    );
    let cached = std::fs::metadata(s.path("cache/vectors.bin")).expect("vectors.bin is written");
    assert!(cached.len() > 1000, "{}", cached.len());
    client.cancel().await.expect("close");
}

/// A server with English descriptions of file tools, which a Chinese request matches by meaning
/// only, and a gateway on it started with the debug-build failpoints `failpoints`; its stderr
/// goes to `stderr.log`.
async fn file_tools_gateway(s: &Scratch, failpoints: &str) -> (Client, String) {
    let tools = json!([
        tool(
            "read_text_file",
            "Read the complete contents of a file from the file system as text.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}})
        ),
        tool(
            "list_directory",
            "List the files and subdirectories in a directory.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}})
        ),
        tool(
            "get_weather",
            "Current weather for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}})
        ),
    ]);
    let config = s.write(
        "toolshelf.toml",
        &format!("{}{}", named_server("files", &tools, ""), files_sections(s)),
    );
    let log = s.path("stderr.log");
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--config", &config])
        .env("TOOLSHELF_LOG", "warn")
        .env("TOOLSHELF_FAILPOINTS", failpoints);
    (
        stdio_client_logged(cmd, std::path::Path::new(&log)).await,
        log,
    )
}

/// The note a search by words carries when it ran without the embedding ranker.
const RANKER_STARTING: &str =
    "Meaning-based matching is still starting, so this search matched words only";

/// A search by words that comes while the embedding ranker is still being prepared waits for it
/// and finds by meaning what words alone do not. The debug-build failpoint `semantic_held` holds
/// the built ranker back until a search waits for it, so the search provably came before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_waits_for_the_ranker_being_prepared() {
    let s = Scratch::new("ranker-wait");
    let (client, log) = file_tools_gateway(&s, "semantic_held").await;
    wait_for("the ranker to be built and held back", || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("semantic search held until a search waits for it")
    })
    .await;
    let found = ok(&search(&client, json!({"queries": ["读取文件"]})).await);
    assert!(
        found.starts_with("Tools matching \"读取文件\"")
            && found.contains("mcp__files__read_text_file")
            && found.contains("related by meaning"),
        "{found}"
    );
    assert!(!found.contains(RANKER_STARTING), "{found}");
    client.cancel().await.expect("close");
    let searches: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "search")
        .collect();
    assert_eq!(
        (&searches[0]["outcome"], &searches[0]["detail"]),
        (&json!("ok"), &Value::Null)
    );
}

/// A search by words whose embedding ranker is still not ready after the wait answers with what
/// words alone find and says that meaning-based matching is still starting, so that "no tool
/// matches" is not read as "no such tool"; the audit says so too. An exact lookup by name needs
/// no ranker and does not wait. The debug-build failpoint `semantic_never` keeps the ranker from
/// ever being ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_without_the_ranker_says_it_is_still_starting() {
    let s = Scratch::new("ranker-never");
    let (client, _log) = file_tools_gateway(&s, "semantic_never").await;
    let named = ok(&search(
        &client,
        json!({"tool_names": ["mcp__files__read_text_file"]}),
    )
    .await);
    assert!(
        named.contains("1. mcp__files__read_text_file") && !named.contains(RANKER_STARTING),
        "{named}"
    );
    let unmatched = ok(&search(&client, json!({"queries": ["读取文件"]})).await);
    assert!(
        unmatched.starts_with("No tool matches \"读取文件\"")
            && unmatched.contains(&format!(
                "{RANKER_STARTING}: a tool described in other words or in another language may be missing. Search again in a few seconds before concluding that no tool fits."
            )),
        "{unmatched}"
    );
    client.cancel().await.expect("close");
    let searches: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "search")
        .collect();
    assert_eq!(searches.len(), 2, "{searches:#?}");
    assert_eq!(
        (&searches[0]["outcome"], &searches[0]["detail"]),
        (&json!("ok"), &Value::Null)
    );
    assert_eq!(searches[1]["outcome"], "no_match");
    assert!(
        searches[1]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("the embedding ranker was not ready")),
        "{}",
        searches[1]
    );
}

/// Replies a downstream server sends that cannot be read fail their call at once, with what was
/// wrong, instead of at the call timeout (60 s here, which every assertion on the text would
/// notice); a long reply under the limit still arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_downstream_replies_fail_at_once() {
    let s = Scratch::new("replies");
    let config = s.write(
        "toolshelf.toml",
        &format!("{}{}", test_server_section(60), files_sections(&s)),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__test__big", "mcp__test__bad_reply", "mcp__test__hang", "mcp__test__hung", "mcp__test__ping"]}),
    )
    .await);
    let pid = server_status(&client, "test").await["pid"].clone();

    let long = ok(&exec(&client, "mcp__test__big", json!({"bytes": 12_000_000})).await);
    assert_eq!(long.len(), 12_000_000);
    assert!(long.bytes().all(|b| b == b'x'));

    let over = err(&exec(&client, "mcp__test__big", json!({"bytes": 17_000_000})).await);
    assert_eq!(
        over,
        "mcp__test__big failed: server \"test\" sent a reply of 16.2 MiB, over the 16 MiB limit; the call was abandoned"
    );
    let truncated = err(&exec(
        &client,
        "mcp__test__bad_reply",
        json!({"kind": "truncated"}),
    )
    .await);
    assert!(
        truncated.starts_with(
            "mcp__test__bad_reply failed: server \"test\" sent a reply that is not valid JSON: "
        ) && truncated.ends_with("; the call was abandoned"),
        "{truncated}"
    );
    let deep = err(&exec(&client, "mcp__test__bad_reply", json!({"kind": "deep"})).await);
    assert!(
        deep.contains("server \"test\" sent a reply nested deeper than the 127 levels"),
        "{deep}"
    );
    let shapeless = err(&exec(
        &client,
        "mcp__test__bad_reply",
        json!({"kind": "not_jsonrpc"}),
    )
    .await);
    assert!(
        shapeless.contains(
            "server \"test\" sent a reply that is not a JSON-RPC response (it has neither \"result\" nor \"error\")"
        ),
        "{shapeless}"
    );
    // Each of these failed one call only: the same process answers the next.
    assert_eq!(
        ok(&exec(&client, "mcp__test__ping", json!({})).await),
        "pong"
    );
    assert_eq!(server_status(&client, "test").await["pid"], pid);

    // A broken line that names no request while two are pending: both fail now, with the reason,
    // and the server is restarted.
    let peer = client.peer().clone();
    let hang = tokio::spawn(async move {
        peer.call_tool(
            CallToolRequestParams::new("defer_execute").with_arguments(
                json!({"tool_name": "mcp__test__hang", "params": {}})
                    .as_object()
                    .expect("object")
                    .clone(),
            ),
        )
        .await
        .expect("tools/call hang")
    });
    wait_for("the hang call to reach the server", || async {
        ok(&exec(&client, "mcp__test__hung", json!({})).await) == "1"
    })
    .await;
    let noid = err(&exec(&client, "mcp__test__bad_reply", json!({"kind": "noid"})).await);
    let hung = err(&hang.await.expect("hang task"));
    for text in [&noid, &hung] {
        assert!(
            text.contains("server \"test\" sent a reply that is not valid JSON: ")
                && text.contains("could not be matched to one of the 2 pending requests")
                && !text.contains("did not answer within"),
            "{text}"
        );
    }
    wait_for("the test server to be restarted", || async {
        let st = server_status(&client, "test").await;
        st["state"] == "ready" && st["pid"] != pid
    })
    .await;
    client.cancel().await.expect("close");
    let failed = s
        .audit()
        .into_iter()
        .find(|r| r["kind"] == "server" && r["outcome"] == "failed")
        .expect("the failure is audited");
    assert!(
        failed["detail"]
            .as_str()
            .is_some_and(|d| d.contains("could not be matched")),
        "{failed}"
    );
}

/// A server that cannot start says why in its own words: the exit status and the last lines it
/// wrote on stderr, a missing working directory by name, and for a URL nobody listens at, the
/// refused connection; none of them in the MCP library's terms.
#[test]
fn a_server_that_cannot_start_says_why_in_plain_words() {
    let s = Scratch::new("why");
    let closed_port = closed_port();
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[cache]\nenabled = false\n\
             [servers.quits]\ncommand = \"sh\"\nargs = [\"-c\", \"echo starting >&2; echo 'fatal: missing API_KEY' >&2; exit 3\"]\n\
             [servers.nowhere]\ncommand = \"python3\"\nargs = [\"-c\", \"pass\"]\ncwd = {:?}\n\
             [servers.down]\nurl = \"http://127.0.0.1:{closed_port}/mcp\"\n",
            s.path("no-such-dir")
        ),
    );
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &config, "--json"])
        .output()
        .expect("status");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // No running gateway is found (3); the probe's failures are named all the same.
    assert_eq!(out.status.code(), Some(3), "a health check sees no gateway");
    assert!(
        stderr.contains(
            "(the servers were started to check them: 3 servers failed: down, nowhere, quits)"
        ),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let reason = |name: &str| {
        v["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["reason"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        reason("quits"),
        "initialize failed: the server exited with status 3; its stderr ended with: \"starting\" / \"fatal: missing API_KEY\""
    );
    assert_eq!(
        reason("nowhere"),
        format!("its cwd {:?} is not a directory", s.path("no-such-dir"))
    );
    assert!(
        reason("down").starts_with(&format!(
            "initialize at http://127.0.0.1:{closed_port}/mcp failed: cannot connect to 127.0.0.1:{closed_port}: Connection refused"
        )),
        "{}",
        reason("down")
    );
    assert!(
        stderr.contains("[quits] fatal: missing API_KEY"),
        "a server's stderr is passed on under its name: {stderr}"
    );
}

/// A stateless streamable HTTP MCP server on 127.0.0.1 (port printed on its first line) with no
/// tools, which records each request's path and every `Authorization` value it came with, a JSON
/// line each, in the file named by its argument.
const RECORDING_HTTP_SERVER: &str = r#"
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
RECORD, lock = sys.argv[1], threading.Lock()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, obj=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(code)
        if obj is not None: self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def record(self):
        line = json.dumps({"path": self.path, "authorization": self.headers.get_all("Authorization") or []})
        with lock, open(RECORD, "a") as f: f.write(line + "\n")
    def do_GET(self): self.record(); self.reply(405)
    def do_DELETE(self): self.record(); self.reply(200)
    def do_POST(self):
        self.record()
        m = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if "id" not in m: return self.reply(202)
        result = {"tools": []} if m.get("method") == "tools/list" else {}
        if m.get("method") == "initialize":
            result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "recording", "version": "0"}}
        self.reply(200, {"jsonrpc": "2.0", "id": m["id"], "result": result})
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A URL's `user:password@` is sent as basic authentication, unless the server's headers name
/// `Authorization` (in any case): then that header is the one sent, never both.
#[test]
fn a_configured_authorization_header_replaces_the_urls_userinfo() {
    let s = Scratch::new("userinfo-auth");
    let script = s.write("recording_http_server.py", RECORDING_HTTP_SERVER);
    let record = s.path("requests.jsonl");
    let mut child = std::process::Command::new("python3")
        .args([script.as_str(), record.as_str()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the HTTP server");
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut port,
    )
    .expect("read its port");
    let _server = Reaped(child);
    let base = format!("http://user:pa%20ss@127.0.0.1:{}", port.trim());
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[cache]\nenabled = false\n\
             [servers.both]\nurl = \"{base}/both\"\nheaders = {{ Authorization = \"Bearer tok-both\" }}\n\
             [servers.lower]\nurl = \"{base}/lower\"\nheaders = {{ aUTHORIZATIOn = \"Bearer tok-lower\" }}\n\
             [servers.basic]\nurl = \"{base}/basic\"\nheaders = {{ X-Other = \"x\" }}\n"
        ),
    );
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &config, "--json"])
        .output()
        .expect("status");
    let v: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    for server in v["servers"].as_array().expect("servers") {
        assert_eq!(server["state"], "ready", "{v}");
    }
    let requests: Vec<Value> = std::fs::read_to_string(&record)
        .expect("requests recorded")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    // `user:pa ss`, percent-decoded, in base64.
    let basic = "Basic dXNlcjpwYSBzcw==";
    for (path, sent) in [
        ("/both", "Bearer tok-both"),
        ("/lower", "Bearer tok-lower"),
        ("/basic", basic),
    ] {
        let of_path: Vec<&Value> = requests.iter().filter(|r| r["path"] == path).collect();
        assert!(!of_path.is_empty(), "no request to {path}: {requests:?}");
        for r in of_path {
            assert_eq!(r["authorization"], json!([sent]), "{path}: {r}");
        }
    }
}

/// A server name with control characters in it (a generated configuration's) is shown escaped
/// in the status table and the error naming the failed servers, so that it cannot forge a row;
/// the JSON keeps it as it is.
#[test]
fn the_status_table_shows_control_characters_in_names_escaped() {
    let s = Scratch::new("status-names");
    let config = s.write(
        "toolshelf.toml",
        "[cache]\nenabled = false\n\
         [servers.\"evil\\nforged      ready  \\u001b[2K\"]\ncommand = \"sh\"\nargs = [\"-c\", \"exit 3\"]\n",
    );
    let name = "evil\nforged      ready  \u{1b}[2K";
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &config])
        .output()
        .expect("status");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "the note, the heading, one row: {stdout}");
    assert!(
        lines[2].starts_with(r"evil\nforged      ready  \u{1b}[2K  failed "),
        "{stdout}"
    );
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(
        stderr.contains(r"1 server failed: evil\nforged      ready  \u{1b}[2K"),
        "{stderr}"
    );
    let json = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &config, "--json"])
        .output()
        .expect("status --json");
    let v: Value = serde_json::from_slice(&json.stdout).expect("status JSON");
    assert_eq!(v["servers"][0]["name"], name, "{v}");
}

/// A server's stderr reaches the operator's terminal with control characters escaped (no
/// cursor moves, no forged lines of another server) and an endless line cut, read only so far.
#[test]
fn a_servers_stderr_is_passed_on_escaped_and_bounded() {
    let s = Scratch::new("noisy");
    let config = s.write(
        "toolshelf.toml",
        "[cache]\nenabled = false\n\
         [servers.noisy]\ncommand = \"sh\"\nargs = [\"-c\", \"{ printf 'a\\\\033[31mred\\\\r[other] forged\\\\n'; \
         head -c 300000 /dev/zero | tr '\\\\0' x; printf '\\\\nlast words\\\\n'; } >&2; exit 3\"]\n",
    );
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &config])
        .output()
        .expect("status");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[noisy] a\\u{1b}[31mred\\u{d}[other] forged\n"),
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
    assert!(!stderr.contains('\u{1b}'), "no escape reaches the terminal");
    assert!(
        stderr.contains("[noisy] last words\n"),
        "the next line is read"
    );
    let longest = stderr.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 5_000, "a line is cut: {longest} bytes");
    assert!(
        stderr.contains("(65536 characters)"),
        "and says how long it was"
    );
}

/// The model is told when a name or a search may concern a server that is down: its tools are
/// unknown, not absent. A name of a running server's and a search that finds something read as
/// before. A server the rules hide is never named, and no server's stderr reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_is_told_which_servers_are_down() {
    let s = Scratch::new("down");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.quits]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'fatal: missing API_KEY' >&2; exit 3\"]\n\
             restart_delay_secs = 600\n\
             [servers.secretdb]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'DB_PASSWORD=hunter2 rejected' >&2; exit 3\"]\n\
             restart_delay_secs = 600\n\
             [permissions]\ndeny = [\"^mcp__secretdb__\", \"^mcp__boom__leak$\"]\n{}{}{}",
            test_server_section(5),
            named_server(
                "boom",
                &json!([
                    tool("crash", "Crash.", json!({"type": "object"})),
                    tool("leak", "Hidden.", json!({"type": "object", "properties": {"x": {"type": "nonsense"}}}))
                ]),
                ""
            ),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let secretdb = |v: &Value| {
        v["servers"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == "secretdb").cloned())
    };
    wait_for("quits and secretdb to fail, boom to start", || async {
        server_status(&client, "quits").await["state"] == "failed"
            && server_status(&client, "boom").await["state"] == "ready"
            && secretdb(&operator_status(&config)).is_some_and(|s| s["state"] == "failed")
    })
    .await;
    // The resource, which the model can read, lists no hidden server, passes on no stderr and
    // warns of no hidden tool; the operator's status keeps all of it.
    let resource = status(&client).await;
    let read = resource.to_string();
    assert!(
        secretdb(&resource).is_none()
            && !read.contains("secretdb")
            && !read.contains("hunter2")
            && !read.contains("API_KEY")
            && !read.contains("leak"),
        "{resource:#}"
    );
    assert_eq!(
        server_status(&client, "quits").await["reason"],
        "initialize failed: the server exited with status 3"
    );
    // The status file follows the hub's state changes a moment later.
    wait_for("the operator's status to hold it all", || async {
        let operator = operator_status(&config);
        secretdb(&operator)
            .is_some_and(|s| s["reason"].as_str().is_some_and(|r| r.contains("hunter2")))
            && operator["warnings"].to_string().contains("mcp__boom__leak")
    })
    .await;
    let says = "Server \"quits\" is not running (initialize failed: the server exited with status 3), so its tools are not known";
    let unknown = err(&exec(&client, "mcp__quits__send_mail", json!({})).await);
    assert!(
        unknown.starts_with("No tool named \"mcp__quits__send_mail\"") && unknown.contains(says),
        "{unknown}"
    );
    // Called as a list of short names would show it, too.
    let short = err(&call(&client, "quits__send_mail", json!({})).await);
    assert!(short.contains(says), "{short}");
    let other = err(&exec(&client, "mcp__test__no_such_tool", json!({})).await);
    assert!(!other.contains("quits"), "{other}");
    let none = text(&search(&client, json!({"queries": ["xylophone quasar"]})).await);
    assert!(none.contains(says), "{none}");
    let found = text(&search(&client, json!({"tool_names": ["mcp__test__ping"]})).await);
    assert!(!found.contains("quits"), "{found}");
    // A hidden server reads as no server at all.
    let hidden = err(&exec(&client, "mcp__secretdb__query", json!({})).await);
    let absent = err(&exec(&client, "mcp__secretdc__query", json!({})).await);
    assert_eq!(
        hidden.replace("mcp__secretdb__query", "NAME"),
        absent.replace("mcp__secretdc__query", "NAME")
    );
    let hidden_short = err(&call(&client, "secretdb__query", json!({})).await);
    for seen in [&hidden, &none, &unknown, &hidden_short] {
        assert!(
            !seen.contains("Server \"secretdb\"")
                && !seen.contains("hunter2")
                && !seen.contains("API_KEY"),
            "{seen}"
        );
    }
    // A crash's stderr stays with the operator too.
    ok(&search(&client, json!({"tool_names": ["mcp__boom__crash"]})).await);
    let crashed = err(&exec(&client, "mcp__boom__crash", json!({})).await);
    assert!(
        crashed.contains("restarted with backoff") && !crashed.contains("s3cret"),
        "{crashed}"
    );
    client.cancel().await.expect("close");
}

/// A server whose list has a tool without `inputSchema` and one without a name keeps its other
/// tools, over several pages; a server whose cursor never ends fails with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_paged_tool_lists() {
    let s = Scratch::new("lists");
    let script = fixture("test_server.py");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[servers.odd]\ncommand = \"python3\"\nargs = [{script:?}, \"--odd-tools\", \"--page-size\", \"3\"]\n\
             [servers.endless]\ncommand = \"python3\"\nargs = [{script:?}, \"--page-size\", \"5\", \"--endless-cursor\"]\n{}",
            test_server_section(5),
            files_sections(&s)
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    list_json(&client).await;
    let test = server_status(&client, "test").await;
    let odd = server_status(&client, "odd").await;
    assert_eq!(odd["state"], "ready", "{odd}");
    assert!(test["tools"].as_u64() > Some(3), "{test}");
    assert_eq!(odd["tools"], test["tools"], "every well-formed tool loads");
    ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__odd__ping"]}),
    )
    .await);
    assert_eq!(
        ok(&exec(&client, "mcp__odd__ping", json!({})).await),
        "pong"
    );
    let skipped = ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__odd__schemaless"]}),
    )
    .await);
    assert!(
        !skipped.contains("\"tool_name\":\"mcp__odd__schemaless\""),
        "{skipped}"
    );
    let warnings = status(&client).await["warnings"].clone();
    let warned: Vec<&str> = warnings
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        warned,
        [
            "server \"odd\": skipping tools[1] \"schemaless\": it has no object \"inputSchema\"",
            "server \"odd\": skipping tools[3]: it has no string \"name\""
        ],
        "the skipped tools stay in the status: {warnings}"
    );
    wait_for("the endless server to fail with the reason", || async {
        let st = server_status(&client, "endless").await;
        st["state"] == "failed"
            && st["reason"]
                .as_str()
                .is_some_and(|r| r.contains("tools/list still had a nextCursor after 100 pages"))
    })
    .await;
    client.cancel().await.expect("close");
}

/// A burst of 2,000 `notifications/tools/list_changed` costs a few re-lists, not 2,000, and the
/// last one still sees the tool added just before the last notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_change_floods_are_coalesced() {
    let s = Scratch::new("flood");
    let config = s.write(
        "toolshelf.toml",
        &format!("{}{}", test_server_section(30), files_sections(&s)),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    ok(&call(
        &client,
        "tool_search",
        json!({"tool_names": ["mcp__test__flood", "mcp__test__lists"]}),
    )
    .await);
    let lists = || async {
        ok(&exec(&client, "mcp__test__lists", json!({})).await)
            .parse::<u64>()
            .expect("a count")
    };
    let before = lists().await;
    ok(&exec(
        &client,
        "mcp__test__flood",
        json!({"count": 2000, "name": "after_flood"}),
    )
    .await);
    wait_for("the tool added by the flood to be searchable", || async {
        let r = call(
            &client,
            "tool_search",
            json!({"tool_names": ["mcp__test__after_flood"]}),
        )
        .await;
        text(&r).contains("1. mcp__test__after_flood")
    })
    .await;
    let relists = lists().await - before;
    assert!(
        (1..20).contains(&relists),
        "2,000 notices caused {relists} tools/list requests"
    );
    client.cancel().await.expect("close");
}

async fn http_sessions(client: &Client) -> u64 {
    status(client).await["http_sessions"]
        .as_u64()
        .expect("http_sessions")
}

/// The HTTP listener refuses duplicate Host or Origin headers, foreign origins and hosts, answers
/// broken bodies with JSON-RPC errors while keeping rmcp's own answers, and refuses a session
/// past `[http] max_sessions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_listener_checks_requests_and_caps_sessions() {
    let s = Scratch::new("http-guard");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}{}[http]\nmax_sessions = 3\nallowed_origins = [\"https://app.example.com\"]\n",
            test_server_section(5),
            files_sections(&s)
        ),
    );
    let (mut gateway, url) = http_gateway(&config);
    let broken = br#"{"jsonrpc": "2.0", "id": 1, "method": "#;

    let foreign = raw_http(
        &url,
        "POST",
        &[("Origin", "http://evil.example")],
        RAW_INITIALIZE.as_bytes(),
    )
    .await;
    assert_eq!(foreign.status, 403);
    assert_eq!(
        foreign.body,
        "Forbidden: Origin \"http://evil.example\" is not allowed; toolshelf accepts loopback origins and those in [http] allowed_origins"
    );
    let other_port = raw_http(
        &url,
        "POST",
        &[("Origin", "https://app.example.com:8443")],
        broken,
    )
    .await;
    assert_eq!(other_port.status, 403, "{other_port:?}");
    let host = raw_http(&url, "POST", &[("Host", "evil.example")], broken).await;
    assert_eq!(host.status, 403);
    assert!(host.body.contains("[http] allowed_hosts"), "{host:?}");
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    for (name, value) in [("Host", addr), ("Origin", "http://localhost")] {
        let twice = raw_http(&url, "POST", &[(name, value), (name, value)], broken).await;
        assert_eq!(twice.status, 400, "{twice:?}");
        assert_eq!(
            twice.body,
            format!("Bad Request: more than one {name} header")
        );
    }

    // Broken bodies get JSON-RPC errors; a listed or loopback origin passes.
    let parse = raw_http(
        &url,
        "POST",
        &[("Origin", "https://app.example.com")],
        broken,
    )
    .await;
    assert_eq!(parse.status, 400, "{parse:?}");
    assert_eq!(parse.header("content-type"), Some("application/json"));
    let e = parse.json();
    assert_eq!(
        (&e["jsonrpc"], &e["id"], &e["error"]["code"]),
        (&json!("2.0"), &Value::Null, &json!(-32700))
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .starts_with("Parse error: "),
        "{e}"
    );
    let invalid = raw_http(
        &url,
        "POST",
        &[("Origin", "http://localhost:5173")],
        br#"{"id": 7, "hello": "world"}"#,
    )
    .await;
    assert_eq!(invalid.status, 400, "{invalid:?}");
    let e = invalid.json();
    assert_eq!((&e["id"], &e["error"]["code"]), (&json!(7), &json!(-32600)));
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .starts_with("Invalid Request: "),
        "{e}"
    );
    let batch = raw_http(
        &url,
        "POST",
        &[],
        br#"[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]"#,
    )
    .await;
    assert_eq!(batch.status, 400, "{batch:?}");
    let e = batch.json();
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .contains("a JSON-RPC batch (an array of messages) is not supported"),
        "{e}"
    );
    // rmcp's own answers, in its order, are kept.
    let media = raw_http(&url, "POST", &[("Content-Type", "text/plain")], broken).await;
    assert_eq!(media.status, 415, "{media:?}");
    assert!(
        media.body.starts_with("Unsupported Media Type"),
        "{media:?}"
    );
    let accept = raw_http(&url, "POST", &[("Accept", "application/json")], broken).await;
    assert_eq!(accept.status, 406, "{accept:?}");
    let large = raw_http(&url, "POST", &[], &vec![b' '; 4 * 1024 * 1024 + 10]).await;
    assert_eq!(large.status, 413, "{large:?}");
    assert_eq!(large.json()["error"]["code"], -32600);

    // Three sessions at most: the observer and two by hand; a fourth is refused until one ends.
    let observer = http_client(&url, TestClient::default()).await;
    let first = open_raw_session(&url).await;
    open_raw_session(&url).await;
    assert_eq!(http_sessions(&observer).await, 3);
    let refused = raw_http(&url, "POST", &[], RAW_INITIALIZE.as_bytes()).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    let e = refused.json();
    assert_eq!(
        (&e["id"], &e["error"]["code"]),
        (&json!(41), &json!(-32000))
    );
    assert_eq!(
        e["error"]["message"],
        "toolshelf is serving 3 HTTP sessions, its limit ([http] max_sessions = 3); end a session or raise the limit"
    );
    let ended = raw_http(
        &url,
        "DELETE",
        &[
            ("Mcp-Session-Id", &first),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        b"",
    )
    .await;
    // 204: the Python SDK reads only 200 or 204 as a session ended (and warns on 202).
    assert_eq!(ended.status, 204, "{ended:?}");
    open_raw_session(&url).await;
    assert_eq!(http_sessions(&observer).await, 3);
    observer.cancel().await.expect("close");
    gateway.kill().expect("stop gateway");
    let _ = gateway.wait();
}

/// Sessions abandoned without a goodbye are closed after `[http] session_idle_secs`: the listener
/// forgets them and each one's end is recorded, so neither memory nor the session cap leaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sessions_left_idle_are_closed() {
    let s = Scratch::new("http-idle");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.test]\ncommand = \"python3\"\nargs = [{:?}]\nstartup_timeout_secs = 2\ncall_timeout_secs = 1\n\
             {}[http]\nsession_idle_secs = 8\n",
            fixture("test_server.py"),
            files_sections(&s)
        ),
    );
    let (mut gateway, url) = http_gateway(&config);
    let mut abandoned = std::collections::BTreeSet::new();
    for _ in 0..50 {
        abandoned.insert(open_raw_session(&url).await);
    }
    assert_eq!(abandoned.len(), 50);
    let observer = http_client(&url, TestClient::default()).await;
    let ends = || {
        s.audit()
            .iter()
            .filter(|r| r["kind"] == "session" && r["outcome"] == "end")
            .count()
    };
    wait_for("every abandoned session to be closed", || async {
        http_sessions(&observer).await == 1 && ends() >= 50
    })
    .await;
    assert_eq!(ends(), 50, "only the abandoned sessions ended");
    observer.cancel().await.expect("close");
    gateway.kill().expect("stop gateway");
    let _ = gateway.wait();
}

/// `GET url` with Python's standard library: (status, body).
fn get_page(url: &str) -> (u16, String) {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys,urllib.request,urllib.error\n\
try:\n    r = urllib.request.urlopen(sys.argv[1], timeout=30); print(r.status); print(r.read().decode())\n\
except urllib.error.HTTPError as e:\n    print(e.code); print(e.read().decode())",
            url,
        ])
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, body) = text.split_once('\n').unwrap_or((&text, ""));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

/// The HTTP gateway's dashboard: servers with their states, the catalog with exposure
/// decisions, the index, and the search playground over the sessions' own index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_gateway_serves_its_dashboard() {
    let s = Scratch::new("gateway-ui");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"Etc/UTC\"]\n\
             [servers.broken]\ncommand = \"false\"\nrestart_delay_secs = 3600\n\
             [permissions]\ndeny = [\"^mcp__time__convert_time$\"]\n{}",
            server_bin("venv/bin/mcp-server-time"),
            files_sections(&s)
        ),
    );
    // Killed even when an assertion fails, so no server outlives the test.
    let (_gateway, url) = http_gateway(&config);
    let base = url.trim_end_matches("/mcp").to_owned();
    let client = http_client(&url, TestClient::default()).await;
    let found = search(&client, json!({"queries": ["current time"]})).await;
    assert!(ok(&found).contains("mcp__time__get_current_time"));

    let (status, page) = get_page(&format!("{base}/ui"));
    assert_eq!(status, 200, "{page}");
    let row = |name: &str| {
        page.split("<tr class=\"server\">")
            .find(|r| r.contains(&format!("<td>{name}</td>")))
            .unwrap_or_else(|| panic!("a row for {name}: {page}"))
            .to_owned()
    };
    assert!(row("time").contains(">ready<"), "{}", row("time"));
    assert!(row("broken").contains(">failed<"), "{}", row("broken"));
    // A failed server stands out from a ready one.
    assert!(
        row("broken").contains("class=\"server-failed\"") && page.contains(".server-failed {"),
        "{}",
        row("broken")
    );
    assert!(
        page.contains("The last search: "),
        "the session's search is timed: {page}"
    );

    let (_, catalog) = get_page(&format!("{base}/ui/catalog"));
    let convert = catalog
        .split("<tr>")
        .find(|r| r.contains("mcp__time__convert_time"))
        .unwrap_or_else(|| panic!("convert_time listed: {catalog}"));
    assert!(
        convert.contains("state-hidden"),
        "the deny rule hides it: {convert}"
    );
    let (_, index) = get_page(&format!("{base}/ui/index"));
    assert!(
        index.contains("available_deferred_tools") && !index.contains("<available_deferred_tools>"),
        "the index is shown, escaped: {index}"
    );
    let (_, hits) = get_page(&format!("{base}/ui/search/hits?q=current+time"));
    let first = hits
        .split("<td class=\"hit\">")
        .nth(1)
        .and_then(|h| h.split('<').next())
        .unwrap_or_else(|| panic!("a hit: {hits}"));
    assert_eq!(first, "mcp__time__get_current_time");
    assert_eq!(get_page(&format!("{base}/ui/nothing")).0, 404);
    // With a trailing slash a page is the same page, as the proxy has it; a browser's icon
    // request gets an empty answer, and any other path says which there are.
    let (status, slashed) = get_page(&format!("{base}/ui/"));
    assert!(
        status == 200 && slashed.contains("<td>broken</td>"),
        "{status} {slashed}"
    );
    let (status, scraped) = get_page(&format!("{base}/metrics/"));
    assert!(
        status == 200 && scraped.contains("toolshelf_"),
        "{status} {scraped}"
    );
    let (status, icon) = get_page(&format!("{base}/favicon.ico"));
    assert_eq!((status, icon.trim()), (204, ""));
    let (status, missing) = get_page(&format!("{base}/elsewhere"));
    assert_eq!(
        (status, missing.trim()),
        (
            404,
            "/elsewhere is no page of the toolshelf gateway (it has /mcp, /ui and /metrics)"
        )
    );
    client.cancel().await.expect("close");
}

/// `GET url` with `headers` by curl: (status, body).
fn curl_get(url: &str, headers: &[&str]) -> (u16, String) {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "-w", "\n%{http_code}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

/// A configured `[ui] token` is required on a loopback listener too: behind a reverse proxy
/// (`Host: gw.internal` reaching 127.0.0.1) the pages would otherwise be open to whoever reaches
/// the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_required_on_loopback_too() {
    let s = Scratch::new("gateway-token-loopback");
    let config = token_config(&s);
    let (_gateway, url) = http_gateway(&config);
    let base = url.trim_end_matches("/mcp").to_owned();
    for host in ["Host: gw.internal", "X-Nothing: 1"] {
        for page in ["metrics", "ui"] {
            let (status, body) = curl_get(&format!("{base}/{page}"), &[host]);
            assert_eq!(status, 401, "{host} {page}: {body}");
            let (status, body) = curl_get(
                &format!("{base}/{page}"),
                &[host, "Authorization: Bearer sesame"],
            );
            assert_eq!(status, 200, "{host} {page}: {body}");
        }
    }
}

/// A gateway configuration with the test server, `[ui] token = "sesame"`, and `gw.internal`
/// among the allowed hosts (as behind a reverse proxy).
fn token_config(s: &Scratch) -> String {
    s.write(
        "toolshelf.toml",
        &format!(
            "{}{}[ui]\ntoken = \"sesame\"\n[http]\nallowed_hosts = [\"gw.internal\"]\n",
            test_server_section(5),
            files_sections(s)
        ),
    )
}

/// On a listener that is not loopback, with `[ui] token` set, `/metrics` (which names servers and
/// their states) needs the token, as `/ui` does and as the proxy's does; `/mcp` does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_dashboard_token_off_loopback() {
    let s = Scratch::new("gateway-metrics-token");
    let config = token_config(&s);
    let (_gateway, url) = http_gateway_on(&config, "0.0.0.0:0");
    let port = url
        .trim_end_matches("/mcp")
        .rsplit(':')
        .next()
        .expect("port")
        .to_owned();
    let base = format!("http://127.0.0.1:{port}");
    let host = "Host: gw.internal";
    for page in ["metrics", "ui"] {
        let (status, body) = curl_get(&format!("{base}/{page}"), &[host]);
        assert_eq!(status, 401, "{page}: {body}");
        let (status, body) = curl_get(
            &format!("{base}/{page}"),
            &[host, "Authorization: Bearer sesame"],
        );
        assert_eq!(status, 200, "{page}: {body}");
    }
    let (status, body) = curl_get(&format!("{base}/metrics?token=sesame"), &[host]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("toolshelf_gateway_server"), "{body}");
    // Fetched with the token in its URL, it is not to be stored.
    let head = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-D", "-", "-H", host])
        .arg(format!("{base}/metrics?token=sesame"))
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&head.stdout).to_ascii_lowercase();
    assert!(head.contains("\r\ncache-control: no-store\r\n"), "{head}");
    // The token guards the pages, not MCP: a session needs no token.
    let client = http_client(&format!("{base}/mcp"), TestClient::default()).await;
    assert!(!list_names(&client).await.is_empty());
    client.cancel().await.expect("close");
}

/// `GET URL` with curl: the body.
fn curl(url: &str) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sS", url])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the sample `series` (its name and labels as written) in a scrape.
fn sample(scrape: &str, series: &str) -> Option<String> {
    scrape.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_owned)
    })
}

/// A session refused at `[http] max_sessions` and audit records the log could not take are not
/// only in the log: the metrics count them (with the open sessions and the build's version),
/// the status file and `toolshelf status` give the refusals, and the dashboard shows both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_sessions_and_dropped_audit_records_are_counted_and_shown() {
    let s = Scratch::new("http-limits");
    // /dev/full opens, and fails every write with "no space left on device".
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[audit]\npath = \"/dev/full\"\nrequired = false\n[cache]\npath = {:?}\n[http]\nmax_sessions = 1\n",
            test_server_section(5),
            s.path("cache")
        ),
    );
    let (_gateway, url, log) = http_gateway_logged(&config, "127.0.0.1:0", &[]);
    let base = url.trim_end_matches("/mcp").to_owned();
    let client = http_client(&url, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["mcp__test__pid"]})).await);
    for _ in 0..2 {
        let refused = raw_http(&url, "POST", &[], RAW_INITIALIZE.as_bytes()).await;
        assert_eq!(refused.status, 503, "{refused:?}");
    }

    let scrape = curl(&format!("{base}/metrics"));
    assert_eq!(
        sample(&scrape, "toolshelf_gateway_sessions_refused_total").as_deref(),
        Some("2"),
        "{scrape}"
    );
    assert_eq!(
        sample(&scrape, "toolshelf_gateway_http_sessions").as_deref(),
        Some("1"),
        "{scrape}"
    );
    let dropped: u64 = sample(&scrape, "toolshelf_gateway_audit_dropped_total")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the dropped records: {scrape}"));
    assert!(dropped >= 1, "{scrape}");
    assert_eq!(
        sample(
            &scrape,
            &format!(
                "toolshelf_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        )
        .as_deref(),
        Some("1"),
        "{scrape}"
    );
    for (name, kind) in [
        ("toolshelf_gateway_sessions_refused_total", "counter"),
        ("toolshelf_gateway_http_sessions", "gauge"),
        ("toolshelf_gateway_audit_dropped_total", "counter"),
        ("toolshelf_build_info", "gauge"),
    ] {
        assert!(
            scrape.contains(&format!("# HELP {name} "))
                && scrape.contains(&format!("# TYPE {name} {kind}\n")),
            "{name}: {scrape}"
        );
    }

    // Said in the log, once for the burst.
    let said: Vec<String> = log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|l| l.contains("refused 1 new HTTP session"))
        .cloned()
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("WARN") && said[0].contains("1 open, the limit ([http] max_sessions = 1)"),
        "{said:?}"
    );

    // The status file follows, written in the background.
    let operator = || {
        let out = std::process::Command::new(TOOLSHELF)
            .args(["status", "--config", &config, "--json"])
            .output()
            .expect("status");
        serde_json::from_slice::<Value>(&out.stdout).expect("status JSON")
    };
    wait_for("the status file to count the refusals", || async {
        operator()["gateways"][0]["http"] == json!({"max_sessions": 1, "sessions_refused": 2})
    })
    .await;
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &config])
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(
            "http: at most 1 sessions at once ([http] max_sessions); 2 refused at that limit"
        ),
        "{table}"
    );

    let page = curl(&format!("{base}/ui"));
    // The figures refresh by themselves, in place: the page fetches itself and swaps its live
    // part in, which holds them.
    let live = page
        .split("<div id=\"live\"")
        .nth(1)
        .unwrap_or_else(|| panic!("a live part: {page}"));
    assert!(
        live.starts_with(
            " hx-get=\"/ui\" hx-trigger=\"every 5s\" hx-select=\"#live\" hx-swap=\"outerHTML\">"
        ) && live.contains("<table id=\"servers\">")
            && live.contains("id=\"audit\"")
            && live.contains("id=\"sessions\""),
        "{page}"
    );
    let audit = page
        .split("id=\"audit\"")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or_else(|| panic!("the audit log's line: {page}"));
    assert!(
        audit.contains("broken") && audit.contains("/dev/full") && audit.contains("No space left"),
        "{audit}"
    );
    let sessions = page
        .split("id=\"sessions\"")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or_else(|| panic!("the sessions' line: {page}"));
    assert!(
        sessions.contains("1 open of at most 1") && sessions.contains("2 refused"),
        "{sessions}"
    );
    client.cancel().await.expect("close");
}

/// `toolshelf status` with these arguments and `XDG_CACHE_HOME` in the scratch directory: its
/// exit status, stdout and stderr.
fn status_run(s: &Scratch, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(TOOLSHELF)
        .arg("status")
        .args(args)
        .env("XDG_CACHE_HOME", s.path("xdg"))
        .current_dir(&s.0)
        .output()
        .expect("status");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A health check can go by `toolshelf status`'s exit status: 3 when no gateway runs for the
/// configuration (the servers probed all the same, `--json` saying so), 0 once one does, and a
/// gateway started with `serve --mcp-config FILE` is found by `status --mcp-config FILE`, the
/// file named relatively or not, or through a symbolic link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_3_without_a_gateway_and_finds_one_serving_an_mcp_config() {
    let s = Scratch::new("status-exit");
    let mcp = s.write(
        "mcp.json",
        &json!({"mcpServers": {
            "test": {"command": "python3", "args": [fixture("test_server.py")]}
        }})
        .to_string(),
    );
    let (code, stdout, stderr) = status_run(&s, &["--mcp-config", &mcp]);
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    assert!(
        stdout.starts_with(
            "no gateway running for this configuration; started each server to check it"
        ),
        "{stdout}"
    );
    assert!(
        stderr.contains("no gateway running for this configuration (the servers were started to check them: no server failed)"),
        "{stderr}"
    );
    let (code, stdout, stderr) = status_run(&s, &["--mcp-config", &mcp, "--json"]);
    assert_eq!(code, Some(3), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("status JSON");
    assert_eq!(
        (&v["source"], &v["running"], &v["gateways"]),
        (&json!("probe"), &json!(false), &json!([])),
        "{v}"
    );
    assert_eq!(v["servers"][0]["state"], "ready", "{v}");

    // A gateway on the same file, named relatively from the scratch directory.
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--mcp-config", "mcp.json"])
        .current_dir(&s.0)
        .env("XDG_CACHE_HOME", s.path("xdg"))
        .env("TOOLSHELF_LOG", "warn");
    let client = stdio_client_logged(cmd, &s.0.join("serve.log")).await;
    ok(&search(&client, json!({"tool_names": ["mcp__test__pid"]})).await);
    std::os::unix::fs::symlink(&mcp, s.0.join("link.json")).expect("symlink");
    for named in [mcp.as_str(), "mcp.json", "link.json"] {
        wait_for("status to find the gateway", || async {
            status_run(&s, &["--mcp-config", named, "--json"]).0 == Some(0)
        })
        .await;
        let (code, stdout, stderr) = status_run(&s, &["--mcp-config", named, "--json"]);
        assert_eq!(code, Some(0), "{stderr}");
        let v: Value = serde_json::from_str(&stdout).expect("status JSON");
        assert_eq!(
            (&v["source"], &v["running"]),
            (&json!("running"), &json!(true)),
            "{v}"
        );
    }
    let (code, stdout, _) = status_run(&s, &["--mcp-config", &mcp]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.starts_with("gateway running (pid "), "{stdout}");
    client.cancel().await.expect("close");
}
