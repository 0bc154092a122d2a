//! End-to-end tests of the rounds `toolshelf proxy` runs within one request: a round the output
//! limit cut off, calls of resident tools, the note when the rounds run out, and calls of a tool
//! the client stopped sending. The upstream is `fixtures/loop_upstream.py`, which ends answers at
//! the output limit as each API does and checks every request as the providers check it.

mod common;

use common::{
    HEADERS, LoopUpstream, ProxyProc, Scratch, anthropic_tool, chat_tools, events, post,
    responses_tools, tool_uses, tools,
};
use serde_json::{Value, json};

const BEARER: [(&str, &str); 1] = [("authorization", "Bearer k")];

/// The Anthropic message a client assembles from a stream: its content blocks (a call's input
/// read from its JSON pieces), its stop reason, and any error event.
fn anthropic_stream(body: &Value) -> Value {
    let mut content: Vec<Value> = Vec::new();
    let mut json_text: Vec<String> = Vec::new();
    let mut stop = Value::Null;
    let mut error = Value::Null;
    for e in events(body) {
        match e["type"].as_str().unwrap_or_default() {
            "content_block_start" => {
                content.push(e["content_block"].clone());
                json_text.push(String::new());
            }
            "content_block_delta" => {
                let i = e["index"].as_u64().expect("an index") as usize;
                match e["delta"]["type"].as_str() {
                    Some("text_delta") => {
                        let t = format!(
                            "{}{}",
                            content[i]["text"].as_str().unwrap_or_default(),
                            e["delta"]["text"].as_str().unwrap_or_default()
                        );
                        content[i]["text"] = t.into();
                    }
                    Some("input_json_delta") => {
                        json_text[i].push_str(e["delta"]["partial_json"].as_str().unwrap_or(""))
                    }
                    _ => {}
                }
            }
            "message_delta" => stop = e["delta"]["stop_reason"].clone(),
            "error" => error = e.clone(),
            _ => {}
        }
    }
    for (block, text) in content.iter_mut().zip(&json_text) {
        if block["type"] == "tool_use" && !text.is_empty() {
            block["input"] = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("a call's input that is not JSON ({e}): {text}"));
        }
    }
    json!({"content": content, "stop_reason": stop, "error": error})
}

/// One Anthropic request; the answer as the client reads it (a stream assembled).
fn anthropic(proxy: &ProxyProc, tools: &[Value], messages: &[Value], stream: bool) -> Value {
    let body = json!({"model": "m", "max_tokens": 64, "system": "You help.", "tools": tools,
                      "messages": messages, "stream": stream});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    if stream {
        anthropic_stream(&answer)
    } else {
        answer
    }
}

fn text_of(answer: &Value) -> String {
    answer["content"]
        .as_array()
        .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect())
        .unwrap_or_default()
}

/// One Chat Completions request; the message, the finish reason and the calls as the client
/// reads them (a stream assembled).
fn chat(proxy: &ProxyProc, messages: &[Value], stream: bool) -> Value {
    let body = json!({"model": "m", "messages": messages, "tools": chat_tools(),
                      "stream": stream});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &BEARER,
    );
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    if !stream {
        let choice = &answer["choices"][0];
        return json!({"text": choice["message"]["content"].as_str().unwrap_or_default(),
                      "tool_calls": choice["message"]["tool_calls"].clone(),
                      "finish_reason": choice["finish_reason"]});
    }
    let mut text = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = Value::Null;
    for e in events(&answer) {
        assert!(e.get("error").is_none(), "an error event: {e}");
        let Some(choice) = e["choices"].as_array().and_then(|c| c.first()) else {
            continue;
        };
        text.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        for tc in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().expect("an index") as usize;
            if calls.len() <= i {
                calls.push(tc.clone());
            } else {
                let more = tc["function"]["arguments"].as_str().unwrap_or_default();
                let args = format!(
                    "{}{more}",
                    calls[i]["function"]["arguments"]
                        .as_str()
                        .unwrap_or_default()
                );
                calls[i]["function"]["arguments"] = args.into();
            }
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    json!({"text": text, "tool_calls": calls, "finish_reason": finish})
}

/// One Responses request; the response as the client reads it (a stream's last event's).
fn responses(proxy: &ProxyProc, input: &[Value], stream: bool) -> Value {
    let body = json!({"model": "m", "input": input, "tools": responses_tools(),
                      "instructions": "You help.", "stream": stream});
    let (status, answer) = post(&format!("{}/v1/responses", proxy.url), &body, &BEARER);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    if !stream {
        return answer;
    }
    let last = events(&answer).pop().expect("events");
    assert!(
        matches!(
            last["type"].as_str(),
            Some("response.completed" | "response.incomplete")
        ),
        "{answer}"
    );
    last["response"].clone()
}

const READ_RESIDENT: &str = "[defer]\nrules = [\"NoDefer(^Read$)\"]\n";

/// A round the output limit cut off in the middle of a `tool_search` or `defer_execute` call
/// ends the request: the client gets the answer as the model left it, stopped by the limit, with
/// no call it cannot run, and the proxy starts no other round. The cut call is not run; the
/// model reads so in the next request, which the provider accepts.
#[test]
fn a_meta_call_the_output_limit_cut_off_is_left_out_and_ends_the_request() {
    let s = Scratch::new("proxy-loop-cut-meta");
    let status_call = json!({"name": "defer_execute", "input": {
        "tool_name": "mcp__git__git_status", "params": {"repo_path": "/a/long/path/to/a/repository"}}});
    let steps = json!([
        {"calls": [{"name": "tool_search", "input": {"tool_names": ["mcp__git__git_status"]}}]},
        {"text": "Checking.", "calls": [status_call], "cut": 50},
        {"text": "Where was I?"},
        // The same, not streamed: the provider gives what it parsed of the cut call.
        {"text": "Checking.", "calls": [status_call], "cut": 50,
         "cut_input": {"tool_name": "mcp__git__git_status"}},
        {"text": "Where was I?"},
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut messages = vec![json!({"role": "user", "content": "is the tree clean?"})];
    let answer = anthropic(&proxy, &tools(), &messages, true);
    assert_eq!(answer["error"], Value::Null, "{answer}");
    assert_eq!(answer["stop_reason"], "max_tokens", "{answer}");
    assert!(tool_uses(&answer).is_empty(), "{answer}");
    assert_eq!(text_of(&answer), "Checking.");
    assert_eq!(upstream.played().len(), 2, "no round after the cut one");
    let cut = upstream.call_ids(1);
    let log = proxy.log();
    assert!(
        log.lines()
            .any(|l| l.contains("defer_execute") && l.contains("cut off")),
        "the log says what was dropped:\n{log}"
    );
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": "go on"}));
    let next = anthropic(&proxy, &tools(), &messages, true);
    assert_eq!(text_of(&next), "Where was I?", "{next}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    let sent = &upstream.played()[2]["body"]["messages"];
    let results: Vec<&Value> = sent
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result" && b["tool_use_id"] == cut[0].as_str())
        .collect();
    assert_eq!(results.len(), 1, "{sent}");
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0].to_string().contains("was not run"),
        "{}",
        results[0]
    );

    messages.push(json!({"role": "assistant", "content": next["content"]}));
    messages.push(json!({"role": "user", "content": "check again"}));
    let answer = anthropic(&proxy, &tools(), &messages, false);
    assert_eq!(answer["stop_reason"], "max_tokens", "{answer}");
    assert!(tool_uses(&answer).is_empty(), "{answer}");
    assert_eq!(upstream.played().len(), 4, "no round after the cut one");
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": "go on"}));
    let next = anthropic(&proxy, &tools(), &messages, false);
    assert_eq!(text_of(&next), "Where was I?", "{next}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// A call of a tool the client runs, cut off by the output limit, reaches the client as far as
/// the model wrote it, with the limit as the stop reason, in every format; the proxy starts no
/// other round, and the turn put back in the next request is one the provider accepts.
#[test]
fn a_client_call_the_output_limit_cut_off_reaches_the_client_as_far_as_it_got() {
    let s = Scratch::new("proxy-loop-cut-client");
    let read = json!({"name": "Read", "input": {"file_path": "/etc/hosts and more"}});
    let steps = json!([
        {"calls": [{"name": "tool_search", "input": {"queries": ["git status"]}}]},
        {"text": "Reading.", "calls": [read], "cut": 22},
        {"text": "Done."},
        {"text": "Reading.", "calls": [read], "cut": 22},
        {"text": "Done."},
        {"text": "Reading.", "calls": [read], "cut": 22},
        {"text": "Done."},
        {"text": "Reading.", "calls": [read], "cut": 22},
        {"text": "Done."},
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let proxy = ProxyProc::start(&s, &upstream.url(), READ_RESIDENT, &[]);

    let mut messages = vec![json!({"role": "user", "content": "read the hosts file"})];
    let answer = anthropic(&proxy, &tools(), &messages, true);
    assert_eq!(answer["error"], Value::Null, "{answer}");
    assert_eq!(answer["stop_reason"], "max_tokens", "{answer}");
    let calls = tool_uses(&answer);
    assert_eq!(calls.len(), 1, "{answer}");
    assert_eq!(calls[0]["name"], "Read");
    assert_eq!(
        calls[0]["input"],
        json!({"file_path": "/etc/ho"}),
        "{answer}"
    );
    assert_eq!(upstream.played().len(), 2, "no round after the cut one");
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": [{"type": "tool_result",
        "tool_use_id": calls[0]["id"], "content": "no such file", "is_error": true}]}));
    let next = anthropic(&proxy, &tools(), &messages, true);
    assert_eq!(text_of(&next), "Done.", "{next}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    // The turn was put back with its search round, the cut call with what the client got.
    let sent = &upstream.played()[2]["body"]["messages"];
    let put_back: Vec<&Value> = sent
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_use")
        .collect();
    assert_eq!(put_back.len(), 2, "{sent}");
    assert_eq!(put_back[0]["name"], "tool_search");
    assert_eq!(put_back[1]["input"], json!({"file_path": "/etc/ho"}));

    let chat_start = upstream.played().len();
    let mut messages = vec![json!({"role": "user", "content": "read the hosts file"})];
    let answer = chat(&proxy, &messages, true);
    assert_eq!(answer["finish_reason"], "length", "{answer}");
    let calls = answer["tool_calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 1, "{answer}");
    assert_eq!(calls[0]["function"]["name"], "Read");
    assert_eq!(upstream.played().len(), chat_start + 1, "no round after");
    messages.push(json!({"role": "assistant", "content": "Reading.", "tool_calls": calls}));
    messages
        .push(json!({"role": "tool", "tool_call_id": calls[0]["id"], "content": "no such file"}));
    let next = chat(&proxy, &messages, true);
    assert_eq!(next["text"], "Done.", "{next}");

    for stream in [false, true] {
        let responses_start = upstream.played().len();
        let user = json!({"role": "user", "content": format!("read the hosts file ({stream})")});
        let mut input = vec![user];
        let answer = responses(&proxy, &input, stream);
        assert_eq!(answer["status"], "incomplete", "{answer}");
        assert_eq!(
            answer["incomplete_details"]["reason"], "max_output_tokens",
            "{answer}"
        );
        let output = answer["output"].as_array().cloned().unwrap_or_default();
        let calls: Vec<&Value> = output
            .iter()
            .filter(|i| i["type"] == "function_call")
            .collect();
        assert_eq!(calls.len(), 1, "{answer}");
        assert_eq!(
            calls[0]["arguments"], "{\"file_path\": \"/etc/ho",
            "the arguments as the model wrote them: {answer}"
        );
        assert_eq!(calls[0]["status"], "incomplete", "{answer}");
        assert_eq!(
            upstream.played().len(),
            responses_start + 1,
            "no round after"
        );
        input.extend(output.iter().cloned());
        input.push(
            json!({"type": "function_call_output", "call_id": calls[0]["call_id"],
                          "output": "no such file"}),
        );
        let next = responses(&proxy, &input, stream);
        assert_eq!(next["status"], "completed", "{next}");
    }
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    // Each call cut off is recorded as handed with the arguments as far as they got, which no
    // hook rewrote.
    let audit = s.audit_at("cache/toolshelf/audit.jsonl");
    let handed: Vec<&Value> = audit.iter().filter(|r| r["outcome"] == "handed").collect();
    assert!(!handed.is_empty(), "{audit:#?}");
    for r in handed {
        assert!(
            r.get("hooks").is_none() && r["params"].as_object().is_some_and(|p| !p.is_empty()),
            "{r}"
        );
    }
}

/// The proxy does not check a call of a resident client tool against the tool's schema: the
/// provider and the client judge it, and a schema the proxy cannot compile does not make the
/// tool uncallable. The permission rules and `pre_call` hooks apply to it all the same.
#[test]
fn a_resident_tool_is_called_as_sent_under_the_rules_and_hooks() {
    let s = Scratch::new("proxy-loop-resident");
    let steps = json!([
        {"calls": [{"name": "Read", "input": {"file_path": "a.txt"}},
                   {"name": "Grep", "input": {"path": "src"}}]},
        {"calls": [{"name": "Grep", "input": {"pattern": "secret key"}},
                   {"name": "Read", "input": {"file_path": "refuse-me"}},
                   {"name": "Read", "input": {"file_path": "b.txt"}}]},
        {"text": "Done."},
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = "[defer]\nrules = [\"NoDefer(^Read$)\", \"NoDefer(^Grep$)\"]\n\
                  [permissions]\ndeny = [\"^Grep(pattern=secret*)\"]\n\
                  [[hooks.pre_call]]\ncommand = \"sh\"\n\
                  args = [\"-c\", \"if grep -q refuse-me; then echo 'not this one' >&2; exit 2; fi\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let mut list = tools();
    // A dangling `$ref`: the proxy cannot compile this schema.
    list[0]["input_schema"]["properties"]["file_path"] = json!({"$ref": "#/$defs/missing"});
    list.push(anthropic_tool(
        "Grep",
        "Search file contents.",
        json!({"pattern": {"type": "string"}, "path": {"type": "string"}}),
        &["pattern"],
    ));
    let mut messages = vec![json!({"role": "user", "content": "look"})];
    let answer = anthropic(&proxy, &list, &messages, false);
    let calls = tool_uses(&answer);
    let names: Vec<&Value> = calls.iter().map(|c| &c["name"]).collect();
    assert_eq!(names, [&json!("Read"), &json!("Grep")], "{answer}");
    assert_eq!(calls[1]["input"], json!({"path": "src"}));
    assert_eq!(upstream.played().len(), 1);
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(
        json!({"role": "user", "content": calls.iter().map(|c| json!({
        "type": "tool_result", "tool_use_id": c["id"], "content": "ok"})).collect::<Vec<_>>()}),
    );
    let answer = anthropic(&proxy, &list, &messages, false);
    let calls = tool_uses(&answer);
    assert_eq!(calls.len(), 1, "{answer}");
    assert_eq!(calls[0]["input"], json!({"file_path": "b.txt"}));
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": calls[0]["id"], "content": "ok"}]}));
    let answer = anthropic(&proxy, &list, &messages, false);
    assert_eq!(text_of(&answer), "Done.");
    let played = upstream.played();
    let refused = upstream.call_ids(1);
    let sent = played[2]["body"]["messages"].to_string();
    let result_of = |id: &str| {
        played[2]["body"]["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .find(|b| b["tool_use_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no result for {id}: {sent}"))
    };
    let denied = result_of(&refused[0]);
    assert_eq!(denied["is_error"], true);
    assert!(denied.to_string().contains("deny[0]"), "{denied}");
    let hooked = result_of(&refused[1]);
    assert_eq!(hooked["is_error"], true);
    assert!(hooked.to_string().contains("not this one"), "{hooked}");
}

/// When the last round a request may take still holds only calls the proxy answers, the client
/// gets the text so far and a note that the rounds ran out, in every format, streamed or not.
#[test]
fn the_rounds_running_out_is_told_after_the_models_text() {
    let s = Scratch::new("proxy-loop-limit-note");
    let round = json!({"text": "hmm a", "calls": [
        {"name": "tool_search", "input": {"queries": ["something"]}}]});
    let steps = Value::Array(vec![round; 12]);
    let upstream = LoopUpstream::start(&s, &steps);
    let proxy = ProxyProc::start(&s, &upstream.url(), "[proxy]\nmax_search_rounds = 2\n", &[]);
    let note = "the model spent all 2 rounds of this request on calls toolshelf answers itself";
    let mut chat_texts = Vec::new();
    for stream in [false, true] {
        let user = json!({"role": "user", "content": format!("find something ({stream})")});
        let answer = anthropic(&proxy, &tools(), std::slice::from_ref(&user), stream);
        let text = text_of(&answer);
        assert!(text.starts_with("hmm a") && text.contains(note), "{answer}");
        assert_eq!(answer["stop_reason"], "end_turn", "{answer}");
        let answer = chat(&proxy, std::slice::from_ref(&user), stream);
        let text = answer["text"].as_str().unwrap_or_default();
        assert!(text.starts_with("hmm a") && text.contains(note), "{answer}");
        chat_texts.push(text.to_owned());
        let answer = responses(&proxy, std::slice::from_ref(&user), stream);
        let text = answer["output"].to_string();
        assert!(text.contains("hmm a") && text.contains(note), "{answer}");
    }
    assert_eq!(upstream.played().len(), 12, "two rounds a request");
    // Streamed or not, a Chat answer reads the same: the note apart from the text before it.
    assert_eq!(chat_texts[0], chat_texts[1]);
    assert!(chat_texts[0].contains("hmm a\n\n["), "{}", chat_texts[0]);
}

/// A resident tool the client stopped sending stays in the frozen list the model sees, but a
/// call of it is refused to the model as gone, not handed to a client that no longer offers it.
/// A name the proxy never saw still goes to the client, which answers it as it would without
/// the proxy.
#[test]
fn a_call_of_a_resident_tool_the_client_stopped_sending_is_refused_as_gone() {
    let s = Scratch::new("proxy-loop-gone");
    let steps = json!([
        {"text": "Hello."},
        {"calls": [{"name": "Read", "input": {"file_path": "a.txt"}}]},
        {"text": "Read is gone."},
        {"calls": [{"name": "Frobnicate", "input": {}}]},
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let proxy = ProxyProc::start(&s, &upstream.url(), READ_RESIDENT, &[]);
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    let answer = anthropic(&proxy, &tools(), &messages, false);
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": "read a.txt"}));
    let fewer: Vec<Value> = tools()
        .into_iter()
        .filter(|t| t["name"] != "Read")
        .collect();
    let answer = anthropic(&proxy, &fewer, &messages, false);
    assert!(tool_uses(&answer).is_empty(), "{answer}");
    assert_eq!(text_of(&answer), "Read is gone.");
    let played = upstream.played();
    assert_eq!(played.len(), 3);
    let frozen: Vec<&Value> = played[1]["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert!(frozen.contains(&&json!("Read")), "{frozen:?}");
    let last = played[2]["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .expect("a message");
    let result = &last["content"][0];
    assert_eq!(result["tool_use_id"], upstream.call_ids(1)[0].as_str());
    assert_eq!(result["is_error"], true);
    assert!(result.to_string().contains("no longer offers"), "{result}");
    let log = proxy.log();
    assert!(
        log.lines()
            .any(|l| l.contains("call refused") && l.contains("outcome=\"gone\"")),
        "{log}"
    );
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": "frobnicate"}));
    let answer = anthropic(&proxy, &fewer, &messages, false);
    let calls = tool_uses(&answer);
    assert_eq!(calls.len(), 1, "{answer}");
    assert_eq!(calls[0]["name"], "Frobnicate");
}

/// A client continuing a recorded turn (the conversation ends with the assistant's message, as
/// after the output limit or the rounds running out) sends it with the results the proxy owes
/// that turn's calls right after it, in every format: the provider accepts the request.
#[test]
fn a_conversation_ending_with_a_recorded_turn_gets_the_results_it_is_owed() {
    let s = Scratch::new("proxy-loop-continue");
    let cut = json!({"text": "Writing.", "cut": 40, "calls": [{"name": "defer_execute", "input": {
        "tool_name": "mcp__fs__write_file", "params": {"path": "a.txt", "content": "hello world"}}}]});
    let search = json!({"text": "Searching.", "calls": [
        {"name": "tool_search", "input": {"queries": ["read file"]}}]});
    let more = json!({"text": " continued"});
    let steps = json!([
        cut, more, search, more, cut, more, search, more, cut, more, search, more
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let proxy = ProxyProc::start(&s, &upstream.url(), "[proxy]\nmax_search_rounds = 1\n", &[]);
    let user = json!({"role": "user", "content": "write a.txt"});
    for _ in 0..2 {
        let answer = anthropic(&proxy, &tools(), std::slice::from_ref(&user), false);
        let messages = [
            user.clone(),
            json!({"role": "assistant", "content": answer["content"]}),
        ];
        let next = anthropic(&proxy, &tools(), &messages, false);
        assert_eq!(text_of(&next), " continued", "{next}");
    }
    for _ in 0..2 {
        let answer = chat(&proxy, std::slice::from_ref(&user), false);
        let messages = [
            user.clone(),
            json!({"role": "assistant", "content": answer["text"]}),
        ];
        let next = chat(&proxy, &messages, false);
        assert_eq!(next["text"], " continued", "{next}");
    }
    for _ in 0..2 {
        let answer = responses(&proxy, std::slice::from_ref(&user), false);
        let mut input = vec![user.clone()];
        input.extend(answer["output"].as_array().expect("output").iter().cloned());
        let next = responses(&proxy, &input, false);
        assert!(next["output"].to_string().contains(" continued"), "{next}");
    }
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    assert_eq!(upstream.played().len(), 12);
    // The owed results come right after the turn put back, and nothing else follows them.
    for (n, played) in upstream.played().iter().enumerate().skip(1).step_by(2) {
        let body = &played["body"];
        let sent = body["messages"]
            .as_array()
            .or(body["input"].as_array())
            .expect("entries");
        let last = sent.last().expect("an entry").to_string();
        assert!(
            last.contains("tool_result")
                || last.contains("\"role\":\"tool\"")
                || last.contains("function_call_output"),
            "request {n} ends with the owed results: {last}"
        );
    }
}

/// A complete call of a resident client tool whose arguments are not a JSON object is answered
/// by the proxy (Chat, Responses, streamed or not; an Anthropic stream, the one place that API
/// can carry such input): no rule or hook could judge those arguments, and the client must
/// never run the tool with empty ones. The model writes them again.
#[test]
fn a_resident_call_with_arguments_that_are_not_an_object_is_sent_back_to_the_model() {
    let s = Scratch::new("proxy-loop-bad-args");
    let written = [r#"{"file_path": "a.txt"}}"#, "[1, 2]"];
    let mut steps = Vec::new();
    for args in written {
        for _ in 0..5 {
            steps.push(json!({"text": "Reading.", "calls": [
                {"name": "Read", "input": {}, "arguments": args}]}));
            steps.push(json!({"text": "Done."}));
        }
    }
    let upstream = LoopUpstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), READ_RESIDENT, &[]);
    let user = json!({"role": "user", "content": "read a.txt"});
    for _ in written {
        for stream in [false, true] {
            let answer = chat(&proxy, std::slice::from_ref(&user), stream);
            assert!(
                answer["tool_calls"]
                    .as_array()
                    .is_none_or(|calls| calls.is_empty()),
                "{answer}"
            );
            assert!(
                answer["text"]
                    .as_str()
                    .unwrap_or_default()
                    .ends_with("Done."),
                "{answer}"
            );
        }
        for stream in [false, true] {
            let answer = responses(&proxy, std::slice::from_ref(&user), stream);
            let output = answer["output"].as_array().cloned().unwrap_or_default();
            assert!(
                !output.iter().any(|i| i["type"] == "function_call"),
                "{answer}"
            );
        }
        let answer = anthropic(&proxy, &tools(), std::slice::from_ref(&user), true);
        assert!(tool_uses(&answer).is_empty(), "{answer}");
        assert!(text_of(&answer).ends_with("Done."), "{answer}");
    }
    // Each refusal went to the model, in the request after the call.
    let refusals = upstream
        .played()
        .iter()
        .filter(|r| {
            r["body"]
                .to_string()
                .contains("Read was not run: its arguments are not a JSON object")
        })
        .count();
    assert_eq!(refusals, 10, "{:?}", upstream.played());
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// A `tool_search` whose arguments are not a JSON object is told so, with a correct call, as
/// `defer_execute`'s is: "neither tool_names nor queries was given" did not say what was wrong.
#[test]
fn a_search_with_arguments_that_are_not_an_object_is_told_so() {
    let s = Scratch::new("proxy-loop-bad-search-args");
    let steps = json!([
        {"text": "Looking.", "calls": [
            {"name": "tool_search", "input": {}, "arguments": "\"weather\""}]},
        {"text": "Done."}
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let user = json!({"role": "user", "content": "what is the weather"});
    let answer = chat(&proxy, std::slice::from_ref(&user), false);
    assert!(
        answer["text"]
            .as_str()
            .unwrap_or_default()
            .ends_with("Done."),
        "{answer}"
    );
    let played = upstream.played();
    assert!(
        played.iter().any(|r| r["body"].to_string().contains(
            "Invalid tool_search call: the arguments are not a JSON object (\\\"weather\\\"). Example: {\\\"queries\\\""
        )),
        "{played:?}"
    );
}

/// A Chat client that asks for logprobs gets those of the text it reads, from every round that
/// wrote some, streamed or not.
#[test]
fn a_chat_answer_carries_the_logprobs_of_its_text() {
    let s = Scratch::new("proxy-loop-logprobs");
    let search = json!({"text": "Looking.", "calls": [
        {"name": "tool_search", "input": {"queries": ["read file"]}}]});
    let done = json!({"text": "Found it."});
    let upstream = LoopUpstream::start(&s, &json!([search, done, search, done]));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let expected = ["Looki", "ng.", "Found", " it."];
    for stream in [false, true] {
        let body = json!({"model": "m", "tools": chat_tools(), "logprobs": true, "stream": stream,
                          "messages": [{"role": "user", "content": "find it"}]});
        let (status, answer) = post(
            &format!("{}/v1/chat/completions", proxy.url),
            &body,
            &BEARER,
        );
        assert_eq!(status, 200, "{answer}");
        let lists: Vec<Value> = if stream {
            events(&answer)
                .iter()
                .map(|e| e["choices"][0]["logprobs"].clone())
                .collect()
        } else {
            vec![answer["choices"][0]["logprobs"].clone()]
        };
        let tokens: Vec<String> = lists
            .iter()
            .filter_map(|lp| lp["content"].as_array())
            .flatten()
            .filter_map(|t| t["token"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(tokens, expected, "stream {stream}: {answer}");
    }
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// A deferred tool the session loaded that the client then stops sending is refused as gone,
/// in the words a resident one gets, not as a name no tool has: the change notice told the model
/// it is gone, and the refusal must not contradict it.
#[test]
fn a_loaded_deferred_tool_the_client_stops_sending_is_refused_as_gone() {
    let s = Scratch::new("proxy-loop-deferred-gone");
    let steps = json!([
        {"calls": [{"name": "tool_search", "input": {"tool_names": ["get_weather"]}}]},
        {"text": "Found it."},
        {"calls": [{"name": "defer_execute",
                    "input": {"tool_name": "get_weather", "params": {"city": "Paris"}}}]},
        {"text": "It is gone."}
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let proxy = ProxyProc::start(&s, &upstream.url(), "[defer]\ndefault = true\n", &[]);
    let weather = anthropic_tool(
        "get_weather",
        "Current weather for a city.",
        json!({"city": {"type": "string"}}),
        &["city"],
    );
    let read = anthropic_tool(
        "read_file",
        "Read a file.",
        json!({"path": {"type": "string"}}),
        &["path"],
    );
    let mut messages = vec![json!({"role": "user", "content": "weather in Paris?"})];
    let first = anthropic(&proxy, &[weather, read.clone()], &messages, false);
    assert_eq!(text_of(&first), "Found it.", "{first}");
    messages.push(json!({"role": "assistant", "content": first["content"]}));
    messages.push(json!({"role": "user", "content": "and now?"}));
    let second = anthropic(&proxy, &[read], &messages, false);
    assert_eq!(text_of(&second), "It is gone.", "{second}");
    let played = upstream.played();
    let last = played.last().expect("a request")["body"]["messages"].to_string();
    assert!(
        last.contains("get_weather was not run: the client no longer offers this tool")
            && !last.contains("No tool named"),
        "{last}"
    );
}
