//! Anthropic Messages: `messages` of `{role, content}` where content is a string or blocks;
//! `tool_use` blocks in assistant messages, `tool_result` blocks opening the next user message.
//!
//! Streams are `message_start`, then per block `content_block_start` / `content_block_delta` /
//! `content_block_stop`, then `message_delta` (stop reason, output usage) and `message_stop`,
//! with `ping`s anywhere. The client's stream keeps the first round's `message_start`, the blocks
//! of every round renumbered from 0, and one `message_delta` / `message_stop` at the very end.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Call, ClientTurn, Part, ProxyResult, Round, Streamer, parse_arguments};
use crate::sse::{Event, write_json};

/// The tool calls of an assistant message.
pub fn calls(entry: &Value) -> Vec<Call> {
    let Some(Value::Array(blocks)) = entry.get("content") else {
        return Vec::new();
    };
    blocks.iter().filter_map(call_of).collect()
}

fn call_of(block: &Value) -> Option<Call> {
    if block.get("type").and_then(Value::as_str) != Some("tool_use") {
        return None;
    }
    let (input, raw_input) = match block.get("input") {
        Some(Value::Object(m)) => (m.clone(), None),
        None | Some(Value::Null) => (Map::new(), None),
        Some(other) => (Map::new(), Some(other.to_string())),
    };
    Some(Call {
        id: block.get("id")?.as_str()?.to_owned(),
        name: block.get("name")?.as_str()?.to_owned(),
        input,
        raw_input,
    })
}

/// Gives every `tool_use` block of an assistant message an object as its `input`, as the API
/// requires of a turn sent to it: a call whose input the model never completed (a stream the
/// output limit cut off mid-JSON) or that is not an object carries `{}`. What it did write
/// stays in the [`Call`] read from the block before ([`Call::raw_input`]).
pub fn object_inputs(entry: &mut Value) {
    let Some(Value::Array(blocks)) = entry.get_mut("content") else {
        return;
    };
    for b in blocks {
        if b.get("type").and_then(Value::as_str) == Some("tool_use")
            && let Some(obj) = b.as_object_mut()
            && !obj.get("input").is_some_and(Value::is_object)
        {
            obj.insert("input".into(), json!({}));
        }
    }
}

/// Renames the `tool_use` block `id`.
pub fn rewrite_call(entry: &mut Value, id: &str, name: &str, input: &Map<String, Value>) {
    let Some(Value::Array(blocks)) = entry.get_mut("content") else {
        return;
    };
    for b in blocks {
        if b.get("type").and_then(Value::as_str) == Some("tool_use")
            && b.get("id").and_then(Value::as_str) == Some(id)
            && let Some(obj) = b.as_object_mut()
        {
            obj.insert("name".into(), name.into());
            obj.insert("input".into(), Value::Object(input.clone()));
        }
    }
}

/// The `tool_use_id`s of a user message's `tool_result` blocks.
pub fn result_ids(entry: &Value) -> Vec<String> {
    let Some(Value::Array(blocks)) = entry.get("content") else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .filter_map(|b| {
            b.get("tool_use_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

/// The ids of the `tool_result` blocks of a message marked `is_error`.
pub fn error_result_ids(entry: &Value) -> Vec<String> {
    let Some(Value::Array(blocks)) = entry.get("content") else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| {
            b.get("type").and_then(Value::as_str) == Some("tool_result")
                && b.get("is_error").and_then(Value::as_bool) == Some(true)
        })
        .filter_map(|b| {
            b.get("tool_use_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

/// `tool_result` blocks.
pub fn result_blocks(results: &[ProxyResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| {
            let mut b = json!({
                "type": "tool_result",
                "tool_use_id": r.id,
                "content": [{"type": "text", "text": r.text}],
            });
            if r.is_error {
                b["is_error"] = true.into();
            }
            b
        })
        .collect()
}

fn text_blocks(texts: &[String]) -> impl Iterator<Item = Value> + '_ {
    texts.iter().map(|t| json!({"type": "text", "text": t}))
}

/// One user message: the results, then the injected text.
pub fn result_entries(results: &[ProxyResult], injected: &[String]) -> Vec<Value> {
    let mut content = result_blocks(results);
    content.extend(text_blocks(injected));
    if content.is_empty() {
        return Vec::new();
    }
    vec![json!({"role": "user", "content": content})]
}

fn blocks_mut(entry: &mut Value) -> Option<&mut Vec<Value>> {
    let obj = entry.as_object_mut()?;
    let content = obj
        .entry("content")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::String(s) = content {
        let text = std::mem::take(s);
        *content = if text.is_empty() {
            Value::Array(Vec::new())
        } else {
            json!([{"type": "text", "text": text}])
        };
    }
    content.as_array_mut()
}

/// Puts `blocks` first in a user message.
pub fn prepend_blocks(entry: &mut Value, blocks: Vec<Value>) {
    if let Some(content) = blocks_mut(entry) {
        let rest = std::mem::replace(content, blocks);
        content.extend(rest);
    }
}

/// Appends text blocks to a user message.
pub fn append_text(entry: &mut Value, texts: &[String]) {
    if let Some(content) = blocks_mut(entry) {
        content.extend(text_blocks(texts));
    }
}

/// Reads a Messages response.
pub fn parse_response(body: Value) -> Result<Round, String> {
    let Value::Object(mut envelope) = body else {
        return Err("the upstream response is not a JSON object".into());
    };
    let content = match envelope.shift_remove("content") {
        Some(Value::Array(c)) => c,
        _ => return Err("the upstream response has no \"content\" array".into()),
    };
    let stop = envelope
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let usage = envelope.get("usage").cloned();
    let parts = content
        .iter()
        .map(|b| call_of(b).map_or_else(|| Part::Raw(b.clone()), Part::Call))
        .collect();
    let mut entry = json!({"role": "assistant", "content": content});
    object_inputs(&mut entry);
    Ok(Round {
        entries: vec![entry],
        parts,
        stop,
        usage,
        envelope,
    })
}

fn call_block(c: &Call) -> Value {
    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input})
}

/// The client's message.
pub fn client_response(out: &ClientTurn) -> Value {
    let mut m = out.envelope.clone();
    let content: Vec<Value> = out
        .parts
        .iter()
        .map(|p| match p {
            // Anthropic calls are all tool_use blocks: no call of its own kind comes here.
            Part::Raw(v) | Part::Own(_, v) => v.clone(),
            Part::Call(c) => call_block(c),
        })
        .collect();
    // Keep the provider's key order: content before the stop fields.
    let mut ordered = Map::new();
    for (k, v) in std::mem::take(&mut m) {
        if k == "stop_reason" {
            ordered.insert("content".into(), Value::Array(content.clone()));
        }
        ordered.insert(k, v);
    }
    if !ordered.contains_key("content") {
        ordered.insert("content".into(), Value::Array(content));
    }
    ordered.insert("stop_reason".into(), json!(out.stop));
    // The message ended where the last round did.
    for k in ENDING {
        if let Some(v) = out.last.get(*k) {
            ordered.insert((*k).into(), v.clone());
        }
    }
    if let Some(u) = &out.usage {
        ordered.insert("usage".into(), u.clone());
    }
    Value::Object(ordered)
}

/// The fields besides `stop_reason` that say how a message ended.
const ENDING: &[&str] = &["stop_sequence", "stop_details", "container"];

/// A block being received.
#[derive(Debug)]
struct Open {
    /// The client's index, `None` for a held tool call.
    client: Option<usize>,
    block: Value,
    json: String,
}

/// The streaming translator.
#[derive(Debug, Default)]
pub struct Stream {
    started: bool,
    next_index: usize,
    open: BTreeMap<u64, Open>,
    round: Round,
    done: bool,
    /// The error event the upstream sent, for [`Streamer::error`].
    upstream_error: Option<Value>,
    /// The last `message_delta`'s `delta`: how the last round ended.
    last_delta: Map<String, Value>,
}

impl Stream {
    /// Ends block `index`: the round's entry gets it, and its part is returned. A call whose
    /// JSON is not an object (cut off by the output limit, or malformed) goes into the entry
    /// with `{}` as its input, which is what the upstream accepts back, and into its part with
    /// the text the model wrote as [`Call::raw_input`].
    fn close(&mut self, index: u64) -> Option<Part> {
        let mut o = self.open.remove(&index)?;
        let mut raw = None;
        if !o.json.is_empty() || o.block.get("type").and_then(Value::as_str) == Some("tool_use") {
            let (input, unparsed) = parse_arguments(&o.json);
            if let Some(obj) = o.block.as_object_mut() {
                match unparsed {
                    None if o.json.is_empty() => {
                        obj.entry("input").or_insert_with(|| json!({}));
                    }
                    None => {
                        obj.insert("input".into(), Value::Object(input));
                    }
                    Some(text) => {
                        obj.insert("input".into(), json!({}));
                        raw = Some(text);
                    }
                }
            }
        }
        self.round.entries_push(o.block.clone());
        Some(match call_of(&o.block) {
            Some(call) => Part::Call(Call {
                raw_input: raw.or(call.raw_input),
                ..call
            }),
            None => Part::Raw(o.block),
        })
    }
}

impl Round {
    fn entries_push(&mut self, block: Value) {
        if self.entries.is_empty() {
            self.entries
                .push(json!({"role": "assistant", "content": []}));
        }
        if let Some(Value::Array(c)) = self.entries[0].get_mut("content") {
            c.push(block);
        }
    }
}

fn apply_delta(block: &mut Value, json_buf: &mut String, delta: &Value) {
    let Some(obj) = block.as_object_mut() else {
        return;
    };
    let append = |obj: &mut Map<String, Value>, key: &str, more: &str| {
        let s = obj
            .entry(key)
            .or_insert_with(|| Value::String(String::new()));
        if let Value::String(s) = s {
            s.push_str(more);
        }
    };
    match delta.get("type").and_then(Value::as_str) {
        Some("text_delta") => append(obj, "text", delta["text"].as_str().unwrap_or("")),
        Some("thinking_delta") => append(obj, "thinking", delta["thinking"].as_str().unwrap_or("")),
        Some("signature_delta") => {
            append(obj, "signature", delta["signature"].as_str().unwrap_or(""))
        }
        Some("input_json_delta") => json_buf.push_str(delta["partial_json"].as_str().unwrap_or("")),
        Some("citations_delta") => {
            let list = obj
                .entry("citations")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let (Value::Array(l), Some(c)) = (list, delta.get("citation")) {
                l.push(c.clone());
            }
        }
        _ => {}
    }
}

fn with_index(mut data: Value, index: usize) -> Value {
    data["index"] = index.into();
    data
}

impl Streamer for Stream {
    fn event(&mut self, event: &Event, out: &mut Vec<u8>) -> Result<(), String> {
        let Some(data) = event.json() else {
            return Err(format!(
                "the upstream sent an event that is not JSON: {:?}",
                crate::short(&event.data)
            ));
        };
        let ty = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("")
            .to_owned();
        let name = event.event.as_deref().unwrap_or(&ty).to_owned();
        match ty.as_str() {
            "message_start" => {
                let mut message = data
                    .get("message")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                self.round.usage = message.get("usage").cloned();
                message.shift_remove("content");
                self.round.envelope = message;
                if !self.started {
                    self.started = true;
                    write_json(out, Some(&name), &data);
                }
            }
            "content_block_start" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                let held = block.get("type").and_then(Value::as_str) == Some("tool_use");
                let client = (!held).then(|| {
                    let i = self.next_index;
                    self.next_index += 1;
                    i
                });
                if let Some(i) = client {
                    write_json(out, Some(&name), &with_index(data.clone(), i));
                }
                self.open.insert(
                    index,
                    Open {
                        client,
                        block,
                        json: String::new(),
                    },
                );
            }
            "content_block_delta" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(o) = self.open.get_mut(&index) {
                    if let Some(delta) = data.get("delta") {
                        apply_delta(&mut o.block, &mut o.json, delta);
                    }
                    if let Some(i) = o.client {
                        write_json(out, Some(&name), &with_index(data.clone(), i));
                    }
                }
            }
            "content_block_stop" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let client = self.open.get(&index).and_then(|o| o.client);
                if let Some(part) = self.close(index) {
                    if let Some(i) = client {
                        write_json(out, Some(&name), &with_index(data.clone(), i));
                    }
                    self.round.parts.push(part);
                }
            }
            "message_delta" => {
                if let Some(s) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.round.stop = Some(s.to_owned());
                }
                if let Some(d) = data.get("delta").and_then(Value::as_object) {
                    self.last_delta.clone_from(d);
                }
                if let Some(u) = data.get("usage").and_then(Value::as_object) {
                    // A delta's figures are the round's totals so far: they replace.
                    let usage = self
                        .round
                        .usage
                        .get_or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(m) = usage {
                        for (k, v) in u {
                            if !v.is_null() {
                                m.insert(k.clone(), v.clone());
                            }
                        }
                    }
                }
            }
            "message_stop" => {
                // Blocks never stopped are closed as they are.
                let left: Vec<u64> = self.open.keys().copied().collect();
                for i in left {
                    if let Some(part) = self.close(i) {
                        self.round.parts.push(part);
                    }
                }
                self.done = true;
            }
            "error" => {
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error")
                    .to_owned();
                self.upstream_error = Some(data);
                return Err(format!("the upstream stream reported an error: {message}"));
            }
            _ => write_json(out, Some(&name), &data),
        }
        Ok(())
    }

    fn round_done(&self) -> bool {
        self.done
    }

    fn upstream_error(&self) -> Option<&Value> {
        self.upstream_error.as_ref()
    }

    fn shown(&self) -> bool {
        // Every block the client receives takes the next index.
        self.next_index > 0
    }

    fn take_round(&mut self) -> Round {
        self.done = false;
        self.open.clear();
        let mut r = std::mem::take(&mut self.round);
        if r.entries.is_empty() {
            r.entries.push(json!({"role": "assistant", "content": []}));
        }
        r
    }

    fn write_text(&mut self, text: &str, out: &mut Vec<u8>) {
        let i = self.next_index;
        self.next_index += 1;
        write_json(
            out,
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}}),
        );
        write_json(
            out,
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": text}}),
        );
        write_json(
            out,
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": i}),
        );
    }

    fn write_call(&mut self, call: &Call, out: &mut Vec<u8>) {
        let i = self.next_index;
        self.next_index += 1;
        write_json(
            out,
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
        );
        write_json(
            out,
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta",
                              "partial_json": Value::Object(call.input.clone()).to_string()}}),
        );
        write_json(
            out,
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": i}),
        );
    }

    fn finish(&mut self, stop: Option<&str>, usage: Option<&Value>, out: &mut Vec<u8>) {
        // The last round's ending (stop sequence, details) with the client's stop reason.
        let mut ending = Map::new();
        ending.insert("stop_reason".into(), json!(stop));
        ending.insert("stop_sequence".into(), Value::Null);
        for (k, v) in &self.last_delta {
            if k != "stop_reason" {
                ending.insert(k.clone(), v.clone());
            }
        }
        let mut delta = json!({"type": "message_delta", "delta": ending});
        if let Some(u) = usage {
            delta["usage"] = u.clone();
        }
        write_json(out, Some("message_delta"), &delta);
        write_json(out, Some("message_stop"), &json!({"type": "message_stop"}));
    }

    fn error(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        let data = self.upstream_error.take().unwrap_or_else(
            || json!({"type": "error", "error": {"type": kind, "message": message}}),
        );
        write_json(out, Some("error"), &data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::Reader;

    fn events(text: &str) -> Vec<Event> {
        Reader::default().feed(text.as_bytes())
    }

    const ROUND: &str = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"tool_search\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\":\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"x\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":7}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );

    #[test]
    fn a_streamed_round_holds_the_call_and_reads_back_whole() {
        let mut s = Stream::default();
        let mut out = Vec::new();
        for e in events(ROUND) {
            s.event(&e, &mut out).expect("event");
        }
        assert!(s.round_done());
        let round = s.take_round();
        assert_eq!(round.stop.as_deref(), Some("tool_use"));
        assert_eq!(
            round.usage,
            Some(json!({"input_tokens": 10, "output_tokens": 7}))
        );
        assert_eq!(
            round.entries,
            vec![json!({"role": "assistant", "content": [
                {"type": "text", "text": "Hi"},
                {"type": "tool_use", "id": "t1", "name": "tool_search", "input": {"query": "x"}}
            ]})]
        );
        let client: Vec<Value> = Reader::default()
            .feed(&out)
            .iter()
            .filter_map(Event::json)
            .collect();
        let types: Vec<&str> = client.iter().filter_map(|v| v["type"].as_str()).collect();
        assert_eq!(
            types,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop"
            ],
            "the tool call is held back, the round's end too"
        );
        // A second round continues the numbering and sends no second message_start.
        let mut out2 = Vec::new();
        for e in events(ROUND) {
            s.event(&e, &mut out2).expect("event");
        }
        let second: Vec<Value> = Reader::default()
            .feed(&out2)
            .iter()
            .filter_map(Event::json)
            .collect();
        assert_eq!(second[0]["type"], "content_block_start");
        assert_eq!(second[0]["index"], 1);
    }

    #[test]
    fn a_call_cut_off_mid_json_goes_back_with_an_object_and_keeps_its_text() {
        let cut = ROUND.replace("\\\"x\\\"}", "\\\"x").replace(
            r#""stop_reason":"tool_use""#,
            r#""stop_reason":"max_tokens""#,
        );
        assert_ne!(cut, ROUND);
        let mut s = Stream::default();
        let mut out = Vec::new();
        for e in events(&cut) {
            s.event(&e, &mut out).expect("event");
        }
        let round = s.take_round();
        assert_eq!(round.stop.as_deref(), Some("max_tokens"));
        assert_eq!(
            round.entries[0]["content"][1],
            json!({"type": "tool_use", "id": "t1", "name": "tool_search", "input": {}}),
            "the upstream takes an object back"
        );
        let Some(Part::Call(call)) = round.parts.last() else {
            panic!("a call: {:?}", round.parts);
        };
        assert_eq!(call.raw_input.as_deref(), Some(r#"{"query":"x"#));

        // A response that is not streamed: any input that is not an object is sent back as `{}`.
        let parsed = parse_response(json!({"id": "msg_1", "content": [
            {"type": "tool_use", "id": "t1", "name": "Read", "input": "{\"a"}],
            "stop_reason": "max_tokens"}))
        .expect("parses");
        assert_eq!(parsed.entries[0]["content"][0]["input"], json!({}));
        assert!(
            matches!(&parsed.parts[0], Part::Call(c) if c.raw_input.is_some()),
            "{:?}",
            parsed.parts
        );
    }

    #[test]
    fn an_upstream_error_event_reaches_the_client_as_sent() {
        let mut s = Stream::default();
        let mut out = Vec::new();
        let text = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n",
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        );
        let results: Vec<_> = events(text).iter().map(|e| s.event(e, &mut out)).collect();
        assert!(results[0].is_ok());
        let why = results[1]
            .clone()
            .expect_err("the error event fails the round");
        assert!(why.contains("Overloaded"), "{why}");
        let mut tail = Vec::new();
        s.error("api_error", &why, &mut tail);
        let sent = Reader::default().feed(&tail);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].event.as_deref(), Some("error"));
        assert_eq!(
            sent[0].json(),
            Some(
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            ),
            "the upstream's error type survives"
        );
        // A failure of the proxy's own is written as such.
        let mut own = Vec::new();
        s.error("api_error", "the upstream stream broke", &mut own);
        assert_eq!(
            Reader::default().feed(&own)[0].json().expect("JSON")["error"]["type"],
            "api_error"
        );
    }

    #[test]
    fn the_message_ends_as_the_last_round_did() {
        let stopped = ROUND.replace(
            r#""delta":{"stop_reason":"tool_use"}"#,
            r#""delta":{"stop_reason":"stop_sequence","stop_sequence":"END"}"#,
        );
        assert_ne!(stopped, ROUND, "the round's message_delta is rewritten");
        let mut s = Stream::default();
        let mut out = Vec::new();
        for e in events(ROUND).iter().chain(&events(&stopped)) {
            s.event(e, &mut out).expect("event");
        }
        let mut tail = Vec::new();
        s.finish(Some("stop_sequence"), None, &mut tail);
        let delta = Reader::default().feed(&tail)[0].json().expect("JSON");
        assert_eq!(
            delta["delta"],
            json!({"stop_reason": "stop_sequence", "stop_sequence": "END"})
        );

        let first = parse_response(json!({"id": "msg_1", "type": "message", "content": [],
            "stop_reason": "tool_use", "stop_sequence": null}))
        .expect("parses");
        let last = parse_response(json!({"id": "msg_2", "type": "message", "content": [],
            "stop_reason": "stop_sequence", "stop_sequence": "END"}))
        .expect("parses");
        let turn = ClientTurn {
            envelope: first.envelope,
            last: last.envelope,
            stop: Some("stop_sequence".into()),
            ..ClientTurn::default()
        };
        let body = client_response(&turn);
        assert_eq!(body["id"], "msg_1", "the first round's identity");
        assert_eq!(body["stop_sequence"], "END", "the last round's ending");
    }

    #[test]
    fn results_go_first_in_the_user_message() {
        let mut m = json!({"role": "user", "content": "go on"});
        prepend_blocks(
            &mut m,
            result_blocks(&[ProxyResult {
                id: "t1".into(),
                text: "r".into(),
                is_error: true,
                kind: None,
            }]),
        );
        assert_eq!(m["content"][0]["type"], "tool_result");
        assert_eq!(m["content"][0]["is_error"], true);
        assert_eq!(m["content"][1]["text"], "go on");
    }
}
