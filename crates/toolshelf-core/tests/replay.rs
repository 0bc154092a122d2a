//! A whole session replayed: 50+ model requests with searches, executions, an expiry, a tool-set
//! change and reminders, in all three APIs. `system` and `tools` must be byte-identical in every
//! request and each request's conversation a byte prefix of the next one's.

use serde_json::{Value, json};
use toolshelf_core::replay::{Event, Replay, TurnReport};
use toolshelf_core::request::{Api, Sections, canonical_json};
use toolshelf_core::search::SearchIndex;
use toolshelf_core::{Catalog, Compiled, Config};

const CATALOG: &str = include_str!("../../../examples/catalog.json");
const CONFIG: &str = include_str!("../../../examples/toolshelf.toml");

fn user(text: &str) -> Event {
    Event::User(text.to_owned())
}

fn call(name: &str, input: Value) -> Event {
    Event::Call {
        name: name.to_owned(),
        input: input.as_object().cloned().expect("object"),
        arguments: None,
    }
}

fn search(q: &str) -> Event {
    call("tool_search", json!({"queries": [q]}))
}

fn exec(tool: &str, params: Value) -> Event {
    call(
        "defer_execute",
        json!({"tool_name": tool, "params": params}),
    )
}

/// A long working session; every `user`/`call` group is one or two model requests.
fn transcript() -> Vec<Event> {
    let mut e = vec![
        Event::Context("cwd: /repo; os: linux".into()),
        user("list the files in the project"),
        search("list directory"),
        exec("mcp__filesystem__list_directory", json!({"path": "/repo"})),
        user("read the readme"),
        exec(
            "mcp__filesystem__read_text_file",
            json!({"path": "/repo/README.md"}),
        ),
        user("what changed in git?"),
        call("mcp__git__git_status", json!({"repo_path": "/repo"})),
        search("git log history"),
        exec(
            "mcp__git__git_log",
            json!({"repo_path": "/repo", "max_count": 5}),
        ),
    ];
    // Routine work on files, long enough for git_log's activation to expire.
    for k in 0..8 {
        e.push(user(&format!("show me file number {k}")));
        e.push(exec(
            "mcp__filesystem__read_text_file",
            json!({"path": format!("/repo/src/f{k}.rs")}),
        ));
    }
    e.extend([
        user("and the log again"),
        exec("mcp__git__git_log", json!({"repo_path": "/repo", "max_count": 5})),
        exec("mcp__git__git_log", json!({"repo_path": "/repo", "max_count": 5})),
        user("commit the fix"),
        search("commit changes"),
        exec("mcp__git__git_commit", json!({"repo_path": "/repo", "message": "fix"})),
        Event::Assistant("Committed.".into()),
        Event::ToolsChanged {
            add: vec![json!({"name": "deploy", "description": "Deploy the service to staging", "server": "ops"})],
            remove: vec![],
        },
        user("please remember that we deploy on fridays"),
        search("remember decision"),
        exec("mcp__memory__create_entities", json!({"entities": [{"name": "deploys", "entityType": "policy", "observations": ["fridays"]}]})),
        user("deploy it"),
        search("deploy service"),
        exec("mcp__ops__deploy", json!({})),
    ]);
    for k in 0..10 {
        e.push(user(&format!("what time is it in zone {k}?")));
        e.push(call(
            "mcp__time__get_current_time",
            json!({"timezone": "Etc/UTC"}),
        ));
    }
    e.extend([user("记住这个决定"), user("thanks")]);
    e
}

/// The example configuration, compiled for `mode`.
fn compiled(mode: Option<&str>) -> Compiled {
    Compiled::new(
        Config::from_toml_str(CONFIG, "toolshelf.toml").expect("config"),
        "toolshelf.toml",
        mode,
    )
    .expect("compiles")
}

/// The example catalog.
fn catalog() -> Catalog {
    Catalog::from_json_str(CATALOG, "catalog.json").expect("catalog")
}

fn replay(api: Api) -> (Vec<TurnReport>, u32) {
    let compiled = compiled(None);
    let catalog = catalog();
    let build = |c: &Catalog, v: &[usize]| SearchIndex::build(c, v);
    let mut r = Replay::new(
        &compiled,
        catalog,
        api,
        "You are a careful coding agent.",
        &build,
    );
    let reports = r.run(&transcript()).expect("replays");
    (reports, r.state().renders())
}

#[test]
fn a_long_session_keeps_its_prefix_in_every_api() {
    for (_, api) in Api::ALL {
        let (reports, renders) = replay(api);
        assert!(reports.len() >= 50, "{} requests", reports.len());
        assert_eq!(renders, 1, "the surface is rendered once");
        let sections: Vec<Sections> = reports
            .iter()
            .map(|r| {
                Sections::of(api, &serde_json::from_str(&r.body).expect("json")).expect("sections")
            })
            .collect();
        for (k, pair) in sections.windows(2).enumerate() {
            let (a, b) = (&pair[0], &pair[1]);
            assert_eq!(
                canonical_json(&a.system),
                canonical_json(&b.system),
                "system at {k}"
            );
            assert_eq!(
                canonical_json(&a.tools),
                canonical_json(&b.tools),
                "tools at {k}"
            );
            assert!(a.conversation.len() < b.conversation.len(), "grows at {k}");
            for (i, m) in a.conversation.iter().enumerate() {
                assert_eq!(
                    canonical_json(m),
                    canonical_json(&b.conversation[i]),
                    "{api:?} message {i} between requests {k} and {}",
                    k + 1
                );
            }
        }
        // What the session did along the way.
        let fired: Vec<u64> = reports
            .iter()
            .filter(|r| r.reminders.iter().any(|n| n.event == "fired"))
            .map(|r| r.turn)
            .collect();
        assert!(!fired.is_empty(), "a reminder fired");
        assert!(
            reports
                .iter()
                .any(|r| r.reminders.iter().any(|n| n.event == "suppressed")),
            "a reminder was suppressed"
        );
        assert!(
            reports
                .iter()
                .any(|r| r.expired.contains(&"mcp__git__git_log".to_owned())),
            "git_log expired"
        );
        assert!(
            reports.iter().any(|r| r
                .injected
                .iter()
                .any(|b| b.contains("new: mcp__ops__deploy"))),
            "the tool-set change was announced"
        );
        assert!(
            reports[0]
                .injected
                .iter()
                .any(|b| b == "cwd: /repo; os: linux")
        );
        // The new tool is searchable and runs, though the surface did not change.
        assert!(!reports[0].body.contains("mcp__ops__deploy"));
        assert!(
            reports
                .iter()
                .any(|r| r.activated.contains(&"mcp__ops__deploy".to_owned()))
        );
    }
}

#[test]
fn the_same_transcript_gives_the_same_bytes() {
    let (a, _) = replay(Api::Anthropic);
    let (b, _) = replay(Api::Anthropic);
    assert_eq!(
        a.iter().map(|r| &r.body).collect::<Vec<_>>(),
        b.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
}

#[test]
fn assembled_bodies_are_pinned() {
    let compiled = compiled(Some("review"));
    let catalog = catalog();
    let build = |c: &Catalog, v: &[usize]| SearchIndex::build(c, v);
    for (label, api) in Api::ALL {
        let mut r = Replay::new(&compiled, catalog.clone(), api, "Be brief.", &build);
        let reports = r
            .run(&[
                user("what did the last commit change?"),
                call("tool_search", json!({"tool_names": ["mcp__git__git_show"]})),
                exec(
                    "mcp__git__git_show",
                    json!({"repo_path": "/repo", "revision": "HEAD"}),
                ),
            ])
            .expect("replays");
        // The last body holds the whole conversation; drop the tool list, pinned elsewhere.
        let mut body: Value =
            serde_json::from_str(&reports.last().expect("a request").body).expect("json");
        body.as_object_mut().expect("object").remove("tools");
        insta::assert_snapshot!(
            format!("replay_{label}"),
            serde_json::to_string_pretty(&body).expect("json")
        );
    }
}

#[test]
fn a_search_hit_on_a_resident_tool_says_to_call_it_directly() {
    let compiled = compiled(None);
    let catalog = catalog();
    let build = |c: &Catalog, v: &[usize]| SearchIndex::build(c, v);
    let mut r = Replay::new(&compiled, catalog, Api::Anthropic, "Be brief.", &build);
    // mcp__git__git_status is resident in the example configuration.
    let reports = r
        .run(&[
            user("what is the state of my working tree?"),
            call(
                "tool_search",
                json!({"tool_names": ["mcp__git__git_status", "mcp__git__git_log"]}),
            ),
        ])
        .expect("replays");
    let body = &reports.last().expect("a request").body;
    assert!(
        body.contains(
            "mcp__git__git_status (already in your tool list with its schema: call it directly)"
        ),
        "{body}"
    );
    assert!(
        !body.contains("defer_execute {\\\"tool_name\\\":\\\"mcp__git__git_status\\\""),
        "{body}"
    );
    // The deferred one still gets its call form.
    assert!(
        body.contains("defer_execute {\\\"tool_name\\\":\\\"mcp__git__git_log\\\""),
        "{body}"
    );
    assert_eq!(
        reports.last().expect("a request").activated,
        ["mcp__git__git_log"]
    );
}

/// A report's sizes are those of its body's parts, with and without the body: they are kept as
/// the conversation grows rather than measured on the assembled body, which would cost a whole
/// serialisation of the conversation on every turn.
#[test]
fn reported_sizes_are_the_sizes_of_the_body_parts() {
    let compiled = compiled(None);
    let build = |c: &Catalog, v: &[usize]| SearchIndex::build(c, v);
    for system in ["You are a careful coding agent.", ""] {
        for (label, api) in Api::ALL {
            let run = |bodies: bool| {
                let mut r = Replay::new(&compiled, catalog(), api, system, &build);
                r.set_bodies(bodies);
                r.run(&transcript()).expect("replays")
            };
            let with = run(true);
            let without = run(false);
            assert_eq!(with.len(), without.len());
            for (w, o) in with.iter().zip(&without) {
                assert_eq!(w.bytes, o.bytes, "{label}, turn {}", w.turn);
                let body: Value = serde_json::from_str(&w.body).expect("json");
                let size = |key: &str| body.get(key).map_or(0, |v| canonical_json(v).len());
                let (system_len, tools_len, messages_len) = match api {
                    Api::Anthropic => (size("system"), size("tools"), size("messages")),
                    Api::OpenAiResponses => (size("instructions"), size("tools"), size("input")),
                    Api::OpenAiChat => {
                        let first = body["messages"]
                            .as_array()
                            .and_then(|m| m.first())
                            .filter(|m| m["role"] == "system")
                            .map_or(0, |m| canonical_json(m).len());
                        (first, size("tools"), size("messages") - first)
                    }
                };
                assert_eq!(
                    (w.bytes.system, w.bytes.tools, w.bytes.messages),
                    (system_len, tools_len, messages_len),
                    "{label}, system {system:?}, turn {}",
                    w.turn
                );
            }
        }
    }
}

/// A configuration from its text, compiled with no mode.
fn compiled_from(text: &str) -> Compiled {
    Compiled::new(
        Config::from_toml_str(text, "toolshelf.toml").expect("config"),
        "toolshelf.toml",
        None,
    )
    .expect("compiles")
}

/// The example configuration with `[session] activation_ttl_turns = ttl` and `extra` appended.
fn config_with(ttl: u64, extra: &str) -> Compiled {
    assert!(CONFIG.contains("\nactivation_ttl_turns = 6\n"));
    let text = CONFIG.replace(
        "activation_ttl_turns = 6",
        &format!("activation_ttl_turns = {ttl}"),
    );
    compiled_from(&format!("{text}\n{extra}"))
}

/// The reports of replaying `events` over the example catalog (Anthropic format, BM25).
fn run_with(compiled: &Compiled, events: &[Event]) -> Vec<TurnReport> {
    run_in(Api::Anthropic, compiled, events)
}

/// The reports of replaying `events` over the example catalog in `api` (BM25).
fn run_in(api: Api, compiled: &Compiled, events: &[Event]) -> Vec<TurnReport> {
    let build = |c: &Catalog, v: &[usize]| SearchIndex::build(c, v);
    let mut r = Replay::new(compiled, catalog(), api, "Be brief.", &build);
    r.run(events).expect("replays")
}

fn turns(reports: &[TurnReport]) -> Vec<u64> {
    reports.iter().map(|r| r.turn).collect()
}

/// The last message of a report's request body, as JSON text: where a call's result goes.
fn last_message(report: &TurnReport) -> String {
    let body: Value = serde_json::from_str(&report.body).expect("json");
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("a message")
        .to_string()
}

const GIT_LOG: &str = "mcp__git__git_log";

/// A `tool_search` by exact name.
fn load(name: &str) -> Event {
    call("tool_search", json!({"tool_names": [name]}))
}

/// The proxy answers `tool_search` inside the client's request (see the proxy's `prepare`, which
/// advances the turn once per client request, and its loop): a tool searched for in one user
/// turn and called in the next was unused for 1 turn, and with `activation_ttl_turns = 1` it
/// runs. Each model request is still reported, the search's round with its request's turn.
#[test]
fn a_search_the_proxy_answers_in_the_request_costs_no_turn() {
    let compiled = config_with(1, "");
    let events = [
        user("show me the log"),
        load(GIT_LOG),
        Event::Assistant("I have loaded git_log. Which repo?".into()),
        user("/home/me/shop"),
        exec(GIT_LOG, json!({"repo_path": "/home/me/shop"})),
        Event::Assistant("done".into()),
    ];
    let reports = run_with(&compiled, &events);
    let last = reports.last().expect("a request");
    assert!(
        last.refused.is_empty() && last.expired.is_empty(),
        "turn {}: refused {:?}, expired {:?}",
        last.turn,
        last.refused,
        last.expired
    );
    // The proxy's turns: request 1 (user), its second upstream round (after the search),
    // request 2 (user), request 3 (the client's result of the call).
    assert_eq!(turns(&reports), [1, 1, 2, 3]);
    assert!(
        last.body
            .contains("[dry run] mcp__git__git_log would run through defer_execute"),
        "{}",
        last.body
    );
}

/// One user turn more between the search and the call: with `activation_ttl_turns = 1` the tool
/// was unused for 2 turns, more than 1, so it expired; the refusal the model reads and --explain
/// both say 2 turns (README: "One unused for more than `activation_ttl_turns` turns expires").
#[test]
fn an_expired_activation_says_how_long_it_was_unused() {
    let compiled = config_with(1, "");
    let reports = run_with(
        &compiled,
        &[
            user("show me the log"),
            load(GIT_LOG),
            Event::Assistant("I have loaded git_log. Which repo?".into()),
            user("hold on"),
            Event::Assistant("ok".into()),
            user("/home/me/shop"),
            exec(GIT_LOG, json!({"repo_path": "/home/me/shop"})),
        ],
    );
    let last = reports.last().expect("a request");
    assert_eq!(last.expired, [GIT_LOG]);
    let line = toolshelf_core::replay::explain_line(last);
    assert!(
        line.contains("expired: mcp__git__git_log (unused for 2 turns)"),
        "{line}"
    );
    assert!(
        last.body.contains("has not been used for 2 turns"),
        "{}",
        last.body
    );
    // The proxy answers the refusal within the request: the model reads it in turn 3.
    assert_eq!(turns(&reports), [1, 1, 2, 3, 3]);
}

/// The default `activation_ttl_turns = 6`: a tool searched for in turn 1 and unused since runs in
/// turn 7 (unused for 6 turns) and is refused in turn 8 (unused for 7, more than 6).
#[test]
fn an_activation_lasts_activation_ttl_turns_client_requests() {
    let compiled = compiled(None);
    for (chatter, expires) in [(5, false), (6, true)] {
        let mut events = vec![
            user("show me the log"),
            load(GIT_LOG),
            Event::Assistant("loaded. which repo?".into()),
        ];
        for k in 0..chatter {
            events.push(user(&format!("chatter {k}")));
            events.push(Event::Assistant("ok".into()));
        }
        events.push(user("/home/me/shop"));
        events.push(exec(GIT_LOG, json!({"repo_path": "/home/me/shop"})));
        let reports = run_with(&compiled, &events);
        let at = reports.len() - 1;
        let last = &reports[at];
        assert_eq!(
            last.expired.len(),
            usize::from(expires),
            "{chatter} chatter turns: refused {:?}",
            last.refused
        );
        // The call is made in the request of the last user turn: turn 2 + chatter.
        assert_eq!(reports[at - 1].turn, 2 + chatter, "{chatter}");
        if expires {
            assert!(
                last.body.contains("has not been used for 7 turns"),
                "{}",
                last.body
            );
        }
    }
}

/// A round in which the model only searched stays in the turn of its client request: no
/// per-turn reminder is evaluated and nothing is injected (no reminder still showing, no
/// tool-set change notice); those come with the next client request.
#[test]
fn a_search_only_round_keeps_the_turn_and_injects_nothing() {
    let compiled = compiled(None);
    let reports = run_with(
        &compiled,
        &[
            // The memory reminder fires in turn 1 and shows through turn 2.
            user("please remember that we deploy on fridays"),
            Event::ToolsChanged {
                add: vec![
                    json!({"name": "deploy", "description": "Deploy the service to staging", "server": "ops"}),
                ],
                remove: vec![],
            },
            search("git log history"),
            call("Read", json!({"file_path": "/repo/DEPLOY.md"})),
            Event::Result {
                content: json!("fridays"),
                is_error: false,
            },
        ],
    );
    assert!(
        reports[0]
            .reminders
            .iter()
            .any(|n| n.id == "memory" && n.event == "fired")
    );
    let round = &reports[1];
    assert!(round.injected.is_empty(), "{:?}", round.injected);
    assert!(round.reminders.is_empty(), "{:?}", round.reminders);
    assert_eq!(turns(&reports), [1, 1, 2]);
    assert_eq!(round.activated.len(), 3, "the search still activates");
    let next = &reports[2];
    assert!(
        next.reminders
            .iter()
            .any(|n| n.id == "memory" && n.event == "showing"),
        "{:?}",
        next.reminders
    );
    assert!(
        next.injected
            .iter()
            .any(|b| b.contains("Decisions worth keeping"))
            && next
                .injected
                .iter()
                .any(|b| b.contains("new: mcp__ops__deploy")),
        "{:?}",
        next.injected
    );
}

/// The proxy runs a script tool of its configuration itself, as it runs the tools the model
/// wrote: the call is answered inside the request and does not end the turn. A tool of a server
/// that happens to be called `scripts` but that no `[tools.NAME] script` defines is the client's.
#[test]
fn a_script_tool_runs_inside_the_request() {
    let catalog = Catalog::from_json_str(
        r#"{"servers": [{"name": "scripts", "tools": [
            {"name": "echo2", "description": "Echo twice.",
             "input_schema": {"type": "object", "properties": {}}},
            {"name": "other", "description": "Not a script of this configuration.",
             "input_schema": {"type": "object", "properties": {}}}]}]}"#,
        "c.json",
    )
    .expect("catalog");
    let compiled = Compiled::new(
        Config::from_toml_str("[tools.echo2]\nscript = \"echo2.star\"\n", "t.toml")
            .expect("config"),
        "t.toml",
        None,
    )
    .expect("compiles");
    let build = |c: &Catalog, v: &[usize]| SearchIndex::build(c, v);
    let run = |tool: &str| {
        let mut r = Replay::new(
            &compiled,
            catalog.clone(),
            Api::Anthropic,
            "Be brief.",
            &build,
        );
        r.run(&[
            user("echo it"),
            call(
                "tool_search",
                json!({"tool_names": [format!("mcp__scripts__{tool}")]}),
            ),
            exec(&format!("mcp__scripts__{tool}"), json!({})),
            Event::Assistant("done".into()),
            user("next"),
        ])
        .expect("replays")
    };
    assert_eq!(turns(&run("echo2")), [1, 1, 1, 2]);
    assert_eq!(turns(&run("other")), [1, 1, 2, 3]);
}

/// A call the proxy refuses is answered inside the request (the loop continues with the refusal
/// and the schema it attaches): only a call the client runs ends the request.
#[test]
fn a_refused_call_is_answered_inside_the_request() {
    let compiled = compiled(None);
    let reports = run_with(
        &compiled,
        &[
            user("show me the log"),
            exec(GIT_LOG, json!({"repo_path": "/r"})),
            exec(GIT_LOG, json!({"repo_path": "/r"})),
            Event::Result {
                content: json!("commit abc"),
                is_error: false,
            },
        ],
    );
    assert_eq!(turns(&reports), [1, 1, 2]);
    assert_eq!(reports[1].refused, ["mcp__git__git_log: not_loaded"]);
}

/// The proxy matches a direct call only by a name exactly as the model's list has it: a case or
/// separator variant of a resident tool's name is no tool of its own, and goes to the client as it
/// came (a new turn). Through `defer_execute` the same variant folds onto the tool and runs.
#[test]
fn a_direct_call_resolves_by_exact_name_and_defer_execute_folds() {
    let compiled = compiled(None);
    let status = "mcp__git__git_status";
    let params = json!({"repo_path": "/repo"});
    for variant in ["GIT-STATUS", "Git_Status", "MCP__GIT__GIT.STATUS"] {
        let reports = run_with(
            &compiled,
            &[
                user("what changed in git?"),
                call(variant, params.clone()),
                call(status, params.clone()),
                exec(variant, params.clone()),
            ],
        );
        assert_eq!(turns(&reports), [1, 2, 3, 4], "{variant}");
        let direct = &reports[1];
        assert_eq!(direct.refused, [format!("{variant}: unknown")], "{variant}");
        assert!(
            direct
                .body
                .contains(&format!("No tool named \\\"{variant}\\\" is available"))
                && direct.body.contains("Closest names: mcp__git__git_status.")
                && !direct.body.contains("would run directly"),
            "{variant}: {}",
            direct.body
        );
        assert!(reports[2].refused.is_empty(), "{:?}", reports[2].refused);
        assert!(
            reports[2]
                .body
                .contains("[dry run] mcp__git__git_status would run directly"),
            "{}",
            reports[2].body
        );
        assert!(reports[3].refused.is_empty(), "{:?}", reports[3].refused);
        assert!(
            reports[3]
                .body
                .contains("[dry run] mcp__git__git_status would run through defer_execute"),
            "{variant}: {}",
            reports[3].body
        );
    }
}

/// A call of a tool the proxy runs itself (`tool_define`, a tool the model wrote) is answered
/// inside the request too, and the reminders it fires go on its result, as the proxy puts them,
/// not into the next request's blocks.
#[test]
fn tools_the_proxy_runs_are_answered_inside_the_request() {
    let compiled = config_with(
        6,
        r#"
[[reminders]]
id = "counted"
category = "word counting"
message = "Counted words are worth a note."
after_tools = ["^word_count$"]
ttl_turns = 1

[authoring]
enabled = true
"#,
    );
    let define = call(
        "defer_execute",
        json!({"tool_name": "tool_define", "params": {
            "name": "word_count",
            "description": "Counts the words of a text.",
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "script": "def run(params):\n    return len(params['text'].split())\n"
        }}),
    );
    let reports = run_with(
        &compiled,
        &[
            user("count the words in my notes"),
            load("tool_define"),
            define,
            exec("word_count", json!({"text": "a b c"})),
            call("Read", json!({"file_path": "/notes"})),
        ],
    );
    let ran = &reports[3];
    assert!(ran.injected.is_empty(), "{:?}", ran.injected);
    assert!(
        ran.reminders
            .iter()
            .any(|n| n.id == "counted" && n.event == "fired"),
        "{:?}",
        ran.reminders
    );
    // The block is on the tool's result, the last message of the request.
    let result = last_message(ran);
    assert!(
        result.contains("[dry run] word_count would run")
            && result.contains("Counted words are worth a note."),
        "{result}"
    );
    assert_eq!(turns(&reports), [1, 1, 1, 1, 2]);
    // It fired in turn 1 and shows for 1 turn: the next request does not bring it again.
    let next = &reports[4];
    assert!(
        !next.injected.iter().any(|b| b.contains("Counted words")),
        "{:?}",
        next.injected
    );
    assert!(
        !next
            .reminders
            .iter()
            .any(|n| n.id == "counted" && n.event == "fired"),
        "{:?}",
        next.reminders
    );
}

/// A `tool_define` call with `defer_loading` beside the definition is refused saying why a
/// defined tool has none, not only that the schema allows no such property.
#[test]
fn defer_loading_beside_a_definition_is_refused_saying_why() {
    let compiled = config_with(6, "[authoring]\nenabled = true\n");
    let define = call(
        "defer_execute",
        json!({"tool_name": "tool_define", "params": {
            "name": "word_count",
            "description": "Counts the words of a text.",
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "script": "def run(params):\n    return 1\n",
            "defer_loading": false
        }}),
    );
    let reports = run_with(
        &compiled,
        &[
            user("count the words in my notes"),
            load("tool_define"),
            define,
        ],
    );
    let result = last_message(&reports[2]);
    assert!(
        result.contains(
            "tool_define was not run: its params do not match its schema (1 problem):\\n- at /defer_loading: \\\"defer_loading\\\" is not an argument of tool_define: a tool you define always goes on the shelf (deferred: tool_search finds it, defer_execute runs it), so there is nothing for it to set; define the tool again without it\\n"
        ) && !result.contains("Additional properties"),
        "{result}"
    );
}

/// A definition of a name the model defined before replaces that tool, as the proxy does it,
/// and does not count against `max_tools` again.
#[test]
fn a_redefinition_replaces_the_tool_as_in_the_proxy() {
    let compiled = config_with(6, "[authoring]\nenabled = true\nmax_tools = 1\n");
    let define = |description: &str| {
        call(
            "defer_execute",
            json!({"tool_name": "tool_define", "params": {
                "name": "word_count",
                "description": description,
                "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "script": "def run(params):\n    return 1\n"
            }}),
        )
    };
    let reports = run_with(
        &compiled,
        &[
            user("count the words in my notes"),
            load("tool_define"),
            define("Counts the words of a text."),
            define("Counts the words of a text, hyphenated ones as one."),
            search("word_count"),
        ],
    );
    let again = last_message(&reports[3]);
    assert!(
        again.contains("Replaced your earlier tool \\\"word_count\\\".")
            && !again.contains("max_tools"),
        "{again}"
    );
    assert!(reports[3].refused.is_empty(), "{:?}", reports[3].refused);
    let found = last_message(&reports[4]);
    assert!(
        found.contains("hyphenated ones as one") && !found.contains("a text.\\n"),
        "{found}"
    );
}

/// `[proxy] max_search_rounds`: after that many upstream rounds of one client request the proxy
/// returns to the client, so the next round is a new turn.
#[test]
fn the_rounds_of_a_request_end_at_max_search_rounds() {
    let searches = |n: usize| {
        let mut e = vec![user("find the git tools")];
        e.extend((0..n).map(|k| search(&format!("git tool {k}"))));
        e
    };
    assert_eq!(
        turns(&run_with(&compiled(None), &searches(5))),
        [1, 1, 1, 1, 2, 2]
    );
    let two = config_with(6, "[proxy]\nmax_search_rounds = 2\n");
    assert_eq!(turns(&run_with(&two, &searches(4))), [1, 1, 2, 2, 3]);
    let one = config_with(6, "[proxy]\nmax_search_rounds = 1\n");
    assert_eq!(turns(&run_with(&one, &searches(2))), [1, 2, 3]);
}

/// A conversation opens with the user: a call before any user message would make a first
/// request that opens with the model's call, which the APIs refuse.
#[test]
fn a_call_before_the_first_user_message_is_an_error() {
    let compiled = compiled(None);
    let build = |c: &Catalog, v: &[usize]| SearchIndex::build(c, v);
    for (events, at) in [
        (vec![call("Read", json!({"file_path": "/a"}))], "event 1"),
        (
            vec![
                Event::Context("cwd: /repo".into()),
                Event::Assistant("Let me look.".into()),
                call("Read", json!({"file_path": "/a"})),
                user("hi"),
            ],
            "event 3",
        ),
    ] {
        let mut r = Replay::new(&compiled, catalog(), Api::Anthropic, "Be brief.", &build);
        let e = match r.run(&events) {
            Ok(reports) => panic!(
                "{at}: replayed, {} request(s), the first opening with {}",
                reports.len(),
                &reports[0].body[..60]
            ),
            Err(e) => e,
        };
        assert!(
            e.starts_with(&format!("{at}: a call before the first user message")),
            "{e}"
        );
    }
}

/// A tool the proxy runs itself never reaches the client, whose permission prompt an `ask` rule
/// leaves the call to: the proxy refuses it, and so does the replay's dry run, inside the
/// request, while a client's tool under the same rule would run after asking.
#[test]
fn an_ask_rule_refuses_a_tool_the_proxy_runs_itself() {
    let compiled = config_with(
        6,
        r#"
[authoring]
enabled = true

[permissions]
ask = ["^word_count$", "^mcp__git__git_log$"]
"#,
    );
    let define = call(
        "defer_execute",
        json!({"tool_name": "tool_define", "params": {
            "name": "word_count",
            "description": "Counts the words of a text.",
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "script": "def run(params):\n    return len(params['text'].split())\n"
        }}),
    );
    let reports = run_with(
        &compiled,
        &[
            user("count the words, then show the log"),
            load("tool_define"),
            define,
            exec("word_count", json!({"text": "a b c"})),
            load(GIT_LOG),
            exec(GIT_LOG, json!({"repo_path": "/repo"})),
        ],
    );
    let refused = &reports[3];
    assert!(
        refused.refused.iter().any(|r| r.starts_with("word_count:")),
        "{:?}",
        refused.refused
    );
    assert!(
        !refused.body.contains("[dry run] word_count would run"),
        "{}",
        refused.body
    );
    let asked = &reports.last().expect("a request").body;
    assert!(
        asked.contains(
            "[dry run] mcp__git__git_log would run through defer_execute after asking the user"
        ),
        "{asked}"
    );
}

/// A call the client ran whose recorded result is an error (its user declined it, its hook
/// blocked it, the tool failed) did not run: as in the proxy, which counts a handed-over call
/// from the result the client sends back, it fires no `after_tools` reminder and does not
/// refresh the tool's activation. The same call with a result that is not an error does both,
/// and so does every result in the OpenAI APIs, whose requests carry no error flag.
#[test]
fn a_client_call_whose_recorded_result_is_an_error_counts_as_not_made() {
    let compiled = config_with(
        1,
        r#"
[[reminders]]
id = "logged"
category = "git history"
message = "The log was read; say which commit you mean."
after_tools = ["^mcp__git__git_log$"]
"#,
    );
    for (api, is_error) in [
        (Api::Anthropic, false),
        (Api::Anthropic, true),
        (Api::OpenAiChat, true),
        (Api::OpenAiResponses, true),
    ] {
        let reports = run_in(
            api,
            &compiled,
            &[
                user("show me the log"),
                load(GIT_LOG),
                Event::Assistant("Loaded. Which repository?".into()),
                user("/home/me/shop"),
                exec(GIT_LOG, json!({"repo_path": "/home/me/shop"})),
                Event::Result {
                    content: json!("declined by the user"),
                    is_error,
                },
                exec(GIT_LOG, json!({"repo_path": "/home/me/shop"})),
            ],
        );
        let ran = api != Api::Anthropic || !is_error;
        let at = format!("{api:?}, is_error {is_error}");
        let with_result = &reports[3];
        assert_eq!(with_result.turn, 3, "{at}");
        let fired = with_result
            .reminders
            .iter()
            .any(|n| n.id == "logged" && n.event == "fired");
        assert_eq!(fired, ran, "{at}: {:?}", with_result.reminders);
        // Searched in turn 1. A call that ran in turn 2 keeps the tool active through turn 3
        // (TTL 1), so the next call goes to the client and its result starts turn 4; one that
        // did not run leaves it unused for 2 turns, and the proxy refuses the next call in
        // turn 3.
        let last = reports.last().expect("a request");
        let (expired, turn) = if ran {
            (Vec::new(), 4)
        } else {
            (vec![GIT_LOG.to_owned()], 3)
        };
        assert_eq!((&last.expired, last.turn), (&expired, turn), "{at}");
    }
}

/// A call the rules deny is refused as denied before its schema is asked for: loading it would
/// not let the call run. Another call of the same unloaded tool is still refused as not loaded.
#[test]
fn a_denied_call_is_refused_before_its_schema_is_asked_for() {
    let compiled = config_with(
        6,
        "[permissions]\ndeny = [\"^mcp__git__git_log(file:repo_path=/secret/**)\"]\n",
    );
    let reports = run_with(
        &compiled,
        &[
            user("show me the log"),
            exec(GIT_LOG, json!({"repo_path": "/secret/repo"})),
            exec(GIT_LOG, json!({"repo_path": "/r"})),
            exec(GIT_LOG, json!({"repo_path": "/r"})),
            Event::Result {
                content: json!("commit abc"),
                is_error: false,
            },
        ],
    );
    assert_eq!(reports[1].refused, ["mcp__git__git_log: denied"]);
    assert!(
        last_message(&reports[1]).contains("forbids this call"),
        "{}",
        last_message(&reports[1])
    );
    assert_eq!(reports[2].refused, ["mcp__git__git_log: not_loaded"]);
}

/// A `defer_execute` whose arguments cannot be read is refused as the proxy refuses it
/// (`bad_arguments`), under the tool it names when it names one.
#[test]
fn a_malformed_defer_execute_is_listed_as_refused() {
    let compiled = compiled(None);
    let reports = run_with(
        &compiled,
        &[
            user("show me the log"),
            call("defer_execute", json!({})),
            call("defer_execute", json!({"tool_name": GIT_LOG, "params": 5})),
        ],
    );
    assert_eq!(reports[1].refused, ["defer_execute: bad_arguments"]);
    assert_eq!(reports[2].refused, [format!("{GIT_LOG}: bad_arguments")]);
}

/// A recorded result's content blocks are read as the model reads them: the texts one a line,
/// a block without text (an image, a resource) as its type, never its data as JSON.
#[test]
fn a_recorded_image_block_is_read_as_its_type_not_its_data() {
    let compiled = compiled(None);
    let data = "QUJD".repeat(5000);
    let reports = run_with(
        &compiled,
        &[
            user("take a screenshot"),
            call("mcp__git__git_status", json!({"repo_path": "/r"})),
            Event::Result {
                content: json!([
                    {"type": "text", "text": "before"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                    {"type": "resource", "resource": {"uri": "file:///a", "blob": data}},
                    {"type": "text", "text": "after"}
                ]),
                is_error: false,
            },
            user("thanks"),
        ],
    );
    let last = reports.last().expect("a report");
    assert!(!last.body.contains("QUJD"), "the data is not text");
    let body: Value = serde_json::from_str(&last.body).expect("json");
    let result = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .expect("the result");
    assert_eq!(result["content"], "before\n[image]\n[resource]\nafter");
}

/// The conversation of the last request of `reports`, as canonical JSON, one message a line.
fn last_conversation(api: Api, reports: &[TurnReport]) -> Vec<Value> {
    let body: Value = serde_json::from_str(&reports.last().expect("a report").body).expect("json");
    body[api.conversation_key()]
        .as_array()
        .expect("a conversation")
        .clone()
}

/// Injected blocks go where the proxy puts them: after the client's last entry of the turn (the
/// user's text, or the results of the calls it ran), the change notice before the reminders,
/// environment context last. Anthropic appends them to that user message; the OpenAI APIs send
/// one more user message holding them joined by a blank line.
#[test]
fn injected_blocks_follow_the_turns_last_entry_as_the_proxy_puts_them() {
    let compiled = compiled(None);
    let deploy = json!({"name": "deploy", "description": "Deploy the service", "server": "ops"});
    let events = |then: Event| {
        vec![
            user("hello"),
            Event::ToolsChanged {
                add: vec![deploy.clone()],
                remove: vec![],
            },
            Event::Context("cwd: /repo".into()),
            then,
        ]
    };
    let notice = "[toolshelf: the available tools changed; new: mcp__ops__deploy. Use tool_search to load new ones.]";
    let is_reminder = |b: &str| b.starts_with("<system-reminder>\nDecisions worth keeping");
    for (_, api) in Api::ALL {
        // A user turn: the reminder fires on "remember".
        let reports = run_in(
            api,
            &compiled,
            &events(user("remember: we deploy on fridays")),
        );
        let injected = &reports.last().expect("a report").injected;
        assert_eq!(injected.len(), 3, "{api:?}: {injected:?}");
        assert_eq!(injected[0], notice, "{api:?}");
        assert!(is_reminder(&injected[1]), "{api:?}: {injected:?}");
        assert_eq!(injected[2], "cwd: /repo", "{api:?}");
        let conv = last_conversation(api, &reports);
        let query = "<user_query>remember: we deploy on fridays</user_query>";
        match api {
            Api::Anthropic => {
                let blocks: Vec<&str> = conv
                    .last()
                    .and_then(|m| m["content"].as_array())
                    .expect("blocks")
                    .iter()
                    .map(|b| b["text"].as_str().expect("text"))
                    .collect();
                let mut expected = vec![query];
                expected.extend(injected.iter().map(String::as_str));
                assert_eq!(blocks, expected);
            }
            _ => {
                let n = conv.len();
                assert_eq!(conv[n - 2]["content"][0]["text"], query, "{api:?}");
                let joined = injected.join("\n\n");
                let last = match api {
                    Api::OpenAiChat => json!({"role": "user", "content": joined}),
                    _ => json!({"type": "message", "role": "user",
                                "content": [{"type": "input_text", "text": joined}]}),
                };
                assert_eq!(conv[n - 1], last, "{api:?}");
            }
        }
        // After the results of a call the client ran: the notice and context follow them.
        let reports = run_in(
            api,
            &compiled,
            &[
                user("hello"),
                call("mcp__git__git_status", json!({"repo_path": "/r"})),
                Event::ToolsChanged {
                    add: vec![deploy.clone()],
                    remove: vec![],
                },
                Event::Context("cwd: /repo".into()),
                Event::Result {
                    content: json!("clean"),
                    is_error: false,
                },
            ],
        );
        let injected = &reports.last().expect("a report").injected;
        assert_eq!(injected, &[notice, "cwd: /repo"], "{api:?}");
        let conv = last_conversation(api, &reports);
        let n = conv.len();
        match api {
            Api::Anthropic => assert_eq!(
                conv[n - 1]["content"],
                json!([
                    {"type": "tool_result", "tool_use_id": "call_0001", "content": "clean"},
                    {"type": "text", "text": notice},
                    {"type": "text", "text": "cwd: /repo"}]),
            ),
            Api::OpenAiChat => {
                assert_eq!(conv[n - 2]["role"], "tool");
                assert_eq!(
                    conv[n - 1],
                    json!({"role": "user", "content": format!("{notice}\n\ncwd: /repo")})
                );
            }
            Api::OpenAiResponses => {
                assert_eq!(conv[n - 2]["type"], "function_call_output");
                assert_eq!(
                    conv[n - 1]["content"],
                    json!([{"type": "input_text", "text": format!("{notice}\n\ncwd: /repo")}])
                );
            }
        }
    }
}

/// The proxy writes its own answers (a search's, a refusal) in Anthropic as one text block, and
/// passes a result the client ran as the client sent it (a string here); in a round of both,
/// the proxy's answers come first, as it puts them back before the client's results.
#[test]
fn the_proxys_own_answers_are_written_as_the_proxy_writes_them() {
    let compiled = compiled(None);
    let recorded = |text: &str| Event::Result {
        content: json!(text),
        is_error: false,
    };
    let reports = run_with(
        &compiled,
        &[
            user("what changed?"),
            call("tool_search", json!({"tool_names": [GIT_LOG]})),
            exec("mcp__git__no_such_tool", json!({})),
            call("mcp__git__git_status", json!({"repo_path": "/r"})),
            load(GIT_LOG),
            recorded("clean"),
            recorded("(recorded search)"),
        ],
    );
    let conv = last_conversation(Api::Anthropic, &reports);
    let results: Vec<&Value> = conv
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 4, "{conv:?}");
    // The search and the refusal, each in a round of its own.
    assert_eq!(results[0]["tool_use_id"], "call_0001");
    let text = results[0]["content"][0]["text"]
        .as_str()
        .expect("one text block");
    assert!(text.contains(GIT_LOG), "{text}");
    assert_eq!(results[0]["content"].as_array().map(Vec::len), Some(1));
    assert_eq!(results[1]["tool_use_id"], "call_0002");
    assert_eq!(results[1]["is_error"], true);
    assert_eq!(results[1]["content"][0]["type"], "text");
    // A round of a client call and a search: the search's answer (its recorded text, in the
    // proxy's form) first, then the client's result as a string.
    assert_eq!(
        results[2],
        &json!({"type": "tool_result", "tool_use_id": "call_0004",
                "content": [{"type": "text", "text": "(recorded search)"}]})
    );
    assert_eq!(
        results[3],
        &json!({"type": "tool_result", "tool_use_id": "call_0003", "content": "clean"})
    );
}

/// A call whose arguments the transcript gives as text (OpenAI's spelling) goes out with that
/// text, as the proxy keeps the model's: Responses as written, Chat Completions compact in the
/// order written (the proxy's `serde_json` form); given as an object, canonical.
#[test]
fn arguments_given_as_text_are_sent_as_the_proxy_sends_the_models() {
    let compiled = compiled(None);
    let written = Event::parse(
        r#"{"call": {"name": "mcp__git__git_status", "arguments": "{\"repo_path\": \"/r\", \"a\": 1}"}}"#,
    )
    .expect("a call");
    let object = Event::parse(
        r#"{"call": {"name": "mcp__git__git_status", "arguments": {"repo_path": "/r", "a": 1}}}"#,
    )
    .expect("a call");
    for (api, as_text, as_object) in [
        (
            Api::OpenAiResponses,
            r#"{"repo_path": "/r", "a": 1}"#,
            r#"{"a":1,"repo_path":"/r"}"#,
        ),
        (
            Api::OpenAiChat,
            r#"{"repo_path":"/r","a":1}"#,
            r#"{"a":1,"repo_path":"/r"}"#,
        ),
    ] {
        let reports = run_in(
            api,
            &compiled,
            &[user("status?"), written.clone(), object.clone()],
        );
        let arguments: Vec<Value> = last_conversation(api, &reports)
            .iter()
            .filter_map(|m| match api {
                Api::OpenAiChat => m.pointer("/tool_calls/0/function/arguments").cloned(),
                _ => m.get("arguments").cloned(),
            })
            .collect();
        assert_eq!(arguments, [json!(as_text), json!(as_object)], "{api:?}");
    }
}

/// A tool the client stopped offering is refused as the proxy refuses it, gone, not unknown: a
/// resident tool of the frozen list called directly, and a deferred tool the session loaded or
/// called, through `defer_execute`. The proxy answers the call itself, so the turn goes on. A
/// deferred tool the session never loaded is an unknown name, and so is a direct call of a
/// deferred tool, which no frozen list holds (the client gets it).
#[test]
fn a_tool_the_client_removed_is_refused_as_gone_as_in_the_proxy() {
    let compiled = compiled(None);
    let status = "mcp__git__git_status";
    let removed = |names: &[&str]| Event::ToolsChanged {
        add: vec![],
        remove: names.iter().map(|n| n.to_string()).collect(),
    };
    let reports = run_with(
        &compiled,
        &[
            user("what changed?"),
            call(status, json!({"repo_path": "/r"})),
            Event::Result {
                content: json!("clean"),
                is_error: false,
            },
            load(GIT_LOG),
            removed(&[status, GIT_LOG, "mcp__git__git_commit", "mcp__git__git_add"]),
            user("and now?"),
            call(status, json!({"repo_path": "/r"})),
            exec(GIT_LOG, json!({"repo_path": "/r"})),
            exec(
                "mcp__git__git_commit",
                json!({"repo_path": "/r", "message": "m"}),
            ),
            call(
                "mcp__git__git_add",
                json!({"repo_path": "/r", "files": ["a"]}),
            ),
        ],
    );
    let refused: Vec<&[String]> = reports.iter().map(|r| r.refused.as_slice()).collect();
    let n = reports.len();
    assert_eq!(refused[n - 4], [format!("{status}: gone")]);
    assert_eq!(refused[n - 3], [format!("{GIT_LOG}: gone")]);
    assert_eq!(refused[n - 2], ["mcp__git__git_commit: unknown"]);
    assert_eq!(refused[n - 1], ["mcp__git__git_add: unknown"]);
    // Answered inside the request: one turn, until the unknown direct call goes to the client
    // and its result opens the next.
    let t = reports[n - 5].turn;
    assert_eq!(
        turns(&reports[n - 5..]),
        [t, t, t, t, t + 1],
        "{:?}",
        turns(&reports)
    );
    let conv = last_conversation(Api::Anthropic, &reports);
    let text_of = |id: &str| -> String {
        conv.iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["tool_use_id"] == id)
            .and_then(|b| b["content"][0]["text"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no result for {id}"))
    };
    let gone = |name: &str| {
        format!(
            "{name} was not run: the client no longer offers this tool. It stays in your tool list only because that list cannot change during a session; it works again if the client offers it again."
        )
    };
    assert_eq!(text_of("call_0003"), gone(status));
    assert_eq!(text_of("call_0004"), gone(GIT_LOG));
}
