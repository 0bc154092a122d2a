//! `toolshelf replay` against the proxy it replays: one conversation sent through `toolshelf
//! proxy` to the scripted model API, and the same conversation as a transcript. The messages the
//! upstream received and those `replay` prints are the same, once the ids only a live upstream
//! gives (call ids, Responses item ids and statuses) are set aside: the reminder and the
//! tool-set change notice after the turn's last entry, the proxy's own answers in its own form,
//! the model's arguments text, the proxy's answers before the client's results.

mod common;

use std::collections::HashMap;

use common::{HEADERS, ProxyProc, Scratch, TOOLSHELF, Upstream, post, tools};
use serde_json::{Value, json};
use toolshelf_core::request::{Api, canonical_json};

const CONFIG: &str = r#"
[defer]
rules = ["NoDefer(^Read$)"]

[[reminders]]
id = "status"
category = "git status"
message = "Check the working tree before committing."
search_hint = ["git status"]
intents = ["commit"]
after_tools = ["^Read$"]
"#;

const SYSTEM: &str = "You help.";

/// The script: a search and a call of the client's, each after a line of text, then two answers.
fn script() -> Value {
    json!({"steps": [
        {"text": "Searching.", "tool_uses": [
            {"name": "tool_search", "input": {"tool_names": ["mcp__git__git_status"], "limit": 3}}]},
        {"text": "Reading.", "tool_uses": [{"name": "Read", "input": {"file_path": "a.txt"}}]},
        {"text": "Done."},
        {"text": "Bye."}
    ]})
}

/// The client's tools as a catalog file: its MCP tools by server and name.
fn catalog() -> Value {
    tools()
        .into_iter()
        .map(|mut t| {
            let name = t["name"].as_str().expect("a name").to_owned();
            if let Some((server, tool)) = toolshelf_core::name::split_mcp(&name) {
                t["server"] = server.into();
                t["name"] = tool.into();
            }
            t
        })
        .collect()
}

/// The tool the client adds with its results, in its API's shape and as a catalog item.
fn added(api: Api) -> (Value, Value) {
    let schema = json!({"type": "object", "properties": {"repo_path": {"type": "string"}}});
    let description = "Show the changes of the working tree.";
    let def = match api {
        Api::Anthropic => {
            json!({"name": "mcp__git__git_diff", "description": description, "input_schema": schema})
        }
        Api::OpenAiChat => json!({"type": "function", "function": {
            "name": "mcp__git__git_diff", "description": description, "parameters": schema}}),
        Api::OpenAiResponses => json!({"type": "function", "name": "mcp__git__git_diff",
            "description": description, "parameters": schema}),
    };
    let item = json!({"server": "git", "name": "git_diff", "description": description,
                      "input_schema": schema});
    (def, item)
}

/// The client's tools in `api`'s shape.
fn client_tools(api: Api) -> Vec<Value> {
    match api {
        Api::Anthropic => tools(),
        Api::OpenAiChat => common::chat_tools(),
        Api::OpenAiResponses => common::responses_tools(),
    }
}

/// The user's message as the client sends it, in the form `replay` writes it.
fn user(api: Api, text: &str) -> Value {
    let text = format!("<user_query>{text}</user_query>");
    match api {
        Api::OpenAiResponses => json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]}),
        _ => json!({"role": "user", "content": [{"type": "text", "text": text}]}),
    }
}

/// One request of the client; the proxy's answer.
fn send(proxy: &ProxyProc, api: Api, tools: &[Value], conversation: &[Value]) -> Value {
    let (path, body, headers): (&str, Value, &[(&str, &str)]) = match api {
        Api::Anthropic => (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 256, "system": SYSTEM, "tools": tools,
                   "messages": conversation}),
            &HEADERS,
        ),
        Api::OpenAiChat => {
            let mut messages = vec![json!({"role": "system", "content": SYSTEM})];
            messages.extend(conversation.iter().cloned());
            (
                "/v1/chat/completions",
                json!({"model": "m", "tools": tools, "messages": messages}),
                &[("authorization", "Bearer k")],
            )
        }
        Api::OpenAiResponses => (
            "/v1/responses",
            json!({"model": "m", "instructions": SYSTEM, "tools": tools, "input": conversation}),
            &[("authorization", "Bearer k")],
        ),
    };
    let (status, answer) = post(&format!("{}{path}", proxy.url), &body, headers);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    answer
}

/// The client's copy of the proxy's answer, as entries of its conversation, and the ids of the
/// calls it got.
fn answer_entries(api: Api, answer: &Value) -> (Vec<Value>, Vec<String>) {
    match api {
        Api::Anthropic => {
            let ids = answer["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| b["id"].as_str().expect("an id").to_owned())
                .collect();
            (
                vec![json!({"role": "assistant", "content": answer["content"]})],
                ids,
            )
        }
        Api::OpenAiChat => {
            let message = answer["choices"][0]["message"].clone();
            let ids = message["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["id"].as_str().expect("an id").to_owned())
                .collect();
            (vec![message], ids)
        }
        Api::OpenAiResponses => {
            let output = answer["output"].as_array().cloned().unwrap_or_default();
            let ids = output
                .iter()
                .filter(|i| i["type"] == "function_call")
                .map(|i| i["call_id"].as_str().expect("an id").to_owned())
                .collect();
            (output, ids)
        }
    }
}

/// The client's result of call `id`, in the form `replay` writes a recorded string result.
fn result(api: Api, id: &str, text: &str) -> Value {
    match api {
        Api::Anthropic => json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": text}]}),
        Api::OpenAiChat => json!({"role": "tool", "tool_call_id": id, "content": text}),
        Api::OpenAiResponses => {
            json!({"type": "function_call_output", "call_id": id, "output": text})
        }
    }
}

/// The conversation of a body with the ids only a live upstream gives set aside: call ids
/// renumbered as `replay` numbers them (in the order they first appear), a Responses item's
/// `id`, `status` and text `annotations` left out.
fn comparable(api: Api, body: &Value) -> Vec<Value> {
    let mut conversation: Vec<Value> = body[api.conversation_key()]
        .as_array()
        .expect("a conversation")
        .clone();
    let mut ids: HashMap<String, String> = HashMap::new();
    fn walk(v: &mut Value, ids: &mut HashMap<String, String>, responses: bool) {
        match v {
            Value::Object(o) => {
                if responses && o.get("type").is_some_and(|t| t != "function_call_output") {
                    o.remove("id");
                    o.remove("status");
                    o.remove("annotations");
                }
                for key in ["id", "tool_use_id", "tool_call_id", "call_id"] {
                    if let Some(Value::String(id)) = o.get_mut(key) {
                        let n = ids.len() + 1;
                        let renamed = ids
                            .entry(id.clone())
                            .or_insert_with(|| format!("call_{n:04}"));
                        *id = renamed.clone();
                    }
                }
                for (_, inner) in o.iter_mut() {
                    walk(inner, ids, responses);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|inner| walk(inner, ids, responses)),
            _ => {}
        }
    }
    for entry in &mut conversation {
        walk(entry, &mut ids, api == Api::OpenAiResponses);
    }
    conversation
}

/// The transcript of the conversation the client holds.
fn transcript(added: &Value) -> String {
    [
        json!({"user": "please commit: check the status"}),
        json!({"assistant": "Searching."}),
        json!({"call": {"name": "tool_search",
                        "arguments": "{\"tool_names\": [\"mcp__git__git_status\"], \"limit\": 3}"}}),
        json!({"assistant": "Reading."}),
        json!({"call": {"name": "Read", "arguments": "{\"file_path\": \"a.txt\"}"}}),
        json!({"tools_changed": {"add": [added]}}),
        json!({"result": {"content": "contents of a.txt"}}),
        json!({"assistant": "Done."}),
        json!({"user": "thanks"}),
    ]
    .iter()
    .map(|e| format!("{e}\n"))
    .collect()
}

#[test]
fn replayed_messages_are_the_messages_the_proxy_sends_upstream() {
    for (name, api) in Api::ALL {
        let s = Scratch::new(&format!("replay-proxy-{name}"));
        let upstream = Upstream::start(&s, &script());
        let proxy = ProxyProc::start(&s, &upstream.url(), CONFIG, &[]);
        let (def, item) = added(api);
        let mut tools = client_tools(api);
        // The user's turn: a search the proxy answers, then a call the client runs.
        let mut conversation = vec![user(api, "please commit: check the status")];
        let first = send(&proxy, api, &tools, &conversation);
        let (entries, ids) = answer_entries(api, &first);
        assert_eq!(ids.len(), 1, "{first}");
        conversation.extend(entries);
        // Its result, with a tool the client has added meanwhile.
        tools.push(def);
        conversation.push(result(api, &ids[0], "contents of a.txt"));
        let second = send(&proxy, api, &tools, &conversation);
        conversation.extend(answer_entries(api, &second).0);
        conversation.push(user(api, "thanks"));
        send(&proxy, api, &tools, &conversation);
        let sent: Vec<Value> = upstream
            .played(4)
            .iter()
            .map(|t| t["body"].clone())
            .collect();

        let out = std::process::Command::new(TOOLSHELF)
            .args([
                "replay", "--ranker", "bm25", "--format", name, "--system", SYSTEM,
            ])
            .args([
                "--catalog",
                &s.write("catalog.json", &catalog().to_string()),
            ])
            .args(["--config", &s.path("proxy.toml")])
            .args(["--transcript", &s.write("t.jsonl", &transcript(&item))])
            .output()
            .expect("run toolshelf replay");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let replayed: Vec<Value> = String::from_utf8(out.stdout)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a body"))
            .collect();
        assert_eq!(replayed.len(), sent.len(), "{name}: one body per request");
        for (k, (proxy_body, replay_body)) in sent.iter().zip(&replayed).enumerate() {
            let (p, r) = (comparable(api, proxy_body), comparable(api, replay_body));
            for (i, (pm, rm)) in p.iter().zip(&r).enumerate() {
                assert_eq!(
                    canonical_json(pm),
                    canonical_json(rm),
                    "{name}: request {} message {i} (proxy, then replay)",
                    k + 1
                );
            }
            assert_eq!(p.len(), r.len(), "{name}: request {} messages", k + 1);
            assert_eq!(
                canonical_json(&proxy_body["tools"]),
                canonical_json(&replay_body["tools"]),
                "{name}: request {} tools",
                k + 1
            );
        }
        // The conversation held what is compared: the notice and the reminder after the
        // client's results, the search's answer and the model's arguments text.
        let last = canonical_json(&replayed[3]);
        for part in [
            "new: mcp__git__git_diff",
            "Check the working tree before committing.",
            "mcp__git__git_status",
        ] {
            assert!(last.contains(part), "{name}: {part} in {last}");
        }
    }
}
