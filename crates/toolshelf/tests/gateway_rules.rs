//! End-to-end tests of the gateway's rules and records: names that collide, permission rules that
//! must hold on every name of a tool, schemas that do not compile, the audit log's fidelity and
//! its failure, the files the gateway keeps (status per process, a private default directory),
//! tools that arrive after the session froze its list, the approval of a model-written tool,
//! calls abandoned while the user is asked or a `pre_call` hook runs, and the name a failed call
//! gives its tool. Real `toolshelf` binary, real rmcp client, and `fixtures/named_server.py` (or
//! `test_server.py`) as downstream servers with tools chosen per test.

mod common;

use std::process::Stdio;

use common::*;
use serde_json::{Value, json};

/// The `warnings` of a status resource, as text.
fn warnings_of(status: &Value) -> Vec<String> {
    status["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn empty() -> Value {
    json!({"type": "object", "properties": {}})
}

/// `toolshelf status --config CFG`'s table, which must succeed.
fn status_table(cfg: &str) -> String {
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", cfg])
        .stderr(Stdio::inherit())
        .output()
        .expect("status");
    assert!(out.status.success());
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `toolshelf status --config CFG --json`, which must succeed.
fn status_json(cfg: &str) -> Value {
    let (status, code) = status_json_and_code(cfg);
    assert_eq!(code, Some(0));
    status
}

/// `toolshelf status --config CFG --json` and its exit status, whatever it is.
fn status_json_and_code(cfg: &str) -> (Value, Option<i32>) {
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", cfg, "--json"])
        .stderr(Stdio::inherit())
        .output()
        .expect("status");
    let status = serde_json::from_slice(&out.stdout).expect("status JSON");
    (status, out.status.code())
}

/// Servers `a` (tool `b__c`) and `a__b` (tool `c`) both have the original name `mcp__a__b__c`;
/// servers `x.y` and `x_y` both want `mcp__x_y__t`. A rule written for either name stops every
/// tool that has it, whichever of them keeps the plain canonical name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_holds_on_every_name_a_tool_has() {
    let s = Scratch::new("collide");
    let config = format!(
        "{}{}{}{}{}[permissions]\ndeny = [\"^mcp__a__b__c$\", \"^mcp__x_y__t$\"]\n",
        named_server(
            "a",
            &json!([
                tool("b__c", "the b__c tool of server a", empty()),
                tool("free", "a free tool", empty())
            ]),
            ""
        ),
        named_server(
            "a__b",
            &json!([tool("c", "the c tool of server a__b", empty())]),
            ""
        ),
        named_server(
            "x.y",
            &json!([tool("t", "the t tool of server x.y", empty())]),
            ""
        ),
        named_server(
            "x_y",
            &json!([tool("t", "the t tool of server x_y", empty())]),
            ""
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    // Every denied tool is hidden: not in the index, not found, not runnable by any name.
    let tools = client.list_all_tools().await.expect("list");
    let index = tools
        .iter()
        .find(|t| t.name == "tool_search")
        .and_then(|t| t.description.clone())
        .expect("tool_search");
    assert!(index.contains("mcp__a\n  free"), "{index}");
    for needle in ["b__c", "mcp__a_b", "mcp__x_y"] {
        assert!(!index.contains(needle), "{needle} is listed:\n{index}");
    }
    let found = text(
        &search(
            &client,
            json!({"queries": ["the tool of server"], "limit": 10}),
        )
        .await,
    );
    assert!(
        !found.contains("server a__b") && !found.contains("server x"),
        "{found}"
    );
    for name in [
        "mcp__a__b__c",
        "mcp__a_b__c",
        "mcp__x_y__t",
        "b__c",
        "c",
        "t",
    ] {
        let e = err(&exec(&client, name, json!({})).await);
        assert!(e.starts_with("No tool named"), "{name}: {e}");
    }
    ok(&exec(&client, "mcp__a__free", json!({})).await);
    client.cancel().await.expect("close");
    let audit = s.audit();
    let hidden: Vec<&Value> = audit.iter().filter(|r| r["kind"] == "hidden").collect();
    assert_eq!(
        hidden.len(),
        6,
        "every name is refused as hidden: {audit:?}"
    );
    assert!(hidden.iter().all(|r| {
        r["detail"]
            .as_str()
            .is_some_and(|d| d.contains("denies every call"))
    }));
    let ran: Vec<&Value> = audit.iter().filter(|r| r["kind"] == "call").collect();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0]["tool"], "mcp__a__free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_that_does_not_compile_refuses_the_call() {
    let s = Scratch::new("schema");
    let broken =
        json!({"type": "object", "properties": {"q": {"type": "string", "pattern": "(unclosed"}}});
    let remote =
        json!({"type": "object", "properties": {"q": {"$ref": "https://example.invalid/q.json"}}});
    let config = format!(
        "{}{}",
        named_server(
            "s",
            &json!([
                tool("bad_pattern", "a tool with a broken pattern", broken),
                tool("remote_ref", "a tool with a remote ref", remote)
            ]),
            ""
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    let found = ok(&search(
        &client,
        json!({"tool_names": ["mcp__s__bad_pattern", "mcp__s__remote_ref"]}),
    )
    .await);
    // The search says what the call would: not callable, and why; no call form to copy.
    assert!(
        !found.contains("call: defer_execute") && !found.contains("parameters:"),
        "{found}"
    );
    for (name, says) in [
        ("mcp__s__bad_pattern", "regex"),
        ("mcp__s__remote_ref", "resolve-http"),
    ] {
        let hit = found
            .split("\n\n")
            .find(|h| h.contains(&format!(". {name}\n")))
            .unwrap_or_else(|| panic!("no hit for {name}: {found}"));
        assert!(
            hit.contains("   cannot be called: its input schema is not valid JSON Schema (")
                && hit.contains(says)
                && hit.ends_with(
                    "so defer_execute refuses every call to it until its server fixes the schema. \
                     Use another tool, or tell the user."
                ),
            "{hit}"
        );
    }
    for (name, says) in [
        ("mcp__s__bad_pattern", "regex"),
        ("mcp__s__remote_ref", "resolve-http"),
    ] {
        let e = err(&exec(&client, name, json!({"q": "anything"})).await);
        assert!(
            e.starts_with(&format!("{name} was not run: its input schema is broken"))
                && e.contains(says),
            "{e}"
        );
    }
    client.cancel().await.expect("close");
    let refused: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "refused")
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|r| r["outcome"] == "schema_broken" && r["detail"].is_string())
    );
    assert!(
        !s.audit().iter().any(|r| r["kind"] == "call"),
        "nothing ran unchecked"
    );
}

/// A tool whose schema is not valid JSON Schema is warned about when its server lists it, once:
/// another server arriving later rebuilds the catalog without repeating the warning. The
/// warning stays in the status resource and in `toolshelf status` for as long as it holds.
/// A server's unusable tools are warned about as its list's, by position: the configuration
/// file did not write them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_bad_tools_are_named_as_its_lists() {
    let s = Scratch::new("list-source");
    let config = format!(
        "{}{}",
        named_server(
            "odd",
            &json!([
                tool("ok", "fine", empty()),
                tool("", "no name", empty()),
                tool("dup", "one", empty()),
                tool("dup", "two", empty())
            ]),
            ""
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    client.list_all_tools().await.expect("tools/list");
    let warned = warnings_of(&status(&client).await);
    for expected in [
        "skipping a tool of server \"odd\": tools/list: tools[1]: ",
        "skipping a tool of server \"odd\": tools/list: tools[3] \"dup\": duplicate tool name",
    ] {
        assert!(
            warned.iter().any(|w| w.starts_with(expected)),
            "{expected}: {warned:?}"
        );
    }
    assert!(!warned.iter().any(|w| w.contains(&cfg)), "{warned:?}");
    client.cancel().await.expect("close");
}

/// A pinned tool whose definition alone fills a good part of the window is named in the
/// gateway's warnings; a deferred one of the same size is not (search trims it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_pinned_tool_is_warned_about() {
    let s = Scratch::new("oversized-pin");
    let big = "word ".repeat(11_000);
    let config = format!(
        "[defer]\nrules = [\"NoDefer(^mcp__s__huge$)\"]\n{}{}",
        named_server(
            "s",
            &json!([
                tool("huge", &big, empty()),
                tool("also_huge", &big, empty())
            ]),
            ""
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    let listed = client.list_all_tools().await.expect("tools/list");
    assert!(listed.iter().any(|t| t.name.ends_with("huge")), "pinned");
    let warned = warnings_of(&status(&client).await);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with("resident tool \"mcp__s__huge\" alone takes ")
            && warned[0].contains("of the 200000-token window on every turn"),
        "{warned:?}"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_schema_is_warned_about_once_and_kept_in_the_status() {
    let s = Scratch::new("schema-warn");
    let marker = s.write("fail-while-present", "");
    let odd = json!({"type": "object", "properties": {"p": {"type": 42}}});
    let config = format!(
        "{}{}{}",
        named_server(
            "s",
            &json!([tool("odd", "a tool with a wrong type", odd)]),
            ""
        ),
        named_server_failing_while(
            "late",
            &json!([tool("arrived", "a tool that arrives later", empty())]),
            Some(&marker),
            "startup_timeout_secs = 5"
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let log = s.0.join("stderr.log");
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--config", &cfg])
        .env("TOOLSHELF_LOG", "warn");
    let client = stdio_client_logged(cmd, &log).await;
    let says =
        "tool \"mcp__s__odd\": its input schema is not a valid JSON Schema (at /properties/p/type";
    wait_for("the odd tool to be listed", || async {
        text(&search(&client, json!({"tool_names": ["mcp__s__odd"]})).await)
            .contains("1. mcp__s__odd")
    })
    .await;
    std::fs::remove_file(&marker).expect("let the late server start");
    wait_for("the late server's tool to become searchable", || async {
        text(&search(&client, json!({"tool_names": ["mcp__late__arrived"]})).await)
            .contains("1. mcp__late__arrived")
    })
    .await;
    let e = err(&exec(&client, "mcp__s__odd", json!({"p": 1})).await);
    assert!(e.contains("its input schema is broken"), "{e}");
    let resource = status(&client).await;
    let warned = warnings_of(&resource);
    assert!(
        warned.len() == 1 && warned[0].starts_with(says),
        "{resource}"
    );
    let running = status_json(&cfg);
    assert_eq!(running["source"], "running", "{running}");
    assert_eq!(running["warnings"], resource["warnings"], "{running}");
    let table = status_table(&cfg);
    assert!(
        table.contains(&format!("warnings (1):\n  {says}")),
        "{table}"
    );
    client.cancel().await.expect("close");
    let logged = std::fs::read_to_string(&log).expect("stderr");
    assert_eq!(logged.matches(says).count(), 1, "{logged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_records_how_each_call_came_and_what_the_user_said() {
    let s = Scratch::new("fidelity");
    let config = format!(
        "{}{}[defer]\nrules = [\"NoDefer(^mcp__s__pinned$)\"]\n[permissions]\nask = [\"^mcp__s__asked$\"]\n",
        named_server(
            "s",
            &json!([
                tool("pinned", "a resident tool", empty()),
                tool("deferred", "a deferred tool", empty()),
                tool("asked", "a tool that needs approval", empty())
            ]),
            ""
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::answering(false)).await;
    ok(&call(&client, "mcp__s__pinned", json!({})).await);
    ok(&search(
        &client,
        json!({"tool_names": ["mcp__s__deferred", "mcp__s__asked"]}),
    )
    .await);
    ok(&exec(&client, "deferred", json!({})).await);
    let e = err(&exec(&client, "mcp__s__asked", json!({})).await);
    assert!(e.contains("the user did not approve it"), "{e}");
    assert!(
        e.starts_with(
            "mcp__s__asked was not run: the user did not approve it (the user declined)."
        ),
        "{e}"
    );
    // A name of a megabyte comes back, and goes to the log, in a few hundred bytes.
    let huge = "x".repeat(1_000_000);
    let e = err(&exec(&client, &huge, json!({"content": "y".repeat(200_000)})).await);
    assert!(
        e.len() < 600 && e.contains("(1000000 characters)"),
        "{} bytes",
        e.len()
    );
    client.cancel().await.expect("close");
    let audit = s.audit();
    let calls: Vec<&Value> = audit.iter().filter(|r| r["kind"] == "call").collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0]["requested"].as_str(), calls[0]["via"].as_str()),
        (Some("mcp__s__pinned"), Some("direct"))
    );
    assert_eq!(
        (
            calls[1]["requested"].as_str(),
            calls[1]["tool"].as_str(),
            calls[1]["via"].as_str()
        ),
        (
            Some("deferred"),
            Some("mcp__s__deferred"),
            Some("defer_execute")
        )
    );
    let asked = audit
        .iter()
        .find(|r| r["outcome"] == "not_approved")
        .expect("refusal");
    assert_eq!(asked["ask"], "declined");
    assert!(
        asked["detail"]
            .as_str()
            .expect("detail")
            .ends_with("; the user declined"),
        "{asked}"
    );
    let unknown = audit
        .iter()
        .find(|r| r["outcome"] == "unknown")
        .expect("unknown");
    let line = serde_json::to_string(unknown).expect("json");
    assert!(line.len() < 6_000, "an audit line of {} bytes", line.len());
    assert!(
        unknown["requested"]
            .as_str()
            .expect("requested")
            .ends_with("(1000000 characters)")
    );
    assert!(
        unknown["params"]["_truncated_bytes"].as_u64() > Some(200_000),
        "{unknown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_refused_while_a_required_audit_log_cannot_be_written() {
    for required in [true, false] {
        let s = Scratch::new(&format!("full-{required}"));
        // /dev/full opens, and fails every write with "no space left on device".
        let config = format!(
            "{}[audit]\npath = \"/dev/full\"\nrequired = {required}\n[cache]\npath = {:?}\n",
            named_server("s", &json!([tool("t", "a tool", empty())]), ""),
            s.path("cache"),
        );
        let cfg = s.write("toolshelf.toml", &config);
        let client = stdio_client(&cfg, TestClient::default()).await;
        ok(&search(&client, json!({"tool_names": ["mcp__s__t"]})).await);
        let r = exec(&client, "mcp__s__t", json!({})).await;
        if required {
            let e = err(&r);
            assert!(
                e.contains("[audit] required = true") && e.contains("/dev/full"),
                "{e}"
            );
        } else {
            assert!(ok(&r).contains("\"server\":\"s\""));
        }
        let audit = status(&client).await["audit"].clone();
        assert_eq!(audit["required"], required);
        assert!(audit["dropped"].as_u64() >= Some(2), "{audit}");
        assert!(
            audit["error"]
                .as_str()
                .is_some_and(|e| e.contains("No space left")),
            "{audit}"
        );
        client.cancel().await.expect("close");
    }
}

/// A required log that became unwritable since its last record (its directory replaced by a
/// file) refuses the very next call, which would otherwise run and lose its record; once the
/// path can be written again, calls run and are recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_log_that_became_unwritable_refuses_the_next_call() {
    let s = Scratch::new("unwritable");
    let config = format!(
        "{}[audit]\npath = {:?}\nrequired = true\n[cache]\npath = {:?}\n",
        named_server("s", &json!([tool("t", "a tool", empty())]), ""),
        s.path("logs/audit.jsonl"),
        s.path("cache"),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["mcp__s__t"]})).await);
    std::fs::remove_dir_all(s.path("logs")).expect("remove the log's directory");
    std::fs::write(s.path("logs"), "").expect("a file in its place");
    let e = err(&exec(&client, "mcp__s__t", json!({})).await);
    assert!(
        e.starts_with("mcp__s__t was not run: toolshelf must record every call")
            && e.contains(&format!("{} is a file", s.path("logs"))),
        "{e}"
    );
    // The operator's view follows the log's health both ways.
    // The operator's view follows the log's health both ways, and a health check fails while
    // calls are refused.
    let audit_status = || {
        let (status, code) = status_json_and_code(&cfg);
        (status["gateways"][0]["audit"].clone(), code)
    };
    wait_for("toolshelf status to report the failing log", || async {
        audit_status().0["error"]
            .as_str()
            .is_some_and(|e| e.contains("is a file"))
    })
    .await;
    assert_eq!(
        audit_status().1,
        Some(1),
        "a failing required log is unhealthy"
    );
    std::fs::remove_file(s.path("logs")).expect("clear the way");
    assert!(ok(&exec(&client, "mcp__s__t", json!({})).await).contains("\"server\":\"s\""));
    wait_for("toolshelf status to report the log recovered", || async {
        audit_status().0["error"].is_null()
    })
    .await;
    assert_eq!(audit_status().1, Some(0));
    client.cancel().await.expect("close");
    let audit = s.audit_at("logs/audit.jsonl");
    let outcomes: Vec<(&str, &str)> = audit
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default(),
                r["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        outcomes[..2],
        [("audit", "recovered"), ("call", "ok")],
        "{audit:?}"
    );
}

/// Approving a call of a tool the model wrote in the session: the question says the model wrote
/// it and shows its script, after its arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_a_model_written_tool_shows_its_script() {
    let s = Scratch::new("ask-authored");
    let config = format!(
        "{}{}[authoring]\nenabled = true\nkeep_dir = \"\"\n[permissions]\ndefault = \"ask\"\nallow = [\"^tool_define$\"]\n",
        named_server("s", &json!([tool("t", "a tool", empty())]), ""),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::answering(true)).await;
    ok(&search(&client, json!({"tool_names": ["tool_define"]})).await);
    let script = "def run(params):\n    return 'up: ' + params['service']\n";
    ok(&exec(
        &client,
        "tool_define",
        json!({"name": "check_status", "description": "Check a service's status.",
               "schema": {"type": "object", "properties": {"service": {"type": "string"}}},
               "script": script}),
    )
    .await);
    assert_eq!(
        ok(&exec(&client, "check_status", json!({"service": "web"})).await),
        "up: web"
    );
    let asked = client.service().asked.lock().expect("asked").clone();
    assert_eq!(
        asked,
        [
            "Allow the agent to run check_status with these arguments? check_status is not a \
configured tool: the model wrote it in this session (tool_define), and its whole script (2 lines, \
55 characters) is shown after the arguments.\n{\n  \"service\": \"web\"\n}\nScript of \
check_status, as the model wrote it:\ndef run(params):\n    return 'up: ' + params['service']"
        ]
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_of_a_server_that_starts_late_are_reachable_from_a_frozen_list() {
    let s = Scratch::new("late");
    let marker = s.write("fail-while-present", "");
    let tools = json!([tool(
        "arrived",
        "a tool that arrives after the list froze",
        empty()
    )]);
    let config = format!(
        "{}{}",
        named_server_failing_while("late", &tools, Some(&marker), "startup_timeout_secs = 5"),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    // Every server is failing: the list still has the meta-tools, so later tools can be reached.
    let names = list_names(&client).await;
    assert_eq!(names, ["tool_search", "defer_execute"]);
    std::fs::remove_file(&marker).expect("let the server start");
    // Found by the search itself: the change notice on the same result names the tool as soon
    // as the catalog has it, which may be before the search's own snapshot does.
    wait_for("the late server's tool to become searchable", || async {
        text(&search(&client, json!({"queries": ["arrives after"]})).await)
            .contains("1. mcp__late__arrived")
    })
    .await;
    let r = exec(&client, "mcp__late__arrived", json!({})).await;
    assert!(ok(&r).contains("\"server\":\"late\""), "{}", text(&r));
    assert_eq!(
        list_names(&client).await,
        names,
        "the frozen list did not change"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_tool_shows_its_template_in_a_session_that_froze_before_it() {
    let s = Scratch::new("late-template");
    let marker = s.write("fail-while-present", "");
    let tools = json!([tool("send", "Send mail.", empty())]);
    let config = format!(
        "{}{}[tools.\"mcp__late__send\"]\ndescription_template = 'part(\"TEMPLATED:\", pkg.description, \"for\", session.client)'\n",
        named_server_failing_while("late", &tools, Some(&marker), "startup_timeout_secs = 5"),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    list_names(&client).await;
    std::fs::remove_file(&marker).expect("let the server start");
    wait_for("the late server's tool to become searchable", || async {
        text(&search(&client, json!({"tool_names": ["mcp__late__send"]})).await)
            .contains("Send mail.")
    })
    .await;
    let found = ok(&search(&client, json!({"tool_names": ["mcp__late__send"]})).await);
    assert!(found.contains("TEMPLATED: Send mail. for"), "{found}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_engine_fault_reads_as_a_fault() {
    let s = Scratch::new("fault");
    let config = format!(
        "{}{}[execute]\nrequire_search = false\n",
        named_server("s", &json!([tool("t", "read a file", empty())]), ""),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    // A debug-build failpoint makes the engine panic inside tool_search.
    let client = stdio_client_with(&cfg, TestClient::default(), |c| {
        c.env("TOOLSHELF_FAILPOINTS", "search");
    })
    .await;
    let e = err(&search(&client, json!({"queries": ["read file"]})).await);
    assert!(
        e.starts_with("tool_search failed: internal error (failpoint search)")
            && e.contains("not a sign that no tool matches"),
        "{e}"
    );
    // The gateway survives it and keeps serving.
    ok(&exec(&client, "mcp__s__t", json!({})).await);
    client.cancel().await.expect("close");
    let searches: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "search")
        .collect();
    assert_eq!(searches[0]["outcome"], "engine_failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gateway_has_its_own_status_and_counts_only_visible_tools() {
    let s = Scratch::new("status");
    let config = format!(
        "{}{}[permissions]\ndeny = [\"^mcp__s__secret$\"]\n",
        named_server(
            "s",
            &json!([
                tool("open", "x", empty()),
                tool("also_open", "y", empty()),
                tool("secret", "z", empty())
            ]),
            ""
        ),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    let (mut one, url_one) = http_gateway(&cfg);
    let (mut two, url_two) = http_gateway(&cfg);
    // Sessions on both, so both have settled.
    for url in [&url_one, &url_two] {
        let c = http_client(url, TestClient::default()).await;
        list_names(&c).await;
        assert_eq!(
            status(&c).await["servers"][0]["tools"],
            2,
            "the denied tool is not counted"
        );
        c.cancel().await.expect("close");
    }
    let v = status_json(&cfg);
    assert_eq!(v["source"], "running");
    let mut pids: Vec<u64> = v["gateways"]
        .as_array()
        .expect("gateways")
        .iter()
        .map(|g| g["pid"].as_u64().expect("pid"))
        .collect();
    pids.sort_unstable();
    let mut want = vec![u64::from(one.id()), u64::from(two.id())];
    want.sort_unstable();
    assert_eq!(pids, want);
    for g in v["gateways"].as_array().expect("gateways") {
        assert_eq!(g["servers"][0]["tools"], 2);
    }
    let table = status_table(&cfg);
    assert_eq!(table.matches("gateway running (pid").count(), 2, "{table}");
    one.kill().expect("kill");
    one.wait().expect("wait");
    let v = status_json(&cfg);
    assert_eq!(v["gateways"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["pid"], u64::from(two.id()));
    two.kill().expect("kill");
    two.wait().expect("wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cache_there_is_no_status_file() {
    let s = Scratch::new("nocache");
    let config = format!(
        "{}[audit]\nenabled = false\n[cache]\nenabled = false\npath = {:?}\n",
        named_server("s", &json!([tool("t", "x", empty())]), ""),
        s.path("cache")
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    ok(&search(&client, json!({"tool_names": ["mcp__s__t"]})).await);
    assert!(
        !s.0.join("cache").exists(),
        "nothing is written to the cache directory"
    );
    client.cancel().await.expect("close");
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_home_files_go_to_a_private_directory() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = Scratch::new("nohome");
    let config = named_server("s", &json!([tool("t", "x", empty())]), "");
    let cfg = s.write("toolshelf.toml", &config);
    let tmp = s.0.join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let no_home = |c: &mut tokio::process::Command| {
        c.env_remove("HOME")
            .env_remove("XDG_CACHE_HOME")
            .env("TMPDIR", &tmp);
    };
    let client = stdio_client_with(&cfg, TestClient::default(), no_home).await;
    ok(&search(&client, json!({"tool_names": ["mcp__s__t"]})).await);
    ok(&exec(&client, "mcp__s__t", json!({})).await);
    client.cancel().await.expect("close");
    let uid = std::fs::metadata("/proc/self").expect("proc").uid();
    let dir = tmp.join(format!("toolshelf-{uid}"));
    let meta = std::fs::symlink_metadata(&dir).expect("private dir exists");
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert!(dir.join("audit.jsonl").exists());

    // A directory of that name that is a symbolic link is refused, not followed.
    let tmp2 = s.0.join("tmp2");
    std::fs::create_dir_all(tmp2.join("elsewhere")).expect("dir");
    std::os::unix::fs::symlink(
        tmp2.join("elsewhere"),
        tmp2.join(format!("toolshelf-{uid}")),
    )
    .expect("symlink");
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &cfg])
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env("TMPDIR", &tmp2)
        .output()
        .expect("status");
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("is a symbolic link") && e.contains("set HOME or XDG_CACHE_HOME"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_never_finished_its_handshake_has_no_end_record() {
    let s = Scratch::new("handshake");
    let config = format!(
        "{}{}",
        named_server("s", &json!([tool("t", "x", empty())]), ""),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    let (mut gateway, url) = http_gateway(&cfg);
    let init = raw_http(&url, "POST", &[], RAW_INITIALIZE.as_bytes()).await;
    assert_eq!(init.status, 200, "{init:?}");
    let session = init
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    // No `notifications/initialized`: the session is deleted half-open.
    let deleted = raw_http(&url, "DELETE", &[("Mcp-Session-Id", &session)], b"").await;
    assert!(deleted.status < 300, "{deleted:?}");
    // A full session afterwards, so its end record proves records are written. It first waits
    // until it is the only session left, so the half-open one has been dropped (and had its
    // chance to write an end record) before the log is read.
    let client = http_client(&url, TestClient::default()).await;
    list_names(&client).await;
    wait_for("the half-open session to be dropped", || async {
        status(&client).await["http_sessions"] == 1
    })
    .await;
    client.cancel().await.expect("close");
    wait_for("the full session's end record", || async {
        s.audit()
            .iter()
            .any(|r| r["kind"] == "session" && r["outcome"] == "end")
    })
    .await;
    let sessions: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "session")
        .collect();
    let outcomes: Vec<&str> = sessions
        .iter()
        .map(|r| r["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, ["start", "end"], "{sessions:?}");
    assert_eq!(sessions[0]["session"], sessions[1]["session"]);
    gateway.kill().expect("kill");
    gateway.wait().expect("wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_log_holds_warnings_and_state_changes_only() {
    let s = Scratch::new("logging");
    let config = format!(
        "{}{}",
        named_server("s", &json!([tool("t", "x", empty())]), ""),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    for verbose in [false, true] {
        let log = s.0.join(format!("stderr-{verbose}.log"));
        let mut cmd = tokio::process::Command::new(TOOLSHELF);
        cmd.args(["serve", "--config", &cfg])
            .env_remove("TOOLSHELF_LOG")
            .env_remove("RUST_LOG");
        if verbose {
            cmd.arg("-v");
        }
        let client = stdio_client_logged(cmd, &log).await;
        ok(&search(&client, json!({"tool_names": ["mcp__s__t"]})).await);
        ok(&exec(&client, "mcp__s__t", json!({})).await);
        client.cancel().await.expect("close");
        let text = std::fs::read_to_string(&log).expect("stderr");
        assert!(
            text.contains("toolshelf_gateway::downstream: ready"),
            "state changes are logged: {text}"
        );
        let library = text
            .lines()
            .filter(|l| l.contains(" INFO ") && l.contains("rmcp::"))
            .count();
        if verbose {
            assert!(library > 0, "-v shows the MCP library's lines: {text}");
        } else {
            assert_eq!(library, 0, "{text}");
        }
    }
}

/// A gateway may offer only the tools its model writes: no server, no script tool, `[authoring]`
/// on. One with none of the three is refused, naming all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_may_offer_only_tool_define() {
    let s = Scratch::new("authoring-only");
    let cfg = s.write(
        "toolshelf.toml",
        &format!("[authoring]\nenabled = true\n{}", files_sections(&s)),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    let found = ok(&search(&client, json!({"tool_names": ["tool_define"]})).await);
    assert!(found.starts_with("1. tool_define\n"), "{found}");
    client.cancel().await.expect("close");
    let none = s.write("none.toml", &files_sections(&s));
    let out = std::process::Command::new(TOOLSHELF)
        .args(["serve", "--config", &none])
        .stdin(Stdio::null())
        .output()
        .expect("serve");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2)
            && e.contains("no MCP servers configured ([servers.NAME]), no script tools ([tools.NAME] script) and no [authoring]"),
        "{e}"
    );
}

/// A catalog captured with `--all` reads back with its configuration as the gateway has it: the
/// deny rule finds the tool it hides (no "matches no tool" warning) and `explain` says why it is
/// hidden. Without `--all` the hidden tool is not in the file at all.
#[test]
fn a_catalog_captured_with_all_reads_back_with_its_rules() {
    let s = Scratch::new("capture-all");
    let tools = json!([tool("secret", "x", empty()), tool("t", "y", empty())]);
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[permissions]\ndeny = [\"^mcp__s__secret$\"]\n{}",
            named_server("s", &tools, ""),
            files_sections(&s)
        ),
    );
    let capture = |all: bool| {
        let mut cmd = std::process::Command::new(TOOLSHELF);
        cmd.args(["catalog", "--config", &cfg]);
        cmd.args(all.then_some("--all"));
        let out = cmd.output().expect("catalog");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        s.write(
            if all { "all.json" } else { "visible.json" },
            &String::from_utf8_lossy(&out.stdout),
        )
    };
    let read_back = |catalog: &str, args: &[&str]| {
        std::process::Command::new(TOOLSHELF)
            .args(args)
            .args(["--catalog", catalog, "--config", &cfg])
            .output()
            .expect("run")
    };
    let visible = capture(false);
    assert!(
        !std::fs::read_to_string(&visible)
            .expect("read")
            .contains("secret")
    );
    let all = capture(true);
    let ledger = read_back(&all, &["ledger"]);
    assert!(ledger.status.success());
    let warnings = String::from_utf8_lossy(&ledger.stderr);
    assert!(!warnings.contains("matches no tool"), "{warnings}");
    let explained = read_back(&all, &["explain", "mcp__s__secret"]);
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.status.success() && text.contains("deny[0]"),
        "{text}{}",
        String::from_utf8_lossy(&explained.stderr)
    );
}

/// `status` says when a running gateway runs another mode than the one asked about, or an older
/// version of the configuration; `catalog --mode` holds only what that mode's sessions reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_mode_and_a_changed_configuration() {
    let s = Scratch::new("drift");
    let tools = json!([tool("look", "x", empty()), tool("change", "y", empty())]);
    let modes = "[modes.look]\ndescription = \"looking only\"\ntools = [\"^mcp__s__look$\"]\n";
    let config = format!(
        "{}{modes}{}",
        named_server("s", &tools, ""),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    wait_for("s to be ready", || async {
        status(&client).await["servers"][0]["state"] == "ready"
    })
    .await;
    wait_for("the status file", || async {
        status_json_and_code(&cfg).0["source"] == "running"
    })
    .await;
    let table = status_table(&cfg);
    assert!(table.contains("gateway running (pid "), "{table}");
    assert!(!table.contains("note:"), "{table}");
    // The file changes under the running gateway.
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{config}{}",
            named_server("second", &json!([tool("t", "z", empty())]), "")
        ),
    );
    let table = status_table(&cfg);
    assert!(
        table.contains("note: the configuration changed after this gateway started (configured but not run: second); restart it to apply the change"),
        "{table}"
    );
    let v = status_json(&cfg);
    assert_eq!(
        v["gateways"][0]["config_changed"],
        json!({"not_running": ["second"], "not_configured": []}),
        "{v}"
    );
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &cfg, "--mode", "look"])
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("note: it does not run mode look; its tool counts are for no mode"),
        "{table}"
    );
    // A mode the configuration does not define is refused, as `serve --mode` refuses it.
    let out = std::process::Command::new(TOOLSHELF)
        .args(["status", "--config", &cfg, "--mode", "nosuch"])
        .output()
        .expect("status");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("unknown mode \"nosuch\"; defined modes: look"),
        "{e}"
    );
    client.cancel().await.expect("close");

    let catalog = |mode: Option<&str>, all: bool| {
        let mut cmd = std::process::Command::new(TOOLSHELF);
        cmd.args(["catalog", "--config", &cfg]);
        cmd.args(mode.map(|m| ["--mode", m]).iter().flatten());
        cmd.args(all.then_some("--all"));
        let out = cmd.output().expect("catalog");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("catalog JSON");
        let mut names: Vec<String> =
            v["servers"]
                .as_array()
                .expect("servers")
                .iter()
                .flat_map(|g| {
                    let server = g["name"].as_str().unwrap_or_default().to_owned();
                    g["tools"].as_array().expect("tools").iter().map(move |t| {
                        format!("{server}/{}", t["name"].as_str().unwrap_or_default())
                    })
                })
                .collect();
        names.sort();
        names
    };
    assert_eq!(catalog(None, false), ["s/change", "s/look", "second/t"]);
    assert_eq!(catalog(Some("look"), false), ["s/look"]);
    // --all keeps what the mode hides, for reading back with the configuration.
    assert_eq!(
        catalog(Some("look"), true),
        ["s/change", "s/look", "second/t"]
    );
}

/// A path the gateway cannot use is refused at start, naming the setting and the part in the way,
/// and saying the cause once.
#[test]
fn an_unusable_audit_or_cache_path_names_the_setting() {
    let s = Scratch::new("paths");
    let file = s.write("a-file", "");
    for (section, want) in [
        (
            format!("[cache]\npath = {file:?}\n"),
            format!(
                "the audit log in [cache] path, {file}/audit.jsonl: {file} is a file, not a directory"
            ),
        ),
        (
            format!("[audit]\npath = \"{file}/sub/audit.jsonl\"\n"),
            format!("[audit] path {file}/sub/audit.jsonl: {file} is a file, not a directory"),
        ),
    ] {
        let config = format!(
            "{}{section}",
            named_server("s", &json!([tool("t", "x", empty())]), "")
        );
        let cfg = s.write("toolshelf.toml", &config);
        let out = std::process::Command::new(TOOLSHELF)
            .args(["serve", "--config", &cfg])
            .stdin(Stdio::null())
            .output()
            .expect("serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!("toolshelf: error: {want}\n")),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_relative_path_is_expanded_and_its_directories_created() {
    let s = Scratch::new("tilde");
    let home = s.0.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let config = format!(
        "{}[audit]\npath = \"~/logs/toolshelf/audit.jsonl\"\n[cache]\npath = \"~/fresh/cache\"\n",
        named_server("s", &json!([tool("t", "x", empty())]), ""),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client_with(&cfg, TestClient::default(), |c| {
        c.env("HOME", &home).current_dir(&s.0);
    })
    .await;
    ok(&search(&client, json!({"tool_names": ["mcp__s__t"]})).await);
    ok(&exec(&client, "mcp__s__t", json!({})).await);
    client.cancel().await.expect("close");
    assert!(
        home.join("logs/toolshelf/audit.jsonl").exists(),
        "the audit log is under HOME"
    );
    assert!(
        std::fs::read_dir(home.join("fresh/cache"))
            .expect("cache dir created")
            .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("catalog-"))),
        "the catalog cache is under HOME"
    );
    assert!(!s.0.join("~").exists(), "no literal ~ directory");
}

/// Each `tools/call` of a gateway session is a turn; a tool unused for more than
/// `[session] activation_ttl_calls` calls expires, and its next call is refused with the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_tool_expires_and_its_next_call_carries_the_schema() {
    let s = Scratch::new("expiry");
    let config = format!(
        "{}{}[session]\nactivation_ttl_calls = 2\n",
        named_server(
            "s",
            &json!([
                tool(
                    "t",
                    "the tool that expires",
                    json!({"type": "object", "properties": {"n": {"type": "integer"}}})
                ),
                tool("other", "another tool", empty())
            ]),
            ""
        ),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    let found = ok(&search(
        &client,
        json!({"tool_names": ["mcp__s__t", "mcp__s__other"]}),
    )
    .await); // turn 1
    assert!(!found.contains("already active"), "{found}");
    ok(&exec(&client, "mcp__s__t", json!({"n": 1})).await); // turn 2: used
    ok(&exec(&client, "mcp__s__other", json!({})).await); // turn 3
    ok(&exec(&client, "mcp__s__other", json!({})).await); // turn 4
    // A repeated search still returns the schema of an active tool, marked as such.
    let again = ok(&search(&client, json!({"tool_names": ["mcp__s__other"]})).await); // turn 5
    assert!(
        again.contains("1. mcp__s__other (already active)") && again.contains("parameters"),
        "{again}"
    );
    let e = err(&exec(&client, "mcp__s__t", json!({"n": 2})).await); // turn 6: 4 calls unused
    assert!(
        e.starts_with("mcp__s__t was not run: its schema was loaded in this session but the tool has not been used for 4 tool calls")
            && e.contains("\"inputSchema\""),
        "{e}"
    );
    let r = ok(&exec(&client, "mcp__s__t", json!({"n": 3})).await); // turn 7: active again
    assert!(r.contains("\"n\":3"), "{r}");
    client.cancel().await.expect("close");
    let expired: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|r| r["outcome"] == "expired")
        .collect();
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0]["tool"], "mcp__s__t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_triggered_by_a_path_arrives_once_on_the_result() {
    let s = Scratch::new("reminder");
    let path_schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let config = format!(
        "{}{}{}[execute]\nrequire_search = false\n\
         [[reminders]]\nid = \"migrations\"\ncategory = \"database migration checks\"\n\
         message = \"Migrations usually go with the migration checks; a colleague would run them before committing.\"\n\
         search_hint = [\"migration check\"]\npaths = [\"migrations/**\"]\ncooldown_turns = 3\n",
        named_server(
            "files",
            &json!([tool("read", "read a file", path_schema)]),
            ""
        ),
        named_server(
            "db",
            &json!([tool(
                "check_migrations",
                "check pending database migrations",
                empty()
            )]),
            ""
        ),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    let plain = ok(&exec(
        &client,
        "mcp__files__read",
        json!({"path": "/repo/src/main.rs"}),
    )
    .await);
    assert!(!plain.contains("system-reminder"), "{plain}");
    let r = exec(
        &client,
        "mcp__files__read",
        json!({"path": "/repo/db/migrations/004_index.sql"}),
    )
    .await;
    let texts: Vec<String> = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(
        texts[0].contains("\"server\":\"files\""),
        "the result first: {texts:?}"
    );
    assert_eq!(
        texts[1],
        "<system-reminder>\nMigrations usually go with the migration checks; a colleague would run them before committing.\nTo find these tools: tool_search {\"queries\": [\"migration check\"]}\n</system-reminder>"
    );
    // Within the cooldown the same trigger adds nothing.
    let again = ok(&exec(
        &client,
        "mcp__files__read",
        json!({"path": "/repo/db/migrations/005.sql"}),
    )
    .await);
    assert!(!again.contains("system-reminder"), "{again}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_tools_keep_their_meta_and_the_naming_and_marking_switch() {
    let s = Scratch::new("alwaysload");
    let mut pinned = tool("pinned", "a pinned tool", empty());
    pinned["_meta"] = json!({"vendor/x": 1});
    let tools = json!([pinned, tool("deferred", "a deferred tool", empty())]);
    for (extra, names, marked) in [
        ("", ["s__pinned", "tool_search", "defer_execute"], true),
        (
            "[gateway]\nalways_load = false\npinned_names = \"canonical\"\n",
            ["mcp__s__pinned", "tool_search", "defer_execute"],
            false,
        ),
    ] {
        let config = format!(
            "{}{}[defer]\nrules = [\"NoDefer(^mcp__s__pinned$)\"]\n{extra}",
            named_server("s", &tools, ""),
            files_sections(&s)
        );
        let cfg = s.write("toolshelf.toml", &config);
        let client = stdio_client(&cfg, TestClient::default()).await;
        let listed = client.list_all_tools().await.expect("list");
        let got: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(got, names);
        for t in &listed {
            let meta = t.meta.as_ref().map(|m| m.0.clone()).unwrap_or_default();
            assert_eq!(
                meta.get("anthropic/alwaysLoad") == Some(&json!(true)),
                marked,
                "{}: {meta:?}",
                t.name
            );
            if t.name.ends_with("pinned") {
                assert_eq!(
                    meta.get("vendor/x"),
                    Some(&json!(1)),
                    "the server's own _meta is kept"
                );
            }
        }
        // Every name of the pinned tool runs it, directly and through defer_execute.
        for name in ["s__pinned", "mcp__s__pinned"] {
            assert!(ok(&call(&client, name, json!({})).await).contains("\"tool\":\"pinned\""));
            assert!(ok(&exec(&client, name, json!({})).await).contains("\"tool\":\"pinned\""));
        }
        client.cancel().await.expect("close");
    }
}

/// A server does not decide its tools' deferral: `defer_loading` (like the catalog format's other
/// keys, which MCP does not define) is not read from a server's tool list, whether the MCP library
/// read the list (it drops keys MCP does not define) or the gateway read it raw (a list with a
/// tool the library cannot read). The configuration decides: a `NoDefer` rule keeps a tool
/// resident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_does_not_decide_its_tools_deferral() {
    let s = Scratch::new("server-deferral");
    let mut keep = tool("keep", "declared resident", empty());
    keep["defer_loading"] = json!(false);
    let typed = json!([keep.clone(), tool("other", "another tool", empty())]);
    // A tool without an input schema: the MCP library cannot read this list.
    let raw = json!([keep, {"name": "schemaless", "description": "no schema"}]);
    let config = format!(
        "{}{}{}[defer]\ndefault = true\nrules = [\"NoDefer(^mcp__typed__other$)\"]\n",
        named_server("typed", &typed, ""),
        named_server("raw", &raw, ""),
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    assert_eq!(
        list_names(&client).await,
        ["typed__other", "tool_search", "defer_execute"]
    );
    // Both are deferred, found and run as any other.
    for name in ["mcp__typed__keep", "mcp__raw__keep"] {
        let found = ok(&search(&client, json!({"tool_names": [name]})).await);
        assert!(found.contains(&format!("1. {name}")), "{found}");
        assert!(ok(&exec(&client, name, json!({})).await).contains("\"tool\":\"keep\""));
    }
    client.cancel().await.expect("close");
}

/// A search names a tool the session's list carries as the list does, keeps its rank, and
/// offers no schema or call form for it: the model calls it directly. It loads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_names_a_pinned_tool_as_the_list_does_and_offers_no_call_form() {
    let s = Scratch::new("pinned-search");
    let tools = json!([
        tool("pinned_clock", "read the wall clock time", empty()),
        tool("clock_alarm", "set an alarm on the wall clock", empty())
    ]);
    for (extra, listed) in [
        ("", "s__pinned_clock"),
        (
            "[gateway]\npinned_names = \"canonical\"\n",
            "mcp__s__pinned_clock",
        ),
    ] {
        let config = format!(
            "{}{}[defer]\nrules = [\"NoDefer(^mcp__s__pinned_clock$)\"]\n{extra}",
            named_server("s", &tools, ""),
            files_sections(&s)
        );
        let cfg = s.write("toolshelf.toml", &config);
        let client = stdio_client(&cfg, TestClient::default()).await;
        assert!(list_names(&client).await.contains(&listed.to_owned()));
        let line =
            format!("{listed} (already in your tool list with its schema: call it directly)");
        let found = ok(&search(&client, json!({"queries": ["wall clock time"]})).await);
        assert!(found.contains(&format!("\n\n1. {line}\n")), "{found}");
        assert!(
            found.contains("2. mcp__s__clock_alarm\n")
                && found.contains("call: defer_execute {\"tool_name\":\"mcp__s__clock_alarm\""),
            "the schema's place goes to the deferred tool: {found}"
        );
        assert!(
            !found.contains("\"tool_name\":\"mcp__s__pinned_clock\""),
            "{found}"
        );
        // A response of the pinned tool alone.
        let named = ok(&search(&client, json!({"tool_names": ["mcp__s__pinned_clock"]})).await);
        assert_eq!(named, format!("1. {line}"));
        client.cancel().await.expect("close");
        let searches: Vec<Value> = s
            .audit()
            .into_iter()
            .filter(|r| r["kind"] == "search")
            .collect();
        let loaded: Vec<String> = searches
            .iter()
            .rev()
            .take(2)
            .flat_map(|r| r["loaded"].as_array().cloned().unwrap_or_default())
            .map(|h| h["name"].to_string())
            .collect();
        assert!(
            !loaded.iter().any(|t| t.contains("pinned_clock")),
            "a pinned tool is not loaded by a search: {searches:?}"
        );
    }
}

/// A client that supports elicitation and dismisses every question.
#[derive(Debug, Clone, Default)]
struct Dismissing;

impl rmcp::ClientHandler for Dismissing {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        client_info(true)
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Cancel,
        ))
    }
}

/// A user who dismisses the approval question is reported as having cancelled it, in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dismissed_approval_question_reads_as_cancelled() {
    use rmcp::ServiceExt;
    let s = Scratch::new("dismissed");
    let config = format!(
        "{}{}[execute]\nrequire_search = false\n[permissions]\nask = [\"^mcp__s__asked$\"]\n",
        named_server(
            "s",
            &json!([tool("asked", "a tool that needs approval", empty())]),
            ""
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--config", &cfg])
        .env("TOOLSHELF_LOG", "warn");
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn toolshelf serve");
    let client = Dismissing.serve(transport).await.expect("initialize");
    let Value::Object(args) = json!({"tool_name": "mcp__s__asked", "params": {}}) else {
        unreachable!()
    };
    let r = client
        .call_tool(rmcp::model::CallToolRequestParams::new("defer_execute").with_arguments(args))
        .await
        .expect("tools/call");
    assert_eq!(r.is_error, Some(true));
    let e = text(&r);
    assert!(
        e.starts_with(
            "mcp__s__asked was not run: the user did not approve it (the user cancelled the prompt)."
        ),
        "{e}"
    );
    client.cancel().await.expect("close");
    let refused = s
        .audit()
        .into_iter()
        .find(|r| r["outcome"] == "not_approved")
        .expect("refusal");
    assert!(
        refused["detail"]
            .as_str()
            .is_some_and(|d| d.ends_with("; the user cancelled the prompt")),
        "{refused}"
    );
}

/// A `[[hooks.EVENT]]` section running `script` with `sh -c`, with more of it in `extra`.
fn sh_hook(event: &str, script: &str, extra: &str) -> String {
    format!("[[hooks.{event}]]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n{extra}")
}

/// Polls `check` every 100 ms until it holds, failing after `secs` seconds with `what`: for what
/// must happen long before something the test holds back would let it (a hook's minute-long
/// sleep, a question never answered).
async fn within<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not happen within {secs}s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Whether process `pid` is gone (a zombie counts: it runs nothing).
fn gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
}

/// A `pre_call` hook whose call is abandoned, by the client's cancellation or by the session's
/// end, is killed with what it started, and the call is audited `cancelled` at once: the session's
/// next call, and its end, wait for no hook. (The hook would sleep for a minute.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_call_kills_its_pre_call_hook_at_once() {
    let s = Scratch::new("abandoned-hook");
    let pids = s.path("hook.pids");
    let config = format!(
        "{}{}[execute]\nrequire_search = false\n{}",
        named_server(
            "s",
            &json!([
                tool("slow", "a tool whose hook is slow", empty()),
                tool("quick", "a tool without a hook", empty())
            ]),
            ""
        ),
        files_sections(&s),
        sh_hook(
            "pre_call",
            &format!("cat > /dev/null; sleep 60 & echo \"$$ $!\" >> {pids:?}; wait"),
            "tools = \"^mcp__s__slow$\"\ntimeout_secs = 120\n",
        ),
    );
    let cfg = s.write("toolshelf.toml", &config);
    // The hook's shell and its sleep, once `n` hooks have started.
    let started = |n: usize| {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (text.ends_with('\n') && lines.len() >= n).then(|| {
            lines[n - 1]
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
    };
    let slow = json!({"tool_name": "mcp__s__slow", "params": {}});
    let client = stdio_client(&cfg, TestClient::default()).await;

    let call = start_call(&client, "defer_execute", slow.clone()).await;
    wait_for("the pre_call hook to start", || async {
        started(1).is_some()
    })
    .await;
    call.cancel(Some("the test cancels it".into()))
        .await
        .expect("cancel");
    within(20, "the cancelled call's audit record", || async {
        !s.calls_of("mcp__s__slow").is_empty()
    })
    .await;
    let next = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        exec(&client, "mcp__s__quick", json!({})),
    )
    .await
    .expect("the next call is answered while the hook would still sleep");
    assert!(ok(&next).contains("\"tool\":\"quick\""));
    let record = &s.calls_of("mcp__s__slow")[0];
    assert_eq!(
        (&record["outcome"], &record["detail"]),
        (
            &json!("cancelled"),
            &json!("mcp__s__slow was abandoned: the client cancelled the call")
        ),
        "{record}"
    );
    for pid in started(1).expect("pids") {
        within(
            20,
            &format!("the end of the hook's process {pid}"),
            || async { gone(&pid) },
        )
        .await;
    }

    // The client leaves while a hook runs.
    let _left = start_call(&client, "defer_execute", slow).await;
    wait_for("the second pre_call hook to start", || async {
        started(2).is_some()
    })
    .await;
    client.cancel().await.expect("close");
    within(20, "the session's end", || async {
        s.audit()
            .iter()
            .any(|r| r["kind"] == "session" && r["outcome"] == "end")
    })
    .await;
    let audit = s.audit();
    let left = audit
        .iter()
        .position(|r| {
            r["tool"] == "mcp__s__slow"
                && r["detail"]
                    .as_str()
                    .is_some_and(|d| d.ends_with("its session ended"))
        })
        .unwrap_or_else(|| panic!("the call left running is audited: {audit:#?}"));
    let end = audit
        .iter()
        .position(|r| r["kind"] == "session" && r["outcome"] == "end")
        .expect("end");
    assert!(
        left < end,
        "the call is recorded before the end: {audit:#?}"
    );
    assert_eq!(audit[left]["outcome"], "cancelled");
    for pid in started(2).expect("pids") {
        within(
            20,
            &format!("the end of the hook's process {pid}"),
            || async { gone(&pid) },
        )
        .await;
    }
}

/// A search abandoned while its `post_search` hook runs kills the hook at once, is audited
/// `cancelled` with nothing loaded, and loads nothing: the model never read the schemas, so a
/// call of a tool it found is still refused as not loaded. (The hook would sleep for a minute.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_search_kills_its_post_search_hook_and_loads_nothing() {
    let s = Scratch::new("abandoned-search-hook");
    let pids = s.path("hook.pids");
    let config = format!(
        "{}{}{}",
        named_server(
            "s",
            &json!([tool("quick", "a quick tool to find", empty())]),
            ""
        ),
        files_sections(&s),
        sh_hook(
            "post_search",
            &format!("cat > /dev/null; sleep 60 & echo \"$$ $!\" >> {pids:?}; wait"),
            "timeout_secs = 120\n",
        ),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    let found = json!({"names": ["mcp__s__quick"]});
    let searching = start_call(&client, "tool_search", found).await;
    wait_for("the post_search hook to start", || async {
        std::fs::read_to_string(&pids).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;
    searching
        .cancel(Some("the test cancels it".into()))
        .await
        .expect("cancel");
    let searched = || {
        s.audit()
            .into_iter()
            .filter(|r| r["kind"] == "search")
            .collect::<Vec<_>>()
    };
    within(20, "the cancelled search's audit record", || async {
        !searched().is_empty()
    })
    .await;
    let record = &searched()[0];
    assert_eq!(
        (&record["outcome"], &record["detail"], &record["loaded"]),
        (
            &json!("cancelled"),
            &json!("the search was abandoned: the client cancelled the call"),
            &json!([])
        ),
        "{record}"
    );
    let text = std::fs::read_to_string(&pids).expect("pids");
    for pid in text.split_whitespace() {
        within(
            20,
            &format!("the end of the hook's process {pid}"),
            || async { gone(pid) },
        )
        .await;
    }
    let refused = err(&exec(&client, "mcp__s__quick", json!({})).await);
    assert!(
        refused.contains("its schema had not been loaded"),
        "the abandoned search loaded nothing: {refused}"
    );
    client.cancel().await.expect("close");
}

/// A client that supports elicitation and never answers: each question stays open until the
/// server withdraws it (`notifications/cancelled`) or the client closes, which it counts.
#[derive(Debug, Clone, Default)]
struct Unanswering {
    asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    withdrawn: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ClientHandler for Unanswering {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        client_info(true)
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use std::sync::atomic::Ordering;
        self.asked.fetch_add(1, Ordering::SeqCst);
        context.ct.cancelled().await;
        self.withdrawn.fetch_add(1, Ordering::SeqCst);
        // Nor is it answered then (as the client closes, an answer could still go out).
        std::future::pending().await
    }
}

/// A call cancelled while it waits for the user's approval is abandoned at once: the question is
/// withdrawn, the call audited `cancelled` with no answer, and the session goes on. A call still
/// waiting when the session ends is recorded before the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_abandoned_while_the_user_is_asked_withdraws_the_question() {
    use rmcp::ServiceExt;
    use std::sync::atomic::Ordering;
    let s = Scratch::new("abandoned-ask");
    let config = format!(
        "{}{}[execute]\nrequire_search = false\n[permissions]\nask = [\"^mcp__s__asked$\"]\n",
        named_server(
            "s",
            &json!([
                tool("asked", "a tool that needs approval", empty()),
                tool("free", "a tool that does not", empty())
            ]),
            ""
        ),
        files_sections(&s),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--config", &cfg])
        .env("TOOLSHELF_LOG", "warn");
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn toolshelf serve");
    let user = Unanswering::default();
    let client = user.clone().serve(transport).await.expect("initialize");
    let asked = json!({"tool_name": "mcp__s__asked", "params": {}});
    let call = rmcp::model::CallToolRequest::new(
        rmcp::model::CallToolRequestParams::new("defer_execute")
            .with_arguments(asked.as_object().expect("an object").clone()),
    );
    let send = || {
        client.peer().send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(call.clone()),
            rmcp::service::PeerRequestOptions::no_options(),
        )
    };

    let pending = send().await.expect("send the call");
    wait_for("the question", || async {
        user.asked.load(Ordering::SeqCst) == 1
    })
    .await;
    pending
        .cancel(Some("the test cancels it".into()))
        .await
        .expect("cancel");
    within(20, "the cancelled call's audit record", || async {
        !s.calls_of("mcp__s__asked").is_empty()
    })
    .await;
    within(20, "the question's withdrawal", || async {
        user.withdrawn.load(Ordering::SeqCst) == 1
    })
    .await;
    let record = &s.calls_of("mcp__s__asked")[0];
    assert_eq!(
        (&record["outcome"], &record["ask"], &record["detail"]),
        (
            &json!("cancelled"),
            &json!("unanswered"),
            &json!("mcp__s__asked was abandoned: the client cancelled the call")
        ),
        "{record}"
    );
    let Value::Object(args) = json!({"tool_name": "mcp__s__free", "params": {}}) else {
        unreachable!()
    };
    let next = client
        .call_tool(rmcp::model::CallToolRequestParams::new("defer_execute").with_arguments(args))
        .await
        .expect("tools/call");
    assert!(text(&next).contains("\"tool\":\"free\""), "{next:?}");

    // The client leaves while a question is open.
    let _left = send().await.expect("send the call");
    wait_for("the second question", || async {
        user.asked.load(Ordering::SeqCst) == 2
    })
    .await;
    client.cancel().await.expect("close");
    within(20, "the session's end", || async {
        s.audit()
            .iter()
            .any(|r| r["kind"] == "session" && r["outcome"] == "end")
    })
    .await;
    let audit = s.audit();
    let left = audit
        .iter()
        .position(|r| {
            r["tool"] == "mcp__s__asked"
                && r["detail"] == "mcp__s__asked was abandoned: its session ended"
        })
        .unwrap_or_else(|| panic!("the call left waiting is audited: {audit:#?}"));
    let end = audit
        .iter()
        .position(|r| r["kind"] == "session" && r["outcome"] == "end")
        .expect("end");
    assert!(
        left < end,
        "the call is recorded before the end: {audit:#?}"
    );
    assert_eq!(
        (&audit[left]["outcome"], &audit[left]["ask"]),
        (&json!("cancelled"), &json!("unanswered"))
    );
    assert_eq!(
        s.outcomes_of("mcp__s__asked"),
        ["cancelled", "cancelled"],
        "no question was approved"
    );
}

/// A call that fails names its tool to the model as the session's list shows it, as a refusal
/// does (`test__hang`, not `mcp__test__hang`); the audit log keeps the canonical name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_names_the_tool_as_the_list_does() {
    let s = Scratch::new("failure-names");
    let config = format!(
        "[servers.test]\ncommand = \"python3\"\nargs = [{:?}]\ncall_timeout_secs = 1\n{}\
         [defer]\nrules = [\"NoDefer(^mcp__test__hang$)\", \"NoDefer(^mcp__test__fail$)\", \
         \"NoDefer(^mcp__test__echo$)\"]\n{}",
        fixture("test_server.py"),
        files_sections(&s),
        sh_hook(
            "post_call",
            "cat > /dev/null; echo 'not for the model' >&2; exit 2",
            "tools = \"^mcp__test__echo$\"\n",
        ),
    );
    let cfg = s.write("toolshelf.toml", &config);
    let client = stdio_client(&cfg, TestClient::default()).await;
    let listed = list_names(&client).await;
    for name in ["test__hang", "test__fail", "test__echo"] {
        assert!(listed.contains(&name.to_owned()), "{listed:?}");
    }
    let hung = err(&call(&client, "test__hang", json!({})).await);
    assert!(
        hung.starts_with("test__hang did not answer within 1s"),
        "{hung}"
    );
    let failed = err(&call(&client, "test__fail", json!({})).await);
    assert!(failed.starts_with("test__fail failed: "), "{failed}");
    let withheld = err(&call(&client, "test__echo", json!({"message": "hi"})).await);
    assert!(
        withheld.starts_with("test__echo ran, but a post_call hook withheld its result: "),
        "{withheld}"
    );
    client.cancel().await.expect("close");
    let hang = &s.calls_of("mcp__test__hang")[0];
    assert!(
        hang["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("mcp__test__hang did not answer within 1s")),
        "{hang}"
    );
}
