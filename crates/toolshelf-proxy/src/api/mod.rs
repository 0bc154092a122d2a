//! The three wire formats, reduced to the few operations the proxy needs.
//!
//! The proxy never converts a conversation into a model of its own and back: what it does not
//! understand (thinking blocks, images, citations, server tools, unknown block types) must reach
//! the upstream exactly as the client sent it. So each format gets a set of small functions over
//! the raw JSON: find the assistant turns and their tool calls, rename one call in place, write
//! tool results and injected text in the format's own shape; and, on the way back, read one
//! upstream round (JSON or SSE) into [`Round`] and write the client's single response.
//!
//! [`Dialect`] dispatches to the format's module; every function there is pure.

pub mod anthropic;
pub mod chat;
pub mod responses;

use serde_json::{Map, Value};
use toolshelf_core::request::Api;

use crate::sse::Event;

/// One tool call of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The call id (`tool_use` id, `tool_calls[].id`, `call_id`).
    pub id: String,
    /// The tool called.
    pub name: String,
    /// The arguments, an object (`{}` when the model sent none or sent text that is not JSON;
    /// `raw_input` then keeps what it sent).
    pub input: Map<String, Value>,
    /// The arguments as sent when they were not a JSON object.
    pub raw_input: Option<String>,
}

/// A piece of one upstream round's output, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Anything but a tool call, in the format's own shape: an Anthropic content block, a
    /// Responses output item, or (Chat Completions) `{"type": "text", "text": ...}`.
    Raw(Value),
    /// A tool call.
    Call(Call),
    /// A call of a tool whose calls are of their own kind (Responses `custom_tool_call`,
    /// `local_shell_call`, `shell_call`, `apply_patch_call`, `computer_call`; a Chat tool call of
    /// type `custom`): the call as the permission rules and hooks read it (see
    /// [`responses::own_call`], [`chat::own_call`]), and the item (the tool call entry) in the
    /// format's own shape, which the client gets as it is.
    Own(Call, Value),
}

/// What one upstream round produced.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// The assistant output as conversation entries (request form), exactly as the upstream
    /// produced it: appended when the proxy continues, and recorded for the next request.
    pub entries: Vec<Value>,
    /// The output, in order.
    pub parts: Vec<Part>,
    /// `stop_reason` / `finish_reason` / the response's `status`.
    pub stop: Option<String>,
    /// The round's `usage` object, as the upstream wrote it.
    pub usage: Option<Value>,
    /// The response without its output (id, model, ...), for the client's envelope.
    pub envelope: Map<String, Value>,
}

/// A result the proxy writes for a call it answered itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProxyResult {
    /// The call answered.
    pub id: String,
    /// The text the model reads.
    pub text: String,
    /// Whether it reports a failure.
    pub is_error: bool,
    /// The type of the output item that answers a Responses call of its own kind
    /// (`custom_tool_call_output`, `shell_call_output`, `apply_patch_call_output`,
    /// `computer_call_output` with a blank screenshot and the text in a message after it; a
    /// `local_shell_call` is answered by a `function_call_output`); `None` for a function call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// Token figures of a `usage` object, read the same way for every format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tokens {
    /// Input tokens (for Anthropic, not counting cache reads and writes).
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the cache (Anthropic).
    pub cache_creation: u64,
}

impl Tokens {
    /// Reads a `usage` object of any of the three formats.
    pub fn of(usage: &Value) -> Self {
        let n = |path: &[&str]| {
            let mut v = usage;
            for p in path {
                match v.get(p) {
                    Some(x) => v = x,
                    None => return 0,
                }
            }
            v.as_u64().unwrap_or(0)
        };
        let input = n(&["input_tokens"]).max(n(&["prompt_tokens"]));
        let output = n(&["output_tokens"]).max(n(&["completion_tokens"]));
        let cache_read = n(&["cache_read_input_tokens"])
            .max(n(&["prompt_tokens_details", "cached_tokens"]))
            .max(n(&["input_tokens_details", "cached_tokens"]));
        Self {
            input,
            output,
            cache_read,
            cache_creation: n(&["cache_creation_input_tokens"]),
        }
    }
}

/// Adds `more` into `total` field by field: numbers are summed, objects merged recursively,
/// anything else taken from `more` when `total` lacks it. Every format's `usage` sums this way.
pub fn add_usage(total: &mut Value, more: &Value) {
    match (total, more) {
        (Value::Object(t), Value::Object(m)) => {
            for (k, v) in m {
                match t.get_mut(k) {
                    Some(slot) => add_usage(slot, v),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t @ Value::Number(_), Value::Number(m)) => {
            if let (Some(a), Some(b)) = (t.as_u64(), m.as_u64()) {
                *t = Value::from(a + b);
            } else if let (Some(a), Some(b)) = (t.as_f64(), m.as_f64()) {
                *t = serde_json::Number::from_f64(a + b).map_or(Value::Null, Value::Number);
            }
        }
        (t @ Value::Null, m) => *t = m.clone(),
        _ => {}
    }
}

/// A call's arguments from the JSON text a model wrote.
pub fn parse_arguments(text: &str) -> (Map<String, Value>, Option<String>) {
    if text.trim().is_empty() {
        return (Map::new(), None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => (m, None),
        _ => (Map::new(), Some(text.to_owned())),
    }
}

/// A format's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect(pub Api);

impl Dialect {
    /// The API.
    pub fn api(self) -> Api {
        self.0
    }

    /// Why a request the proxy would rewrite cannot be served, with the request field at fault
    /// (Chat Completions' `n` above 1, see [`chat::unsupported`]); `None` when it can.
    pub fn unsupported(self, body: &Map<String, Value>) -> Option<(&'static str, String)> {
        match self.0 {
            Api::OpenAiChat => chat::unsupported(body),
            _ => None,
        }
    }

    /// The client's tool definitions.
    pub fn tools(self, body: &Map<String, Value>) -> &[Value] {
        match body.get("tools") {
            Some(Value::Array(a)) => a,
            _ => &[],
        }
    }

    /// A definition's tool name; `None` for a definition the proxy must leave alone (a
    /// provider's server tool, a tool without a name).
    pub fn client_tool_name(self, def: &Value) -> Option<&str> {
        let ty = def.get("type").and_then(Value::as_str);
        match self.0 {
            Api::Anthropic => match ty {
                None | Some("custom") => def.get("name").and_then(Value::as_str),
                Some(_) => None,
            },
            Api::OpenAiChat => match ty {
                Some("function") => def.pointer("/function/name").and_then(Value::as_str),
                _ => None,
            },
            Api::OpenAiResponses => match ty {
                Some("function") => def.get("name").and_then(Value::as_str),
                _ => None,
            },
        }
    }

    /// Whether a definition without a usable name is shaped like a client tool (a function
    /// tool, or an Anthropic tool with no type), as opposed to a provider's typed tool.
    pub fn looks_like_client_tool(self, def: &Value) -> bool {
        let ty = def.get("type").and_then(Value::as_str);
        match self.0 {
            Api::Anthropic => matches!(ty, None | Some("custom")),
            Api::OpenAiChat | Api::OpenAiResponses => ty == Some("function"),
        }
    }

    /// Whether the request already uses the provider's own deferral: a tool marked
    /// `defer_loading`, or a tool-search tool.
    pub fn uses_provider_deferral(self, body: &Map<String, Value>) -> bool {
        self.tools(body).iter().any(is_provider_deferral)
    }

    /// The request's system text, for the session key.
    pub fn system_text(self, body: &Map<String, Value>) -> String {
        match self.0 {
            Api::Anthropic => body.get("system").map(text_of).unwrap_or_default(),
            Api::OpenAiChat => conversation(self, body)
                .iter()
                .filter(|m| {
                    matches!(
                        m.get("role").and_then(Value::as_str),
                        Some("system" | "developer")
                    )
                })
                .map(|m| m.get("content").map(text_of).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n"),
            Api::OpenAiResponses => body.get("instructions").map(text_of).unwrap_or_default(),
        }
    }

    /// Whether a conversation entry is (part of) an assistant turn.
    pub fn is_assistant(self, entry: &Value) -> bool {
        match self.0 {
            Api::Anthropic | Api::OpenAiChat => {
                entry.get("role").and_then(Value::as_str) == Some("assistant")
            }
            Api::OpenAiResponses => responses::is_output_item(entry),
        }
    }

    /// Whether an entry is the user's own words (not tool results, not a system message).
    pub fn is_user_text(self, entry: &Value) -> bool {
        if entry.get("role").and_then(Value::as_str) != Some("user") {
            return false;
        }
        match entry.get("content") {
            Some(Value::String(_)) => true,
            Some(Value::Array(parts)) => !parts
                .iter()
                .any(|p| p.get("type").and_then(Value::as_str) == Some("tool_result")),
            _ => false,
        }
    }

    /// The user's own words of the client's latest turn: the last user-text entry after the
    /// conversation's last assistant entry. It need not be the last entry: a client may follow
    /// it with entries of its own (Claude Code sends a `system` message after the first one).
    pub fn latest_user_text(self, conv: &[Value]) -> Option<String> {
        let start = conv
            .iter()
            .rposition(|e| self.is_assistant(e))
            .map_or(0, |i| i + 1);
        conv[start..]
            .iter()
            .rev()
            .find(|e| self.is_user_text(e))
            .and_then(|e| e.get("content"))
            .map(text_of)
    }

    /// The text a client shows of one assistant entry (request form): its text, not its
    /// reasoning or calls.
    pub fn shown_text(self, entry: &Value) -> String {
        match self.0 {
            Api::Anthropic | Api::OpenAiChat => match entry.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts.iter().map(|p| self.part_text(p)).collect(),
                _ => String::new(),
            },
            Api::OpenAiResponses => self.part_text(entry),
        }
    }

    /// The text of one [`Part::Raw`] (an Anthropic content block, a Responses output item, a
    /// Chat text part), as [`Self::shown_text`] reads it back from the client's copy.
    pub fn part_text(self, part: &Value) -> String {
        let ty = part.get("type").and_then(Value::as_str);
        match self.0 {
            Api::Anthropic | Api::OpenAiChat => match ty {
                Some("text") => part
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                _ => String::new(),
            },
            Api::OpenAiResponses => {
                let message = match ty {
                    Some(t) => t == "message",
                    None => part.get("role").and_then(Value::as_str) == Some("assistant"),
                };
                if !message {
                    return String::new();
                }
                match part.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect(),
                    _ => String::new(),
                }
            }
        }
    }

    /// The tool calls in an assistant entry.
    pub fn calls(self, entry: &Value) -> Vec<Call> {
        match self.0 {
            Api::Anthropic => anthropic::calls(entry),
            Api::OpenAiChat => chat::calls(entry),
            Api::OpenAiResponses => responses::calls(entry),
        }
    }

    /// Renames call `id` in `entry` to `name` with `input`.
    pub fn rewrite_call(self, entry: &mut Value, id: &str, name: &str, input: &Map<String, Value>) {
        match self.0 {
            Api::Anthropic => anthropic::rewrite_call(entry, id, name, input),
            Api::OpenAiChat => chat::rewrite_call(entry, id, name, input),
            Api::OpenAiResponses => responses::rewrite_call(entry, id, name, input),
        }
    }

    /// The ids of the tool results in an entry.
    pub fn result_ids(self, entry: &Value) -> Vec<String> {
        match self.0 {
            Api::Anthropic => anthropic::result_ids(entry),
            Api::OpenAiChat => entry
                .get("tool_call_id")
                .and_then(Value::as_str)
                .filter(|_| entry.get("role").and_then(Value::as_str) == Some("tool"))
                .map(|s| vec![s.to_owned()])
                .unwrap_or_default(),
            Api::OpenAiResponses => responses::result_id(entry).into_iter().collect(),
        }
    }

    /// The ids of the tool results in an entry that the client flagged as errors (Anthropic's
    /// `is_error`: a call its user declined, its hook blocked or that failed). The OpenAI formats
    /// have no such flag: none.
    pub fn error_result_ids(self, entry: &Value) -> Vec<String> {
        match self.0 {
            Api::Anthropic => anthropic::error_result_ids(entry),
            Api::OpenAiChat | Api::OpenAiResponses => Vec::new(),
        }
    }

    /// The conversation entries carrying `results` (and, after them, `injected` text blocks).
    pub fn result_entries(self, results: &[ProxyResult], injected: &[String]) -> Vec<Value> {
        match self.0 {
            Api::Anthropic => anthropic::result_entries(results, injected),
            Api::OpenAiChat => chat::result_entries(results, injected),
            Api::OpenAiResponses => responses::result_entries(results, injected),
        }
    }

    /// Puts `results` before everything else in `entries` (the client's entries after an
    /// assistant turn), where the format wants them.
    pub fn prepend_results(self, entries: &mut Vec<Value>, results: &[ProxyResult]) {
        if results.is_empty() {
            return;
        }
        if self.0 == Api::Anthropic
            && let Some(first) = entries.first_mut()
            && first.get("role").and_then(Value::as_str) == Some("user")
        {
            anthropic::prepend_blocks(first, anthropic::result_blocks(results));
            return;
        }
        let mut out = self.result_entries(results, &[]);
        // A message after the results (the refusal of a computer call) goes after the client's
        // own results too, so that the answers to the turn's calls stay together.
        let told = match out.last() {
            Some(last) if self.0 == Api::OpenAiResponses && last.get("role").is_some() => out.pop(),
            _ => None,
        };
        let answers = entries
            .iter()
            .take_while(|e| !self.result_ids(e).is_empty())
            .count();
        out.extend(entries.drain(..answers));
        out.extend(told);
        out.append(entries);
        *entries = out;
    }

    /// Adds injected text blocks after `entry` (the last entry of a client turn): into it for
    /// Anthropic user messages, else as one extra user entry. Returns the entries to insert
    /// after it (none when it took them itself).
    pub fn inject_after(self, entry: &mut Value, blocks: &[String]) -> Vec<Value> {
        if blocks.is_empty() {
            return Vec::new();
        }
        if self.0 == Api::Anthropic && entry.get("role").and_then(Value::as_str) == Some("user") {
            anthropic::append_text(entry, blocks);
            return Vec::new();
        }
        vec![user_text_entry(self.0, blocks)]
    }

    /// Parses a non-streaming response body.
    pub fn parse_response(self, body: Value) -> Result<Round, String> {
        match self.0 {
            Api::Anthropic => anthropic::parse_response(body),
            Api::OpenAiChat => chat::parse_response(body),
            Api::OpenAiResponses => responses::parse_response(body),
        }
    }

    /// Why a non-streaming response the upstream answered with success failed all the same,
    /// if it did: a Responses response whose status is `failed`.
    pub fn failed_response(self, body: &Value) -> Option<String> {
        match self.0 {
            Api::OpenAiResponses => responses::failed(body),
            _ => None,
        }
    }

    /// The client's response from the rounds' parts it may see.
    pub fn client_response(self, out: &ClientTurn) -> Value {
        match self.0 {
            Api::Anthropic => anthropic::client_response(out),
            Api::OpenAiChat => chat::client_response(out),
            Api::OpenAiResponses => responses::client_response(out),
        }
    }

    /// A streaming translator for one client response. `echo` holds the request fields the
    /// client sent that a format's responses echo (see [`ClientTurn::echo`]).
    pub fn streamer(self, include_usage: bool, echo: Map<String, Value>) -> Box<dyn Streamer> {
        match self.0 {
            Api::Anthropic => Box::new(anthropic::Stream::default()),
            Api::OpenAiChat => Box::new(chat::Stream::new(include_usage)),
            Api::OpenAiResponses => Box::new(responses::Stream::new(echo)),
        }
    }

    /// An error as the format writes it, for the body of a response the proxy writes itself.
    pub fn error_body(self, kind: &str, message: &str) -> Value {
        match self.0 {
            Api::Anthropic => serde_json::json!({
                "type": "error",
                "error": {"type": kind, "message": message}
            }),
            _ => serde_json::json!({
                "error": {"type": kind, "message": message, "code": kind, "param": null}
            }),
        }
    }
}

/// What the client receives for one request: everything it may see of every round.
#[derive(Debug, Clone, Default)]
pub struct ClientTurn {
    /// The first round's envelope (id, model, ...).
    pub envelope: Map<String, Value>,
    /// Parts the client sees, in order; calls already carry the client's tool names.
    pub parts: Vec<Part>,
    /// The stop reason the client sees.
    pub stop: Option<String>,
    /// The rounds' usage, summed.
    pub usage: Option<Value>,
    /// The last round's envelope: how the answer ended, where the format says more than the
    /// stop reason (a stop sequence, why a response is incomplete or failed).
    pub last: Map<String, Value>,
    /// The request fields the proxy rewrites that a Responses response object echoes (`tools`,
    /// `tool_choice`), as the client sent them: the client's copy must name the client's tools,
    /// never the upstream's frozen list with the meta-tools.
    pub echo: Map<String, Value>,
}

/// Translates one upstream SSE stream after another into the single stream the client reads.
///
/// Parts other than tool calls are written out as they arrive (renumbered); tool calls are held
/// until complete, because a meta-tool call must never reach the client half-written; the
/// caller decides what becomes of them and writes the client's calls with
/// [`Streamer::write_call`], then ends the stream with [`Streamer::finish`].
pub trait Streamer: Send + std::fmt::Debug {
    /// Handles one upstream event; client bytes go to `out`.
    fn event(&mut self, event: &Event, out: &mut Vec<u8>) -> Result<(), String>;
    /// Whether the current round's stream ended.
    fn round_done(&self) -> bool;
    /// Whether the client's stream holds output past its opening (the first round's
    /// `message_start`, role chunk or `response.created`): text, a call, an item. Until it
    /// does, the proxy may still answer a failure with an HTTP status instead of an error event.
    fn shown(&self) -> bool;
    /// The round just streamed (and readies the next).
    fn take_round(&mut self) -> Round;
    /// Writes a complete text part the proxy adds itself.
    fn write_text(&mut self, text: &str, out: &mut Vec<u8>);
    /// Writes a complete call of a client tool.
    fn write_call(&mut self, call: &Call, out: &mut Vec<u8>);
    /// Ends the client's stream: stop reason, summed usage.
    fn finish(&mut self, stop: Option<&str>, usage: Option<&Value>, out: &mut Vec<u8>);
    /// An error event for a failure after the stream started. When the failure is an error
    /// event the upstream sent (the `Err` of [`Streamer::event`]), that event is written as the
    /// upstream wrote it instead: its type (an overloaded model, a rate limit) is what the client
    /// decides a retry by. A Responses `response.failed` the upstream sent ends the stream as it
    /// is, with the upstream's error.
    fn error(&mut self, kind: &str, message: &str, out: &mut Vec<u8>);
    /// The error event the upstream sent (or its `response.failed`), when that is what failed
    /// the round.
    fn upstream_error(&self) -> Option<&Value>;
}

/// Whether a tool definition belongs to the provider's own deferral.
pub fn is_provider_deferral(def: &Value) -> bool {
    def.get("defer_loading").and_then(Value::as_bool) == Some(true)
        || def
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.starts_with("tool_search_tool") || t == "tool_search")
}

/// The conversation array of a body.
pub fn conversation(dialect: Dialect, body: &Map<String, Value>) -> &[Value] {
    match body.get(dialect.0.conversation_key()) {
        Some(Value::Array(a)) => a,
        _ => &[],
    }
}

/// Text of a string or of an array of text blocks.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn user_text_entry(api: Api, blocks: &[String]) -> Value {
    let text = blocks.join("\n\n");
    match api {
        Api::OpenAiResponses => serde_json::json!({
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]
        }),
        _ => serde_json::json!({"role": "user", "content": text}),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn usage_sums_field_by_field() {
        let mut t = json!({"input_tokens": 10, "output_tokens": 2, "details": {"cached": 1}});
        add_usage(
            &mut t,
            &json!({"input_tokens": 5, "output_tokens": 3, "details": {"cached": 4}, "new": 1}),
        );
        assert_eq!(
            t,
            json!({"input_tokens": 15, "output_tokens": 5, "details": {"cached": 5}, "new": 1})
        );
    }

    #[test]
    fn tokens_read_every_format() {
        let a = Tokens::of(&json!({"input_tokens": 3, "output_tokens": 4,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}));
        assert_eq!(
            (a.input, a.output, a.cache_read, a.cache_creation),
            (3, 4, 100, 7)
        );
        let c = Tokens::of(&json!({"prompt_tokens": 50, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 40}}));
        assert_eq!((c.input, c.output, c.cache_read), (50, 5, 40));
        let r = Tokens::of(&json!({"input_tokens": 60, "output_tokens": 6,
            "input_tokens_details": {"cached_tokens": 30}}));
        assert_eq!((r.input, r.output, r.cache_read), (60, 6, 30));
    }

    #[test]
    fn the_latest_user_text_is_found_behind_the_clients_own_entries() {
        let d = Dialect(Api::Anthropic);
        let conv = [
            json!({"role": "user", "content": [{"type": "text", "text": "read the note"}]}),
            json!({"role": "system", "content": "# Environment"}),
        ];
        assert_eq!(d.latest_user_text(&conv).as_deref(), Some("read the note"));
        // After an assistant turn only what follows it counts: tool results are no user text.
        let later = [
            conv[0].clone(),
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}),
        ];
        assert_eq!(d.latest_user_text(&later), None);
        let chat = Dialect(Api::OpenAiChat);
        let conv = [
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "hi"}),
        ];
        assert_eq!(chat.latest_user_text(&conv).as_deref(), Some("hi"));
        assert_eq!(chat.latest_user_text(&[]), None);
    }

    #[test]
    fn arguments_that_are_not_an_object_are_kept() {
        assert_eq!(parse_arguments(""), (Map::new(), None));
        assert_eq!(parse_arguments("[1]").1.as_deref(), Some("[1]"));
        assert_eq!(parse_arguments("{\"a\":1}").0["a"], json!(1));
    }
}
