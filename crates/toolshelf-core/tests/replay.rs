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
