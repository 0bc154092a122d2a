//! End-to-end tests of `toolshelf proxy` with the official Python SDKs as its clients: the
//! Anthropic SDK on Messages, the OpenAI SDK on Chat Completions and Responses, each plain and
//! streaming (through the SDKs' stream helpers). The real proxy binary runs in front of the
//! scripted model API (`fixtures/scripted_upstream.py`), which plays the model's turns and
//! records every request it receives; `fixtures/sdk_client.py` runs an agent loop on the SDKs
//! and reports what they parsed, what they raised and the bytes that went over the wire.
//!
//! The conversation tests check what each side sees: the client a plain tool call of its own
//! tool and never the meta-tools, the upstream a frozen tool list and a conversation that only
//! grows. The fault tests check that upstream errors (statuses, and error events mid-stream),
//! broken streams, stalled upstreams, departing clients, broken JSON and oversized bodies end in a
//! clear answer, and that the proxy serves on after each.
//!
//! The SDKs are installed by `scripts/install-clients.sh` (`scripts/test` runs it); when they are
//! missing these tests fail and say so, they never skip. Every run of the client has a deadline
//! and every request a timeout; the assertions are about what happens, never about how fast.

#[path = "../common/mod.rs"]
mod common;
mod framing;
mod sdk;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::*;
use framing::{check_stream, stream_error, wire_events};
use sdk::*;

/// One agent loop of two requests through the proxy, checked from both sides.
fn agent_loop(api: Api, stream: bool) {
    let mode = if stream { "stream" } else { "json" };
    let tag = format!("sdk-{}-{mode}", api.name());
    let s = Scratch::new(&tag);
    let upstream = Upstream::start(&s, &json!([search_step(), execute_step(), answer_step()]));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let prompt = format!("What is the weather in Paris? ({tag})");
    let report = run_client(&s, "loop", &spec(api, stream, &proxy, &prompt, json!({})));
    let what = format!("{} {mode}", api.name());

    // The client's side.
    assert_eq!(
        report["sdk"],
        json!({"anthropic": ANTHROPIC_SDK_VERSION, "openai": OPENAI_SDK_VERSION}),
        "the pinned SDKs"
    );
    let reqs = requests(&report);
    assert_eq!(
        reqs.len(),
        2,
        "{what}: two requests, each parsed by the SDK: {report:#}"
    );
    for r in reqs {
        assert_eq!(r["ok"], true, "{what}: the SDK parsed the response: {r:#}");
        let usage = &r["usage"];
        let tokens = |k: &str| usage[k].as_u64().unwrap_or(0);
        assert!(
            tokens("input_tokens").max(tokens("prompt_tokens")) > 0
                && tokens("output_tokens").max(tokens("completion_tokens")) > 0,
            "{what}: usage with tokens both ways: {usage}"
        );
        if stream {
            assert!(
                !r["events"].as_array().expect("events").is_empty(),
                "{what}: the SDK streamed events"
            );
        }
    }
    let calls: Vec<&Value> = reqs
        .iter()
        .flat_map(|r| r["calls"].as_array().expect("calls"))
        .collect();
    assert_eq!(
        calls.len(),
        1,
        "{what}: exactly one tool call reached the client: {calls:?}"
    );
    assert_eq!(calls[0]["name"], TARGET, "{what}: the real tool's name");
    assert_eq!(
        calls[0]["input"],
        target_params(),
        "{what}: the params as the input"
    );
    assert_eq!(
        reqs[0]["calls"].as_array().map(Vec::len),
        Some(1),
        "{what}: the call ends the first request"
    );
    assert_eq!(
        reqs[0]["stop"],
        match api {
            Api::Anthropic => "tool_use",
            Api::Chat => "tool_calls",
            Api::Responses => "completed",
        },
        "{what}: the first response stops for the call"
    );
    assert!(
        reqs[0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Let me find a forecast tool."),
        "{what}: the text of the search round reaches the client: {}",
        reqs[0]["text"]
    );
    assert_eq!(reqs[1]["text"], FINAL_TEXT, "{what}: the answer");
    let wire = report["wire"].as_array().expect("wire");
    assert_eq!(wire.len(), 2, "{what}: two exchanges");
    for (i, w) in wire.iter().enumerate() {
        assert_eq!(w["status"], 200, "{what}: exchange {i}");
        let body = w["body"].as_str().unwrap_or_default();
        for meta in ["tool_search", "defer_execute"] {
            assert!(
                !body.contains(meta),
                "{what}: the client never sees {meta}; exchange {i}:\n{body}"
            );
        }
        if stream {
            check_stream(api, &format!("{what}, exchange {i}"), &wire_events(w));
        } else {
            assert!(
                w["content_type"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("application/json"),
                "{w:#}"
            );
        }
    }

    // The upstream's side.
    let turns = upstream.played(3);
    let bodies = raw_bodies(&turns);
    let tools = bodies[0]["tools"].to_string();
    for (i, b) in bodies.iter().enumerate() {
        assert_eq!(
            b["tools"].to_string(),
            tools,
            "{what}: upstream request {i} has the same tools, byte for byte"
        );
        assert_eq!(
            b["stream"].as_bool() == Some(true),
            stream,
            "{what}: upstream request {i} streams as the client asked"
        );
    }
    assert_eq!(
        api.tool_names(&bodies[0]),
        ["tool_search", "defer_execute"],
        "{what}: every client tool is deferred"
    );
    let index = api.search_description(&bodies[0]);
    assert!(
        index.contains("<available_deferred_tools>")
            && index.contains("\nmcp__weather\n")
            && index.contains("  get_forecast\n"),
        "{what}: tool_search's description lists the deferred tools, by server: {index}"
    );
    let key = api.conversation_key();
    let convs: Vec<&Vec<Value>> = bodies
        .iter()
        .map(|b| b[key].as_array().expect("a conversation"))
        .collect();
    for i in 1..convs.len() {
        let (before, after) = (convs[i - 1], convs[i]);
        assert!(
            after.len() > before.len(),
            "{what}: request {i} adds to the conversation"
        );
        for (k, e) in before.iter().enumerate() {
            assert_eq!(
                after[k].to_string(),
                e.to_string(),
                "{what}: request {i} begins with request {}'s conversation; entry {k} differs",
                i - 1
            );
        }
        let joined = |c: &[Value]| c.iter().map(Value::to_string).collect::<String>();
        assert!(
            joined(after).starts_with(&joined(before)),
            "{what}: a byte prefix"
        );
    }
    let answers = upstream.answers();
    let defer = &answers[1]["tool_uses"][0];
    assert_eq!(
        defer["name"], "defer_execute",
        "{what}: the script's second step"
    );
    let defer_id = defer["id"].as_str().expect("a call id");
    assert_eq!(
        calls[0]["id"], defer_id,
        "{what}: the client's call keeps the defer_execute call's id"
    );
    let results = turns[2]["tool_results"].as_array().expect("tool_results");
    let mine: Vec<&Value> = results
        .iter()
        .filter(|r| r["content"] == TOOL_RESULT)
        .collect();
    assert_eq!(
        mine.len(),
        1,
        "{what}: the client's result reaches the upstream once: {results:#?}"
    );
    assert_eq!(
        mine[0]["id"], defer_id,
        "{what}: the result answers the defer_execute call"
    );
    let upstream_calls = api.calls(convs[2]);
    let answered = upstream_calls
        .iter()
        .find(|(id, _, _)| id == defer_id)
        .unwrap_or_else(|| panic!("{what}: no call {defer_id} in {upstream_calls:?}"));
    assert_eq!(
        (&answered.1, &answered.2),
        (
            &"defer_execute".to_owned(),
            &json!({"tool_name": TARGET, "params": target_params()})
        ),
        "{what}: the upstream sees the call as the defer_execute call its model made"
    );
    assert!(
        upstream_calls
            .iter()
            .all(|(_, name, _)| name == "tool_search" || name == "defer_execute"),
        "{what}: the upstream sees only the meta-tools called: {upstream_calls:?}"
    );

    // The proxy's figures.
    let totals = &totals_after(&proxy, 3);
    assert_eq!(totals["rounds"], 3, "{what}: {totals}");
    assert_eq!(totals["requests"], 2, "{what}: {totals}");
    assert_eq!(totals["rewritten"], 2, "{what}: {totals}");
    assert!(totals["searches"].as_u64() >= Some(1), "{what}: {totals}");
    assert_eq!(totals["prefix_breaks"], 0, "{what}: {totals}");
    assert_eq!(totals["errors"], 0, "{what}: {totals}");
}

#[test]
fn anthropic_messages_agent_loop() {
    agent_loop(Api::Anthropic, false);
}

#[test]
fn anthropic_messages_agent_loop_streamed() {
    agent_loop(Api::Anthropic, true);
}

#[test]
fn openai_chat_agent_loop() {
    agent_loop(Api::Chat, false);
}

#[test]
fn openai_chat_agent_loop_streamed() {
    agent_loop(Api::Chat, true);
}

#[test]
fn openai_responses_agent_loop() {
    agent_loop(Api::Responses, false);
}

#[test]
fn openai_responses_agent_loop_streamed() {
    agent_loop(Api::Responses, true);
}

// --- faults ---------------------------------------------------------------------------------

/// Upstream 429, 500 and 529 on the round after a search reach the client: as the upstream's
/// status and body when nothing was sent yet, as the format's error event inside a stream
/// that showed the client the search round's text. A stream that showed nothing (the model only
/// searched) has sent no status yet: the upstream's status, body and `retry-after` go out, as
/// for a request not streamed, so the SDK can retry.
fn upstream_errors(api: Api) {
    let cases = [
        (429, "rate_limit_error", "slow down, scripted"),
        (500, "api_error", "internal trouble, scripted"),
        (529, "overloaded_error", "Overloaded, scripted"),
    ];
    let body = |kind: &str, message: &str| match api {
        Api::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
        _ => json!({"error": {"type": kind, "message": message, "code": kind, "param": null}}),
    };
    // The search round: with text the client sees, or with the call alone.
    let quiet_search = || {
        let mut step = search_step();
        step.as_object_mut().expect("a step").remove("text");
        step
    };
    let mut steps = Vec::new();
    for pass in 0..3 {
        for (status, kind, message) in cases {
            steps.push(if pass < 2 {
                search_step()
            } else {
                quiet_search()
            });
            steps.push(json!({"status": status, "body": body(kind, message),
                              "headers": {"retry-after": "7"}}));
        }
    }
    let s = Scratch::new(&format!("sdk-errors-{}", api.name()));
    let upstream = Upstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut specs = Vec::new();
    for pass in 0..3 {
        for (status, _, _) in cases {
            let stream = pass > 0;
            let prompt = format!("weather, please ({status}, pass {pass})");
            specs.push(spec(api, stream, &proxy, &prompt, json!({"requests": 1})));
        }
    }
    let reports = run_client(&s, "errors", &Value::Array(specs));
    let reports = reports.as_array().expect("one report per spec");
    for (i, report) in reports.iter().enumerate() {
        let pass = i / cases.len();
        let (stream, shown) = (pass > 0, pass == 1);
        let (status, kind, message) = cases[i % cases.len()];
        let what = format!(
            "{} {status} (stream: {stream}, text shown: {shown})",
            api.name()
        );
        let r = only_request(report);
        assert_eq!(r["ok"], false, "{what}: the SDK raised: {r:#}");
        let wire = &report["wire"][0];
        if shown {
            assert_eq!(wire["status"], 200, "{what}: the stream had started");
            let (got_kind, got_message) = stream_error(api, &what, wire);
            assert_eq!(
                got_kind, kind,
                "{what}: the error's type follows the status"
            );
            assert!(
                got_message.contains(&status.to_string()) && got_message.contains(message),
                "{what}: the message names the upstream's status and carries its message: {got_message}"
            );
            assert!(
                !got_message.contains('{'),
                "{what}: the upstream's message, not its JSON body: {got_message}"
            );
            // The SDK read the stream's error event (the Responses stream helper reports the
            // stream that never completed).
            let err = &r["error"];
            match api {
                Api::Responses => assert!(
                    err["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("response.completed"),
                    "{what}: {err}"
                ),
                _ => assert!(
                    err["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains(message),
                    "{what}: the SDK's error carries the message: {err}"
                ),
            }
        } else {
            assert_eq!(wire["status"], status, "{what}: the upstream's status");
            let got: Value = serde_json::from_str(wire["body"].as_str().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{what}: the body is not JSON ({e}): {wire:#}"));
            assert_eq!(got, body(kind, message), "{what}: the upstream's body");
            assert_eq!(
                wire["headers"]["retry-after"], "7",
                "{what}: the upstream's headers"
            );
            assert_eq!(
                r["error"]["status"], status,
                "{what}: the SDK's error: {r:#}"
            );
        }
    }
    // Every fault came on the round after a search the proxy answered.
    let turns = upstream.played(3 * 2 * cases.len());
    for pair in turns.chunks(2) {
        let results = pair[1]["tool_results"].as_array().expect("tool_results");
        assert!(
            results
                .iter()
                .any(|r| r["content"].as_str().unwrap_or_default().contains(TARGET)),
            "the faulty round carries the search's answer: {results:#?}"
        );
    }
    // A failed request still books the rounds and searches it had.
    let totals = &totals_after(&proxy, 3 * cases.len() as u64);
    assert_eq!(totals["errors"], 3 * cases.len(), "{totals}");
    assert_eq!(totals["searches"], 3 * cases.len(), "{totals}");
    assert_eq!(totals["rounds"], 3 * cases.len(), "{totals}");
}

#[test]
fn anthropic_upstream_errors_reach_the_client() {
    upstream_errors(Api::Anthropic);
}

#[test]
fn openai_chat_upstream_errors_reach_the_client() {
    upstream_errors(Api::Chat);
}

#[test]
fn openai_responses_upstream_errors_reach_the_client() {
    upstream_errors(Api::Responses);
}

/// An error event the upstream streams mid-answer, on the round after a search (a provider's
/// overloaded model), reaches the client as the upstream wrote it, after the text that came
/// before it: its type is what the client decides a retry by.
#[test]
fn an_upstream_error_event_mid_stream_reaches_the_client_as_sent() {
    let partial = "Partial answer before the failure.";
    let cases = [
        (
            Api::Anthropic,
            4,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        (
            Api::Chat,
            2,
            json!({"error": {"type": "server_error", "message": "The server is overloaded",
                             "code": "overloaded", "param": null}}),
        ),
        (
            Api::Responses,
            5,
            json!({"type": "error", "code": "server_is_overloaded",
                   "message": "The server is overloaded", "param": null}),
        ),
    ];
    let mut steps = Vec::new();
    for (_, after, error) in &cases {
        steps.push(search_step());
        steps.push(json!({"text": partial, "error_after": after, "error": error}));
    }
    let s = Scratch::new("sdk-error-event");
    let upstream = Upstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let specs: Vec<Value> = cases
        .iter()
        .map(|(api, _, _)| {
            let prompt = format!("weather ({} overloaded)", api.name());
            spec(*api, true, &proxy, &prompt, json!({"requests": 1}))
        })
        .collect();
    let reports = run_client(&s, "error-event", &Value::Array(specs));
    for (report, (api, _, error)) in reports.as_array().expect("reports").iter().zip(&cases) {
        let what = api.name();
        let r = only_request(report);
        assert_eq!(r["ok"], false, "{what}: the SDK raised: {r:#}");
        let wire = &report["wire"][0];
        stream_error(*api, what, wire);
        let events = wire_events(wire);
        // The Responses stream ends with `response.failed` after the error event (checked above).
        let error_at = events.len() - if *api == Api::Responses { 2 } else { 1 };
        let mut last = events[error_at]["data"].clone();
        if *api == Api::Responses {
            assert_eq!(last["sequence_number"], json!(error_at), "{what}");
            last.as_object_mut()
                .expect("an object")
                .remove("sequence_number");
        }
        assert_eq!(&last, error, "{what}: the upstream's error event, as sent");
        let before = wire["body"].as_str().unwrap_or_default();
        assert!(
            before.contains(partial),
            "{what}: the text before the error reached the client:\n{before}"
        );
        if *api == Api::Anthropic {
            assert_eq!(
                r["error"]["body"]["error"]["type"], "overloaded_error",
                "{what}: the SDK reads the upstream's error type: {r:#}"
            );
        }
    }
    upstream.played(2 * cases.len());
}

/// The same error events before the client's stream showed anything (the model only searched,
/// and the next round fails as it opens): no status was sent yet, so the client gets the one the
/// event's type means, 529 (Anthropic) or 503 (OpenAI) for an overloaded model, with the error
/// as the body, and its SDK reads the error it would read from the provider.
#[test]
fn an_upstream_error_event_before_any_output_gets_the_status_it_means() {
    let cases = [
        (
            Api::Anthropic,
            1,
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        (
            Api::Chat,
            1,
            503,
            json!({"error": {"type": "server_error", "message": "The server is overloaded",
                             "code": "overloaded", "param": null}}),
        ),
        (
            Api::Responses,
            2,
            503,
            json!({"type": "error", "code": "server_is_overloaded",
                   "message": "The server is overloaded", "param": null}),
        ),
    ];
    let mut steps = Vec::new();
    for (_, after, _, error) in &cases {
        let mut quiet = search_step();
        quiet.as_object_mut().expect("a step").remove("text");
        steps.push(quiet);
        steps.push(json!({"text": "never shown", "error_after": after, "error": error}));
    }
    let s = Scratch::new("sdk-error-event-early");
    let upstream = Upstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let specs: Vec<Value> = cases
        .iter()
        .map(|(api, ..)| {
            let prompt = format!("weather ({} overloaded early)", api.name());
            spec(*api, true, &proxy, &prompt, json!({"requests": 1}))
        })
        .collect();
    let reports = run_client(&s, "error-event-early", &Value::Array(specs));
    for (report, (api, _, status, error)) in reports.as_array().expect("reports").iter().zip(&cases)
    {
        let what = api.name();
        let r = only_request(report);
        assert_eq!(r["ok"], false, "{what}: the SDK raised: {r:#}");
        let wire = &report["wire"][0];
        assert_eq!(wire["status"], *status, "{what}: {wire:#}");
        let body: Value = serde_json::from_str(wire["body"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{what}: the body is not JSON ({e}): {wire:#}"));
        match api {
            Api::Responses => assert_eq!(
                (&body["error"]["code"], &body["error"]["message"]),
                (&error["code"], &error["message"]),
                "{what}: {body:#}"
            ),
            _ => assert_eq!(&body, error, "{what}: the event's error as the body"),
        }
        assert_eq!(
            r["error"]["status"], *status,
            "{what}: the SDK's error: {r:#}"
        );
    }
    upstream.played(2 * cases.len());
}

/// A Responses response that fails (`response.failed`, or a JSON answer whose status is
/// `failed`) is a failed request, not an answer. Before the client's stream showed anything (as
/// the stream opens, or on the round after a search the model made without a word), and for a
/// response not streamed, the client gets the status the error's code means with the error as
/// OpenAI's error body, which its SDK raises (and would retry); after the stream showed text, the
/// stream ends with the upstream's `response.failed`. Each is logged as failed, naming the code,
/// and counts in `errors`.
#[test]
fn a_failed_response_is_a_failed_request() {
    let failed = json!({"code": "server_error",
                        "message": "The model failed to generate a response."});
    let limited = json!({"code": "rate_limit_exceeded", "message": "Too many requests, scripted"});
    let partial = "Partial answer before the failure.";
    let mut quiet = search_step();
    quiet.as_object_mut().expect("a step").remove("text");
    let steps = [
        json!({"text": "never shown", "failure": failed, "failed_after": 1}),
        quiet,
        json!({"text": "never shown", "failure": limited, "failed_after": 2}),
        json!({"text": "never shown", "failure": failed}),
        search_step(),
        json!({"text": partial, "failure": failed, "failed_after": 5}),
    ];
    let s = Scratch::new("sdk-response-failed");
    let upstream = Upstream::start(&s, &Value::Array(steps.to_vec()));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    // (what, streamed, the status the client gets, the error)
    let cases = [
        ("failed as the stream opens", true, 502, &failed),
        ("failed after a quiet search", true, 429, &limited),
        ("failed, not streamed", false, 502, &failed),
        ("failed after text was shown", true, 200, &failed),
    ];
    let specs: Vec<Value> = cases
        .iter()
        .map(|(what, stream, ..)| {
            let prompt = format!("weather ({what})");
            spec(
                Api::Responses,
                *stream,
                &proxy,
                &prompt,
                json!({"requests": 1}),
            )
        })
        .collect();
    let reports = run_client(&s, "response-failed", &Value::Array(specs));
    for (report, (what, _, status, error)) in
        reports.as_array().expect("reports").iter().zip(&cases)
    {
        let r = only_request(report);
        assert_eq!(r["ok"], false, "{what}: the SDK raised: {r:#}");
        let wire = &report["wire"][0];
        assert_eq!(wire["status"], *status, "{what}: {wire:#}");
        if *status == 200 {
            let events = wire_events(wire);
            let types = framing::event_types(&events);
            assert!(!types.contains(&"error".to_owned()), "{what}: {types:?}");
            let last = events.last().expect("events");
            assert_eq!(last["event"], "response.failed", "{what}: {types:?}");
            assert_eq!(last["data"]["sequence_number"], json!(events.len() - 1));
            assert_eq!(
                &last["data"]["response"]["error"], *error,
                "{what}: the upstream's error"
            );
            assert!(
                wire["body"].as_str().unwrap_or_default().contains(partial),
                "{what}: the text before the failure reached the client"
            );
            continue;
        }
        let body: Value = serde_json::from_str(wire["body"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{what}: the body is not JSON ({e}): {wire:#}"));
        assert_eq!(
            (&body["error"]["code"], &body["error"]["message"]),
            (&error["code"], &error["message"]),
            "{what}: {body:#}"
        );
        assert_eq!(
            r["error"]["status"], *status,
            "{what}: the SDK's error: {r:#}"
        );
    }
    upstream.played(6);
    // The failed rounds are not counted; the two searches' are.
    let totals = totals_after(&proxy, 2);
    assert_eq!(
        (&totals["errors"], &totals["rounds"]),
        (&json!(4), &json!(2)),
        "{totals}"
    );
    let log = proxy.log();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("openai-responses session=") && l.contains(" failed: "))
        .collect();
    assert_eq!(failures.len(), 4, "{log}");
    for (line, code) in failures.iter().zip([
        "server_error",
        "rate_limit_exceeded",
        "server_error",
        "server_error",
    ]) {
        assert!(
            line.contains(&format!(
                "failed: the upstream response failed (code {code}): "
            )),
            "{line}"
        );
    }
    assert!(
        !log.contains(" prefix="),
        "no request was booked as answered:\n{log}"
    );
}

/// An upstream stream that breaks off mid-event, on the round after a search, ends the client's
/// stream with an error event that says so; the proxy then serves the next request. A JSON
/// answer broken off the same way is a 502 naming the upstream.
#[test]
fn a_cut_upstream_ends_in_a_clear_error_and_the_proxy_serves_on() {
    let mut steps = Vec::new();
    for _api in APIS {
        for _stream in [false, true] {
            steps.push(search_step());
            let mut cut = execute_step();
            cut["cut_after"] = json!(3);
            steps.push(cut);
            steps.push(answer_step());
        }
    }
    let s = Scratch::new("sdk-cut");
    let upstream = Upstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut specs = Vec::new();
    for api in APIS {
        for stream in [false, true] {
            let cut = format!("weather ({} cut, stream {stream})", api.name());
            let next = format!("weather ({} after the cut, stream {stream})", api.name());
            specs.push(spec(api, stream, &proxy, &cut, json!({"requests": 1})));
            specs.push(spec(api, stream, &proxy, &next, json!({"requests": 1})));
        }
    }
    let reports = run_client(&s, "cut", &Value::Array(specs));
    let reports = reports.as_array().expect("one report per spec");
    let mut n = 0;
    for api in APIS {
        for stream in [false, true] {
            let what = format!("{} (stream: {stream})", api.name());
            let (cut, next) = (&reports[n], &reports[n + 1]);
            n += 2;
            let r = only_request(cut);
            assert_eq!(r["ok"], false, "{what}: the SDK raised: {r:#}");
            let wire = &cut["wire"][0];
            if stream {
                let (kind, message) = stream_error(api, &what, wire);
                assert_eq!(kind, "api_error", "{what}");
                assert!(
                    message.contains("upstream stream"),
                    "{what}: the message says the upstream's stream failed: {message}"
                );
            } else {
                assert_eq!(wire["status"], 502, "{what}: {wire:#}");
                let body = wire["body"].as_str().unwrap_or_default();
                assert!(
                    body.contains(&upstream.url()),
                    "{what}: the message names the upstream: {body}"
                );
            }
            let r = only_request(next);
            assert_eq!(r["ok"], true, "{what}: the next request is served: {r:#}");
            assert_eq!(r["text"], FINAL_TEXT, "{what}");
        }
    }
    upstream.played(3 * 2 * 3);
    let log = proxy.log();
    assert!(
        log.contains("the upstream stream ended before the response was complete")
            || log.contains("the upstream stream broke"),
        "the proxy logs the broken stream:\n{log}"
    );
}

/// An upstream that answers a streaming request with one JSON document (a server that ignores
/// `stream`), on the round after a search: the client's stream ends in an error that says so,
/// naming the media type and the document's start, not that the stream ended early. A stream
/// labelled `text/plain` is read as the stream it is.
#[test]
fn a_json_answer_to_a_streaming_request_is_named_as_one() {
    let mut steps = Vec::new();
    for _api in APIS {
        steps.push(search_step());
        steps.push(json!({"status": 200, "body": {"note": "a document, not a stream"}}));
    }
    // A stream mislabelled as plain text is still read as the stream it is.
    for _api in APIS {
        let mut plain = answer_step();
        plain["content_type"] = json!("text/plain; charset=utf-8");
        steps.push(plain);
    }
    let s = Scratch::new("sdk-json-for-stream");
    let upstream = Upstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let specs: Vec<Value> = APIS
        .iter()
        .map(|&api| {
            let prompt = format!("weather ({} answered with JSON)", api.name());
            spec(api, true, &proxy, &prompt, json!({"requests": 1}))
        })
        .collect();
    let mut specs = specs;
    for api in APIS {
        let prompt = format!("weather ({} streamed as text/plain)", api.name());
        specs.push(spec(api, true, &proxy, &prompt, json!({"requests": 1})));
    }
    let reports = run_client(&s, "json-for-stream", &Value::Array(specs));
    let reports = reports.as_array().expect("reports");
    for (report, api) in reports[APIS.len()..].iter().zip(APIS) {
        let r = only_request(report);
        assert_eq!(r["ok"], true, "{}: {r:#}", api.name());
        assert_eq!(r["text"], FINAL_TEXT, "{}", api.name());
    }
    for (report, api) in reports.iter().zip(APIS) {
        let what = api.name();
        let r = only_request(report);
        assert_eq!(r["ok"], false, "{what}: the SDK raised: {r:#}");
        let (kind, message) = stream_error(api, what, &report["wire"][0]);
        assert_eq!(kind, "api_error", "{what}");
        for part in [
            "answered a streaming request with application/json, not an event stream",
            "a document, not a stream",
        ] {
            assert!(message.contains(part), "{what}: {part:?} in {message}");
        }
    }
    upstream.played(3 * APIS.len());
}

/// A client that closes its connection mid-stream: the proxy drops the upstream's stream (the
/// upstream sees its reader go long before the stream's end) and serves the next request.
#[test]
fn a_client_leaving_mid_stream_frees_the_upstream_and_the_proxy_serves_on() {
    let slow = json!({"text": "A long answer, written slowly. ".repeat(80),
                      "event_delay": 0.2});
    let mut steps = Vec::new();
    for _api in APIS {
        steps.push(slow.clone());
        steps.push(answer_step());
    }
    let s = Scratch::new("sdk-leave");
    let upstream = Upstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let mut specs = Vec::new();
    for api in APIS {
        let leave = format!("weather ({} leaving)", api.name());
        let next = format!("weather ({} next)", api.name());
        specs.push(spec(
            api,
            true,
            &proxy,
            &leave,
            json!({"disconnect_after_events": 3, "requests": 1}),
        ));
        specs.push(spec(api, true, &proxy, &next, json!({"requests": 1})));
    }
    let reports = run_client(&s, "leave", &Value::Array(specs));
    let reports = reports.as_array().expect("one report per spec");
    for (i, api) in APIS.iter().enumerate() {
        let (leave, next) = (
            only_request(&reports[2 * i]),
            only_request(&reports[2 * i + 1]),
        );
        assert_eq!(leave["disconnected"], true, "{api:?}: {leave:#}");
        assert_eq!(
            next["ok"], true,
            "{api:?}: the next request is served: {next:#}"
        );
        assert_eq!(next["text"], FINAL_TEXT, "{api:?}");
    }
    // The slow streams are 2,400 characters in 40-character events, 0.2 s apart: a reader that
    // left is noticed by the upstream's next writes only if the proxy let go of the stream.
    let seqs: Vec<Value> = upstream
        .turns()
        .iter()
        .filter(|t| t["step"].as_u64().is_some_and(|s| s % 2 == 0))
        .map(|t| t["seq"].clone())
        .collect();
    assert_eq!(seqs.len(), 3, "three slow streams");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let aborted: Vec<Value> = upstream
            .records()
            .into_iter()
            .filter(|r| r["kind"] == "aborted")
            .collect();
        let log = proxy.log();
        let departures = log
            .matches(" abandoned: the client went away before the answer was whole, after 1 upstream round\n")
            .count();
        if seqs
            .iter()
            .all(|seq| aborted.iter().any(|a| &a["seq"] == seq))
            && departures == 3
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy kept reading the upstream's streams after their clients left; \
             aborted at the upstream: {aborted:?}; the proxy's log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A body that is not JSON, or not an object, is a 400 in the format's error shape, and never
/// reaches the upstream.
#[test]
fn malformed_json_gets_a_400_that_says_so() {
    let s = Scratch::new("sdk-malformed");
    let upstream = Upstream::start(&s, &json!([]));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let cases = [
        (
            r#"{"model": "m", "messages": [{"role": "user", "#,
            None,
            "not valid JSON",
        ),
        ("[1, 2]", None, "must be a JSON object"),
        (
            r#"{"model": "m", "stream": "yes", "messages": [], "input": []}"#,
            None,
            "\"stream\" must be true or false, not \"yes\"",
        ),
        (
            r#"{"model": "m", "messages": [], "input": []}"#,
            Some("gzip"),
            "the request body is \"gzip\"-encoded",
        ),
    ];
    let mut specs = Vec::new();
    for api in APIS {
        for (body, coding, _) in cases {
            let mut headers = json!({"content-type": "application/json"});
            if let Some(c) = coding {
                headers["content-encoding"] = c.into();
            }
            specs.push(json!({"base_url": proxy.url, "timeout": 60,
                              "raw": {"path": api.path(), "body": body, "headers": headers}}));
        }
    }
    let reports = run_client(&s, "malformed", &Value::Array(specs));
    let reports = reports.as_array().expect("one report per spec");
    let mut n = 0;
    for api in APIS {
        for (_, _, says) in cases {
            let raw = &reports[n]["raw"];
            n += 1;
            let what = format!("{} {says}", api.name());
            assert_eq!(raw["status"], 400, "{what}: {raw:#}");
            let body: Value = serde_json::from_str(raw["body"].as_str().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{what}: the error body is not JSON ({e}): {raw:#}"));
            let error = &body["error"];
            if api == Api::Anthropic {
                assert_eq!(
                    body["type"], "error",
                    "{what}: Anthropic's error shape: {body}"
                );
            }
            assert_eq!(error["type"], "invalid_request_error", "{what}: {body}");
            assert!(
                error["message"].as_str().unwrap_or_default().contains(says),
                "{what}: the message says what is wrong: {body}"
            );
        }
    }
    assert!(
        upstream.records().is_empty(),
        "nothing reached the upstream: {:#?}",
        upstream.records()
    );
}

/// A body over `[proxy] max_body_bytes` is a 413 whose message names the limit, read by the SDK
/// as the status error it is, and never reaches the upstream.
#[test]
fn a_body_over_max_body_bytes_gets_a_413_naming_the_limit() {
    let s = Scratch::new("sdk-limit");
    let upstream = Upstream::start(&s, &json!([answer_step()]));
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[proxy]\nmax_body_bytes = 65536\n",
        &[],
    );
    let specs: Vec<Value> = APIS
        .iter()
        .map(|&api| {
            let prompt = format!("weather ({} over the limit)", api.name());
            spec(
                api,
                false,
                &proxy,
                &prompt,
                json!({"pad_bytes": 10 << 20, "requests": 1}),
            )
        })
        .collect();
    let reports = run_client(&s, "limit", &Value::Array(specs));
    for (report, api) in reports.as_array().expect("reports").iter().zip(APIS) {
        let r = only_request(report);
        let err = &r["error"];
        assert_eq!(err["status"], 413, "{api:?}: {r:#}");
        let message = err["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("65536") && message.contains("max_body_bytes"),
            "{api:?}: the message names the limit: {message}"
        );
    }
    assert!(
        upstream.records().is_empty(),
        "nothing reached the upstream: {} requests",
        upstream.records().len()
    );
}

/// A 10 MB conversation under the default limit (32 MiB) is rewritten and answered like any
/// other, plain and streamed.
#[test]
fn a_10_mb_request_under_the_default_limit_is_rewritten() {
    let s = Scratch::new("sdk-large");
    let steps: Vec<Value> = (0..2)
        .flat_map(|_| [search_step(), execute_step(), answer_step()])
        .collect();
    let upstream = Upstream::start(&s, &Value::Array(steps));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let pad = 10 << 20;
    let specs = json!([
        spec(
            Api::Anthropic,
            false,
            &proxy,
            "weather (large, anthropic)",
            json!({"pad_bytes": pad})
        ),
        spec(
            Api::Responses,
            true,
            &proxy,
            "weather (large, responses)",
            json!({"pad_bytes": pad})
        ),
    ]);
    let reports = run_client(&s, "large", &specs);
    for report in reports.as_array().expect("reports") {
        let reqs = requests(report);
        assert_eq!(reqs.len(), 2, "{reqs:#?}");
        assert!(reqs.iter().all(|r| r["ok"] == true), "{reqs:#?}");
        assert_eq!(reqs[0]["calls"][0]["name"], TARGET);
        assert_eq!(reqs[1]["text"], FINAL_TEXT);
    }
    let turns = upstream.played(6);
    for t in &turns {
        let raw = t["raw"].as_str().unwrap_or_default();
        assert!(
            raw.len() > pad,
            "the whole conversation went upstream: {} bytes",
            raw.len()
        );
        assert!(
            t["tool_names"] == json!(["tool_search", "defer_execute"]),
            "rewritten: {}",
            t["tool_names"]
        );
    }
    let totals = &totals_after(&proxy, 6);
    assert_eq!(totals["rewritten"], 4, "{totals}");
    assert_eq!(totals["prefix_breaks"], 0, "{totals}");
}

/// An upstream that stops answering, before its headers, inside a JSON body, inside an error's
/// body, or inside a stream on the round after a search: each request ends once
/// `[proxy] upstream_timeout_secs` has passed, in an error that says so (a 504, or the stream's
/// error event once the stream has shown the client something), and the proxy serves the next
/// one.
#[test]
fn an_upstream_that_stops_answering_times_out() {
    let stall = json!({"hang": 30, "hang_after": 5});
    let with_stall = |mut step: Value| {
        if let (Value::Object(m), Value::Object(extra)) = (&mut step, stall.clone()) {
            m.extend(extra);
        }
        step
    };
    let error = json!({"error": {"type": "rate_limit_error", "message": "slow down"}});
    let error_step = || json!({"status": 429, "body": error});
    // A search round the client sees nothing of: the call alone.
    let quiet_search = || {
        let mut step = search_step();
        step.as_object_mut().expect("a step").remove("text");
        step
    };
    // (what, API, streamed, the steps it plays)
    let cases = [
        ("no headers", Api::Chat, false, vec![json!({"hang": 30})]),
        (
            "half a body",
            Api::Anthropic,
            false,
            vec![with_stall(answer_step())],
        ),
        (
            "half an error",
            Api::Responses,
            false,
            vec![with_stall(error_step())],
        ),
        (
            "a stalled stream",
            Api::Responses,
            true,
            vec![search_step(), with_stall(execute_step())],
        ),
        (
            "an error stalled mid-stream",
            Api::Anthropic,
            true,
            vec![search_step(), with_stall(error_step())],
        ),
        (
            "quietly, a stalled stream",
            Api::Anthropic,
            true,
            vec![quiet_search(), with_stall(execute_step())],
        ),
        (
            "quietly, no headers",
            Api::Responses,
            true,
            vec![quiet_search(), json!({"hang": 30})],
        ),
        ("after the stalls", Api::Chat, true, vec![answer_step()]),
    ];
    let steps: Vec<Value> = cases.iter().flat_map(|c| c.3.clone()).collect();
    let s = Scratch::new("sdk-timeout");
    let upstream = Upstream::start(&s, &Value::Array(steps.clone()));
    let proxy = ProxyProc::start(
        &s,
        &upstream.url(),
        "[proxy]\nupstream_timeout_secs = 2\n",
        &[],
    );
    let specs: Vec<Value> = cases
        .iter()
        .map(|(what, api, stream, _)| {
            let prompt = format!("weather ({what})");
            spec(*api, *stream, &proxy, &prompt, json!({"requests": 1}))
        })
        .collect();
    let reports = run_client(&s, "timeout", &Value::Array(specs));
    let reports = reports.as_array().expect("one report per spec");
    for (report, (what, api, stream, _)) in reports.iter().zip(&cases) {
        let r = only_request(report);
        if *what == "after the stalls" {
            assert_eq!(r["ok"], true, "the next request is served: {r:#}");
            assert_eq!(r["text"], FINAL_TEXT);
        } else if *stream && !what.starts_with("quietly") {
            let (_, message) = stream_error(*api, what, &report["wire"][0]);
            assert!(
                message.contains("stalled for 2 s") || message.contains("within 2 s"),
                "{what}: the error event says the upstream stopped answering: {message}"
            );
        } else {
            assert_eq!(
                r["error"]["status"], 504,
                "{what}: a gateway timeout: {r:#}"
            );
            let message = r["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("within 2 s") && message.contains("upstream_timeout_secs"),
                "{what}: the message names the limit: {message}"
            );
        }
    }
    upstream.played(steps.len());
}
