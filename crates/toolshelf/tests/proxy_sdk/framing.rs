//! What the client's streams must look like, checked on the events that went over the wire:
//! each format's framing as its provider documents it, and the error event a failed stream
//! ends with.

use serde_json::{Value, json};

use crate::sdk::{Api, id};

/// The events of a wire record, their data parsed where it is JSON (`[DONE]` stays a string).
pub fn wire_events(wire: &Value) -> Vec<Value> {
    wire["events"]
        .as_array()
        .unwrap_or_else(|| panic!("not a stream: {wire:#}"))
        .iter()
        .map(|e| {
            let data = e["data"].as_str().unwrap_or_default();
            json!({"event": e["event"],
                   "data": serde_json::from_str::<Value>(data).unwrap_or_else(|_| data.into()),
                   "unterminated": e.get("unterminated").is_some()})
        })
        .collect()
}

pub fn event_types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e["data"]["type"].as_str() {
            Some(t) => t.to_owned(),
            None => e["data"]
                .as_str()
                .map_or_else(|| "(chunk)".to_owned(), str::to_owned),
        })
        .collect()
}

/// Anthropic: one `message_start` first, blocks numbered from 0 in order (start, deltas, stop),
/// one `message_delta` then one `message_stop` last; each event named as its type.
pub fn check_anthropic_stream(what: &str, events: &[Value]) {
    let types = event_types(events);
    let count = |t: &str| types.iter().filter(|x| *x == t).count();
    assert_eq!(
        types.first().map(String::as_str),
        Some("message_start"),
        "{what}: {types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("message_stop"),
        "{what}: {types:?}"
    );
    assert_eq!(
        count("message_start"),
        1,
        "{what}: one message_start: {types:?}"
    );
    assert_eq!(
        count("message_stop"),
        1,
        "{what}: one message_stop: {types:?}"
    );
    assert_eq!(
        count("message_delta"),
        1,
        "{what}: one message_delta: {types:?}"
    );
    assert_eq!(types[types.len() - 2], "message_delta", "{what}: {types:?}");
    assert_eq!(count("error"), 0, "{what}: {types:?}");
    let mut open: Option<u64> = None;
    let mut next = 0;
    for e in events {
        let d = &e["data"];
        assert_eq!(
            e["event"], d["type"],
            "{what}: the event is named as its type: {e}"
        );
        let index = d["index"].as_u64();
        match d["type"].as_str() {
            Some("content_block_start") => {
                assert_eq!(open, None, "{what}: a block starts inside another: {e}");
                assert_eq!(
                    index,
                    Some(next),
                    "{what}: blocks are numbered in order: {e}"
                );
                open = index;
                next += 1;
            }
            Some("content_block_delta") => {
                assert_eq!(index, open, "{what}: a delta for the open block: {e}")
            }
            Some("content_block_stop") => {
                assert_eq!(index, open, "{what}: the open block stops: {e}");
                open = None;
            }
            _ => {}
        }
    }
    assert_eq!(open, None, "{what}: every block stopped");
}

/// Chat Completions: unnamed chunks of one completion id, one finish reason, the usage chunk
/// after it (the client asked for it), and `[DONE]` last and once.
pub fn check_chat_stream(what: &str, events: &[Value]) {
    let types = event_types(events);
    assert_eq!(
        events.last().map(|e| &e["data"]),
        Some(&json!("[DONE]")),
        "{what}: ends with [DONE]: {types:?}"
    );
    let chunks = &events[..events.len() - 1];
    assert!(
        chunks.iter().all(|e| e["data"].is_object()),
        "{what}: [DONE] once, every other event a chunk: {types:?}"
    );
    let first_id = &chunks[0]["data"]["id"];
    let mut finishes = 0;
    let mut usage_at = None;
    for (i, e) in chunks.iter().enumerate() {
        let d = &e["data"];
        assert!(e["event"].is_null(), "{what}: chunks are unnamed: {e}");
        assert_eq!(&d["id"], first_id, "{what}: one completion id: {e}");
        assert_eq!(d["object"], "chat.completion.chunk", "{what}: {e}");
        assert!(d.get("error").is_none(), "{what}: no error: {e}");
        for c in d["choices"].as_array().expect("choices") {
            if !c["finish_reason"].is_null() {
                finishes += 1;
                assert!(usage_at.is_none(), "{what}: usage after the finish: {e}");
            }
        }
        if d["usage"].is_object() {
            usage_at = Some(i);
        }
    }
    assert_eq!(finishes, 1, "{what}: one finish reason: {chunks:#?}");
    assert_eq!(
        usage_at,
        Some(chunks.len() - 1),
        "{what}: the usage chunk right before [DONE]"
    );
}

/// Responses: `sequence_number` 0, 1, 2, ...; `response.created` first and one
/// `response.completed` last, of one response id; output items added in order from 0 and done;
/// the completed response holds every item done.
pub fn check_responses_stream(what: &str, events: &[Value]) {
    let types = event_types(events);
    assert_eq!(
        types.first().map(String::as_str),
        Some("response.created"),
        "{what}: {types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("response.completed"),
        "{what}: {types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "response.completed").count(),
        1,
        "{what}: {types:?}"
    );
    let response_id = &events[0]["data"]["response"]["id"];
    let mut done_items = Vec::new();
    let mut next_index = 0;
    for (n, e) in events.iter().enumerate() {
        let d = &e["data"];
        assert_eq!(
            e["event"], d["type"],
            "{what}: the event is named as its type: {e}"
        );
        assert_eq!(
            d["sequence_number"],
            json!(n),
            "{what}: sequence numbers count up: {e}"
        );
        if let Some(r) = d.get("response") {
            assert_eq!(&r["id"], response_id, "{what}: one response id: {e}");
        }
        match d["type"].as_str() {
            Some("response.output_item.added") => {
                assert_eq!(
                    d["output_index"],
                    json!(next_index),
                    "{what}: items in order: {e}"
                );
                next_index += 1;
            }
            Some("response.output_item.done") => done_items.push(d["item"].clone()),
            Some("error") => panic!("{what}: an error event: {e}"),
            _ => {}
        }
    }
    assert_eq!(
        done_items.len(),
        next_index as usize,
        "{what}: every item added is done"
    );
    let completed = &events[events.len() - 1]["data"]["response"];
    assert_eq!(
        completed["output"],
        json!(done_items),
        "{what}: the completed response holds the items"
    );
    assert_eq!(completed["status"], "completed", "{what}");
}

/// What a client stream's framing must be, checked on the events that went over the wire.
pub fn check_stream(api: Api, what: &str, events: &[Value]) {
    match api {
        Api::Anthropic => check_anthropic_stream(what, events),
        Api::Chat => check_chat_stream(what, events),
        Api::Responses => check_responses_stream(what, events),
    }
}

/// The error a stream ended with: the format's error event, the last event (for the Responses
/// API the one before the last, which must be a `response.failed` carrying the same error).
pub fn stream_error(api: Api, what: &str, wire: &Value) -> (String, String) {
    let events = wire_events(wire);
    let types = event_types(&events);
    let mut last = events
        .last()
        .unwrap_or_else(|| panic!("{what}: an empty stream"));
    if api == Api::Responses {
        let n = events.len() - 1;
        assert_eq!(
            last["event"], "response.failed",
            "{what}: ends as a failed response: {types:?}"
        );
        let failed = &last["data"];
        assert_eq!(failed["sequence_number"], json!(n), "{what}");
        assert_eq!(failed["response"]["status"], "failed", "{what}");
        assert!(n > 0, "{what}: an error event comes first: {types:?}");
        last = &events[n - 1];
        assert_eq!(
            failed["response"]["error"],
            json!({"code": last["data"]["code"], "message": last["data"]["message"]}),
            "{what}: response.failed carries the error event's code and message"
        );
    }
    let d = &last["data"];
    let (kind, message) = match api {
        Api::Anthropic => {
            assert_eq!(
                last["event"], "error",
                "{what}: ends with an error event: {types:?}"
            );
            (&d["error"]["type"], &d["error"]["message"])
        }
        Api::Chat => {
            assert!(
                d["error"].is_object(),
                "{what}: ends with an error chunk: {types:?}"
            );
            (&d["error"]["type"], &d["error"]["message"])
        }
        Api::Responses => {
            assert_eq!(
                last["event"], "error",
                "{what}: ends with an error event: {types:?}"
            );
            assert_eq!(d["type"], "error", "{what}");
            let n = events.len() - 2;
            assert_eq!(
                d["sequence_number"],
                json!(n),
                "{what}: numbered like the rest"
            );
            (&d["code"], &d["message"])
        }
    };
    let finished = ["message_stop", "[DONE]", "response.completed"];
    assert!(
        !types.iter().any(|t| finished.contains(&t.as_str())),
        "{what}: a failed stream does not also finish: {types:?}"
    );
    (id(kind), id(message))
}
