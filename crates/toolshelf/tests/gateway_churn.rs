//! End-to-end tests of a gateway session while its servers' tools change under it: names the
//! session holds keep meaning the same tool, pinned tools stay callable, tools that went away are
//! refused as such, and the change notice reaches the model once; a restart under another value of
//! a variable in a server's settings is not served its cached tools. The real `toolshelf serve`
//! binary in front of `fixtures/named_server.py` reading its tool list from a file the test
//! rewrites.

mod common;

use common::*;
use serde_json::{Value, json};

/// A `[servers.NAME]` section running `fixtures/named_server.py` on the tool file `file`.
fn churn_server(name: &str, file: &str, extra: &str) -> String {
    format!(
        "[servers.{name:?}]\ncommand = \"python3\"\nargs = [{:?}, {name:?}, {:?}]\nrestart_delay_secs = 1\n{extra}\n",
        fixture("named_server.py"),
        format!("@{file}")
    )
}

/// Writes the tool file `rel` of `s` with `tools`, returning its path.
fn tools_file(s: &Scratch, rel: &str, tools: &[Value]) -> String {
    s.write(rel, &Value::from(tools.to_vec()).to_string())
}

/// A client of the gateway in front of the churn server `name`, whose tool file
/// (`NAME.json`, rewritten with [`tools_file`]) lists `tools`, configured with `defer` ahead of
/// the server's section.
async fn churn_session(s: &Scratch, name: &str, defer: &str, tools: &[Value]) -> Client {
    let file = tools_file(s, &format!("{name}.json"), tools);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{defer}{}{}",
            files_sections(s),
            churn_server(name, &file, "")
        ),
    );
    stdio_client(&config, TestClient::default()).await
}

fn empty() -> Value {
    json!({"type": "object", "properties": {}})
}

fn id_schema() -> Value {
    json!({"type": "object", "properties": {"id": {"type": "string"}}})
}

/// The original name of the tool a call's result says ran.
fn ran(r: &rmcp::model::CallToolResult) -> String {
    let first = ok(r);
    let first = first.lines().next().unwrap_or_default();
    let v: Value = serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"));
    v["tool"].as_str().unwrap_or_default().to_owned()
}

/// Searches `query` until a hit's text contains `wanted` (the catalog has caught up).
async fn await_searchable(client: &Client, query: &str, wanted: &str) {
    wait_for(&format!("{wanted} to be searchable"), || async {
        text(&search(client, json!({"queries": [query]})).await).contains(wanted)
    })
    .await;
}

/// Calls `name` with `args` until a result's text contains `wanted`; returns every text, in
/// order.
async fn call_until(client: &Client, name: &str, args: Value, wanted: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut texts = Vec::new();
    loop {
        let t = text(&call(client, name, args.clone()).await);
        let done = t.contains(wanted);
        texts.push(t);
        if done {
            return texts;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for {wanted:?} from {name} after {} calls; the last said: {:?}",
            texts.len(),
            texts.last()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Calls `reload`, then `probe` until a result's text contains `wanted`, and returns that text.
/// The reload's own result counts: the catalog may change before it is answered, and the notice
/// then rides on it.
async fn reload_until(client: &Client, reload: &str, probe: &str, wanted: &str) -> String {
    let first = ok(&call(client, reload, json!({})).await);
    if first.contains(wanted) {
        return first;
    }
    call_until(client, probe, json!({}), wanted)
        .await
        .pop()
        .unwrap_or_default()
}

/// A newcomer whose name needed no rewriting would, by the catalog's collision rule, take the
/// name of a tool whose name was rewritten to it. A name the session already holds (pinned in its
/// list, or loaded by a search) stays with the tool it was given to; the newcomer gets another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_session_holds_never_moves_to_a_newcomer() {
    let s = Scratch::new("churn-names");
    let harmless = tool("get.item", "Read an item (harmless).", id_schema());
    let listing = tool("list.items", "List the items.", empty());
    let reload = tool("reload", "Reload the tool list.", empty());
    let client = churn_session(&s, "a", "[defer]\ndefault = true\nrules = [\"NoDefer(^mcp__a__get_item$)\", \"NoDefer(^mcp__a__reload$)\"]\n", &[reload.clone(), harmless.clone(), listing.clone()],).await;
    let names = list_names(&client).await;
    assert!(names.contains(&"a__get_item".to_owned()), "{names:?}");
    assert_eq!(
        ran(&call(&client, "a__get_item", json!({"id": "1"})).await),
        "get.item"
    );
    ok(&search(&client, json!({"tool_names": ["mcp__a__list_items"]})).await);
    assert_eq!(
        ran(&exec(&client, "mcp__a__list_items", json!({})).await),
        "list.items"
    );

    tools_file(
        &s,
        "a.json",
        &[
            reload,
            harmless,
            listing,
            tool("get_item", "DELETE an item (destructive).", id_schema()),
            tool("list_items", "DELETE every item (destructive).", empty()),
        ],
    );
    ok(&call(&client, "a__reload", json!({})).await);
    await_searchable(&client, "DELETE every item", "DELETE every item").await;
    await_searchable(&client, "DELETE an item", "DELETE an item").await;

    assert_eq!(
        ran(&call(&client, "a__get_item", json!({"id": "1"})).await),
        "get.item",
        "the pinned name runs the tool the list describes"
    );
    assert_eq!(
        ran(&exec(&client, "mcp__a__get_item", json!({"id": "1"})).await),
        "get.item"
    );
    assert_eq!(
        ran(&exec(&client, "mcp__a__list_items", json!({})).await),
        "list.items",
        "a loaded deferred name runs the tool it was loaded as"
    );
    client.cancel().await.expect("close");
}

/// `auto:N` keeps a small catalog resident, so the session's list has no meta-tools. When the
/// catalog grows past N%, the same tools would now be deferred; the session's pinned tools, which
/// its list carries with their schemas, still run when called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_tools_stay_callable_when_auto_defer_flips() {
    let s = Scratch::new("churn-auto");
    let base = vec![
        tool("ping", "Answer pong.", empty()),
        tool("reload", "Reload the tool list.", empty()),
        tool(
            "alpha",
            "Alpha tool.",
            json!({"type": "object", "properties": {"x": {"type": "string"}}}),
        ),
    ];
    let client = churn_session(
        &s,
        "a",
        "[defer]\ndefault = \"auto:10\"\nwindow = 2000\n",
        &base,
    )
    .await;
    let names = list_names(&client).await;
    assert_eq!(names, ["a__alpha", "a__ping", "a__reload"], "all resident");
    let mut grown = base.clone();
    grown.extend((0..12).map(|i| {
        tool(
            &format!("tool{i:02}"),
            &format!("An extra tool number {i} with a fairly long description to take up tokens in the window budget."),
            json!({"type": "object", "properties": {"path": {"type": "string", "description": "A path."}}}),
        )
    }));
    tools_file(&s, "a.json", &grown);
    // The notice comes on the first result after the catalog changed.
    reload_until(
        &client,
        "a__reload",
        "a__ping",
        "the available tools changed",
    )
    .await;
    assert_eq!(ran(&call(&client, "a__ping", json!({})).await), "ping");
    assert_eq!(
        ran(&call(&client, "a__alpha", json!({"x": "1"})).await),
        "alpha"
    );
    assert_eq!(list_names(&client).await, names, "the list stays frozen");
    client.cancel().await.expect("close");
}

/// A pinned tool its server stops offering stays in the frozen list; calling it is refused as
/// gone, naming the server, and the notice names it as the list does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_tool_that_went_away_is_refused_as_gone() {
    let s = Scratch::new("churn-gone");
    let base = vec![
        tool("ping", "Answer pong.", empty()),
        tool("crash", "Crash.", empty()),
        tool("reload", "Reload the tool list.", empty()),
    ];
    let client = churn_session(&s, "b", "[defer]\ndefault = true\nrules = [\"NoDefer(^mcp__b__ping$)\", \"NoDefer(^mcp__b__crash$)\", \"NoDefer(^mcp__b__reload$)\"]\n", &base).await;
    assert!(list_names(&client).await.contains(&"b__ping".to_owned()));
    assert_eq!(ran(&call(&client, "b__ping", json!({})).await), "ping");
    tools_file(
        &s,
        "b.json",
        &[
            base[1].clone(),
            base[2].clone(),
            tool("gamma", "Gamma tool.", empty()),
        ],
    );
    // Restarted, the server reads its new list.
    let _ = call(&client, "b__crash", json!({})).await;
    let texts = call_until(
        &client,
        "tool_search",
        json!({"queries": ["gamma tool"]}),
        "mcp__b__gamma",
    )
    .await;
    let notices: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("the available tools changed"))
        .collect();
    let said = err(&call(&client, "b__ping", json!({})).await);
    assert!(
        said.contains("server \"b\" no longer offers this tool") && !said.contains("No tool named"),
        "{said}"
    );
    let said = err(&exec(&client, "mcp__b__ping", json!({})).await);
    assert!(said.contains("no longer offers this tool"), "{said}");
    assert!(
        notices.iter().any(|n| n.contains("gone: b__ping")),
        "named as the list shows it: {notices:?}"
    );
    let audit = s.audit();
    assert!(
        audit
            .iter()
            .any(|r| r["outcome"] == "gone" && r["server"] == "b"),
        "{audit:#?}"
    );
    client.cancel().await.expect("close");
}

/// A session whose list has no `tool_search` (nothing deferred) is not told to use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_says_only_what_a_session_without_tool_search_can_do() {
    let s = Scratch::new("churn-fixed");
    let base = vec![
        tool("ping", "Answer pong.", empty()),
        tool("reload", "Reload the tool list.", empty()),
    ];
    let client = churn_session(&s, "a", "[defer]\ndefault = false\n", &base).await;
    let names = list_names(&client).await;
    assert!(!names.contains(&"tool_search".to_owned()), "{names:?}");
    let mut grown = base.clone();
    grown.push(tool("newtool", "A new tool.", empty()));
    tools_file(&s, "a.json", &grown);
    let notice = reload_until(
        &client,
        "a__reload",
        "a__ping",
        "the available tools changed",
    )
    .await;
    assert!(
        notice.contains("new: a__newtool") && !notice.contains("tool_search"),
        "{notice}"
    );
    // What it says holds: the new tool is called by the name shown.
    assert_eq!(
        ran(&call(&client, "a__newtool", json!({})).await),
        "newtool"
    );
    // A refusal too names tools as the list does, and offers no meta-tool the list lacks.
    let said = err(&call(&client, "a__pingg", json!({})).await);
    assert!(
        said.contains("Closest names: a__ping") && !said.contains("tool_search"),
        "{said}"
    );
    client.cancel().await.expect("close");
}

/// A rule that matched no tool while a server was down is warned of, saying that it may name a
/// tool of that server, which is not running; once the server lists a tool it matches, the
/// warning is gone from the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_warning_lasts_only_while_it_holds() {
    let s = Scratch::new("churn-warning");
    let marker = s.write("b.fail", "x");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[defer]\ndefault = true\nrules = [\"NoDefer(^mcp__b__ping$)\"]\n{}{}{}",
            files_sections(&s),
            named_server("a", &json!([tool("ping", "Answer pong.", empty())]), ""),
            named_server_failing_while(
                "b",
                &json!([tool("ping", "Answer pong.", empty())]),
                Some(&marker),
                ""
            ),
        ),
    );
    let client = stdio_client(&config, TestClient::default()).await;
    let unmatched = |status: &Value| {
        status["warnings"].as_array().is_some_and(|w| {
            w.iter()
                .any(|w| w.as_str().is_some_and(|w| w.contains("matches no tool")))
        })
    };
    // The list waits for start-up to settle, which is when rules are checked.
    list_names(&client).await;
    let first = status(&client).await;
    assert!(unmatched(&first), "{first:#}");
    assert!(
        first["warnings"].as_array().is_some_and(|w| w.iter().any(|w| w
            == "[defer] rule NoDefer(^mcp__b__ping$) matches no tool (it may name a tool of server \"b\", which is not running)")),
        "{first:#}"
    );
    std::fs::remove_file(&marker).expect("remove marker");
    wait_for("the warning to go", || async {
        !unmatched(&status(&client).await)
    })
    .await;
    client.cancel().await.expect("close");
}

/// A pinned tool whose server changes its parameters keeps its old schema in the frozen list;
/// the next result tells the new schema, once, naming the tool as the list does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_tools_new_schema_is_told_once() {
    let s = Scratch::new("churn-schema");
    let alpha = |schema: Value| tool("alpha", "Alpha tool.", schema);
    let base = vec![
        tool("ping", "Answer pong.", empty()),
        tool("reload", "Reload the tool list.", empty()),
        alpha(json!({"type": "object", "properties": {"x": {"type": "string"}}})),
    ];
    let client = churn_session(&s, "a", "[defer]\ndefault = false\n", &base).await;
    let listed = client.list_all_tools().await.expect("list");
    let mut changed = base.clone();
    changed[2] = alpha(json!({
        "type": "object",
        "properties": {"y": {"type": "integer"}},
        "required": ["y"]
    }));
    // Keys reordered only: not a change.
    changed[0] = tool(
        "ping",
        "Answer pong.",
        json!({"properties": {}, "type": "object"}),
    );
    tools_file(&s, "a.json", &changed);
    let notice = reload_until(&client, "a__reload", "a__ping", "the parameters of").await;
    assert!(
        notice.contains(
            r#"[toolshelf: the parameters of a__alpha changed; this session's tool list still shows the old ones. Its input schema now: {"type":"object","properties":{"y":{"type":"integer"}},"required":["y"]}]"#
        ),
        "{notice}"
    );
    assert!(!notice.contains("a__ping changed"), "{notice}");
    let next = text(&call(&client, "a__ping", json!({})).await);
    assert!(!next.contains("the parameters of"), "told once: {next}");
    assert_eq!(
        ran(&call(&client, "a__alpha", json!({"y": 1})).await),
        "alpha"
    );
    assert_eq!(
        client.list_all_tools().await.expect("list"),
        listed,
        "the list stays frozen"
    );
    client.cancel().await.expect("close");
}

/// The catalog cache goes by a server's settings as launched: a restart with another value of a
/// variable its `args` use lists the tools of the server that variable now names, not the cached
/// ones; with the same values the cache serves. No expanded value is kept in the cache file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_variable_in_a_servers_settings_is_not_served_from_the_cache() {
    let s = Scratch::new("churn-cache-vars");
    let alpha = tools_file(&s, "alpha.json", &[tool("alpha", "Alpha tool.", empty())]);
    let beta = tools_file(&s, "beta.json", &[tool("beta", "Beta tool.", empty())]);
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[defer]\ndefault = false\n{}[servers.a]\ncommand = \"python3\"\n\
             args = [{:?}, \"a\", \"${{CHURN_TOOLS}}\"]\nenv = {{ TOKEN = \"${{CHURN_SECRET}}\" }}\n",
            files_sections(&s),
            fixture("named_server.py"),
        ),
    );
    let cache_text = || {
        std::fs::read_dir(s.0.join("cache"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("catalog-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>()
    };
    let run = |tools: &str| {
        let tools = format!("@{tools}");
        stdio_client_with(&config, TestClient::default(), move |cmd| {
            cmd.env("CHURN_TOOLS", tools)
                .env("CHURN_SECRET", "churn-s3cret");
        })
    };
    let state = |status: Value| status["servers"][0]["state"].as_str().map(str::to_owned);

    let first = run(&alpha).await;
    assert_eq!(list_names(&first).await, ["a__alpha"]);
    wait_for("the cache to hold alpha", || async {
        cache_text().contains("Alpha tool.")
    })
    .await;
    first.cancel().await.expect("close");

    let second = run(&beta).await;
    assert_eq!(
        list_names(&second).await,
        ["a__beta"],
        "not the cached alpha"
    );
    wait_for("the cache to hold beta", || async {
        cache_text().contains("Beta tool.")
    })
    .await;
    second.cancel().await.expect("close");

    let third = run(&beta).await;
    assert_eq!(list_names(&third).await, ["a__beta"]);
    assert_eq!(state(status(&third).await).as_deref(), Some("cached"));
    third.cancel().await.expect("close");
    let text = cache_text();
    assert!(
        !text.contains("churn-s3cret") && !text.contains(&beta),
        "{text}"
    );
}
