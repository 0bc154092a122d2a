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

/// One request of the client: its tools, and the user's words, or (`None`) the results of the
/// calls the proxy's last answer handed over.
type Request<'a> = (Vec<Value>, Option<&'a str>);

/// Sends `requests` to the proxy, with `script` playing the model, and replays `transcript`, the
/// same conversation: the bodies the upstream received and those `replay` printed.
fn both(
    s: &Scratch,
    api: Api,
    script: &Value,
    requests: &[Request<'_>],
    transcript: &[Value],
) -> (Vec<Value>, Vec<Value>) {
    let upstream = Upstream::start(s, script);
    let proxy = ProxyProc::start(s, &upstream.url(), CONFIG, &[]);
    let mut conversation = Vec::new();
    let mut owed: Vec<String> = Vec::new();
    for (tools, text) in requests {
        match text {
            Some(text) => conversation.push(user(api, text)),
            None => conversation.extend(
                owed.drain(..)
                    .map(|id| result(api, &id, "contents of a.txt")),
            ),
        }
        let answer = send(&proxy, api, tools, &conversation);
        let (entries, ids) = answer_entries(api, &answer);
        conversation.extend(entries);
        owed = ids;
    }
    let steps = script["steps"].as_array().map_or(0, Vec::len);
    let sent = upstream
        .played(steps)
        .iter()
        .map(|t| t["body"].clone())
        .collect();
    let lines: String = transcript.iter().map(|e| format!("{e}\n")).collect();
    let out = std::process::Command::new(TOOLSHELF)
        .args(["replay", "--ranker", "bm25", "--format", api.name()])
        .args(["--system", SYSTEM])
        .args([
            "--catalog",
            &s.write("catalog.json", &catalog().to_string()),
        ])
        .args(["--config", &s.path("proxy.toml")])
        .args(["--transcript", &s.write("t.jsonl", &lines)])
        .output()
        .expect("run toolshelf replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a body"))
        .collect();
    (sent, replayed)
}

/// Asserts that each body of `sent` has the messages of the same body of `replayed`.
fn same_messages(api: Api, sent: &[Value], replayed: &[Value]) {
    assert_eq!(replayed.len(), sent.len(), "{api:?}: one body per request");
    for (k, (proxy_body, replay_body)) in sent.iter().zip(replayed).enumerate() {
        let (p, r) = (comparable(api, proxy_body), comparable(api, replay_body));
        for (i, (pm, rm)) in p.iter().zip(&r).enumerate() {
            assert_eq!(
                canonical_json(pm),
                canonical_json(rm),
                "{api:?}: request {} message {i} (proxy, then replay)",
                k + 1
            );
        }
        assert_eq!(p.len(), r.len(), "{api:?}: request {} messages", k + 1);
    }
}

#[test]
fn replayed_messages_are_the_messages_the_proxy_sends_upstream() {
    let (_, item) = added(Api::Anthropic);
    // The arguments as the scripted model writes them (Python's json.dumps).
    let transcript = [
        json!({"user": "please commit: check the status"}),
        json!({"assistant": "Searching."}),
        json!({"call": {"name": "tool_search",
                        "arguments": "{\"tool_names\": [\"mcp__git__git_status\"], \"limit\": 3}"}}),
        json!({"assistant": "Reading."}),
        json!({"call": {"name": "Read", "arguments": "{\"file_path\": \"a.txt\"}"}}),
        json!({"tools_changed": {"add": [item]}}),
        json!({"result": {"content": "contents of a.txt"}}),
        json!({"assistant": "Done."}),
        json!({"user": "thanks"}),
    ];
    for (name, api) in Api::ALL {
        let s = Scratch::new(&format!("replay-proxy-{name}"));
        let tools = client_tools(api);
        // The client adds a tool when it sends its results.
        let mut more = tools.clone();
        more.push(added(api).0);
        let (sent, replayed) = both(
            &s,
            api,
            &script(),
            &[
                (tools, Some("please commit: check the status")),
                (more.clone(), None),
                (more, Some("thanks")),
            ],
            &transcript,
        );
        same_messages(api, &sent, &replayed);
        for (k, (proxy_body, replay_body)) in sent.iter().zip(&replayed).enumerate() {
            assert_eq!(
                canonical_json(&proxy_body["tools"]),
                canonical_json(&replay_body["tools"]),
                "{name}: request {} tools",
                k + 1
            );
        }
        // The conversation held what is compared: the notice and the reminder after the
        // client's results, the search's answer.
        let last = canonical_json(&replayed[3]);
        for part in [
            "new: mcp__git__git_diff",
            "Check the working tree before committing.",
            "why: exact name",
        ] {
            assert!(last.contains(part), "{name}: {part} in {last}");
        }
    }
}

/// A resident tool the client stopped sending stays in the model's list; its call is refused by
/// the proxy, which says the tool is gone, and `replay` says the same.
#[test]
fn a_call_of_a_tool_the_client_dropped_is_refused_alike() {
    let read = json!({"name": "Read", "input": {"file_path": "a.txt"}});
    let script = json!({"steps": [
        {"tool_uses": [read]},
        {"text": "Read it."},
        {"tool_uses": [read]},
        {"text": "It is gone."}
    ]});
    // The arguments as the scripted model writes them.
    let call = json!({"call": {"name": "Read", "arguments": "{\"file_path\": \"a.txt\"}"}});
    let transcript = [
        json!({"user": "read a.txt"}),
        call.clone(),
        json!({"result": {"content": "contents of a.txt"}}),
        json!({"assistant": "Read it."}),
        json!({"tools_changed": {"remove": ["Read"]}}),
        json!({"user": "read it again"}),
        call,
        json!({"assistant": "It is gone."}),
    ];
    for (name, api) in Api::ALL {
        let s = Scratch::new(&format!("replay-proxy-gone-{name}"));
        let tools = client_tools(api);
        let without: Vec<Value> = tools
            .iter()
            .filter(|t| !canonical_json(t).contains("\"Read\""))
            .cloned()
            .collect();
        assert_eq!(without.len() + 1, tools.len());
        let (sent, replayed) = both(
            &s,
            api,
            &script,
            &[
                (tools.clone(), Some("read a.txt")),
                (tools, None),
                (without, Some("read it again")),
            ],
            &transcript,
        );
        same_messages(api, &sent, &replayed);
        let last = canonical_json(&replayed[3]);
        assert!(
            last.contains("Read was not run: the client no longer offers this tool."),
            "{name}: {last}"
        );
    }
}
