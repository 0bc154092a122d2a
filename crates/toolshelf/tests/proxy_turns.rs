//! End-to-end tests of how `toolshelf proxy` carries one client-visible turn into the next
//! request: results it still owes a Responses conversation chained by id, a turn the client
//! edited, chained requests it cannot place, `defer_execute` of tools passed along as sent, and
//! the bound on the rounds of one request. The upstream is the scripted model API.

mod common;

use common::{HEADERS, ProxyProc, Scratch, Upstream, post, responses_tools, tool_uses, tools};
use serde_json::{Value, json};

const BEARER: [(&str, &str); 1] = [("authorization", "Bearer k")];

/// Sends one Anthropic request with `messages` and `tools`; returns the answer.
fn send(proxy: &ProxyProc, tools: &[Value], messages: &[Value]) -> Value {
    let body = json!({"model": "m", "max_tokens": 256, "system": "You help.", "tools": tools,
                      "messages": messages});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    answer
}

/// Appends `answer` and a result for each of its calls to `messages`.
fn answered(messages: &mut Vec<Value>, answer: &Value) {
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    let results: Vec<Value> = tool_uses(answer)
        .iter()
        .map(|b| json!({"type": "tool_result", "tool_use_id": b["id"], "content": format!("result of {}", b["name"].as_str().unwrap_or_default())}))
        .collect();
    if !results.is_empty() {
        messages.push(json!({"role": "user", "content": results}));
    }
}

/// One Responses request; returns the answer.
fn respond(proxy: &ProxyProc, body: Value) -> Value {
    let mut full = json!({"model": "m", "tools": responses_tools(), "instructions": "You help."});
    for (k, v) in body.as_object().expect("an object") {
        full[k] = v.clone();
    }
    let (status, answer) = post(&format!("{}/v1/responses", proxy.url), &full, &BEARER);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    answer
}

fn function_calls(answer: &Value) -> Vec<Value> {
    answer["output"]
        .as_array()
        .map(|o| {
            o.iter()
                .filter(|i| i["type"] == "function_call")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The ids of the calls the upstream answered in scripted turn `step`, by tool name.
fn scripted_call(upstream: &Upstream, step: usize, name: &str) -> String {
    upstream.answers()[step]["tool_uses"]
        .as_array()
        .and_then(|u| u.iter().find(|c| c["name"] == name))
        .and_then(|c| c["id"].as_str())
        .unwrap_or_else(|| panic!("no {name} call in step {step}"))
        .to_owned()
}

/// A round that holds a call the client runs and a search the proxy answers: a client that
/// chains by `previous_response_id` sends only its own result; the search's result, which the
/// upstream is owed too, comes first in the next request, and a retry sends the same.
#[test]
fn a_chained_responses_request_carries_the_results_the_proxy_still_owes() {
    let s = Scratch::new("proxy-owed-mixed");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["git status"]}},
                       {"name": "Read", "input": {"file_path": "a.txt"}}]},
        {"text": "Fine."},
        {"text": "Fine again."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[defer]\nrules = [\"NoDefer(^Read$)\"]\n",
        &[],
    );
    let first = respond(&proxy, json!({"input": "read a.txt"}));
    let read = function_calls(&first);
    assert_eq!(read.len(), 1, "{first}");
    assert_eq!(read[0]["name"], "Read");
    let mine = json!({"type": "function_call_output", "call_id": read[0]["call_id"], "output": "contents"});
    let chained = json!({"previous_response_id": first["id"], "input": [mine]});
    respond(&proxy, chained.clone());
    respond(&proxy, chained);
    let turns = upstream.played(3);
    let search = scripted_call(&upstream, 0, "tool_search");
    let input = &turns[1]["body"]["input"];
    assert_eq!(input.as_array().map(Vec::len), Some(2), "{input}");
    assert_eq!(input[0]["type"], "function_call_output");
    assert_eq!(
        input[0]["call_id"],
        search.as_str(),
        "the search's result first"
    );
    assert!(
        input[0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("mcp__git__git_status")),
        "{input}"
    );
    assert_eq!(input[1], mine, "then the client's items as sent");
    assert_eq!(
        turns[2]["body"]["input"], *input,
        "a retry sends the same items"
    );
}

/// A request that spent its search rounds leaves the last search's result owed: a client that
/// chains by id gets it before its next message.
#[test]
fn a_chained_responses_request_after_the_search_rounds_ran_out_carries_the_owed_result() {
    let s = Scratch::new("proxy-owed-limit");
    let search =
        json!({"tool_uses": [{"name": "tool_search", "input": {"queries": ["something"]}}]});
    let upstream = Upstream::start(&s, &json!({"steps": [search, search, search]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "[proxy]\nmax_search_rounds = 1\n", &[]);
    let first = respond(&proxy, json!({"input": "find something"}));
    assert!(function_calls(&first).is_empty(), "{first}");
    assert!(
        first
            .to_string()
            .contains("the model spent this request's one round on calls toolshelf answers itself"),
        "{first}"
    );
    let rounds = upstream.turns().len();
    let next = json!({"role": "user", "content": "go on"});
    respond(
        &proxy,
        json!({"previous_response_id": first["id"], "input": [next]}),
    );
    let input = &upstream.turns()[rounds]["body"]["input"];
    assert_eq!(input.as_array().map(Vec::len), Some(2), "{input}");
    assert_eq!(
        input[0]["call_id"],
        scripted_call(&upstream, rounds - 1, "tool_search").as_str(),
        "the last search's result first: {input}"
    );
    assert_eq!(input[1], next);
}

/// A client that edits an assistant turn (other text, a call and its result dropped) sends a
/// turn the proxy did not give it: that turn goes upstream as edited, never the recorded one.
#[test]
fn an_assistant_turn_the_client_edited_goes_upstream_as_edited() {
    let s = Scratch::new("proxy-edited");
    let script = json!({"steps": [
        {"text": "Let me search.", "tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        {"text": "Reading both.", "tool_uses": [
            {"name": "defer_execute", "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "x"}}},
            {"name": "Read", "input": {"file_path": "y"}}]},
        {"text": "Done."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[defer]\nrules = [\"NoDefer(^Read$)\"]\n",
        &[],
    );
    let mut messages = vec![json!({"role": "user", "content": "read x and y"})];
    let answer = send(&proxy, &tools(), &messages);
    let uses = tool_uses(&answer);
    assert_eq!(uses.len(), 2, "{answer}");
    let kept = uses[0].clone();
    assert_eq!(kept["name"], "mcp__fs__read_file");
    messages.push(json!({"role": "assistant", "content": [
        {"type": "text", "text": "I will only read x."}, kept]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": kept["id"], "content": "x data"}]}));
    send(&proxy, &tools(), &messages);
    let turns = upstream.played(3);
    let sent = turns[2]["body"]["messages"].as_array().expect("messages");
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert_eq!(
        sent[1]["content"],
        json!([{"type": "text", "text": "I will only read x."},
               {"type": "tool_use", "id": kept["id"], "name": "defer_execute",
                "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "x"}}}]),
        "the edited turn, its deferred call as the defer_execute call it was"
    );
    assert_eq!(sent[2], messages[2]);
}

/// Chained Responses requests whose `previous_response_id` the proxy never saw, carrying only
/// call results, are two conversations: what one searched for is not loaded in the other.
#[test]
fn chained_requests_the_proxy_cannot_place_keep_their_own_sessions() {
    let s = Scratch::new("proxy-unplaced");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["git status"]}}]},
        {"text": "X done."},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__git__git_status", "params": {"repo_path": "/y"}}}]},
        {"text": "Y done."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let x = respond(
        &proxy,
        json!({"previous_response_id": "resp_elsewhere_x", "input": [
            {"type": "function_call_output", "call_id": "call_x1", "output": "x result"}]}),
    );
    assert!(function_calls(&x).is_empty(), "{x}");
    let y = respond(
        &proxy,
        json!({"previous_response_id": "resp_elsewhere_y", "input": [
            {"type": "function_call_output", "call_id": "call_y1", "output": "y result"}]}),
    );
    assert!(
        function_calls(&y).is_empty(),
        "Y never searched for the tool: its call is refused, not handed over: {y}"
    );
    upstream.played(4);
    let refusal = upstream.turns()[3]["tool_results"]
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .expect("a result");
    assert!(
        refusal["content"]
            .as_str()
            .is_some_and(|t| t.contains("was not run")),
        "{refusal}"
    );
}

/// `defer_execute` of a tool passed along as sent: one the client runs from ordinary calls
/// (Anthropic's `bash`) reaches the client as its call, under the same rules as a direct call;
/// a provider's server tool is refused with what it is and how to call it.
#[test]
fn defer_execute_of_a_tool_passed_along_hands_over_what_the_client_runs() {
    let s = Scratch::new("proxy-defer-typed");
    let script = json!({"steps": [
        {"tool_uses": [
            {"name": "defer_execute", "input": {"tool_name": "bash", "params": {"command": "ls"}}},
            {"name": "defer_execute", "input": {"tool_name": "bash", "params": {"command": "rm -rf /"}}},
            {"name": "defer_execute", "input": {"tool_name": "web_search", "params": {"query": "x"}}}]},
        {"text": "Done."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[permissions]\ndeny = [\"^bash(command=rm *)\"]\n",
        &[],
    );
    let mut list = tools();
    list.push(json!({"type": "bash_20250124", "name": "bash"}));
    list.push(json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 2}));
    let mut messages = vec![json!({"role": "user", "content": "look around"})];
    let answer = send(&proxy, &list, &messages);
    let uses = tool_uses(&answer);
    assert_eq!(uses.len(), 1, "{answer}");
    assert_eq!(uses[0]["name"], "bash");
    assert_eq!(uses[0]["input"], json!({"command": "ls"}));
    assert_eq!(answer["stop_reason"], "tool_use");
    answered(&mut messages, &answer);
    send(&proxy, &list, &messages);
    let turns = upstream.played(2);
    let results = turns[1]["tool_results"].as_array().expect("results");
    assert_eq!(results.len(), 3, "{results:#?}");
    let text = |i: usize| results[i]["content"].as_str().unwrap_or_default();
    assert_eq!(results[0]["is_error"], true);
    assert!(
        text(0).contains("deny[0]"),
        "the rule is named: {}",
        text(0)
    );
    assert_eq!(results[1]["is_error"], true);
    assert!(
        text(1).contains("provider") && text(1).contains("directly"),
        "{}",
        text(1)
    );
    assert_eq!(results[2]["is_error"], false);
    assert_eq!(results[2]["content"], "result of bash");
}

/// `max_search_rounds` is the number of upstream rounds one request may take: the last one's
/// search is answered in the next request, and the client is told.
#[test]
fn max_search_rounds_bounds_the_upstream_rounds_of_a_request() {
    let s = Scratch::new("proxy-round-limit");
    let search =
        json!({"tool_uses": [{"name": "tool_search", "input": {"queries": ["something"]}}]});
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [search, search, search, {"text": "Here."}]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "[proxy]\nmax_search_rounds = 2\n", &[]);
    let mut messages = vec![json!({"role": "user", "content": "find something"})];
    let answer = send(&proxy, &tools(), &messages);
    assert!(
        answer
            .to_string()
            .contains("the model spent all 2 rounds of this request on calls toolshelf answers"),
        "{answer}"
    );
    assert_eq!(upstream.turns().len(), 2, "two upstream rounds");
    answered(&mut messages, &answer);
    messages.push(json!({"role": "user", "content": "go on"}));
    let answer = send(&proxy, &tools(), &messages);
    assert!(answer.to_string().contains("Here."), "{answer}");
    upstream.played(4);
}

/// A request whose one round (`max_search_rounds = 1`) went on a `defer_execute` call the
/// proxy refused tells the client what the round went on: calls the proxy answers, no search.
#[test]
fn a_round_spent_on_a_refused_call_is_told_for_what_it_was() {
    let s = Scratch::new("proxy-round-limit-refused");
    let refused = json!({"tool_uses": [{"name": "defer_execute",
                                        "input": {"tool_name": "no_such_tool", "params": {}}}]});
    let upstream = Upstream::start(&s, &json!({"steps": [refused]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "[proxy]\nmax_search_rounds = 1\n", &[]);
    let messages = vec![json!({"role": "user", "content": "do it"})];
    let answer = send(&proxy, &tools(), &messages);
    let text = answer["content"].to_string();
    assert!(
        text.contains("the model spent this request's one round on calls toolshelf answers itself"),
        "{answer}"
    );
    assert!(!text.contains("tool_search"), "{answer}");
    assert_eq!(proxy.status()["totals"]["refused"], 1);
    upstream.played(1);
}

const STATUS_REMINDER: &str = "[[reminders]]\nid = \"history\"\ncategory = \"git history\"\n\
                               message = \"A status often leads to the history; a colleague would look there next.\"\n\
                               after_tools = [\"git_status\"]\n";

/// A call the client was handed counts as made once its result comes back, and not when the
/// result is flagged as an error (its user declined it, its hook blocked it): a declined call
/// fires no `after_tools` reminder, and leaves the rule's cooldown for the call that then runs.
#[test]
fn a_call_the_client_declined_fires_no_reminder_and_the_call_that_ran_does() {
    let s = Scratch::new("proxy-declined");
    let status = json!({"tool_uses": [{"name": "defer_execute",
        "input": {"tool_name": "mcp__git__git_status", "params": {"repo_path": "."}}}]});
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__git__git_status"]}}]},
        status,
        status,
        {"text": "Clean."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), STATUS_REMINDER, &[]);
    let mut messages = vec![json!({"role": "user", "content": "is the tree clean?"})];
    let result = |messages: &mut Vec<Value>, content: &str, is_error: bool| {
        let answer = send(&proxy, &tools(), messages);
        let uses = tool_uses(&answer);
        assert_eq!(uses.len(), 1, "{answer}");
        assert_eq!(uses[0]["name"], "mcp__git__git_status");
        messages.push(json!({"role": "assistant", "content": answer["content"]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": uses[0]["id"], "content": content, "is_error": is_error}]}));
    };
    result(
        &mut messages,
        "The user doesn't want to proceed with this tool use.",
        true,
    );
    result(&mut messages, "nothing to commit", false);
    send(&proxy, &tools(), &messages);
    let turns = upstream.played(4);
    let sent = |i: usize| turns[i]["body"]["messages"].to_string();
    assert!(
        !sent(2).contains("system-reminder"),
        "the declined call fired nothing: {}",
        sent(2)
    );
    let last = turns[3]["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(
        last.contains("<system-reminder>\\nA status often leads to the history"),
        "the call that ran fired the reminder: {last}"
    );
}

/// A Responses client that chains by `previous_response_id` does not resend the turn whose calls
/// it ran: the calls are read from that turn's record, and fire their `after_tools` reminders.
#[test]
fn a_call_the_client_ran_in_a_chained_responses_conversation_fires_its_reminder() {
    let s = Scratch::new("proxy-chained-reminder");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__git__git_status"]}}]},
        {"tool_uses": [{"name": "defer_execute",
            "input": {"tool_name": "mcp__git__git_status", "params": {"repo_path": "."}}}]},
        {"text": "Clean."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), STATUS_REMINDER, &[]);
    let first = respond(&proxy, json!({"input": "is the tree clean?"}));
    let calls = function_calls(&first);
    assert_eq!(calls.len(), 1, "{first}");
    assert_eq!(calls[0]["name"], "mcp__git__git_status");
    respond(
        &proxy,
        json!({"previous_response_id": first["id"], "input": [
            {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "nothing to commit"}]}),
    );
    let turns = upstream.played(3);
    let input = turns[2]["body"]["input"].to_string();
    assert!(
        input.contains("A status often leads to the history"),
        "{input}"
    );
}

/// Two conversations that open alike, A and B, each send two requests; the second ones carry a
/// tool the first ones did not. `send(conversation, messages, tools)` sends one request as
/// conversation `0` (A) or `1` (B) and returns the answer's text. Returns the upstream bodies of
/// the two second requests.
fn two_conversations_gain_a_tool(
    s: &Scratch,
    config: &str,
    send: impl Fn(&ProxyProc, usize, &[Value], &[Value]) -> String,
    assistant: impl Fn(&str) -> Value,
) -> (Value, Value) {
    let script = json!({"steps": [
        {"text": "A one."}, {"text": "B one."}, {"text": "A two."}, {"text": "B two."}
    ]});
    let upstream = Upstream::start(s, &script);
    let proxy = ProxyProc::start(s, &upstream.url(), config, &[]);
    let opening = vec![json!({"role": "user", "content": "hello"})];
    let mut more = tools();
    more.push(common::anthropic_tool(
        "mcp__fs__list_dir",
        "List the entries of a directory.",
        json!({"path": {"type": "string"}}),
        &["path"],
    ));
    let mut convs = Vec::new();
    for c in 0..2 {
        let text = send(&proxy, c, &opening, &tools());
        let mut messages = opening.clone();
        messages.push(assistant(&text));
        messages.push(json!({"role": "user", "content": "and now?"}));
        convs.push(messages);
    }
    for (c, messages) in convs.iter().enumerate() {
        send(&proxy, c, messages, &more);
    }
    let turns = upstream.played(4);
    (turns[2]["body"].clone(), turns[3]["body"].clone())
}

/// Conversations that open alike but carry different ids of their harness's own (Claude Code's
/// `x-claude-code-session-id`, an OpenAI `prompt_cache_key`) keep their own sessions: a tool that
/// appears is announced to each. Without an id they share one, and the notice goes to the first
/// only (the limit the README states).
#[test]
fn conversations_that_open_alike_keep_their_own_notices_by_their_harness_id() {
    let announced = |body: &Value, key: &str| body[key].to_string().contains("mcp__fs__list_dir");
    let anthropic = |header: Option<&'static str>| {
        move |proxy: &ProxyProc, c: usize, messages: &[Value], tools: &[Value]| {
            let body = json!({"model": "m", "max_tokens": 256, "system": "You help.",
                              "tools": tools, "messages": messages});
            let id = format!("{}-{c}", header.unwrap_or_default());
            let mut headers = HEADERS.to_vec();
            if header.is_some() {
                headers.push(("x-claude-code-session-id", id.as_str()));
            }
            let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
            assert_eq!(status, 200, "{answer}");
            answer["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
    };
    let assistant = |text: &str| json!({"role": "assistant", "content": text});

    let s = Scratch::new("proxy-harness-header");
    let (a, b) = two_conversations_gain_a_tool(&s, "", anthropic(Some("cc")), assistant);
    assert!(announced(&a, "messages"), "A is told: {a}");
    assert!(announced(&b, "messages"), "B is told too: {b}");

    let s = Scratch::new("proxy-harness-none");
    let (a, b) = two_conversations_gain_a_tool(&s, "", anthropic(None), assistant);
    assert!(announced(&a, "messages"), "A is told: {a}");
    assert!(
        !announced(&b, "messages"),
        "without an id B shares A's session, which was told: {b}"
    );

    let s = Scratch::new("proxy-harness-cache-key");
    let chat = |proxy: &ProxyProc, c: usize, messages: &[Value], tools: &[Value]| {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t["name"],
                "description": t["description"], "parameters": t["input_schema"]}})
            })
            .collect();
        let mut all = vec![json!({"role": "system", "content": "You help."})];
        all.extend(messages.iter().cloned());
        let body = json!({"model": "m", "messages": all, "tools": tools,
                          "prompt_cache_key": format!("conversation-{c}")});
        let (status, answer) = post(
            &format!("{}/v1/chat/completions", proxy.url),
            &body,
            &BEARER,
        );
        assert_eq!(status, 200, "{answer}");
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let (a, b) = two_conversations_gain_a_tool(&s, "", chat, assistant);
    assert!(announced(&a, "messages"), "A is told: {a}");
    assert!(announced(&b, "messages"), "B is told too: {b}");
}

/// A search hit on a client tool the proxy keeps in the upstream list says to call it directly,
/// under the client's name, with no `defer_execute` form; a deferred hit keeps its call form.
#[test]
fn a_search_hit_on_a_resident_client_tool_says_to_call_it_directly() {
    let s = Scratch::new("proxy-pinned-hit");
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["Read", "mcp__fs__read_file"]}}]},
        {"text": "Fine."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[defer]\nrules = [\"NoDefer(^Read$)\"]\n",
        &[],
    );
    send(
        &proxy,
        &tools(),
        &[json!({"role": "user", "content": "read a.txt"})],
    );
    let turns = upstream.played(2);
    let result = turns[1]["body"]["messages"].to_string();
    assert!(
        result.contains("Read (already in your tool list with its schema: call it directly)"),
        "{result}"
    );
    assert!(
        !result.contains("defer_execute {\\\"tool_name\\\":\\\"Read\\\""),
        "{result}"
    );
    assert!(
        result.contains("defer_execute {\\\"tool_name\\\":\\\"mcp__fs__read_file\\\""),
        "{result}"
    );
}

/// A request sent again as it was (a client's retry, a regenerated answer) is the same turn:
/// it neither ages the session's activations nor counts as a turn in the log, so a tool found
/// just before stays active through the retries.
#[test]
fn a_request_sent_again_is_the_same_turn() {
    let s = Scratch::new("proxy-resend");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__fs__read_file"]}}]},
            {"text": "Found it."},
            {"text": "Reading."},
            {"text": "Reading now."},
            {"tool_uses": [{"name": "defer_execute",
                            "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "x"}}}]},
            {"text": "It had expired."}
        ]}),
    );
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[session]\nactivation_ttl_turns = 1\n",
        &[],
    );
    let mut messages = vec![json!({"role": "user", "content": "find the file reader"})];
    let answer = send(&proxy, &tools(), &messages);
    answered(&mut messages, &answer);
    messages.push(json!({"role": "user", "content": "now read x"}));
    // The same request three times; the third answer is the call.
    for _ in 0..2 {
        send(&proxy, &tools(), &messages);
    }
    let answer = send(&proxy, &tools(), &messages);
    let names: Vec<Value> = tool_uses(&answer)
        .iter()
        .map(|b| b["name"].clone())
        .collect();
    assert_eq!(
        names,
        [json!("mcp__fs__read_file")],
        "{answer}\n{}",
        proxy.log()
    );
    let log = proxy.log();
    assert_eq!(proxy_log_turns(&log), ["1", "2", "2", "2"], "{log}");
}

/// The `turn=` of each request line of the proxy's log, in order.
fn proxy_log_turns(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|l| l.split(" turn=").nth(1))
        .filter_map(|rest| rest.split(' ').next())
        .collect()
}

/// Scratch: `defer_execute` of `bash` (passed along) beside a client tool `Bash`.
#[test]
fn scratch_defer_execute_of_bash_beside_a_client_bash() {
    let s = Scratch::new("proxy-defer-fold");
    let script = json!({"steps": [
        {"tool_uses": [
            {"name": "defer_execute", "input": {"tool_name": "bash", "params": {"command": "ls"}}}]},
        {"text": "Done."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut list = tools();
    list.push(common::anthropic_tool(
        "Bash",
        "Run a shell command.",
        json!({"command": {"type": "string"}}),
        &["command"],
    ));
    list.push(json!({"type": "bash_20250124", "name": "bash"}));
    let messages = vec![json!({"role": "user", "content": "look around"})];
    let answer = send(&proxy, &list, &messages);
    eprintln!("ANSWER {answer}");
    let uses = tool_uses(&answer);
    assert_eq!(uses.len(), 1, "{answer}");
    assert_eq!(uses[0]["name"], "bash", "{answer}");
}

/// A Responses response object echoes the request's `tools` and `tool_choice` as the client
/// sent them, streamed or not, though the upstream got the frozen list and a choice of
/// `defer_execute`.
#[test]
fn a_responses_answer_echoes_the_clients_tool_choice() {
    let s = Scratch::new("proxy-echo-choice");
    let call = json!({"name": "defer_execute", "input": {
        "tool_name": "mcp__fs__read_file", "params": {"path": "n.txt"}}});
    let script = json!({"steps": [{"tool_uses": [call]}, {"tool_uses": [call]}]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let choice = json!({"type": "function", "name": "mcp__fs__read_file"});
    for stream in [false, true] {
        let answer = respond(
            &proxy,
            json!({"input": "read n.txt", "tool_choice": choice, "stream": stream}),
        );
        let response = if stream {
            let text = answer.as_str().expect("an event stream");
            let last = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| serde_json::from_str::<Value>(d.trim()).expect("JSON"))
                .next_back()
                .expect("events");
            assert_eq!(last["type"], "response.completed", "{text}");
            last["response"].clone()
        } else {
            answer
        };
        assert_eq!(response["tool_choice"], choice, "{response}");
        assert_eq!(
            response["tools"],
            Value::Array(responses_tools()),
            "{response}"
        );
        assert_eq!(function_calls(&response)[0]["name"], "mcp__fs__read_file");
    }
    let turns = upstream.played(2);
    assert_eq!(turns[0]["body"]["tool_choice"]["name"], "defer_execute");
}

/// A reminder points at `tool_search` only in a session whose list has it: with nothing deferred
/// the list has no `tool_search`, and the reminder's text leaves the line out.
#[test]
fn a_reminder_points_at_tool_search_only_when_the_session_has_it() {
    let rule = "[[reminders]]\nid = \"mig\"\ncategory = \"database migration checks\"\n\
                message = \"Schema changes usually go with the migration checks.\"\n\
                search_hint = [\"migration check\"]\nintents = [\"migration\"]\n";
    for (name, defer, searchable) in [
        (
            "proxy-reminder-nodefer",
            "[defer]\ndefault = false\n",
            false,
        ),
        ("proxy-reminder-defer", "", true),
    ] {
        let s = Scratch::new(name);
        // The list has Read when nothing is deferred, tool_search when everything is.
        let script = json!({"steps": [{"text": "Done."}], "match": ["Read", "tool_search"]});
        let upstream = Upstream::start(&s, &script);
        let proxy = ProxyProc::start(&s, &upstream.url(), &format!("{defer}{rule}"), &[]);
        send(
            &proxy,
            &tools(),
            &[json!({"role": "user", "content": "write the migration"})],
        );
        let turns = upstream.played(1);
        let body = &turns[0]["body"];
        let listed = body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "tool_search"));
        assert_eq!(listed, searchable, "{name}: {}", body["tools"]);
        let messages = body["messages"].to_string();
        assert!(
            messages.contains("Schema changes usually go with the migration checks."),
            "{name}: the reminder fired: {messages}"
        );
        assert_eq!(
            messages.contains("To find these tools: tool_search"),
            searchable,
            "{name}: {messages}"
        );
    }
}
