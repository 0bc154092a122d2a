//! `replay` and `ledger --transcript` through the real binary, on the bundled example.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolshelf"))
        .args(args)
        .output()
        .expect("run toolshelf")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn example(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(file)
        .display()
        .to_string()
}

fn temp(name: &str, content: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolshelf-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join(name);
    std::fs::write(&p, content).expect("write");
    p.display().to_string()
}

#[test]
fn replayed_bodies_keep_their_prefix_in_every_format() {
    let transcript = example("transcript.jsonl");
    for format in ["anthropic", "openai", "openai-responses"] {
        let bodies = ok(&["replay", "--transcript", &transcript, "--format", format]);
        let lines: Vec<Value> = bodies
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON body a line"))
            .collect();
        assert_eq!(lines.len(), 14, "{format}: one body per model request");
        let file = temp(&format!("bodies-{format}.jsonl"), &bodies);
        let check = ok(&["prefix-check", &file]);
        assert!(
            check.contains("every request keeps the previous one's prefix"),
            "{check}"
        );
        // The example's reminder reaches the model after the commit, as an injected block.
        assert!(
            bodies.contains("<system-reminder>\\nDecisions worth keeping"),
            "{format}"
        );
    }
}

/// The bundled example is a clean transcript: every command that replays it says nothing on
/// stderr.
#[test]
fn the_bundled_example_replays_without_a_warning() {
    let transcript = example("transcript.jsonl");
    for args in [
        vec!["replay", "--transcript", &transcript],
        vec!["replay", "--transcript", &transcript, "--explain"],
        vec!["ledger", "--transcript", &transcript],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.is_empty(), "{args:?}: {err}");
    }
}

#[test]
fn explain_says_what_the_session_did() {
    let text = ok(&[
        "replay",
        "--transcript",
        &example("transcript.jsonl"),
        "--explain",
    ]);
    assert!(
        text.contains("reminder memory fired: mcp__git__git_commit was just called"),
        "{text}"
    );
    assert!(text.contains("reminder memory suppressed"), "{text}");
    assert!(
        text.contains("activated: mcp__memory__create_entities"),
        "{text}"
    );
    let turns = example_reports();
    assert_eq!(turns.len(), 14);
    assert!(
        turns
            .iter()
            .all(|t| t["bytes"]["tools"].as_u64() > Some(1000))
    );
}

#[test]
fn the_ledger_accounts_the_whole_session() {
    let v: Value = serde_json::from_str(&ok(&[
        "ledger",
        "--transcript",
        &example("transcript.jsonl"),
        "--json",
    ]))
    .expect("json");
    assert_eq!(v["requests"], 14);
    let t = &v["totals"];
    let (input, cached, all) = (
        t["input_tokens"].as_u64().expect("input"),
        t["cached_tokens"].as_u64().expect("cached"),
        t["all_resident_tokens"].as_u64().expect("all"),
    );
    assert!(cached < input && cached * 10 > input * 8, "{t}");
    assert!(all > input, "{t}");
    let turns = v["turns"].as_array().expect("turns");
    assert_eq!(
        turns[0]["cached"], 0,
        "nothing to reuse before the first request"
    );
    for pair in turns.windows(2) {
        assert_eq!(
            pair[1]["cached"], pair[0]["total"],
            "each request reuses the whole previous one"
        );
    }
    let table = ok(&["ledger", "--transcript", &example("transcript.jsonl")]);
    assert!(table.contains("served by a prefix cache"), "{table}");
}

/// Each request's message tokens are those of the messages the replayed body sends, as written
/// (a lone text block is counted as the block it is, not as the string a prompt cache reads it as).
#[test]
fn the_ledger_counts_the_messages_as_sent() {
    let transcript = example("transcript.jsonl");
    let v: Value = serde_json::from_str(&ok(&["ledger", "--transcript", &transcript, "--json"]))
        .expect("json");
    let bodies = ok(&["replay", "--transcript", &transcript]);
    let turns = v["turns"].as_array().expect("turns");
    let mut lone_blocks = 0;
    for (turn, line) in turns.iter().zip(bodies.lines()) {
        let body: Value = serde_json::from_str(line).expect("a body");
        let messages = body["messages"].as_array().expect("messages");
        lone_blocks += messages
            .iter()
            .filter(|m| m["content"].as_array().is_some_and(|c| c.len() == 1))
            .count();
        let sent: usize = messages
            .iter()
            .map(|m| toolshelf_core::tokens::count(&toolshelf_core::request::canonical_json(m)))
            .sum();
        assert_eq!(turn["messages"].as_u64(), Some(sent as u64), "{turn}");
    }
    assert_eq!(turns.len(), bodies.lines().count());
    assert!(lone_blocks > 0, "the example sends content of one block");
}

#[test]
fn bad_transcripts_and_rules_are_named() {
    let bad = temp("bad.jsonl", "{\"user\": \"hi\"}\n{\"shout\": \"x\"}\n");
    let out = run(&["replay", "--transcript", &bad]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("bad.jsonl:2: unknown event \"shout\""), "{e}");
    let config = temp(
        "rules.toml",
        "[[reminders]]\nid = \"git\"\ncategory = \"git history\"\nmessage = \"Pass repo_path to see the history.\"\nsearch_hint = [\"git log\"]\nintents = [\"history\"]\n",
    );
    let ok_transcript = temp("t.jsonl", "{\"user\": \"hi\"}\n");
    let out = run(&[
        "replay",
        "--catalog",
        &example("catalog.json"),
        "--config",
        &config,
        "--transcript",
        &ok_transcript,
    ]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("names the parameter \"repo_path\""), "{e}");
    // Like every other configuration error, it names the file.
    assert!(e.contains("rules.toml: [[reminders]] \"git\""), "{e}");
}

/// The last request body of a replay of `lines`.
fn last_body(name: &str, lines: &str) -> Value {
    let out = ok(&[
        "replay",
        "--ranker",
        "bm25",
        "--transcript",
        &temp(name, lines),
    ]);
    serde_json::from_str(out.lines().last().expect("a body")).expect("json")
}

#[test]
fn a_recorded_result_keeps_its_error_flag_and_its_text() {
    let call = "{\"user\": \"read\"}\n{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/a\"}}}\n";
    let result = |r: &str| -> Value {
        let body = last_body("result.jsonl", &format!("{call}{r}\n"));
        body["messages"][2]["content"][0].clone()
    };
    let failed = result("{\"result\": {\"content\": \"ENOENT\", \"is_error\": true}}");
    assert_eq!(failed["content"], "ENOENT");
    assert_eq!(failed["is_error"], true, "{failed}");
    // A call the dry run refuses (not loaded) keeps the recording's verdict: it worked. The
    // proxy writes that answer, so it carries the text as the proxy writes its answers.
    let body = last_body(
        "refused.jsonl",
        "{\"user\": \"log\"}\n{\"call\": {\"name\": \"defer_execute\", \"input\": {\"tool_name\": \"mcp__git__git_log\", \"params\": {\"repo_path\": \"/r\"}}}}\n{\"result\": {\"content\": \"commit abc\"}}\n",
    );
    let r = &body["messages"][2]["content"][0];
    assert_eq!(
        r["content"],
        json!([{"type": "text", "text": "commit abc"}])
    );
    assert!(r.get("is_error").is_none(), "{r}");
    // Text blocks are the text the model read, one block a line.
    let blocks = result(
        "{\"result\": {\"content\": [{\"type\": \"text\", \"text\": \"one\"}, {\"type\": \"text\", \"text\": \"two\"}]}}",
    );
    assert_eq!(blocks["content"], "one\ntwo");
}

/// A key a transcript event does not take is refused by every command that reads transcripts,
/// naming the file, line and key (and the key it is a slip for), before anything is printed;
/// MCP's `isError` and the `arguments` of MCP and OpenAI are read as `is_error` and `input`.
#[test]
fn a_key_a_transcript_event_does_not_take_is_refused_and_wire_spellings_are_read() {
    let call = "{\"user\": \"read\"}\n{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/a\"}}}\n";
    let body = last_body(
        "is-error.jsonl",
        &format!("{call}{{\"result\": {{\"content\": \"boom\", \"isError\": true}}}}\n"),
    );
    let failed = &body["messages"][2]["content"][0];
    assert_eq!(failed["content"], "boom");
    assert_eq!(failed["is_error"], true, "{failed}");
    let body = last_body(
        "arguments.jsonl",
        "{\"user\": \"read\"}\n{\"call\": {\"name\": \"Read\", \"arguments\": {\"file_path\": \"/a\"}}}\n{\"result\": {\"content\": \"ok\"}}\n",
    );
    let used = &body["messages"][1]["content"][0];
    assert_eq!(used["input"]["file_path"], "/a", "{used}");
    for (name, line, says) in [
        (
            "remove-slip.jsonl",
            "{\"tools_changed\": {\"add\": [], \"remvoe\": [\"Read\"]}}",
            "unknown key \"remvoe\" in \"tools_changed\"; did you mean \"remove\"?",
        ),
        (
            "flag-slip.jsonl",
            "{\"result\": {\"content\": \"x\", \"is_eror\": true}}",
            "unknown key \"is_eror\" in \"result\"; did you mean \"is_error\"?",
        ),
    ] {
        let path = temp(name, &format!("{call}{line}\n{{\"user\": \"next\"}}\n"));
        for args in [
            vec!["replay", "--transcript", &path],
            vec!["replay", "--transcript", &path, "--explain"],
            vec!["ledger", "--transcript", &path],
        ] {
            let out = run(&args);
            let e = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
            assert!(e.contains(&format!("{path}:3: {says}")), "{args:?}: {e}");
            assert!(out.stdout.is_empty(), "{args:?}");
        }
    }
}

#[test]
fn transcripts_that_cannot_be_replayed_are_refused_with_their_line_and_no_output() {
    for (name, text, expected) in [
        (
            "extra.jsonl",
            "{\"user\": \"hi\"}\n{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/a\"}}}\n{\"result\": {\"content\": \"x\"}}\n\n{\"result\": {\"content\": \"y\"}}\n",
            "extra.jsonl:5: a result with no call before it to answer (from ",
        ),
        (
            "orphan.jsonl",
            "\n{\"user\": \"hi\"}\n{\"assistant\": \"ok\"}\n{\"result\": {\"content\": \"x\"}}\n",
            "orphan.jsonl:4: a result with no call before it to answer",
        ),
        (
            "remove.jsonl",
            "{\"user\": \"hi\"}\n{\"tools_changed\": {\"remove\": [\"no_such_tool\"]}}\n{\"user\": \"again\"}\n",
            "remove.jsonl:2: tools_changed.remove names \"no_such_tool\"",
        ),
        (
            "add.jsonl",
            "{\"user\": \"hi\"}\n{\"tools_changed\": {\"add\": [{\"description\": \"no name\"}]}}\n{\"user\": \"again\"}\n",
            "add.jsonl:2: ",
        ),
        (
            "null.jsonl",
            "{\"user\": \"hi\"}\n{\"tools_changed\": null}\n",
            "null.jsonl:2: \"tools_changed\" must be an object",
        ),
        (
            "context.jsonl",
            "{\"user\": \"hi\"}\n{\"context\": \"late\"}\n",
            "context.jsonl:2: context after the last request",
        ),
        (
            "empty.jsonl",
            "\n\n",
            "empty.jsonl: the transcript has no events",
        ),
        (
            "flag.jsonl",
            "{\"user\": \"hi\"}\n{\"call\": {\"name\": \"Read\", \"input\": {}}}\n{\"result\": {\"content\": \"x\", \"is_error\": \"yes\"}}\n",
            "flag.jsonl:3: \"result\".is_error must be true or false",
        ),
    ] {
        let out = run(&[
            "replay",
            "--ranker",
            "bm25",
            "--transcript",
            &temp(name, text),
        ]);
        assert!(!out.status.success(), "{name}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(expected), "{name}: {e}");
        if name == "extra.jsonl" {
            assert!(
                e.contains("extra.jsonl:2, 1 call is followed by 2 results)"),
                "{e}"
            );
        }
        assert!(
            out.stdout.is_empty(),
            "{name}: a malformed file yields no body"
        );
    }
    let latin = std::env::temp_dir().join(format!(
        "toolshelf-replay-latin-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(&latin, b"{\"user\": \"hi\"}\n{\"user\": \"h\xe9\"}\n").expect("write");
    let out = run(&["replay", "--transcript", &latin.display().to_string()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains(".jsonl:2: not valid UTF-8"), "{e}");
    // A byte order mark is not an event.
    let bom = temp("bom.jsonl", "\u{feff}{\"user\": \"hi\"}\n");
    assert_eq!(
        ok(&["replay", "--ranker", "bm25", "--transcript", &bom])
            .lines()
            .count(),
        1
    );
}

#[test]
fn explain_names_refused_calls_and_the_ranker_is_the_one_asked_for() {
    let text = ok(&[
        "replay",
        "--ranker",
        "bm25",
        "--explain",
        "--transcript",
        &temp(
            "unknown.jsonl",
            "{\"user\": \"hi\"}\n{\"call\": {\"name\": \"no_such_tool\", \"input\": {}}}\n",
        ),
    ]);
    assert!(text.contains("refused: no_such_tool: unknown"), "{text}");
    // The default is the gateway's ranker (hybrid); semantic is the embedding alone.
    let transcript = example("transcript.jsonl");
    let with = |ranker: Option<&str>| {
        let mut args = vec!["replay", "--transcript", &transcript];
        if let Some(r) = ranker {
            args.extend(["--ranker", r]);
        }
        ok(&args)
    };
    let default = with(None);
    assert_eq!(default, with(Some("hybrid")));
    assert_ne!(default, with(Some("semantic")));
    assert_ne!(default, with(Some("bm25")));
}

#[test]
fn the_ledger_warns_once_follows_tool_changes_and_refuses_window() {
    let catalog = temp(
        "warn.json",
        r#"{"servers": [{"name": "a", "tools": [{"name": "bar", "description": "Bar a thing.", "inputSchema": {"type": "object", "properties": {"x": {"type": "nonsense"}}}}]}]}"#,
    );
    let hi = temp("hi.jsonl", "{\"user\": \"hi\"}\n");
    let out = run(&[
        "ledger",
        "--catalog",
        &catalog,
        "--transcript",
        &hi,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(e.matches("mcp__a__bar").count(), 1, "{e}");
    let out = run(&["ledger", "--transcript", &hi, "--window", "5"]);
    assert!(!out.status.success());
    // A tool added mid-session counts in the all-resident surface from then on.
    let big = format!(
        "{{\"user\": \"hi\"}}\n{{\"assistant\": \"hello\"}}\n{{\"tools_changed\": {{\"add\": [{{\"name\": \"deploy\", \"description\": \"{}\", \"inputSchema\": {{\"type\": \"object\"}}, \"server\": \"ops\"}}]}}}}\n{{\"user\": \"deploy\"}}\n",
        "Deploy the app. ".repeat(200)
    );
    let v: Value = serde_json::from_str(&ok(&[
        "ledger",
        "--ranker",
        "bm25",
        "--catalog",
        &catalog,
        "--transcript",
        &temp("grow.jsonl", &big),
        "--json",
    ]))
    .expect("json");
    let turns = v["turns"].as_array().expect("turns");
    // all_resident - total + tools: the tokens of the all-resident tool list itself.
    let extra = |t: &Value| {
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        n("all_resident") + n("tools") - n("total")
    };
    assert!(extra(&turns[1]) > extra(&turns[0]) + 500, "{turns:?}");
}

#[test]
fn a_transcript_line_that_gives_a_key_twice_is_refused() {
    for (name, text, expected) in [
        (
            "dup-user.jsonl",
            "{\"user\": \"hi\"}\n\n{\"user\": \"a\", \"user\": \"b\"}\n",
            "dup-user.jsonl:3: duplicate key \"user\" in the top level",
        ),
        (
            "dup-input.jsonl",
            "{\"user\": \"hi\"}\n{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/a\", \"file_path\": \"/b\"}}}\n",
            "dup-input.jsonl:2: duplicate key \"file_path\" in call.input",
        ),
        // The first fault in the file is the one named, whatever its kind.
        (
            "dup-after.jsonl",
            "{\"shout\": \"x\"}\n{\"user\": \"a\", \"user\": \"b\"}\n",
            "dup-after.jsonl:1: unknown event \"shout\"",
        ),
        // A syntax error is told in words, at the column of the line it is on.
        (
            "bare-word.jsonl",
            "{\"user\": \"hi\"}\n{\"user\": hello}\n",
            "bare-word.jsonl:2: not valid JSON: expected a value: a string in double quotes, \
a number, true, false, null, an array or an object (column 10)",
        ),
    ] {
        let path = temp(name, text);
        for args in [
            vec!["replay", "--ranker", "bm25", "--transcript", &path],
            vec!["ledger", "--ranker", "bm25", "--transcript", &path],
        ] {
            let out = run(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let e = String::from_utf8_lossy(&out.stderr);
            assert!(e.contains(expected), "{args:?}: {e}");
            assert!(out.stdout.is_empty(), "{args:?}: no output");
        }
    }
}

#[test]
fn a_transcript_with_no_user_turn_is_refused() {
    for (name, text) in [
        (
            "only-assistant.jsonl",
            "{\"assistant\": \"a\"}\n{\"assistant\": \"b\"}\n",
        ),
        (
            "only-tools-changed.jsonl",
            "{\"tools_changed\": {\"add\": [], \"remove\": []}}\n",
        ),
        ("assistant-first.jsonl", "{\"assistant\": \"hi\"}\n"),
    ] {
        let path = temp(name, text);
        for args in [
            vec!["replay", "--ranker", "bm25", "--transcript", &path],
            vec!["ledger", "--ranker", "bm25", "--transcript", &path],
            vec![
                "ledger",
                "--ranker",
                "bm25",
                "--transcript",
                &path,
                "--json",
            ],
        ] {
            let out = run(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let e = String::from_utf8_lossy(&out.stderr);
            assert!(
                e.contains(&format!(
                    "{path}: the transcript has no user turn to replay"
                )),
                "{args:?}: {e}"
            );
            assert!(out.stdout.is_empty(), "{args:?}: no output");
        }
    }
}

/// A conversation opens with the user: a call before the first user message would make a first
/// request that opens with the model's call (for Anthropic an assistant `tool_use`, which the API
/// refuses). It is an error naming the file and line, before anything is printed.
#[test]
fn a_call_before_the_first_user_message_is_refused() {
    for (name, text, line) in [
        (
            "call-only.jsonl",
            "{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/x\"}}}\n",
            1,
        ),
        (
            "call-then-user.jsonl",
            "{\"context\": \"cwd: /r\"}\n{\"assistant\": \"Let me look.\"}\n\n{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/x\"}}}\n{\"result\": {\"content\": \"x\"}}\n{\"user\": \"hi\"}\n",
            4,
        ),
    ] {
        let path = temp(name, text);
        for args in [
            vec!["replay", "--ranker", "bm25", "--transcript", &path],
            vec!["ledger", "--ranker", "bm25", "--transcript", &path],
        ] {
            let out = run(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let e = String::from_utf8_lossy(&out.stderr);
            assert!(
                e.contains(&format!(
                    "{path}:{line}: a call before the first user message"
                )),
                "{args:?}: {e}"
            );
            assert!(out.stdout.is_empty(), "{args:?}: no output");
        }
    }
}

/// The reviewer's case: with `activation_ttl_turns = 1`, a tool searched for in one user turn and
/// called in the next runs, as in the proxy, which answers the search inside the first user
/// turn's request. `--explain` gives the search's round that request's turn.
#[test]
fn explain_counts_turns_as_the_proxy_does() {
    let config = std::fs::read_to_string(example("toolshelf.toml"))
        .expect("example config")
        .replace("activation_ttl_turns = 6", "activation_ttl_turns = 1");
    let config = temp("ttl1.toml", &config);
    let transcript = temp(
        "ttl1.jsonl",
        concat!(
            "{\"user\": \"show me the log\"}\n",
            "{\"call\": {\"name\": \"tool_search\", \"input\": {\"tool_names\": [\"mcp__git__git_log\"]}}}\n",
            "{\"assistant\": \"I have loaded git_log. Which repo?\"}\n",
            "{\"user\": \"/home/me/shop\"}\n",
            "{\"call\": {\"name\": \"defer_execute\", \"input\": {\"tool_name\": \"mcp__git__git_log\", \"params\": {\"repo_path\": \"/home/me/shop\"}}}}\n",
            "{\"assistant\": \"done\"}\n",
        ),
    );
    let text = ok(&[
        "replay",
        "--ranker",
        "bm25",
        "--config",
        &config,
        "--catalog",
        &example("catalog.json"),
        "--transcript",
        &transcript,
        "--explain",
    ]);
    assert!(!text.contains("refused"), "{text}");
    let turns: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("turn "))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(turns, ["1", "1", "2", "3"], "{text}");
}

/// A tool that `tools_changed.add` names otherwise than the session can is renamed with a
/// warning naming the line and both names, and `remove` finds it by the name it was given.
#[test]
fn a_tool_added_under_an_invalid_name_is_warned_about_and_removable_by_it() {
    let path = temp(
        "bad-name.jsonl",
        "{\"user\": \"hi\"}\n{\"tools_changed\": {\"add\": [{\"name\": \"bad name!\"}]}}\n{\"user\": \"x\"}\n{\"tools_changed\": {\"remove\": [\"bad name!\"]}}\n{\"user\": \"y\"}\n",
    );
    let out = run(&["replay", "--ranker", "bm25", "--transcript", &path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "toolshelf: warning: {path}:2: tools_changed.add[0] \"bad name!\" is named \"bad_name_\""
        )),
        "{err}"
    );
    assert_eq!(err.matches("warning").count(), 1, "said once: {err}");
    let bodies = String::from_utf8_lossy(&out.stdout);
    assert_eq!(bodies.lines().count(), 3, "{bodies}");
    // A name the session already has names the tool that has it.
    let path = temp(
        "dup-add.jsonl",
        "{\"user\": \"hi\"}\n{\"tools_changed\": {\"add\": [{\"name\": \"Read\"}]}}\n{\"user\": \"x\"}\n",
    );
    let out = run(&["replay", "--ranker", "bm25", "--transcript", &path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{path}:2: tools_changed.add[0] \"Read\": duplicate tool name; the session's tool \"Read\" has the same name"
        )),
        "{err}"
    );
    assert!(!err.contains("tool has the same name"), "{err}");
    // A written name that became another tool's canonical name: the warning says which name
    // removes which tool.
    let path = temp(
        "written-is-canonical.jsonl",
        "{\"user\": \"hi\"}\n{\"tools_changed\": {\"add\": [{\"name\": \"b__c\", \"server\": \"a\"}, {\"name\": \"c\", \"server\": \"a__b\"}]}}\n{\"user\": \"x\"}\n",
    );
    let out = run(&["replay", "--ranker", "bm25", "--transcript", &path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("tools_changed.remove \"mcp__a__b__c\" removes the tool of that canonical name, so remove this one as \"mcp__a_b__c\""),
        "{err}"
    );
    assert!(!err.contains("finds it by either name"), "{err}");
    // A name of the form mcp__SERVER__TOOL is that server's tool, as the proxy reads a client's
    // tools: named by the rules for a server's tool, as the catalog and the proxy name it.
    let path = temp(
        "client-name.jsonl",
        "{\"user\": \"hi\"}\n{\"tools_changed\": {\"add\": [{\"name\": \"mcp__svc__住处\"}]}}\n{\"user\": \"x\"}\n{\"tools_changed\": {\"remove\": [\"mcp__svc__住处\"]}}\n{\"user\": \"y\"}\n",
    );
    let out = run(&["replay", "--ranker", "bm25", "--transcript", &path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "toolshelf: warning: {path}:2: tools_changed.add[0] \"mcp__svc__住处\" is named \"mcp__svc__tool_1d75284e\" in the session"
        )),
        "{err}"
    );
    let bodies = String::from_utf8_lossy(&out.stdout);
    assert!(
        bodies.contains("new: mcp__svc__tool_1d75284e.")
            && bodies.contains("gone: mcp__svc__tool_1d75284e."),
        "{bodies}"
    );
}

/// A recorded result's content is a string or content blocks; anything else names its line.
#[test]
fn a_result_content_that_is_neither_text_nor_blocks_is_refused() {
    for (content, found) in [
        ("5", "found a number"),
        ("{\"text\": \"x\"}", "found an object"),
        ("null", "found null"),
        ("[\"x\"]", "found an array holding something else"),
    ] {
        let path = temp(
            "content-kind.jsonl",
            &format!(
                "{{\"user\": \"a\"}}\n{{\"call\": {{\"name\": \"Read\", \"input\": {{\"file_path\": \"/a\"}}}}}}\n{{\"result\": {{\"content\": {content}}}}}\n"
            ),
        );
        let out = run(&["replay", "--transcript", &path]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{content}: {err}");
        assert!(
            err.contains(&format!(
                "{path}:3: \"result\".content must be a string or content blocks"
            )) && err.contains(found),
            "{content}: {err}"
        );
        assert!(out.stdout.is_empty(), "{content}");
    }
}

/// `replay --explain --json` of the bundled example transcript: one report a model request.
fn example_reports() -> Vec<Value> {
    let json = ok(&[
        "replay",
        "--transcript",
        &example("transcript.jsonl"),
        "--explain",
        "--json",
    ]);
    json.lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// `--explain --json` prints one object per model request, numbered, with its turn.
#[test]
fn explain_json_numbers_every_model_request() {
    let help = ok(&["replay", "--help"]);
    assert!(!help.contains("one JSON object per turn"), "{help}");
    assert!(help.contains("per model request"), "{help}");
    let reports = example_reports();
    let requests: Vec<u64> = reports
        .iter()
        .map(|r| r["request"].as_u64().expect("request"))
        .collect();
    assert_eq!(requests, (1..=reports.len() as u64).collect::<Vec<_>>());
    let turns: Vec<u64> = reports
        .iter()
        .map(|r| r["turn"].as_u64().expect("turn"))
        .collect();
    assert!(turns.windows(2).any(|w| w[0] == w[1]), "{turns:?}");
}

/// Three calls followed by two results: the results answer the last two calls and the first
/// gets a computed result in a round of its own, as the README says; the replay warns, naming
/// the line where the calls start, and still replays. As many results as calls say nothing.
#[test]
fn fewer_results_than_calls_are_warned_about() {
    let calls = "{\"call\": {\"name\": \"tool_search\", \"input\": {\"queries\": [\"read file\"]}}}\n\
                 {\"call\": {\"name\": \"tool_search\", \"input\": {\"queries\": [\"git log\"]}}}\n\
                 {\"call\": {\"name\": \"tool_search\", \"input\": {\"queries\": [\"memory\"]}}}\n";
    let result = "{\"result\": {\"content\": \"ok\"}}\n";
    let path = temp(
        "uneven.jsonl",
        &format!("{{\"user\": \"hi\"}}\n{calls}{result}{result}"),
    );
    let out = run(&["replay", "--ranker", "bm25", "--transcript", &path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "toolshelf: warning: {path}:2: 3 calls followed by 2 results: the results answer the last 2 calls as one round, and the first call gets a computed result in a round of its own"
        )),
        "{err}"
    );
    let even = temp(
        "even.jsonl",
        &format!("{{\"user\": \"hi\"}}\n{calls}{result}{result}{result}"),
    );
    let out = run(&["replay", "--ranker", "bm25", "--transcript", &even]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("warning"), "{err}");
}

/// A session with nothing deferred has no `tool_search`, so its reminders do not point at it;
/// one that defers tools is shown the queries that find them.
#[test]
fn a_reminder_points_at_tool_search_only_when_the_session_has_it() {
    let rule = "[[reminders]]\nid = \"mig\"\ncategory = \"database migration checks\"\n\
                message = \"Schema changes usually go with the migration checks.\"\n\
                search_hint = [\"migration check\"]\nintents = [\"migration\"]\n";
    let transcript = temp(
        "reminder-search.jsonl",
        "{\"user\": \"write the migration\"}\n{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/m.sql\"}}}\n{\"result\": {\"content\": \"x\"}}\n",
    );
    for (name, defer, searchable) in [
        ("reminder-nodefer.toml", "[defer]\ndefault = false\n", false),
        ("reminder-defer.toml", "", true),
    ] {
        let config = temp(name, &format!("{defer}{rule}"));
        let bodies = ok(&[
            "replay",
            "--ranker",
            "bm25",
            "--catalog",
            &example("catalog.json"),
            "--config",
            &config,
            "--transcript",
            &transcript,
        ]);
        let first: Value =
            serde_json::from_str(bodies.lines().next().expect("a body")).expect("a JSON body");
        let listed = first["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "tool_search"));
        assert_eq!(listed, searchable, "{name}");
        let messages = first["messages"].to_string();
        assert!(
            messages.contains("Schema changes usually go with the migration checks."),
            "{name}: {messages}"
        );
        assert_eq!(
            messages.contains("To find these tools: tool_search"),
            searchable,
            "{name}: {messages}"
        );
    }
}

/// A tool `tools_changed` adds with an input schema that does not compile is warned about as a
/// catalog file's is, naming the file and line of the event and the tool, before any output;
/// its calls are then refused as the warning says.
#[test]
fn a_tool_added_with_a_broken_schema_is_warned_about() {
    let path = temp(
        "broken-schema.jsonl",
        "{\"user\": \"hi\"}\n{\"tools_changed\": {\"add\": [{\"name\": \"N\", \"description\": \"a\", \"input_schema\": {\"type\": \"object\", \"properties\": {\"p\": {\"type\": 42}}}}]}}\n{\"user\": \"x\"}\n{\"call\": {\"name\": \"tool_search\", \"input\": {\"tool_names\": [\"N\"]}}}\n{\"call\": {\"name\": \"defer_execute\", \"input\": {\"tool_name\": \"N\", \"params\": {\"p\": \"v\"}}}}\n",
    );
    let out = run(&[
        "replay",
        "--ranker",
        "bm25",
        "--explain",
        "--transcript",
        &path,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "toolshelf: warning: {path}:2: tools_changed.add[0]: tool \"N\": its input schema is not a valid JSON Schema (at /properties/p/type:"
        )),
        "{err}"
    );
    assert_eq!(err.matches("warning").count(), 1, "said once: {err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("refused: N: its schema does not compile"),
        "{text}"
    );
}

/// Context and tool changes between a round's calls and its results belong to the request that
/// carries the results: the context goes there as it would from a line before the call, and a
/// removal there leaves the call judged against the tools it was made with. Anything else
/// between a call and its result is an error naming both lines.
#[test]
fn events_between_a_call_and_its_result() {
    let replay = |name: &str, lines: &str| {
        run(&[
            "replay",
            "--ranker",
            "bm25",
            "--explain",
            "--json",
            "--transcript",
            &temp(name, lines),
        ])
    };
    let bodies = |name: &str, lines: &str| {
        ok(&[
            "replay",
            "--ranker",
            "bm25",
            "--transcript",
            &temp(name, lines),
        ])
    };
    let (user, call, result) = (
        "{\"user\": \"hi\"}\n",
        "{\"call\": {\"name\": \"Read\", \"input\": {\"file_path\": \"/a\"}}}\n",
        "{\"result\": {\"content\": \"x\"}}\n",
    );
    let context = "{\"context\": \"cwd: /repo\"}\n";
    let between = bodies(
        "ctx-between.jsonl",
        &format!("{user}{call}{context}{result}{{\"assistant\": \"done\"}}\n"),
    );
    assert_eq!(
        between,
        bodies(
            "ctx-before.jsonl",
            &format!("{user}{context}{call}{result}{{\"assistant\": \"done\"}}\n")
        ),
        "the context reaches the results' request either way"
    );
    assert!(
        between
            .lines()
            .nth(1)
            .is_some_and(|b| b.contains("cwd: /repo")),
        "{between}"
    );
    // Read is removed while the client runs it: the call still ran.
    let out = replay(
        "tc-between.jsonl",
        &format!("{user}{call}{{\"tools_changed\": {{\"remove\": [\"Read\"]}}}}\n{result}"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report a line"))
        .collect();
    assert_eq!(reports.len(), 2, "{text}");
    assert_eq!(reports[1]["refused"], serde_json::json!([]), "{text}");
    assert_eq!(reports[1]["turn"], 2, "the client ran it: {text}");
    assert_eq!(
        reports[1]["injected"].as_array().map(Vec::len),
        Some(1),
        "the change notice: {text}"
    );
    for (name, middle, says) in [
        (
            "assistant-between.jsonl",
            "{\"assistant\": \"thinking\"}\n",
            "assistant-between.jsonl:4: a result must come right after its call (line 2); line 3 (assistant) is between them",
        ),
        (
            "user-between.jsonl",
            "{\"user\": \"more\"}\n",
            "user-between.jsonl:4: a result must come right after its call (line 2); line 3 (user) is between them",
        ),
        (
            "ctx-assistant-between.jsonl",
            "{\"context\": \"c\"}\n{\"assistant\": \"thinking\"}\n",
            "ctx-assistant-between.jsonl:5: a result must come right after its call (line 2); line 4 (assistant) is between them",
        ),
    ] {
        let out = replay(name, &format!("{user}{call}{middle}{result}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(out.stdout.is_empty(), "{name}: nothing replayed");
    }
    // With something between, which calls the results answer cannot be told by their place.
    let out = replay(
        "fewer-between.jsonl",
        &format!("{user}{call}{call}{context}{result}"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fewer-between.jsonl:5: 2 calls followed by 1 result, with line 4 (context) between them"),
        "{err}"
    );
}

/// A direct call of a tool the model has in its list with its schema goes to the client as the
/// model wrote it, as the proxy hands it on: not refused for arguments that do not fit the
/// schema (the provider and the client judge those), and no tool is reported activated for it.
/// A deferred tool's call through `defer_execute` is still checked, and its refusal loads it.
#[test]
fn a_resident_tool_called_directly_is_not_checked_against_its_schema() {
    let text = ok(&[
        "replay",
        "--ranker",
        "bm25",
        "--explain",
        "--transcript",
        &temp(
            "resident-invalid.jsonl",
            "{\"user\": \"read\"}\n{\"call\": {\"name\": \"Read\", \"input\": {\"path\": \"/a\"}}}\n{\"result\": {\"content\": \"x\"}}\n",
        ),
    ]);
    assert!(!text.contains("refused"), "{text}");
    assert!(!text.contains("activated"), "{text}");
    let turns: Vec<&str> = text.lines().filter(|l| l.starts_with("turn ")).collect();
    assert!(
        turns.len() == 2 && turns[1].starts_with("turn 2:"),
        "the client ran it, and its result starts the next turn: {text}"
    );
    let text = ok(&[
        "replay",
        "--ranker",
        "bm25",
        "--explain",
        "--transcript",
        &temp(
            "deferred-invalid.jsonl",
            "{\"user\": \"log\"}\n{\"call\": {\"name\": \"tool_search\", \"input\": {\"tool_names\": [\"mcp__git__git_log\"]}}}\n{\"call\": {\"name\": \"defer_execute\", \"input\": {\"tool_name\": \"mcp__git__git_log\", \"params\": {\"max_count\": \"five\"}}}}\n",
        ),
    ]);
    assert!(
        text.contains("refused: mcp__git__git_log: invalid arguments"),
        "{text}"
    );
    assert!(text.contains("activated: mcp__git__git_log"), "{text}");
}
