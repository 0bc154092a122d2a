//! `toolshelf prefix-check` through the real binary, on bodies built by `toolshelf_core::request`:
//! a growing conversation passes in every API, and each kind of cache break is found where it
//! starts.

use std::process::{Command, Output};

use serde_json::{Map, Value, json};
use toolshelf_core::request::{
    Api, Item, Sections, ToolCall, ToolResult, assemble, canonical_json,
};
use toolshelf_core::wire::definition_from_parts;

const APIS: [Api; 3] = [Api::Anthropic, Api::OpenAiChat, Api::OpenAiResponses];
const SYSTEM: &str = "You are a coding agent.";

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolshelf"))
        .args(args)
        .output()
        .expect("run toolshelf")
}

fn temp_file(name: &str, content: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolshelf-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write");
    path.display().to_string()
}

fn tools(api: Api) -> Vec<Value> {
    let schema = Map::from_iter([
        ("type".into(), json!("object")),
        ("properties".into(), json!({"path": {"type": "string"}})),
    ]);
    [("read", "Read a file."), ("write", "Write a file.")]
        .iter()
        .map(|(name, description)| {
            definition_from_parts(name, description, &schema, api.tool_format())
        })
        .collect()
}

fn items() -> Vec<Item> {
    let call = |id: &str, path: &str| ToolCall {
        id: id.into(),
        name: "read".into(),
        input: json!({"path": path}),
        arguments: None,
    };
    let result = |id: &str, content: &str| ToolResult {
        id: id.into(),
        content: content.into(),
        is_error: false,
        by_proxy: false,
    };
    vec![
        Item::User {
            text: "list the files".into(),
            injected: vec!["<env>cwd=/repo</env>".into()],
        },
        Item::Assistant {
            text: Some("Reading.".into()),
            calls: vec![call("c1", "a.rs")],
        },
        Item::Results {
            results: vec![result("c1", "fn main() {}")],
            injected: vec!["<reminder>tools changed: +write</reminder>".into()],
        },
        Item::Assistant {
            text: None,
            calls: vec![call("c2", "b.rs"), call("c3", "c.rs")],
        },
        Item::Results {
            results: vec![result("c2", "mod b;"), result("c3", "mod c;")],
            injected: vec![],
        },
        Item::Assistant {
            text: Some("Two modules and a main.".into()),
            calls: vec![],
        },
        Item::User {
            text: "thanks".into(),
            injected: vec!["<r>1</r>".into(), "<r>2</r>".into()],
        },
    ]
}

/// The bodies a harness sends: one after each user turn and each set of results.
fn bodies(api: Api) -> Vec<Value> {
    let items = items();
    let settings = Map::from_iter([("model".into(), json!("m")), ("stream".into(), json!(true))]);
    (1..=items.len())
        .filter(|&n| !matches!(items[n - 1], Item::Assistant { .. }))
        .map(|n| assemble(api, SYSTEM, &tools(api), &items[..n], &settings))
        .collect()
}

/// The bodies as a JSON lines file, with a blank line that must be skipped.
fn file_of(name: &str, bodies: &[Value]) -> String {
    let mut text = String::new();
    for (i, b) in bodies.iter().enumerate() {
        text.push_str(&canonical_json(b));
        text.push('\n');
        if i == 1 {
            text.push_str("\n  \n");
        }
    }
    temp_file(name, &text)
}

fn check_json(path: &str) -> (Option<i32>, Value) {
    let out = run(&["prefix-check", path, "--json"]);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v)
}

/// The conversation element the first user message is, by its place in the body.
fn first_message_name(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "messages[0]",
        Api::OpenAiChat => "messages[1]",
        Api::OpenAiResponses => "input[0]",
    }
}

/// Asserts that only the last pair broke, in `section` at `offset`, and returns that break.
fn only_last_pair_broke(v: &Value, n: usize, section: &str, offset: usize) -> Value {
    assert_eq!(v["requests"], n, "{v}");
    assert_eq!(v["ok"], false, "{v}");
    let pairs = v["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), n - 1);
    for p in &pairs[..n - 2] {
        assert!(p.get("break").is_none(), "{p}");
    }
    let last = &pairs[n - 2];
    assert_eq!(
        (last["from"].as_u64(), last["to"].as_u64()),
        (Some(n as u64 - 1), Some(n as u64))
    );
    let b = &last["break"];
    assert_eq!(b["section"], section, "{last}");
    assert_eq!(b["offset"], offset, "{last}");
    let setting = matches!(section, "model" | "tool_choice" | "thinking");
    for (key, broken) in [
        ("settings", setting),
        ("system", section == "system"),
        ("tools", section == "tools"),
        (
            "messages_prefix",
            !setting && section != "system" && section != "tools",
        ),
    ] {
        assert_eq!(last[key], !broken, "{key} in {last}");
    }
    b.clone()
}

#[test]
fn a_growing_conversation_keeps_its_prefix_in_every_api() {
    for api in APIS {
        let bodies = bodies(api);
        assert_eq!(bodies.len(), 4);
        let path = file_of(&format!("ok-{}.jsonl", api.name()), &bodies);
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(0), "{api:?}: {v}");
        assert_eq!(v["requests"], 4);
        assert_eq!(v["ok"], true);
        let pairs = v["pairs"].as_array().expect("pairs");
        assert_eq!(pairs.len(), 3);
        for (i, p) in pairs.iter().enumerate() {
            assert_eq!(
                p,
                &json!({"from": i + 1, "to": i + 2, "settings": true, "system": true, "tools": true, "messages_prefix": true})
            );
        }
        // Forcing the right API changes nothing; the text form says ok per pair.
        let out = run(&["prefix-check", &path, "--api", api.name()]);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert_eq!(
            text,
            "1→2 ok\n2→3 ok\n3→4 ok\n4 requests, 3 pairs: every request keeps the previous one's prefix\n"
        );
    }
}

#[test]
fn an_edited_earlier_message_breaks_at_its_first_changed_byte() {
    for api in APIS {
        let mut bodies = bodies(api);
        let key = api.conversation_key();
        let index = first_message_name(api)
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .trim_end_matches(']')
            .parse::<usize>()
            .expect("index");
        let original = canonical_json(&bodies[3][key][index]);
        let edited = original.replace("list the files", "list the filez");
        assert_ne!(original, edited);
        // The offset is in the message as compared: a content of one text block reads as its
        // text.
        let compared = Sections::of(api, &bodies[3]).expect("sections");
        let compared = canonical_json(&compared.conversation[index - compared.first]);
        bodies[3][key][index] = serde_json::from_str(&edited).expect("json");
        let offset = compared.find("list the files").expect("text") + "list the file".len();
        let path = file_of(&format!("edited-{}.jsonl", api.name()), &bodies);
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(1), "{api:?}: {v}");
        let b = only_last_pair_broke(&v, 4, first_message_name(api), offset);
        let (earlier, later) = (b["earlier"].as_str(), b["later"].as_str());
        assert!(earlier.is_some_and(|e| e.contains("files")), "{b}");
        assert!(later.is_some_and(|l| l.contains("filez")), "{b}");
        let out = run(&["prefix-check", &path]);
        assert_eq!(out.status.code(), Some(1));
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert!(
            text.contains(&format!(
                "3→4 {} differs at byte {offset}: ",
                first_message_name(api)
            )) && text.ends_with("4 requests, 3 pairs: 1 broken\n"),
            "{text}"
        );
    }
}

#[test]
fn reordered_tools_break_the_tools_section() {
    for api in APIS {
        let mut bodies = bodies(api);
        let tools = bodies[3]["tools"].clone();
        bodies[3]["tools"].as_array_mut().expect("tools").reverse();
        // The first tool's description is the first byte that differs.
        let offset = canonical_json(&tools).find("Read a file.").expect("read");
        let path = file_of(&format!("tools-{}.jsonl", api.name()), &bodies);
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(1), "{api:?}: {v}");
        let b = only_last_pair_broke(&v, 4, "tools", offset);
        assert!(
            b["later"]
                .as_str()
                .is_some_and(|l| l.contains("Write a file.")),
            "{b}"
        );
    }
}

#[test]
fn a_changed_system_prompt_breaks_the_system_section() {
    let changed = "You are a careful coding agent.";
    for api in APIS {
        let mut bodies = bodies(api);
        // The system part as documented: Anthropic's `system`, Responses' `instructions`, the
        // leading system messages of Chat Completions.
        let section = match api {
            Api::Anthropic => {
                bodies[3]["system"] = changed.into();
                json!(SYSTEM)
            }
            Api::OpenAiChat => {
                bodies[3]["messages"][0]["content"] = changed.into();
                json!([{"role": "system", "content": SYSTEM}])
            }
            Api::OpenAiResponses => {
                bodies[3]["instructions"] = changed.into();
                json!(SYSTEM)
            }
        };
        // "You are a c" is shared: "oding" and "areful" part at the "o".
        let offset = canonical_json(&section).find("oding").expect("system");
        let path = file_of(&format!("system-{}.jsonl", api.name()), &bodies);
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(1), "{api:?}: {v}");
        only_last_pair_broke(&v, 4, "system", offset);
    }
}

#[test]
fn a_shorter_later_request_is_missing_a_message() {
    let mut bodies = bodies(Api::Anthropic);
    bodies.swap(2, 3);
    let path = file_of("shrunk.jsonl", &bodies);
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(1));
    // Request 3 now has 7 messages, request 4 only 5.
    let b = &v["pairs"][2]["break"];
    assert_eq!(
        (
            b["section"].as_str(),
            b["offset"].as_u64(),
            b["later"].as_str()
        ),
        (Some("messages[5]"), Some(0), Some("")),
        "{v}"
    );
    let text = String::from_utf8(run(&["prefix-check", &path]).stdout).expect("utf-8");
    assert!(
        text.contains("3→4 messages[5] is missing from the later request"),
        "{text}"
    );
}

#[test]
fn a_moved_anthropic_cache_breakpoint_is_not_a_break() {
    let mut bodies = bodies(Api::Anthropic);
    // The usual client: the breakpoint sits on the newest message's last block.
    for b in &mut bodies {
        let messages = b["messages"].as_array_mut().expect("messages");
        let last = messages.last_mut().expect("a message");
        let blocks = last["content"].as_array_mut().expect("blocks");
        blocks.last_mut().expect("a block")["cache_control"] = json!({"type": "ephemeral"});
    }
    let path = file_of("cache-control.jsonl", &bodies);
    let (code, v) = check_json(&path);
    assert_eq!((code, &v["ok"]), (Some(0), &json!(true)), "{v}");
    // In an OpenAI body the same key is content like any other.
    let mut chat = bodies_with_marker(Api::OpenAiChat);
    chat.truncate(2);
    let (code, v) = check_json(&file_of("marker-openai.jsonl", &chat));
    assert_eq!(code, Some(1), "{v}");
}

/// [`bodies`] with a marker on the first block of the first request's last message of blocks
/// (in the OpenAI APIs, the injected blocks follow in a message whose content is a string).
fn bodies_with_marker(api: Api) -> Vec<Value> {
    let mut bodies = bodies(api);
    let key = api.conversation_key();
    let last = bodies[0][key]
        .as_array_mut()
        .and_then(|m| m.iter_mut().rev().find(|m| m["content"].is_array()))
        .expect("a message of blocks");
    last["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    bodies
}

#[test]
fn bad_lines_are_named_by_file_and_line() {
    let good = canonical_json(&bodies(Api::Anthropic)[0]);
    for (name, bad, says) in [
        (
            "truncated.jsonl",
            "{\"messages\": [",
            "not a valid JSON request body",
        ),
        (
            "array.jsonl",
            "[1, 2]",
            "a request body must be a JSON object",
        ),
        ("unknown.jsonl", "{\"model\": \"m\"}", "cannot tell the API"),
    ] {
        let path = temp_file(name, &format!("{good}\n\n{bad}\n{good}\n"));
        let out = run(&["prefix-check", &path]);
        assert!(!out.status.success(), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{path}:3: {says}")), "{name}: {err}");
    }
    // A body of another API, forced: what is missing is said.
    let path = temp_file("forced.jsonl", &format!("{good}\n"));
    let err = String::from_utf8(run(&["prefix-check", &path, "--api", "openai-responses"]).stderr)
        .expect("utf-8");
    assert!(
        err.contains("forced.jsonl:1: no `input` array (openai-responses request)"),
        "{err}"
    );
    // A body plainly of another API that the forced one could read is refused too: read as
    // Chat, an Anthropic body's `system` would not be compared.
    let anthropic = "{\"model\": \"m\", \"system\": \"S\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    let path = temp_file(
        "misread.jsonl",
        &format!("{anthropic}\n{}\n", anthropic.replace("\"S\"", "\"S2\"")),
    );
    let out = run(&["prefix-check", &path, "--api", "openai"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("misread.jsonl:1: the body is plainly an anthropic request, which --api openai would misread")
            && err.contains("give --api anthropic"),
        "{err}"
    );
    let path = temp_file("input.jsonl", "{\"input\": []}\n");
    let err = String::from_utf8(run(&["prefix-check", &path, "--api", "anthropic"]).stderr)
        .expect("utf-8");
    assert!(err.contains("input.jsonl:1: no `messages` array"), "{err}");
    let empty = temp_file("empty.jsonl", "\n\n");
    let err = String::from_utf8(run(&["prefix-check", &empty]).stderr).expect("utf-8");
    assert!(err.contains("holds no request bodies"), "{err}");
    let err =
        String::from_utf8(run(&["prefix-check", "/nonexistent.jsonl"]).stderr).expect("utf-8");
    assert!(err.contains("cannot read log /nonexistent.jsonl"), "{err}");
}

#[test]
fn help_describes_the_check() {
    let out = run(&["prefix-check", "--help"]);
    let help = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        help.contains("--api")
            && help.contains("openai-responses")
            && help.contains("Exit status 1"),
        "{help}"
    );
    // --json's shape as the README gives it, the field of a chained request included.
    let one_line = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        one_line.contains(
            r#"{"requests", "pairs": [{"from", "to", "settings", "system", "tools", "messages_prefix", "chained"?, "break"?: {"section", "offset", "earlier", "later"}}], "ok"}"#
        ),
        "{help}"
    );
}

/// Writes `bodies` (JSON text, one a line) and checks them.
fn check_lines(name: &str, bodies: &[Value]) -> (Option<i32>, Value) {
    let text: String = bodies.iter().map(|b| format!("{b}\n")).collect();
    check_json(&temp_file(name, &text))
}

#[test]
fn bodies_whose_api_cannot_be_told_are_read_alike() {
    // A Chat body with no system message and no tools reads as Anthropic, the next (with a tool
    // call) as Chat; a lone text block and its string are the same prompt either way.
    let first = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "list files"}]}]});
    let second = json!({"model": "m", "messages": [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.rs"}]});
    let (code, v) = check_lines("undetectable.jsonl", &[first, second]);
    assert_eq!((code, &v["ok"]), (Some(0), &json!(true)), "{v}");
    // Responses: `input` as a string is the one user message it stands for.
    let first = json!({"model": "m", "input": "list files"});
    let second = json!({"model": "m", "input": [{"role": "user", "content": "list files"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}]});
    let (code, v) = check_lines("responses-string.jsonl", &[first, second]);
    assert_eq!((code, &v["ok"]), (Some(0), &json!(true)), "{v}");
    // Anthropic: `system` as a string or as one text block.
    let first = json!({"model": "m", "system": "You are X", "messages": [{"role": "user", "content": "hi"}]});
    let second = json!({"model": "m", "system": [{"type": "text", "text": "You are X"}], "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]});
    let (code, v) = check_lines("system-block.jsonl", &[first, second]);
    assert_eq!((code, &v["ok"]), (Some(0), &json!(true)), "{v}");
}

#[test]
fn a_changed_model_tool_choice_or_thinking_is_a_break() {
    let body = |model: &str, extra: Value| {
        let mut b =
            json!({"model": model, "system": "S", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        b
    };
    // Offsets are into each setting's canonical JSON: `"sonnet"` against `"haiku"`, `null`
    // against an object.
    for (name, second, section, offset) in [
        ("model", body("haiku", json!({})), "model", 1),
        (
            "tool-choice",
            body("sonnet", json!({"tool_choice": {"type": "any"}})),
            "tool_choice",
            0,
        ),
        (
            "thinking",
            body(
                "sonnet",
                json!({"thinking": {"type": "enabled", "budget_tokens": 2048}}),
            ),
            "thinking",
            0,
        ),
    ] {
        let (code, v) = check_lines(
            &format!("{name}.jsonl"),
            &[body("sonnet", json!({})), second],
        );
        assert_eq!(code, Some(1), "{name}: {v}");
        only_last_pair_broke(&v, 2, section, offset);
    }
    // Settings outside the cached prefix are not compared.
    let (code, v) = check_lines(
        "max-tokens.jsonl",
        &[
            body("sonnet", json!({"max_tokens": 100})),
            body("sonnet", json!({"max_tokens": 200, "temperature": 0.5})),
        ],
    );
    assert_eq!(code, Some(0), "{v}");
    // Only Anthropic says a tool_choice change invalidates its cache.
    let chat = |choice: &str| json!({"model": "m", "tool_choice": choice, "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]});
    let (code, v) = check_lines("chat-tool-choice.jsonl", &[chat("auto"), chat("required")]);
    assert_eq!(code, Some(0), "{v}");
}

#[test]
fn integers_past_64_bits_are_compared_by_their_digits() {
    let body = |n: &str| -> Value {
        serde_json::from_str(&format!(
            r#"{{"model": "m", "messages": [{{"role": "user", "content": "hi"}}, {{"role": "assistant", "content": [{{"type": "tool_use", "id": "c", "name": "x", "input": {{"n": {n}}}}}]}}]}}"#
        ))
        .expect("json")
    };
    let (code, v) = check_lines(
        "big-int.jsonl",
        &[body("18446744073709551616"), body("18446744073709551617")],
    );
    assert_eq!(code, Some(1), "{v}");
    let (code, v) = check_lines(
        "same-big-int.jsonl",
        &[body("18446744073709551616"), body("18446744073709551616")],
    );
    assert_eq!(code, Some(0), "{v}");
}

#[test]
fn an_input_that_cannot_be_checked_exits_2_not_1() {
    let missing = std::env::temp_dir().join("toolshelf-prefix-no-such-file.jsonl");
    let out = run(&["prefix-check", &missing.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    for (name, text) in [
        ("not-json.jsonl", "{\"messages\": [\n"),
        ("empty.jsonl", "\n\n"),
    ] {
        let out = run(&["prefix-check", &temp_file(name, text)]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(!out.stderr.is_empty(), "{name}: the error is said");
    }
    // A byte order mark before the first body is not an error.
    let body = canonical_json(&bodies(Api::Anthropic)[0]);
    let out = run(&[
        "prefix-check",
        &temp_file("bom.jsonl", &format!("\u{feff}{body}\n{body}\n")),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_body_that_gives_a_key_twice_is_refused() {
    let good = canonical_json(&bodies(Api::Anthropic)[0]);
    let path = temp_file(
        "dup-key.jsonl",
        &format!(
            "{good}\n{{\"model\": \"m\", \"messages\": [{{\"role\": \"user\", \"content\": \"a\"}}], \"model\": \"n\"}}\n"
        ),
    );
    let out = run(&["prefix-check", &path]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{path}:2: duplicate key \"model\" in the top level"
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no verdict on a body read two ways");
}

/// `-` reads the log from standard input, so a replay pipes straight into the check; an error
/// names the input `stdin` with its line.
#[test]
fn a_log_piped_on_stdin_is_checked() {
    use std::io::Write as _;
    let pipe = |input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolshelf"))
            .args(["prefix-check", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run toolshelf");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write");
        child.wait_with_output().expect("output")
    };
    let replayed = run(&["replay", "--transcript", "../../examples/transcript.jsonl"]);
    assert!(replayed.status.success());
    let out = pipe(&String::from_utf8_lossy(&replayed.stdout));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("1→2 ok"), "{text}");
    let out = pipe("{\"messages\": []}\nnot json\n");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stdin:2"), "{err}");
}

/// A log whose API changes between two bodies says so, rather than reporting the first part
/// that happens to differ.
#[test]
fn a_change_of_api_is_named_as_the_break() {
    let anthropic =
        json!({"model": "m", "system": "S", "messages": [{"role": "user", "content": "hi"}]});
    let chat = json!({"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]});
    let (code, v) = check_lines("mixed.jsonl", &[anthropic.clone(), chat.clone()]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["pairs"][0]["break"]["section"], "api", "{v}");
    assert_eq!(v["pairs"][0]["break"]["earlier"], "anthropic", "{v}");
    assert_eq!(v["pairs"][0]["break"]["later"], "openai", "{v}");
    let path = temp_file(
        "mixed-text.jsonl",
        &format!(
            "{}\n{}\n",
            canonical_json(&anthropic),
            canonical_json(&chat)
        ),
    );
    let out = run(&["prefix-check", &path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "1→2 the API changes (anthropic → openai): a request to another API shares no cache"
        ),
        "{text}"
    );
}

/// A body of plain messages is Anthropic or Chat, never Responses: a switch to `input` (or back)
/// is an `api` break, however the messages are written.
#[test]
fn a_switch_between_messages_and_input_is_an_api_break() {
    let plain = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let typed =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi", "type": "message"}]});
    let responses = json!({"model": "m", "input": "hi"});
    for (name, first) in [("plain", &plain), ("typed", &typed)] {
        for (order, pair) in [
            ("to", [first.clone(), responses.clone()]),
            ("from", [responses.clone(), first.clone()]),
        ] {
            let (code, v) = check_lines(&format!("switch-{name}-{order}.jsonl"), &pair);
            assert_eq!(code, Some(1), "{name} {order}: {v}");
            let b = &v["pairs"][0]["break"];
            assert_eq!(b["section"], "api", "{name} {order}: {v}");
            let plain_side = if order == "to" { "earlier" } else { "later" };
            assert_eq!(b[plain_side], "anthropic or openai", "{v}");
            assert_eq!(v["pairs"][0]["settings"], false, "{v}");
        }
    }
    let path = temp_file(
        "switch-text.jsonl",
        &format!(
            "{}\n{}\n",
            canonical_json(&plain),
            canonical_json(&responses)
        ),
    );
    let out = run(&["prefix-check", &path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1→2 the API changes (anthropic or openai → openai-responses)"),
        "{text}"
    );
    // Plain messages next to plain messages, or a Chat body, are no change of API.
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"}]});
    let (code, v) = check_lines("plain-chat.jsonl", &[plain.clone(), chat]);
    assert_eq!((code, &v["ok"]), (Some(0), &json!(true)), "{v}");
}

/// A Chat log for Claude (through OpenRouter or LiteLLM) carries `cache_control` markers: its
/// first body, plain user messages, reads as Anthropic alone, but byte-identical messages are
/// no break next to a body that is Chat beyond doubt.
#[test]
fn a_marked_chat_body_whose_api_cannot_be_told_reads_as_its_neighbour() {
    let user = json!({"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]});
    let first = json!({"model": "m", "messages": [user.clone()]});
    let second = json!({"model": "m", "messages": [user.clone(),
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"}]});
    let (code, v) = check_lines("marked-chat.jsonl", &[first.clone(), second.clone()]);
    assert_eq!((code, &v["ok"]), (Some(0), &json!(true)), "{v}");
    // And the other way round: a certain Chat body, then one that cannot be told.
    let third =
        json!({"model": "m", "messages": [user.clone(), {"role": "assistant", "content": "ok"}]});
    let (code, v) = check_lines("marked-chat-back.jsonl", &[second.clone(), third]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["pairs"][0]["break"]["section"], "messages[1]", "{v}");
    // A marker that moves in a Chat body is still content there.
    let unmarked = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
    let mut moved = second.clone();
    moved["messages"][0] = unmarked;
    let (code, v) = check_lines("marked-chat-moved.jsonl", &[first, moved]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["pairs"][0]["break"]["section"], "messages[0]", "{v}");
}

#[test]
fn messages_that_are_not_an_array_are_named() {
    let path = temp_file("messages-string.jsonl", "{\"messages\": \"x\"}\n");
    let out = run(&["prefix-check", &path]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{path}:1: cannot tell the API: `messages` must be an array, found a string"
        )),
        "{err}"
    );
}

/// A body with a block only Anthropic has is Anthropic beyond doubt: a Chat body after it is
/// another API, though both carry `messages`.
#[test]
fn an_anthropic_tool_use_beside_a_chat_tool_message_is_an_api_break() {
    let user = json!({"role": "user", "content": "hi"});
    let tool_use = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "a", "name": "x", "input": {}}]});
    let tool = json!({"role": "tool", "tool_call_id": "a", "content": "r"});
    let bodies = [
        json!({"model": "m", "messages": [user.clone()]}),
        json!({"model": "m", "messages": [user.clone(), tool_use.clone()]}),
        json!({"model": "m", "messages": [user, tool_use, tool]}),
    ];
    let (code, v) = check_lines("anthropic-then-chat.jsonl", &bodies);
    assert_eq!(code, Some(1), "{v}");
    assert!(v["pairs"][0]["break"].is_null(), "{v}");
    let b = &v["pairs"][1]["break"];
    assert_eq!(
        (&b["section"], &b["earlier"], &b["later"]),
        (&json!("api"), &json!("anthropic"), &json!("openai")),
        "{v}"
    );
}

/// A Responses request chained by `previous_response_id` sends only its new items: its earlier
/// input is the provider's, so only the settings, the instructions and the tools are compared.
#[test]
fn a_chained_responses_request_is_compared_without_its_input() {
    let tools = json!([{"type": "function", "name": "f", "parameters": {"type": "object"}}]);
    let first = json!({"model": "m", "instructions": "S", "tools": tools, "input": "hi"});
    let chained = json!({"model": "m", "instructions": "S", "tools": tools,
                         "previous_response_id": "resp_1", "input": "and now?"});
    let (code, v) = check_lines("chained.jsonl", &[first.clone(), chained.clone()]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["pairs"][0]["chained"], true, "{v}");
    let path = temp_file(
        "chained-text.jsonl",
        &format!("{}\n{}\n", canonical_json(&first), canonical_json(&chained)),
    );
    let text = String::from_utf8_lossy(&run(&["prefix-check", &path]).stdout).into_owned();
    assert!(
        text.contains("1→2 ok (chained by previous_response_id"),
        "{text}"
    );
    // Its tools are still compared; and the same input unchained is a break.
    let mut other = chained.clone();
    other["tools"] = json!([]);
    let (code, v) = check_lines("chained-tools.jsonl", &[first.clone(), other]);
    assert_eq!(
        (code, &v["pairs"][0]["break"]["section"]),
        (Some(1), &json!("tools")),
        "{v}"
    );
    let mut unchained = chained;
    unchained
        .as_object_mut()
        .expect("body")
        .remove("previous_response_id");
    let (code, v) = check_lines("unchained.jsonl", &[first, unchained]);
    assert_eq!(code, Some(1), "{v}");
    assert!(v["pairs"][0].get("chained").is_none(), "{v}");
}
