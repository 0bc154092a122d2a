//! OpenAI Chat Completions: `messages` of `{role, content}`; an assistant message carries
//! `tool_calls` (`{id, type: "function", function: {name, arguments}}`, arguments a JSON
//! string) and each result is its own `{role: "tool", tool_call_id, content}` message.
//!
//! Streams are `chat.completion.chunk`s whose `choices[0].delta` carries `content` pieces and
//! `tool_calls` pieces by `index`, then a chunk with `finish_reason`, an optional usage chunk
//! (`stream_options.include_usage`) and `data: [DONE]`. The client's stream carries every round's
//! content under the first round's id, its tool calls renumbered from 0 and written whole, and
//! one finish, usage and `[DONE]` at the end. A request the proxy rewrites asks for one choice:
//! one with `n` above 1 is refused ([`unsupported`]), since the proxy runs one conversation's
//! tool rounds per request, not one per choice.
//!
//! Tool call pieces in a stream carry the call's `index`; some OpenAI-compatible servers send
//! none. A piece without an index that brings an `id` other than the last call's starts a call of
//! its own, and one without either continues the last call.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Call, ClientTurn, Part, ProxyResult, Round, Streamer, parse_arguments};
use crate::sse::{Event, write, write_json};

/// Why a request the proxy would rewrite cannot be served, and the field that says so: a request
/// for several choices (`n` above 1). Each choice would be a conversation of its own, with its
/// own tool rounds, which one request cannot carry back.
pub fn unsupported(body: &Map<String, Value>) -> Option<(&'static str, String)> {
    let n = body.get("n")?;
    if n.as_f64().is_none_or(|n| n <= 1.0) {
        return None;
    }
    Some((
        "n",
        format!(
            "\"n\": {n} asks for {n} choices; toolshelf rewrites a request with tools for one \
             choice only (it answers tool_search and runs the tool rounds of one conversation per \
             request): leave \"n\" out or set it to 1, and send one request per choice"
        ),
    ))
}

/// Whether a tool call is of a custom tool (`{"type": "custom", "custom": {"name", "input"}}`),
/// whose call carries text, not JSON arguments.
fn is_custom(tc: &Value) -> bool {
    tc.get("type").and_then(Value::as_str) == Some("custom")
        || (tc.get("function").is_none() && tc.get("custom").is_some())
}

/// The call of a custom tool, as the permission rules and hooks read it: its name, and its text
/// input as the params `{"input": TEXT}` (input that is not text is kept in `raw_input`).
pub fn own_call(tc: &Value) -> Option<Call> {
    if !is_custom(tc) {
        return None;
    }
    let c = tc.get("custom")?;
    let (input, raw_input) = match c.get("input") {
        Some(Value::String(text)) => {
            let mut m = Map::new();
            m.insert("input".into(), text.clone().into());
            (m, None)
        }
        other => (Map::new(), Some(other.unwrap_or(&Value::Null).to_string())),
    };
    Some(Call {
        id: tc.get("id")?.as_str()?.to_owned(),
        name: c.get("name")?.as_str()?.to_owned(),
        input,
        raw_input,
    })
}

/// A custom tool call with `params` (as a `pre_call` hook left them) as its input, or why they
/// do not fit: a custom tool takes text, `{"input": TEXT}`.
pub fn with_params(tc: &Value, params: &Map<String, Value>) -> Result<Value, String> {
    match params.get("input") {
        Some(Value::String(text)) if params.len() == 1 => {
            let mut out = tc.clone();
            out["custom"]["input"] = text.clone().into();
            Ok(out)
        }
        _ => Err("a custom tool's params must be {\"input\": TEXT}".into()),
    }
}

/// A custom tool call as the format writes it.
fn custom_value(c: &Call) -> Value {
    let input = c.input.get("input").and_then(Value::as_str).unwrap_or("");
    json!({"id": c.id, "type": "custom", "custom": {"name": c.name, "input": input}})
}

fn call_of(tc: &Value) -> Option<Call> {
    if is_custom(tc) {
        return own_call(tc);
    }
    let f = tc.get("function")?;
    let args = f.get("arguments").and_then(Value::as_str).unwrap_or("");
    let (input, raw_input) = parse_arguments(args);
    Some(Call {
        id: tc.get("id")?.as_str()?.to_owned(),
        name: f.get("name")?.as_str()?.to_owned(),
        input,
        raw_input,
    })
}

/// The tool calls of an assistant message.
pub fn calls(entry: &Value) -> Vec<Call> {
    match entry.get("tool_calls") {
        Some(Value::Array(tcs)) => tcs.iter().filter_map(call_of).collect(),
        _ => Vec::new(),
    }
}

fn call_value(c: &Call) -> Value {
    json!({"id": c.id, "type": "function",
           "function": {"name": c.name, "arguments": Value::Object(c.input.clone()).to_string()}})
}

/// A call's arguments for the client: text that is not a JSON object (unfinished, or as the
/// model wrote it) goes as it is.
fn client_arguments(c: &Call) -> String {
    c.raw_input
        .clone()
        .unwrap_or_else(|| Value::Object(c.input.clone()).to_string())
}

/// Renames call `id`.
pub fn rewrite_call(entry: &mut Value, id: &str, name: &str, input: &Map<String, Value>) {
    let Some(Value::Array(tcs)) = entry.get_mut("tool_calls") else {
        return;
    };
    for tc in tcs {
        if tc.get("id").and_then(Value::as_str) == Some(id)
            && let Some(f) = tc.get_mut("function").and_then(Value::as_object_mut)
        {
            f.insert("name".into(), name.into());
            f.insert(
                "arguments".into(),
                Value::Object(input.clone()).to_string().into(),
            );
        }
    }
}

/// One `tool` message per result, then one user message with the injected text.
pub fn result_entries(results: &[ProxyResult], injected: &[String]) -> Vec<Value> {
    let mut out: Vec<Value> = results
        .iter()
        .map(|r| json!({"role": "tool", "tool_call_id": r.id, "content": r.text}))
        .collect();
    if !injected.is_empty() {
        out.push(json!({"role": "user", "content": injected.join("\n\n")}));
    }
    out
}

/// A round's calls as its assistant message carries them.
fn call_values(parts: &[Part]) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Call(c) => Some(call_value(c)),
            Part::Own(c, _) => Some(custom_value(c)),
            Part::Raw(_) => None,
        })
        .collect()
}

/// A tool call as a part: a custom tool's call is a call of its own kind.
fn part_of_call(c: Call, tc: Value) -> Part {
    if is_custom(&tc) {
        Part::Own(c, tc)
    } else {
        Part::Call(c)
    }
}

fn assistant_entry(text: &str, calls: &[Value]) -> Value {
    let mut m = Map::new();
    m.insert("role".into(), "assistant".into());
    m.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            text.into()
        },
    );
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls.to_vec()));
    }
    Value::Object(m)
}

/// Reads a completion.
pub fn parse_response(body: Value) -> Result<Round, String> {
    let Value::Object(mut envelope) = body else {
        return Err("the upstream response is not a JSON object".into());
    };
    let Some(Value::Array(mut choices)) = envelope.shift_remove("choices") else {
        return Err("the upstream response has no \"choices\" array".into());
    };
    if choices.is_empty() {
        return Err("the upstream response has no choice".into());
    }
    let choice = choices.swap_remove(0);
    let stop = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let calls: Vec<Part> = match message.get("tool_calls") {
        Some(Value::Array(tcs)) => tcs
            .iter()
            .filter_map(|tc| Some(part_of_call(call_of(tc)?, tc.clone())))
            .collect(),
        _ => Vec::new(),
    };
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(Part::Raw(json!({"type": "text", "text": text})));
    }
    if let Some(lp) = choice.get("logprobs").filter(|v| !v.is_null()) {
        parts.push(Part::Raw(json!({"type": LOGPROBS, "logprobs": lp})));
    }
    let entry = assistant_entry(&text, &call_values(&calls));
    parts.extend(calls);
    // Other fields of the message (refusal, annotations, reasoning) go to the client as given.
    if let Value::Object(mut rest) = message {
        for k in ["role", "content", "tool_calls"] {
            rest.shift_remove(k);
        }
        envelope.insert("message_extra".into(), Value::Object(rest));
    }
    Ok(Round {
        entries: vec![entry],
        parts,
        stop,
        usage: envelope.get("usage").cloned(),
        envelope,
    })
}

/// The type of the part holding a round's `logprobs` (no text of its own).
const LOGPROBS: &str = "logprobs";

/// The choice's `logprobs` for the client: the rounds' own, their token lists (`content`,
/// `refusal`) joined in order; null when no round had any.
fn logprobs(parts: &[Part]) -> Value {
    let mut joined: Option<Map<String, Value>> = None;
    for p in parts {
        let Part::Raw(v) = p else { continue };
        if v.get("type").and_then(Value::as_str) != Some(LOGPROBS) {
            continue;
        }
        let Some(Value::Object(lp)) = v.get("logprobs") else {
            continue;
        };
        let Some(all) = &mut joined else {
            joined = Some(lp.clone());
            continue;
        };
        for (k, more) in lp {
            match all.get_mut(k) {
                Some(Value::Array(have)) => {
                    if let Value::Array(more) = more {
                        have.extend(more.iter().cloned());
                    }
                }
                Some(slot) if slot.is_null() => *slot = more.clone(),
                Some(_) => {}
                None => {
                    all.insert(k.clone(), more.clone());
                }
            }
        }
    }
    joined.map_or(Value::Null, Value::Object)
}

/// The text and calls of a turn's parts. A message has one text, so the texts of successive
/// rounds are joined with a blank line, as separate blocks would read.
fn split(parts: &[Part]) -> (String, Vec<Value>) {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for p in parts {
        match p {
            Part::Raw(v) => texts.extend(
                v.get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty()),
            ),
            Part::Call(c) => calls.push(json!({"id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": client_arguments(c)}})),
            Part::Own(_, tc) => calls.push(tc.clone()),
        }
    }
    (texts.join(ROUND_SEPARATOR), calls)
}

/// Between the texts of two rounds in one message.
const ROUND_SEPARATOR: &str = "\n\n";

/// The client's completion.
pub fn client_response(out: &ClientTurn) -> Value {
    let mut envelope = out.envelope.clone();
    let extra = match envelope.shift_remove("message_extra") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let (text, calls) = split(&out.parts);
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            text.into()
        },
    );
    for (k, v) in extra {
        message.insert(k, v);
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut body = Map::new();
    for (k, v) in envelope {
        if k == "usage" {
            continue;
        }
        body.insert(k, v);
    }
    body.insert(
        "choices".into(),
        json!([{"index": 0, "message": message, "logprobs": logprobs(&out.parts),
                 "finish_reason": out.stop}]),
    );
    if let Some(u) = &out.usage {
        body.insert("usage".into(), u.clone());
    }
    Value::Object(body)
}

#[derive(Debug, Default)]
struct Pending {
    id: String,
    name: String,
    /// The arguments text, or a custom tool's input text.
    arguments: String,
    /// Whether it is a custom tool's call.
    custom: bool,
}

/// The streaming translator.
#[derive(Debug)]
pub struct Stream {
    include_usage: bool,
    /// The first chunk's `id`, `created`, `model`, ... (everything but choices and usage).
    head: Option<Map<String, Value>>,
    role_sent: bool,
    /// Whether a chunk with more than the role was sent: see [`Streamer::shown`].
    shown: bool,
    next_call: usize,
    text: String,
    /// Whether an earlier round streamed text: this round's first text starts on a new paragraph.
    earlier_text: bool,
    /// The round's calls by index (a piece without one gets the next free key, see
    /// [`Self::add_piece`]).
    calls: BTreeMap<u64, Pending>,
    /// The key of the call the last piece went to.
    last_call: Option<u64>,
    /// The custom tool calls of this response, by id: what [`Streamer::write_call`] writes for
    /// one the proxy lets through.
    custom: std::collections::HashMap<String, Value>,
    round: Round,
    done: bool,
    /// The error chunk the upstream sent, for [`Streamer::error`].
    upstream_error: Option<Value>,
}

impl Stream {
    /// A translator; `include_usage` when the client asked for the usage chunk.
    pub fn new(include_usage: bool) -> Self {
        Self {
            include_usage,
            head: None,
            role_sent: false,
            shown: false,
            next_call: 0,
            text: String::new(),
            earlier_text: false,
            calls: BTreeMap::new(),
            last_call: None,
            custom: std::collections::HashMap::new(),
            round: Round::default(),
            done: false,
            upstream_error: None,
        }
    }

    /// Adds one `tool_calls` piece to its call: the one its `index` names; without an index, a
    /// new call when it brings an id other than the last call's, else the last call.
    fn add_piece(&mut self, tc: &Value) {
        let id = tc
            .get("id")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty());
        let key = match tc.get("index").and_then(Value::as_u64) {
            Some(i) => i,
            None => match self.last_call {
                Some(k) if id.is_none_or(|id| self.calls.get(&k).is_some_and(|p| p.id == id)) => k,
                _ => self.calls.keys().next_back().map_or(0, |k| k + 1),
            },
        };
        self.last_call = Some(key);
        let p = self.calls.entry(key).or_default();
        // An id comes whole; a server that repeats it on every piece names the same call.
        if let Some(id) = id
            && p.id != id
        {
            p.id.push_str(id);
        }
        p.custom |= is_custom(tc);
        if let Some(n) = tc
            .pointer("/function/name")
            .or_else(|| tc.pointer("/custom/name"))
            .and_then(Value::as_str)
        {
            p.name.push_str(n);
        }
        if let Some(a) = tc
            .pointer("/function/arguments")
            .or_else(|| tc.pointer("/custom/input"))
            .and_then(Value::as_str)
        {
            p.arguments.push_str(a);
        }
    }

    fn chunk(&self, choices: Value) -> Value {
        let mut m = self.head.clone().unwrap_or_default();
        m.insert("choices".into(), choices);
        Value::Object(m)
    }
}

impl Streamer for Stream {
    fn event(&mut self, event: &Event, out: &mut Vec<u8>) -> Result<(), String> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let Some(Value::Object(mut data)) = event.json() else {
            return Err(format!(
                "the upstream sent a chunk that is not a JSON object: {:?}",
                crate::short(&event.data)
            ));
        };
        if let Some(e) = data.get("error").filter(|e| !e.is_null()) {
            let message = e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error");
            let why = format!("the upstream stream reported an error: {message}");
            self.upstream_error = Some(Value::Object(data));
            return Err(why);
        }
        let choices = match data.shift_remove("choices") {
            Some(Value::Array(c)) => c,
            _ => Vec::new(),
        };
        if let Some(u) = data.shift_remove("usage")
            && !u.is_null()
        {
            self.round.usage = Some(u);
        }
        if self.head.is_none() {
            self.head = Some(data.clone());
        }
        if self.round.envelope.is_empty() {
            self.round.envelope = data;
        }
        for choice in choices
            .iter()
            .filter(|c| c["index"].as_u64().unwrap_or(0) == 0)
        {
            if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
                self.round.stop = Some(r.to_owned());
            }
            let Some(delta) = choice.get("delta").and_then(Value::as_object) else {
                continue;
            };
            if let Some(Value::Array(tcs)) = delta.get("tool_calls") {
                for tc in tcs {
                    self.add_piece(tc);
                }
            }
            // Everything else in the delta streams on: content, refusal, reasoning.
            let mut rest = delta.clone();
            rest.shift_remove("tool_calls");
            if let Some(t) = rest.get("content").and_then(Value::as_str) {
                let first = self.text.is_empty() && !t.is_empty();
                self.text.push_str(t);
                if first && self.earlier_text {
                    rest.insert("content".into(), format!("{ROUND_SEPARATOR}{t}").into());
                }
            }
            if rest.contains_key("role") {
                if self.role_sent {
                    rest.shift_remove("role");
                } else {
                    self.role_sent = true;
                }
            }
            // The chunk's logprobs go with the text they are of.
            let logprobs = choice.get("logprobs").cloned().unwrap_or(Value::Null);
            let tokens = logprobs.as_object().is_some_and(|o| {
                o.values()
                    .any(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            });
            let empty = rest.values().all(|v| v.is_null() || v == "");
            self.shown |= tokens
                || rest
                    .iter()
                    .any(|(k, v)| k != "role" && !v.is_null() && v != "");
            if !empty || tokens {
                let c = self.chunk(
                    json!([{"index": 0, "delta": rest, "logprobs": logprobs, "finish_reason": null}]),
                );
                write_json(out, None, &c);
            }
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
        self.shown
    }

    fn take_round(&mut self) -> Round {
        self.done = false;
        self.last_call = None;
        let calls: Vec<Part> = std::mem::take(&mut self.calls)
            .into_values()
            .map(|p| {
                if p.custom {
                    let tc = json!({"id": p.id, "type": "custom",
                                    "custom": {"name": p.name, "input": p.arguments}});
                    self.custom.insert(p.id.clone(), tc.clone());
                    let call = own_call(&tc).unwrap_or(Call {
                        id: p.id,
                        name: p.name,
                        input: Map::new(),
                        raw_input: Some(p.arguments),
                    });
                    return Part::Own(call, tc);
                }
                let (input, raw_input) = parse_arguments(&p.arguments);
                Part::Call(Call {
                    id: p.id,
                    name: p.name,
                    input,
                    raw_input,
                })
            })
            .collect();
        let text = std::mem::take(&mut self.text);
        self.earlier_text |= !text.is_empty();
        let mut r = std::mem::take(&mut self.round);
        if !text.is_empty() {
            r.parts
                .push(Part::Raw(json!({"type": "text", "text": text})));
        }
        r.entries = vec![assistant_entry(&text, &call_values(&calls))];
        r.parts.extend(calls);
        r
    }

    fn write_text(&mut self, text: &str, out: &mut Vec<u8>) {
        // Apart from the rounds' text before it, as in the answer that is not streamed.
        let text = if self.earlier_text {
            format!("{ROUND_SEPARATOR}{text}")
        } else {
            text.to_owned()
        };
        self.earlier_text |= !text.is_empty();
        let mut delta = json!({"content": text});
        self.shown = true;
        if !self.role_sent {
            self.role_sent = true;
            delta["role"] = "assistant".into();
        }
        let c = self
            .chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]));
        write_json(out, None, &c);
    }

    fn write_call(&mut self, call: &Call, out: &mut Vec<u8>) {
        let i = self.next_call;
        self.next_call += 1;
        let tc = match self.custom.get(&call.id) {
            Some(_) => {
                let mut tc = custom_value(call);
                tc["index"] = i.into();
                tc
            }
            None => json!({"index": i, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": client_arguments(call)}}),
        };
        let mut delta = json!({"tool_calls": [tc]});
        self.shown = true;
        if !self.role_sent {
            self.role_sent = true;
            delta["role"] = "assistant".into();
        }
        let c = self
            .chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]));
        write_json(out, None, &c);
    }

    fn finish(&mut self, stop: Option<&str>, usage: Option<&Value>, out: &mut Vec<u8>) {
        let c =
            self.chunk(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": stop}]));
        write_json(out, None, &c);
        if self.include_usage {
            let mut u = self.chunk(json!([]));
            u["usage"] = usage.cloned().unwrap_or(Value::Null);
            write_json(out, None, &u);
        }
        write(out, None, "[DONE]");
    }

    fn error(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        let data = self.upstream_error.take().unwrap_or_else(
            || json!({"error": {"type": kind, "message": message, "code": kind, "param": null}}),
        );
        write_json(out, None, &data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::Reader;

    #[test]
    fn an_upstream_error_chunk_reaches_the_client_as_sent() {
        let upstream = json!({"error": {"type": "server_error", "message": "The server is overloaded",
                                        "code": "overloaded", "param": null}});
        let mut s = Stream::new(true);
        let mut out = Vec::new();
        let event = Event {
            event: None,
            data: upstream.to_string(),
        };
        let why = s
            .event(&event, &mut out)
            .expect_err("the error chunk fails the round");
        assert!(why.contains("The server is overloaded"), "{why}");
        s.error("api_error", &why, &mut out);
        let sent = Reader::default().feed(&out);
        assert_eq!(sent.len(), 1);
        assert_eq!(
            sent[0].json(),
            Some(upstream),
            "the upstream's error survives"
        );
    }

    /// A chunk whose `error` is null (some OpenAI-compatible servers send the key on every
    /// chunk) is no error, and its text is output the client is shown.
    #[test]
    fn a_null_error_in_a_chunk_is_no_error() {
        let mut s = Stream::new(false);
        let mut out = Vec::new();
        let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "error": null,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]});
        let event = Event {
            event: None,
            data: chunk.to_string(),
        };
        s.event(&event, &mut out).expect("not an error");
        assert!(s.shown(), "the text is shown");
        assert!(String::from_utf8_lossy(&out).contains("\"Hi\""));
    }

    /// The texts of two rounds are two paragraphs of the one message, streamed or not, while the
    /// upstream's own history keeps each round's text as it was.
    #[test]
    fn the_texts_of_two_rounds_are_two_paragraphs() {
        let round = |text: &str| {
            format!(
                "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n\
                 data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
            )
        };
        let mut s = Stream::new(false);
        let mut out = Vec::new();
        let mut parts = Vec::new();
        for text in ["Let me look.", "Reading now."] {
            for e in Reader::default().feed(round(text).as_bytes()) {
                s.event(&e, &mut out).expect("event");
            }
            let r = s.take_round();
            assert_eq!(
                r.entries[0]["content"], text,
                "the upstream's history as it was"
            );
            parts.extend(r.parts);
        }
        let streamed: String = Reader::default()
            .feed(&out)
            .iter()
            .filter_map(|e| e.json())
            .filter_map(|c| {
                c.pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(streamed, "Let me look.\n\nReading now.");
        let (text, _) = split(&parts);
        assert_eq!(text, "Let me look.\n\nReading now.");
    }

    /// Some OpenAI-compatible servers send tool call pieces without an `index`: a piece with an id
    /// other than the last call's starts a call, one without an id continues the last call.
    #[test]
    fn tool_call_pieces_without_an_index_are_told_apart_by_their_ids() {
        let chunk = |delta: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
            )
        };
        let piece = |id: Option<&str>, name: Option<&str>, arguments: &str| {
            let mut tc = json!({"type": "function", "function": {"arguments": arguments}});
            if let Some(id) = id {
                tc["id"] = id.into();
            }
            if let Some(name) = name {
                tc["function"]["name"] = name.into();
            }
            chunk(json!({"tool_calls": [tc]}))
        };
        let text = [
            chunk(json!({"role": "assistant", "content": ""})),
            piece(Some("call_a"), Some("tool_search"), "{\"queries\":"),
            piece(None, None, "[\"weather\"]}"),
            // A server that repeats the id on every piece names the same call.
            piece(Some("call_b"), Some("tool_search"), ""),
            piece(Some("call_b"), None, "{\"queries\":[\"widgets\"]}"),
            // Two whole calls in one piece each.
            piece(Some("call_c"), Some("Read"), "{\"file_path\":\"a\"}"),
            piece(Some("call_d"), Some("Read"), "{\"file_path\":\"b\"}"),
            format!(
                "data: {}\n\ndata: [DONE]\n\n",
                json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            ),
        ]
        .concat();
        let mut s = Stream::new(false);
        let mut out = Vec::new();
        for e in Reader::default().feed(text.as_bytes()) {
            s.event(&e, &mut out).expect("event");
        }
        let r = s.take_round();
        let calls: Vec<(String, String, Value)> = r
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Call(c) => {
                    Some((c.id.clone(), c.name.clone(), Value::Object(c.input.clone())))
                }
                Part::Raw(_) | Part::Own(..) => None,
            })
            .collect();
        assert_eq!(
            calls,
            [
                (
                    "call_a".to_owned(),
                    "tool_search".to_owned(),
                    json!({"queries": ["weather"]})
                ),
                (
                    "call_b".to_owned(),
                    "tool_search".to_owned(),
                    json!({"queries": ["widgets"]})
                ),
                (
                    "call_c".to_owned(),
                    "Read".to_owned(),
                    json!({"file_path": "a"})
                ),
                (
                    "call_d".to_owned(),
                    "Read".to_owned(),
                    json!({"file_path": "b"})
                ),
            ]
        );
        assert_eq!(r.entries[0]["tool_calls"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn a_request_for_several_choices_is_refused_naming_n() {
        let body = |n: Value| {
            let Value::Object(m) = json!({"model": "m", "n": n, "messages": []}) else {
                unreachable!()
            };
            m
        };
        let (param, why) = unsupported(&body(json!(2))).expect("n = 2 is refused");
        assert_eq!(param, "n");
        assert!(why.starts_with("\"n\": 2 asks for 2 choices"), "{why}");
        for fine in [json!(1), json!(null), json!("2")] {
            assert_eq!(unsupported(&body(fine.clone())), None, "{fine}");
        }
        assert_eq!(unsupported(&Map::new()), None);
    }

    #[test]
    fn tool_call_pieces_join_and_content_streams() {
        let text = concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"tool_search\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"query\\\":\\\"x\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n",
        );
        let mut s = Stream::new(true);
        let mut out = Vec::new();
        for e in Reader::default().feed(text.as_bytes()) {
            s.event(&e, &mut out).expect("event");
        }
        assert!(s.round_done());
        let r = s.take_round();
        assert_eq!(r.stop.as_deref(), Some("tool_calls"));
        assert_eq!(
            r.usage,
            Some(json!({"prompt_tokens": 5, "completion_tokens": 2}))
        );
        let Part::Call(c) = &r.parts[1] else {
            panic!("a call: {:?}", r.parts)
        };
        assert_eq!((c.id.as_str(), c.name.as_str()), ("call_1", "tool_search"));
        assert_eq!(c.input["query"], "x");
        let sent = String::from_utf8(out).expect("utf8");
        assert!(sent.contains("\"Hi\""), "{sent}");
        assert!(!sent.contains("tool_search"), "the call is held: {sent}");
        assert!(!sent.contains("[DONE]"));
    }
}
