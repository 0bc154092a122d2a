//! The request bodies the model is sent for a small conversation, pinned byte for byte in each
//! API: one line per top-level key, and one per message, each in canonical JSON.

use serde_json::{Map, Value, json};
use toolshelf_core::request::{Api, Item, ToolCall, ToolResult, assemble, canonical_json};
use toolshelf_core::wire::definition_from_parts;

fn conversation() -> Vec<Item> {
    vec![
        Item::User {
            text: "What changed in the last commit?".into(),
            injected: vec![],
        },
        Item::Assistant {
            text: Some("Let me look.".into()),
            calls: vec![ToolCall {
                id: "call_1".into(),
                name: "git_log".into(),
                input: json!({"max_count": 1, "repo_path": "."}),
                arguments: None,
            }],
        },
        Item::Results {
            results: vec![ToolResult {
                id: "call_1".into(),
                content: "commit 3f2a: README: usage table".into(),
                is_error: false,
                by_proxy: false,
            }],
            injected: vec![
                "<system-reminder>The tool set changed: +git_show</system-reminder>".into(),
            ],
        },
        Item::User {
            text: "And before that?".into(),
            injected: vec![
                "<environment>cwd=/repo branch=main</environment>".into(),
                "<system-reminder>Keep answers short.</system-reminder>".into(),
            ],
        },
    ]
}

fn body(api: Api) -> Value {
    let schema = Map::from_iter([
        ("type".into(), json!("object")),
        (
            "properties".into(),
            json!({"repo_path": {"type": "string"}, "max_count": {"type": "integer"}}),
        ),
        ("required".into(), json!(["repo_path"])),
    ]);
    let tools = [definition_from_parts(
        "git_log",
        "Show the commit log.",
        &schema,
        api.tool_format(),
    )];
    let settings = Map::from_iter([
        ("model".into(), json!("some-model")),
        (
            match api {
                Api::OpenAiResponses => "max_output_tokens",
                _ => "max_tokens",
            }
            .into(),
            json!(1024),
        ),
        ("stream".into(), json!(true)),
    ]);
    assemble(
        api,
        "You are a coding agent.",
        &tools,
        &conversation(),
        &settings,
    )
}

/// One line per top-level key in canonical order; arrays one element per line.
fn lines(body: &Value) -> String {
    let canonical: Value = serde_json::from_str(&canonical_json(body)).expect("json");
    let mut out = String::new();
    for (key, value) in canonical.as_object().expect("object") {
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    out.push_str(&format!("{key}[{i}]: {}\n", canonical_json(item)));
                }
            }
            other => out.push_str(&format!("{key}: {}\n", canonical_json(other))),
        }
    }
    out
}

#[test]
fn anthropic_body() {
    insta::assert_snapshot!(lines(&body(Api::Anthropic)));
}

#[test]
fn openai_chat_body() {
    insta::assert_snapshot!(lines(&body(Api::OpenAiChat)));
}

#[test]
fn openai_responses_body() {
    insta::assert_snapshot!(lines(&body(Api::OpenAiResponses)));
}

#[test]
fn the_lines_are_the_canonical_bytes() {
    // The snapshots show the body split per key and element; joined back they are the bytes sent.
    for api in [Api::Anthropic, Api::OpenAiChat, Api::OpenAiResponses] {
        let b = body(api);
        let text = canonical_json(&b);
        let key = api.conversation_key();
        let elements: Vec<String> = b[key]
            .as_array()
            .expect("array")
            .iter()
            .map(canonical_json)
            .collect();
        assert!(
            text.contains(&format!("\"{key}\":[{}]", elements.join(","))),
            "{api:?}"
        );
    }
}
