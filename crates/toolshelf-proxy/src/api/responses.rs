//! OpenAI Responses: `input` is a list of items: messages (`{type: "message", role, content}`
//! or the short `{role, content}`), `function_call` items (`call_id`, `name`, `arguments` as a
//! JSON string), `function_call_output` items, reasoning items and others. The model's output is
//! a list of items of the same kinds, valid as input as they are, so an assistant turn is a run of
//! output items.
//!
//! Streams are typed events with a `sequence_number`: `response.created`, per item
//! `response.output_item.added` ... `response.output_item.done` (text, reasoning and argument
//! deltas in between, addressed by `output_index`), and `response.completed`. The client's stream
//! keeps the first `response.created` / `response.in_progress`, every round's items renumbered
//! from 0, function calls written whole, and one `response.completed` holding every item it saw.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Call, ClientTurn, Part, ProxyResult, Round, Streamer, parse_arguments};
use crate::sse::{Event, write_json};

/// Whether an input item is something the model produced.
pub fn is_output_item(item: &Value) -> bool {
    if item.get("role").and_then(Value::as_str) == Some("assistant") {
        return true;
    }
    match item.get("type").and_then(Value::as_str) {
        Some("reasoning") => true,
        Some(t) => t.ends_with("_call"),
        None => false,
    }
}

fn call_of(item: &Value) -> Option<Call> {
    if item.get("type").and_then(Value::as_str) != Some("function_call") {
        return None;
    }
    let (input, raw_input) =
        parse_arguments(item.get("arguments").and_then(Value::as_str).unwrap_or(""));
    Some(Call {
        id: item.get("call_id")?.as_str()?.to_owned(),
        name: item.get("name")?.as_str()?.to_owned(),
        input,
        raw_input,
    })
}

/// An output item the model writes to call a tool of its own kind: its type, the item that
/// answers it, and the field that holds its arguments.
struct OwnKind {
    item: &'static str,
    answer: &'static str,
    field: &'static str,
}

const OWN_KINDS: [OwnKind; 5] = [
    OwnKind {
        item: "custom_tool_call",
        answer: "custom_tool_call_output",
        field: "input",
    },
    // Codex answers a `local_shell_call` with a `function_call_output` of its `call_id`.
    OwnKind {
        item: "local_shell_call",
        answer: "function_call_output",
        field: "action",
    },
    OwnKind {
        item: "shell_call",
        answer: "shell_call_output",
        field: "action",
    },
    OwnKind {
        item: "apply_patch_call",
        answer: "apply_patch_call_output",
        field: "operation",
    },
    OwnKind {
        item: "computer_call",
        answer: "computer_call_output",
        field: "action",
    },
];

/// The output items that answer calls, by their type; each names its call by `call_id` (a
/// `local_shell_call_output` by `id`).
const ANSWERS: [&str; 6] = [
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
    "shell_call_output",
    "apply_patch_call_output",
    "computer_call_output",
];

fn own_kind(item: &Value) -> Option<&'static OwnKind> {
    let ty = item.get("type").and_then(Value::as_str)?;
    OWN_KINDS.iter().find(|k| k.item == ty)
}

/// Whether an output item is a call of a tool of its own kind.
pub fn is_own_call(item: &Value) -> bool {
    own_kind(item).is_some()
}

/// The call in an output item of its own kind, as the permission rules and hooks read it. Its
/// name is the custom tool's `name`, or for a built-in the kind of tool it calls (`local_shell`,
/// `shell`, `apply_patch`, `computer`; the proxy finds the client's tool of that type). Its
/// params: `{"input": TEXT}` for a custom tool's text input, else the fields of the item's
/// `action` (`local_shell`: `type`, `command` (the argument list), `env`, `working_directory`,
/// `timeout_ms`, `user`; `shell`: `commands`, `timeout_ms`, `max_output_length`; `computer`: the
/// action's `type` and its fields) or `operation` (`apply_patch`: `type`, `path`, `diff`).
/// Arguments of another shape (no text, no object) are kept in `raw_input`.
pub fn own_call(item: &Value) -> Option<Call> {
    let kind = own_kind(item)?;
    let id = item.get("call_id")?.as_str()?.to_owned();
    let name = match kind.item {
        "custom_tool_call" => item.get("name")?.as_str()?.to_owned(),
        other => other.strip_suffix("_call").unwrap_or(other).to_owned(),
    };
    let args = item.get(kind.field);
    let (input, raw_input) = match (kind.field, args) {
        ("input", Some(Value::String(text))) => {
            let mut m = Map::new();
            m.insert("input".into(), text.clone().into());
            (m, None)
        }
        ("input", _) => (Map::new(), Some(args.unwrap_or(&Value::Null).to_string())),
        (_, Some(Value::Object(m))) => (m.clone(), None),
        (_, _) => (Map::new(), Some(args.unwrap_or(&Value::Null).to_string())),
    };
    Some(Call {
        id,
        name,
        input,
        raw_input,
    })
}

/// The type of the output item that answers a refused call of its own kind (`item`).
pub fn answer_kind(item: &Value) -> Option<&'static str> {
    own_kind(item).map(|k| k.answer)
}

/// A blank 1x1 PNG: the screenshot of the `computer_call_output` that answers a computer call
/// the proxy refused (the refusal itself follows it as text).
const BLANK_SCREENSHOT: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR42mP4DwABAQEAHLCMmQAAAABJRU5ErkJggg==";

/// The item of a call of its own kind with `params` (as a `pre_call` hook left them) written
/// back in place of its arguments, or why they do not fit the item's shape.
pub fn with_params(item: &Value, params: &Map<String, Value>) -> Result<Value, String> {
    let kind = own_kind(item).ok_or("it is no call of its own kind")?;
    let mut out = item.clone();
    if kind.field == "input" {
        return match params.get("input") {
            Some(Value::String(text)) if params.len() == 1 => {
                out["input"] = text.clone().into();
                Ok(out)
            }
            _ => Err("a custom tool's params must be {\"input\": TEXT}".into()),
        };
    }
    let text = |k: &str| params.get(k).is_some_and(Value::is_string);
    let strings = |k: &str| {
        params
            .get(k)
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().all(Value::is_string))
    };
    let fits = match kind.item {
        "local_shell_call" => {
            params.get("type").and_then(Value::as_str) == Some("exec") && strings("command")
        }
        "shell_call" => strings("commands"),
        "apply_patch_call" => {
            matches!(
                params.get("type").and_then(Value::as_str),
                Some("create_file" | "update_file" | "delete_file")
            ) && text("path")
        }
        _ => text("type"),
    };
    if !fits {
        return Err(format!(
            "they do not fit a {}'s {:?} object",
            kind.item, kind.field
        ));
    }
    out[kind.field] = Value::Object(params.clone());
    Ok(out)
}

/// The call an output item makes: a function call, or a call of its own kind.
fn any_call(item: &Value) -> Option<Call> {
    call_of(item).or_else(|| own_call(item))
}

/// The call in a `function_call` item, or in an item of a call of its own kind.
pub fn calls(entry: &Value) -> Vec<Call> {
    any_call(entry).into_iter().collect()
}

/// The id of the call an input item answers.
pub fn result_id(entry: &Value) -> Option<String> {
    let ty = entry.get("type").and_then(Value::as_str)?;
    if !ANSWERS.contains(&ty) {
        return None;
    }
    let key = if ty == "local_shell_call_output" {
        "id"
    } else {
        "call_id"
    };
    entry.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Renames the `function_call` item of call `id`.
pub fn rewrite_call(entry: &mut Value, id: &str, name: &str, input: &Map<String, Value>) {
    if entry.get("type").and_then(Value::as_str) == Some("function_call")
        && entry.get("call_id").and_then(Value::as_str) == Some(id)
        && let Some(obj) = entry.as_object_mut()
    {
        obj.insert("name".into(), name.into());
        obj.insert(
            "arguments".into(),
            Value::Object(input.clone()).to_string().into(),
        );
    }
}

/// One output item per result (`function_call_output`, or the item of its call's kind), then
/// one user message with the text of refused computer calls (whose output is a screenshot, so
/// their output item carries a blank one) and the injected text.
pub fn result_entries(results: &[ProxyResult], injected: &[String]) -> Vec<Value> {
    let mut out: Vec<Value> = results.iter().map(result_item).collect();
    let texts: Vec<String> = results
        .iter()
        .filter(|r| r.kind.as_deref() == Some("computer_call_output"))
        .map(|r| {
            format!(
                "[toolshelf: computer call {} was refused and not run: {} The screenshot that answers it is a blank placeholder, not the screen.]",
                r.id, r.text
            )
        })
        .chain(injected.iter().cloned())
        .collect();
    if !texts.is_empty() {
        out.push(json!({"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": texts.join("\n\n")}]}));
    }
    out
}

/// The output item that answers a call with `r`, in the kind its call wants.
fn result_item(r: &ProxyResult) -> Value {
    match r.kind.as_deref() {
        Some(kind @ "custom_tool_call_output") => {
            json!({"type": kind, "call_id": r.id, "output": r.text})
        }
        Some(kind @ "shell_call_output") => json!({"type": kind, "call_id": r.id, "output": [
            {"stdout": "", "stderr": r.text, "outcome": {"type": "exit", "exit_code": 1}}]}),
        Some(kind @ "apply_patch_call_output") => {
            json!({"type": kind, "call_id": r.id, "status": "failed", "output": r.text})
        }
        // The refusal is told in a message after the results (see `result_entries`).
        Some(kind @ "computer_call_output") => json!({"type": kind, "call_id": r.id,
            "output": {"type": "computer_screenshot", "image_url": BLANK_SCREENSHOT}}),
        _ => json!({"type": "function_call_output", "call_id": r.id, "output": r.text}),
    }
}

fn part_of(item: &Value) -> Part {
    if let Some(c) = call_of(item) {
        return Part::Call(c);
    }
    match own_call(item) {
        Some(c) => Part::Own(c, item.clone()),
        None => Part::Raw(item.clone()),
    }
}

/// Reads a response.
pub fn parse_response(body: Value) -> Result<Round, String> {
    let Value::Object(mut envelope) = body else {
        return Err("the upstream response is not a JSON object".into());
    };
    let Some(Value::Array(output)) = envelope.shift_remove("output") else {
        return Err("the upstream response has no \"output\" array".into());
    };
    let parts = output.iter().map(part_of).collect();
    let has_calls = output.iter().any(|i| any_call(i).is_some());
    Ok(Round {
        stop: Some(stop_of(&envelope, has_calls)),
        usage: envelope.get("usage").cloned(),
        entries: output,
        parts,
        envelope,
    })
}

/// Why `response` failed, when its status is `failed`: the upstream answered with a failed
/// response, not with an error status.
pub fn failed(response: &Value) -> Option<String> {
    (response.get("status").and_then(Value::as_str) == Some("failed")).then(|| failure(response))
}

/// What a failed response's `error` says, its code first.
fn failure(response: &Value) -> String {
    let said = |k: &str| {
        response
            .pointer(&format!("/error/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("none given")
    };
    format!(
        "the upstream response failed (code {}): {}",
        crate::short(said("code")),
        crate::short(said("message"))
    )
}

/// Responses has no stop reason: a completed response with calls stopped for them.
fn stop_of(response: &Map<String, Value>, has_calls: bool) -> String {
    let status = response
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("completed");
    if status == "completed" && has_calls {
        "tool_calls".into()
    } else {
        status.into()
    }
}

/// A `function_call` item for the client. Arguments that are not a JSON object (unfinished, as
/// in a response the output limit cut off) go as the model wrote them, in an item marked
/// `incomplete`, as the API gives such a call.
fn call_item(c: &Call, item_id: Option<&str>) -> Value {
    let id = item_id.map_or_else(|| format!("fc_{}", c.id), str::to_owned);
    let (arguments, status) = match &c.raw_input {
        Some(raw) => (raw.clone(), "incomplete"),
        None => (Value::Object(c.input.clone()).to_string(), "completed"),
    };
    json!({"type": "function_call", "id": id, "call_id": c.id, "name": c.name,
           "arguments": arguments, "status": status})
}

fn output_of(parts: &[Part]) -> Vec<Value> {
    parts
        .iter()
        .map(|p| match p {
            Part::Raw(v) => v.clone(),
            Part::Call(c) => call_item(c, None),
            Part::Own(_, item) => item.clone(),
        })
        .collect()
}

fn status_of(stop: Option<&str>) -> &str {
    match stop {
        None | Some("tool_calls") => "completed",
        Some(s) => s,
    }
}

/// Puts the client's own fields (`echo`: its tools, its tool choice) where a response object
/// echoes the upstream's.
fn echo_client_fields(response: &mut Map<String, Value>, echo: &Map<String, Value>) {
    for (k, v) in echo {
        if let Some(slot) = response.get_mut(k) {
            *slot = v.clone();
        }
    }
}

/// The client's response.
pub fn client_response(out: &ClientTurn) -> Value {
    let mut body = Map::new();
    for (k, v) in &out.envelope {
        match k.as_str() {
            "status" => {
                body.insert(k.clone(), status_of(out.stop.as_deref()).into());
            }
            _ if out.echo.contains_key(k) => {
                body.insert(k.clone(), out.echo[k].clone());
            }
            "output" => {}
            "usage" => {
                body.insert("output".into(), Value::Array(output_of(&out.parts)));
                body.insert(k.clone(), out.usage.clone().unwrap_or(Value::Null));
            }
            _ => {
                body.insert(k.clone(), v.clone());
            }
        }
    }
    if !body.contains_key("output") {
        body.insert("output".into(), Value::Array(output_of(&out.parts)));
    }
    if !body.contains_key("usage")
        && let Some(u) = &out.usage
    {
        body.insert("usage".into(), u.clone());
    }
    // The response ended where the last round did.
    for k in ENDING {
        if let Some(v) = out.last.get(*k) {
            body.insert((*k).into(), v.clone());
        }
    }
    Value::Object(body)
}

/// The fields besides `status` that say how a response ended.
const ENDING: &[&str] = &["error", "incomplete_details", "completed_at"];

/// The streaming translator.
#[derive(Debug, Default)]
pub struct Stream {
    /// The client's `tools` and `tool_choice`, echoed in the response objects it receives.
    echo: Map<String, Value>,
    /// Rounds finished before this one.
    rounds: u32,
    seq: u64,
    next_index: u64,
    /// Upstream output index to the client's; absent for held function calls.
    shown: BTreeMap<u64, u64>,
    held: BTreeMap<u64, Value>,
    /// The calls of their own kind the upstream made in this response, by call id: what
    /// [`Streamer::write_call`] writes for a call the proxy lets through.
    own_items: std::collections::HashMap<String, Value>,
    /// The first round's response object.
    response: Option<Map<String, Value>>,
    /// Items the client saw, in order.
    items: Vec<Value>,
    round: Round,
    done: bool,
    /// The error event the upstream sent, for [`Streamer::error`].
    upstream_error: Option<Value>,
    /// The last round's [`ENDING`] fields.
    ending: Map<String, Value>,
}

impl Stream {
    /// A translator for a client that sent the fields `echo`.
    pub fn new(echo: Map<String, Value>) -> Self {
        Self {
            echo,
            ..Self::default()
        }
    }

    fn send(&mut self, out: &mut Vec<u8>, name: Option<&str>, mut data: Value) {
        data["sequence_number"] = self.seq.into();
        self.seq += 1;
        write_json(out, name, &data);
    }

    /// Writes output item `i` whole: added (as `added` shows it), then done.
    fn write_whole(&mut self, i: u64, added: Value, done: Value, out: &mut Vec<u8>) {
        self.send(
            out,
            Some("response.output_item.added"),
            json!({"type": "response.output_item.added", "output_index": i, "item": added}),
        );
        self.send(
            out,
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "output_index": i, "item": done}),
        );
        self.items.push(done);
    }
}

impl Streamer for Stream {
    fn event(&mut self, event: &Event, out: &mut Vec<u8>) -> Result<(), String> {
        let Some(mut data) = event.json() else {
            return Err(format!(
                "the upstream sent an event that is not JSON: {:?}",
                crate::short(&event.data)
            ));
        };
        let ty = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let name = event.event.clone();
        let output_index = data.get("output_index").and_then(Value::as_u64);
        match ty.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                if let Some(Value::Object(r)) = data.get_mut("response") {
                    echo_client_fields(r, &self.echo);
                    let mut env = r.clone();
                    env.shift_remove("output");
                    if self.round.envelope.is_empty() {
                        self.round.envelope = env;
                    }
                    if self.response.is_none() {
                        self.response = Some(r.clone());
                    }
                }
                if self.rounds == 0 {
                    self.send(out, name.as_deref(), data);
                }
            }
            // A failed response fails the round as an error event does.
            "response.failed" => {
                let why = failure(data.get("response").unwrap_or(&Value::Null));
                self.upstream_error = Some(data);
                return Err(why);
            }
            "response.completed" | "response.incomplete" => {
                if let Some(Value::Object(r)) = data.get("response") {
                    self.round.usage = r.get("usage").cloned();
                    let has_calls = self
                        .round
                        .parts
                        .iter()
                        .any(|p| matches!(p, Part::Call(_) | Part::Own(..)));
                    self.round.stop = Some(stop_of(r, has_calls));
                    self.ending = ENDING
                        .iter()
                        .filter_map(|k| Some(((*k).to_owned(), r.get(*k)?.clone())))
                        .collect();
                    let mut env = r.clone();
                    env.shift_remove("output");
                    self.round.envelope = env;
                }
                self.done = true;
            }
            "error" => {
                let why = format!(
                    "the upstream stream reported an error: {}",
                    data.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown")
                );
                self.upstream_error = Some(data);
                return Err(why);
            }
            "response.output_item.added" => {
                let Some(i) = output_index else {
                    return Ok(());
                };
                let item = data.get("item").cloned().unwrap_or(Value::Null);
                if item.get("type").and_then(Value::as_str) == Some("function_call")
                    || is_own_call(&item)
                {
                    self.held.insert(i, item);
                } else {
                    let c = self.next_index;
                    self.next_index += 1;
                    self.shown.insert(i, c);
                    data["output_index"] = c.into();
                    self.send(out, name.as_deref(), data);
                }
            }
            "response.output_item.done" => {
                let Some(i) = output_index else {
                    return Ok(());
                };
                let item = data.get("item").cloned().unwrap_or(Value::Null);
                self.round.entries.push(item.clone());
                self.round.parts.push(part_of(&item));
                if let Some(id) = item.get("call_id").and_then(Value::as_str)
                    && is_own_call(&item)
                {
                    self.own_items.insert(id.to_owned(), item.clone());
                }
                if self.held.remove(&i).is_none()
                    && let Some(&c) = self.shown.get(&i)
                {
                    self.items.push(item);
                    data["output_index"] = c.into();
                    self.send(out, name.as_deref(), data);
                }
            }
            _ => match output_index {
                Some(i) if self.held.contains_key(&i) => {}
                Some(i) => {
                    if let Some(&c) = self.shown.get(&i) {
                        data["output_index"] = c.into();
                        self.send(out, name.as_deref(), data);
                    }
                }
                None => self.send(out, name.as_deref(), data),
            },
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
        // Every item the client receives takes the next output index.
        self.next_index > 0
    }

    fn take_round(&mut self) -> Round {
        self.done = false;
        self.rounds += 1;
        self.held.clear();
        self.shown.clear();
        std::mem::take(&mut self.round)
    }

    fn write_text(&mut self, text: &str, out: &mut Vec<u8>) {
        let i = self.next_index;
        self.next_index += 1;
        let item = json!({"type": "message", "id": format!("msg_toolshelf_{i}"), "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
        let mut added = item.clone();
        added["content"] = json!([]);
        added["status"] = "in_progress".into();
        self.write_whole(i, added, item, out);
    }

    fn write_call(&mut self, call: &Call, out: &mut Vec<u8>) {
        let i = self.next_index;
        self.next_index += 1;
        if let Some(item) = self.own_items.get(&call.id) {
            // Handed over as the model wrote it, with the params a hook may have rewritten
            // (checked to fit before the call was let through).
            let done = match own_call(item) {
                Some(asked) if asked.input == call.input => item.clone(),
                _ => with_params(item, &call.input).unwrap_or_else(|_| item.clone()),
            };
            let mut added = done.clone();
            added["status"] = "in_progress".into();
            self.write_whole(i, added, done, out);
            return;
        }
        let done = call_item(call, None);
        let mut added = done.clone();
        added["arguments"] = "".into();
        added["status"] = "in_progress".into();
        let item_id = done["id"].clone();
        let args = done["arguments"].clone();
        self.send(
            out,
            Some("response.output_item.added"),
            json!({"type": "response.output_item.added", "output_index": i, "item": added}),
        );
        self.send(
            out,
            Some("response.function_call_arguments.delta"),
            json!({"type": "response.function_call_arguments.delta", "output_index": i,
                   "item_id": item_id, "delta": args}),
        );
        self.send(
            out,
            Some("response.function_call_arguments.done"),
            json!({"type": "response.function_call_arguments.done", "output_index": i,
                   "item_id": item_id, "arguments": args}),
        );
        self.send(
            out,
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "output_index": i, "item": done}),
        );
        self.items.push(done);
    }

    fn finish(&mut self, stop: Option<&str>, usage: Option<&Value>, out: &mut Vec<u8>) {
        let mut r = self.response.clone().unwrap_or_default();
        let status = status_of(stop).to_owned();
        r.insert("status".into(), status.clone().into());
        r.insert("output".into(), Value::Array(self.items.clone()));
        r.insert("usage".into(), usage.cloned().unwrap_or(Value::Null));
        for (k, v) in &self.ending {
            r.insert(k.clone(), v.clone());
        }
        let ty = match status.as_str() {
            "incomplete" => "response.incomplete",
            "failed" => "response.failed",
            _ => "response.completed",
        };
        self.send(out, Some(ty), json!({"type": ty, "response": r}));
    }

    fn error(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        // A stream opens with `response.created`, and clients read an error only after one
        // (the OpenAI SDK raises its own "expected response.created" otherwise): a stream that
        // fails before the upstream sent anything gets one of its own.
        if self.seq == 0 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let created = json!({"type": "response.created", "response": {
                "id": format!("resp_toolshelf_{nanos:x}"), "object": "response",
                "status": "in_progress", "output": []}});
            if let Some(Value::Object(r)) = created.get("response") {
                self.response = Some(r.clone());
            }
            self.send(out, Some("response.created"), created);
        }
        let mut r = self.response.clone().unwrap_or_default();
        echo_client_fields(&mut r, &self.echo);
        r.insert("status".into(), "failed".into());
        r.insert("output".into(), Value::Array(self.items.clone()));
        // A failed response the upstream sent ends the client's as it is: its error, after the
        // items the client saw.
        if let Some(failed) = self
            .upstream_error
            .take_if(|e| e["type"] == "response.failed")
        {
            let error = failed
                .pointer("/response/error")
                .filter(|e| e.is_object())
                .cloned()
                .unwrap_or_else(|| json!({"code": kind, "message": message}));
            r.insert("error".into(), error);
            self.send(
                out,
                Some("response.failed"),
                json!({"type": "response.failed", "response": r}),
            );
            return;
        }
        // Renumbered by `send`, like every event the client receives.
        let data = self.upstream_error.take().unwrap_or_else(
            || json!({"type": "error", "code": kind, "message": message, "param": null}),
        );
        let code = data.get("code").cloned().unwrap_or_else(|| kind.into());
        let said = data
            .get("message")
            .cloned()
            .unwrap_or_else(|| message.into());
        self.send(out, Some("error"), data);
        // Then the stream ends as a failed response ends, so that a client waiting for the
        // response's last event (Codex reads `response.failed`'s `error.message`) gets this
        // error rather than "stream closed before response.completed".
        r.insert("error".into(), json!({"code": code, "message": said}));
        self.send(
            out,
            Some("response.failed"),
            json!({"type": "response.failed", "response": r}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON events a stream wrote.
    fn events(out: &[u8]) -> Vec<Value> {
        crate::sse::Reader::default()
            .feed(out)
            .iter()
            .filter_map(Event::json)
            .collect()
    }

    #[test]
    fn output_items_are_told_from_input_items() {
        assert!(is_output_item(
            &json!({"type": "function_call", "call_id": "c"})
        ));
        assert!(is_output_item(&json!({"type": "reasoning", "id": "r"})));
        assert!(is_output_item(
            &json!({"type": "message", "role": "assistant"})
        ));
        assert!(!is_output_item(
            &json!({"type": "function_call_output", "call_id": "c"})
        ));
        assert!(!is_output_item(&json!({"role": "user", "content": "hi"})));
    }

    #[test]
    fn response_objects_echo_the_clients_tools_and_tool_choice() {
        let upstream_tools = json!([{"type": "function", "name": "tool_search"},
                                    {"type": "function", "name": "defer_execute"}]);
        let upstream_choice = json!({"type": "function", "name": "defer_execute"});
        let client_tools = json!([{"type": "function", "name": "mcp__weather__get_forecast"}]);
        let client_choice = json!({"type": "function", "name": "mcp__weather__get_forecast"});
        let echo: Map<String, Value> = [
            ("tools".to_owned(), client_tools.clone()),
            ("tool_choice".to_owned(), client_choice.clone()),
        ]
        .into_iter()
        .collect();
        let round = parse_response(json!({"id": "resp_1", "status": "completed",
            "tools": upstream_tools, "tool_choice": upstream_choice, "output": [],
            "usage": {"input_tokens": 3}}))
        .expect("parses");
        let turn = ClientTurn {
            envelope: round.envelope,
            echo: echo.clone(),
            ..ClientTurn::default()
        };
        let body = client_response(&turn);
        assert_eq!(body["tools"], client_tools);
        assert_eq!(body["tool_choice"], client_choice);

        let response = |status: &str| {
            json!({"id": "resp_1", "object": "response", "status": status,
                   "tools": upstream_tools, "tool_choice": upstream_choice, "output": []})
        };
        let upstream = [
            json!({"type": "response.created", "sequence_number": 0,
                   "response": response("in_progress")}),
            json!({"type": "response.in_progress", "sequence_number": 1,
                   "response": response("in_progress")}),
            json!({"type": "response.completed", "sequence_number": 2,
                   "response": response("completed")}),
        ];
        let mut s = Stream::new(echo);
        let mut out = Vec::new();
        for data in &upstream {
            let event = Event {
                event: data["type"].as_str().map(str::to_owned),
                data: data.to_string(),
            };
            s.event(&event, &mut out).expect("event");
        }
        assert!(s.round_done());
        s.take_round();
        s.finish(Some("completed"), None, &mut out);
        let sent = events(&out);
        let types: Vec<&str> = sent.iter().filter_map(|v| v["type"].as_str()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.completed"
            ]
        );
        for v in &sent {
            assert_eq!(
                v["response"]["tools"], client_tools,
                "{} must echo the client's tools",
                v["type"]
            );
            assert_eq!(
                v["response"]["tool_choice"], client_choice,
                "{} must echo the client's tool_choice",
                v["type"]
            );
        }
    }

    #[test]
    fn an_upstream_error_event_reaches_the_client_as_sent_in_sequence() {
        let mut s = Stream::default();
        let mut out = Vec::new();
        let created = json!({"type": "response.created", "sequence_number": 0,
                             "response": {"id": "resp_1", "status": "in_progress", "output": []}});
        let error = json!({"type": "error", "code": "server_is_overloaded",
                           "message": "The server is overloaded", "param": null,
                           "sequence_number": 7});
        let event = |v: &Value| Event {
            event: v["type"].as_str().map(str::to_owned),
            data: v.to_string(),
        };
        s.event(&event(&created), &mut out).expect("created");
        let why = s
            .event(&event(&error), &mut out)
            .expect_err("the error event fails the round");
        assert!(why.contains("The server is overloaded"), "{why}");
        s.error("api_error", &why, &mut out);
        let sent = events(&out);
        assert_eq!(sent.len(), 3);
        let mut want = error.clone();
        want["sequence_number"] = json!(1);
        assert_eq!(
            sent[1], want,
            "the upstream's error, numbered in the client's sequence"
        );
        assert_eq!(
            sent[2],
            json!({"type": "response.failed", "sequence_number": 2, "response": {
                "id": "resp_1", "status": "failed", "output": [],
                "error": {"code": "server_is_overloaded", "message": "The server is overloaded"}}}),
            "the stream ends as a failed response, with the upstream's error"
        );
    }

    /// A `response.failed` fails the round as an error event does, and ends the client's stream
    /// as the upstream ended its own: a failed response with the upstream's error, after the
    /// items the client saw.
    #[test]
    fn a_failed_response_fails_the_round_and_ends_the_stream_as_sent() {
        let mut s = Stream::default();
        let mut out = Vec::new();
        let item = json!({"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                          "content": [{"type": "output_text", "text": "Hi", "annotations": []}]});
        let error = json!({"code": "server_error", "message": "The model failed"});
        for data in [
            json!({"type": "response.created", "sequence_number": 0,
                   "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.added", "sequence_number": 1,
                   "output_index": 0, "item": item}),
            json!({"type": "response.output_item.done", "sequence_number": 2,
                   "output_index": 0, "item": item}),
        ] {
            let event = Event {
                event: data["type"].as_str().map(str::to_owned),
                data: data.to_string(),
            };
            s.event(&event, &mut out).expect("event");
        }
        let failed = json!({"type": "response.failed", "sequence_number": 3, "response": {
            "id": "resp_1", "status": "failed", "output": [item], "error": error}});
        let why = s
            .event(
                &Event {
                    event: Some("response.failed".into()),
                    data: failed.to_string(),
                },
                &mut out,
            )
            .expect_err("a failed response fails the round");
        assert_eq!(
            why,
            "the upstream response failed (code server_error): The model failed"
        );
        assert!(!s.round_done(), "no round to take");
        assert_eq!(s.upstream_error(), Some(&failed));
        s.error("api_error", &why, &mut out);
        let sent = events(&out);
        let types: Vec<&str> = sent.iter().filter_map(|v| v["type"].as_str()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.output_item.added",
                "response.output_item.done",
                "response.failed"
            ],
            "no error event of the proxy's own"
        );
        assert_eq!(
            sent[3],
            json!({"type": "response.failed", "sequence_number": 3, "response": {
                "id": "resp_1", "status": "failed", "output": [item], "error": error}})
        );
    }

    #[test]
    fn a_response_whose_status_is_failed_says_why() {
        assert_eq!(
            failed(&json!({"status": "failed", "output": [],
                           "error": {"code": "rate_limit_exceeded", "message": "Too many"}})),
            Some("the upstream response failed (code rate_limit_exceeded): Too many".into())
        );
        assert_eq!(
            failed(&json!({"status": "failed", "output": [], "error": null})),
            Some("the upstream response failed (code none given): none given".into())
        );
        assert_eq!(failed(&json!({"status": "completed", "output": []})), None);
        assert_eq!(failed(&json!({"status": "incomplete", "output": []})), None);
    }

    #[test]
    fn a_stream_that_fails_before_anything_was_sent_opens_with_response_created() {
        let mut s = Stream::default();
        let mut out = Vec::new();
        s.error(
            "api_error",
            "the upstream answered with something that is not JSON",
            &mut out,
        );
        let sent = events(&out);
        let types: Vec<&str> = sent.iter().filter_map(|v| v["type"].as_str()).collect();
        assert_eq!(types, ["response.created", "error", "response.failed"]);
        assert_eq!(sent[0]["sequence_number"], 0);
        assert_eq!(sent[1]["sequence_number"], 1);
        assert_eq!(sent[1]["code"], "api_error");
        assert_eq!(sent[2]["sequence_number"], 2);
        assert_eq!(sent[2]["response"]["id"], sent[0]["response"]["id"]);
        assert_eq!(sent[2]["response"]["status"], "failed");
        assert_eq!(sent[2]["response"]["error"]["code"], "api_error");
    }

    #[test]
    fn the_response_ends_as_the_last_round_did() {
        let why = json!({"reason": "max_output_tokens"});
        let mut s = Stream::default();
        let mut out = Vec::new();
        for data in [
            json!({"type": "response.created", "sequence_number": 0,
                   "response": {"id": "resp_1", "status": "in_progress", "output": [],
                                "incomplete_details": null}}),
            json!({"type": "response.incomplete", "sequence_number": 1,
                   "response": {"id": "resp_1", "status": "incomplete", "output": [],
                                "incomplete_details": why}}),
        ] {
            let event = Event {
                event: data["type"].as_str().map(str::to_owned),
                data: data.to_string(),
            };
            s.event(&event, &mut out).expect("event");
        }
        let round = s.take_round();
        assert_eq!(round.stop.as_deref(), Some("incomplete"));
        let mut tail = Vec::new();
        s.finish(round.stop.as_deref(), None, &mut tail);
        let end = crate::sse::Reader::default().feed(&tail)[0]
            .json()
            .expect("JSON");
        assert_eq!(end["type"], "response.incomplete");
        assert_eq!(end["response"]["incomplete_details"], why);

        let turn = ClientTurn {
            envelope: json!({"id": "resp_1", "status": "in_progress", "incomplete_details": null})
                .as_object()
                .cloned()
                .expect("an object"),
            last: round.envelope,
            stop: round.stop,
            ..ClientTurn::default()
        };
        let body = client_response(&turn);
        assert_eq!(body["status"], "incomplete");
        assert_eq!(body["incomplete_details"], why);
    }

    #[test]
    fn a_response_reads_calls_and_stops_for_them() {
        let r = parse_response(json!({"id": "resp_1", "status": "completed", "output": [
            {"type": "message", "id": "m1", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "function_call", "id": "fc1", "call_id": "call_1", "name": "tool_search", "arguments": "{\"query\":\"x\"}"}
        ], "usage": {"input_tokens": 3}})).expect("parses");
        assert_eq!(r.stop.as_deref(), Some("tool_calls"));
        assert_eq!(r.entries.len(), 2);
        assert!(matches!(&r.parts[1], Part::Call(c) if c.input["query"] == "x"));
    }
}
