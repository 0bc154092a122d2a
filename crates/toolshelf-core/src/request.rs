//! Request bodies for the three LLM APIs, assembled so that a provider's prompt cache keeps
//! hitting.
//!
//! Prompt caches (Anthropic's explicit breakpoints, OpenAI's automatic prefix cache) reuse work
//! only for a byte-identical prefix: tools, then system, then the messages in order. The tool
//! surface is already a pure function of its inputs; this module makes the rest of the request
//! equally predictable:
//!
//! - `system` and `tools` are written as given, so they are the same bytes every turn;
//! - the messages (`input` for Responses) are the only growing part, and the messages of the
//!   request for `items[..n]` are element for element the first messages of the request for
//!   `items[..n + 1]`: every item maps to its own messages, never merged with a neighbour's, and
//!   nothing earlier is rewritten when an item is added;
//! - host-injected text (reminders, tool-set change notices, environment context) is carried by
//!   the item it arrived with and placed where the proxy places it, after the item's own
//!   messages, never spliced into an earlier message: in Anthropic as text blocks at the end of
//!   the item's user message (after the user's text, which is wrapped in
//!   `<user_query>…</user_query>`, or after the `tool_result` blocks, which must open their
//!   message); in the OpenAI APIs, which answer tool calls with one message (item) per call, as
//!   one extra user message after the item's messages, whose text is the blocks joined by a
//!   blank line;
//! - bodies are compared and written through [`canonical_json`], so the same value is the same
//!   bytes whatever order its keys were built in.
//!
//! Pure: no I/O. The caller keeps the transcript (the items, with their injected blocks) and
//! sends `canonical_json(&assemble(...))`.
//!
//! [`Sections`] reads a body of any of the three APIs back into the parts a cache depends on,
//! which is what `toolshelf prefix-check` compares.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value, json};

use crate::wire::Format;

/// The APIs a request body can be assembled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages: top-level `system`, `tools`, `messages`.
    Anthropic,
    /// OpenAI Chat Completions: `messages` opening with a system message, `tools`.
    OpenAiChat,
    /// OpenAI Responses: `instructions`, `tools`, `input`.
    OpenAiResponses,
}

impl Api {
    /// Every API, with the name used on the command line (the same as `--format`'s).
    pub const ALL: [(&'static str, Api); 3] = [
        ("anthropic", Api::Anthropic),
        ("openai", Api::OpenAiChat),
        ("openai-responses", Api::OpenAiResponses),
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAiChat => "openai",
            Api::OpenAiResponses => "openai-responses",
        }
    }

    /// The wire format of this API's tool definitions.
    pub fn tool_format(self) -> Format {
        match self {
            Api::Anthropic => Format::Anthropic,
            Api::OpenAiChat => Format::OpenAi,
            Api::OpenAiResponses => Format::OpenAiResponses,
        }
    }

    /// The key of the growing array: `messages`, or `input` for Responses.
    pub fn conversation_key(self) -> &'static str {
        match self {
            Api::OpenAiResponses => "input",
            _ => "messages",
        }
    }

    /// The top-level settings besides the prompt that decide which prompt cache a request can
    /// use at all: each model has its own cache, and on Anthropic a change of `tool_choice` or
    /// `thinking` invalidates the cached messages. A request that changes one of them breaks
    /// its prefix, whatever its bytes.
    pub fn cache_settings(self) -> &'static [&'static str] {
        match self {
            Api::Anthropic => &["model", "tool_choice", "thinking"],
            Api::OpenAiChat | Api::OpenAiResponses => &["model"],
        }
    }

    /// Which API a request body is for, or `None` when it has no `messages` or `input`.
    ///
    /// The rule, first match wins:
    /// 1. an `input` or `instructions` key: OpenAI Responses;
    /// 2. a top-level `system` key: Anthropic (Chat Completions has none);
    /// 3. a message with role `system`, `developer` or `tool`, or with `tool_calls`, or a tool
    ///    with a `function` object: OpenAI Chat Completions;
    /// 4. a content block of a type only Anthropic has (`tool_use`, `tool_result`, `thinking`,
    ///    `redacted_thinking`), or a tool with an `input_schema`: Anthropic;
    /// 5. any other body with `messages`: Anthropic. Where nothing tells the two apart (plain
    ///    user and assistant messages, no system part) they split into the same sections, so
    ///    the choice does not change a comparison.
    pub fn detect(body: &Value) -> Option<Api> {
        Self::detected(body).map(|(api, _)| api)
    }

    /// The API `body` is for beyond doubt: what [`Api::detect`] says, unless only its last rule
    /// decided (plain user and assistant messages, no system part, which Chat and Anthropic
    /// share).
    pub fn detect_certain(body: &Value) -> Option<Api> {
        Self::detected(body).and_then(|(api, certain)| certain.then_some(api))
    }

    /// The APIs `body` may be for: the one [`Api::detect`] names when a rule before the last
    /// decided; Anthropic and Chat Completions when only the last did (plain user and assistant
    /// messages: not Responses, which has no `messages` without an `input`); none when the body
    /// has neither `messages` nor `input`. Two bodies whose candidates share no API are plainly
    /// of different APIs.
    pub fn candidates(body: &Value) -> &'static [Api] {
        match Self::detected(body) {
            Some((Api::Anthropic, true)) => &[Api::Anthropic],
            Some((Api::OpenAiChat, true)) => &[Api::OpenAiChat],
            Some((Api::OpenAiResponses, _)) => &[Api::OpenAiResponses],
            Some(_) => &[Api::Anthropic, Api::OpenAiChat],
            None => &[],
        }
    }

    /// [`Api::detect`]'s answer, and whether a rule before the last one gave it.
    fn detected(body: &Value) -> Option<(Api, bool)> {
        let body = body.as_object()?;
        if body.contains_key("input") || body.contains_key("instructions") {
            return Some((Api::OpenAiResponses, true));
        }
        let messages = body.get("messages")?.as_array()?;
        if body.contains_key("system") {
            return Some((Api::Anthropic, true));
        }
        let chat_message = messages.iter().any(|m| {
            matches!(
                m.get("role").and_then(Value::as_str),
                Some("system" | "developer" | "tool")
            ) || m.get("tool_calls").is_some()
        });
        let chat_tool = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t.get("function").is_some()));
        if chat_message || chat_tool {
            return Some((Api::OpenAiChat, true));
        }
        let anthropic_block = messages.iter().any(|m| {
            m.get("content")
                .and_then(Value::as_array)
                .is_some_and(|blocks| {
                    blocks.iter().any(|b| {
                        matches!(
                            b.get("type").and_then(Value::as_str),
                            Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking")
                        )
                    })
                })
        });
        let anthropic_tool = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t.get("input_schema").is_some()));
        Some((Api::Anthropic, anthropic_block || anthropic_tool))
    }
}

/// One tool call made by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The API's call id (`tool_use_id`, `tool_call_id`, `call_id`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments (a JSON object).
    pub input: Value,
    /// The arguments as the model wrote them (JSON text holding `input`), when known. The OpenAI
    /// APIs carry arguments as text, and the proxy keeps the model's: Responses carries this text
    /// as written, Chat Completions compact in the key order written (as the proxy writes a
    /// call back, `serde_json`'s form of the parsed object). Without it, both carry
    /// [`canonical_json`] of `input`.
    pub arguments: Option<String>,
}

impl ToolCall {
    /// The arguments text `api` carries (only the OpenAI APIs carry text).
    fn arguments_in(&self, api: Api) -> String {
        match (&self.arguments, api) {
            (Some(written), Api::OpenAiResponses) => written.clone(),
            (Some(written), _) => serde_json::from_str::<Value>(written)
                .map_or_else(|_| written.clone(), |v| v.to_string()),
            (None, _) => canonical_json(&self.input),
        }
    }
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The id of the call it answers.
    pub id: String,
    /// The text the model reads.
    pub content: String,
    /// Whether the call failed. Only Anthropic has a field for it (`is_error`); the OpenAI APIs
    /// have none, so there the content alone must say so.
    pub is_error: bool,
    /// Whether the proxy wrote it (an answer it gave itself: a search's, a refusal, the result
    /// of a tool it runs) rather than the client (the result of a call the client ran).
    /// Anthropic carries the proxy's text as one text block, as the proxy writes its answers
    /// (`"content": [{"type": "text", "text": ...}]`), and the client's as a string; the OpenAI
    /// APIs carry both as a string.
    pub by_proxy: bool,
}

/// One entry of the transcript. An item maps to its own messages, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// The user's text, with host-injected blocks (reminders, tool-set change notices,
    /// environment context) that go after it, in the given order.
    User { text: String, injected: Vec<String> },
    /// The model's turn: optional text, then tool calls.
    Assistant {
        text: Option<String>,
        calls: Vec<ToolCall>,
    },
    /// Results of the previous assistant turn's calls, plus host-injected blocks (after the
    /// results).
    Results {
        results: Vec<ToolResult>,
        injected: Vec<String>,
    },
}

/// The request body for `items` in `api`.
///
/// `tools` must already be in the API's wire format ([`Api::tool_format`]); they are written as
/// given. An empty `system` or `tools` is left out (OpenAI refuses an empty `tools` array), and so
/// is an item with nothing in it; text that is empty or only whitespace (an assistant's, an
/// injected block) counts as nothing and is left out too (Anthropic refuses an empty text block). `settings` (`model`, `max_tokens`, `stream`, ...) become
/// top-level keys; one that names a key assembled here (`system`, `tools`, `messages`, `input`,
/// `instructions`) is ignored, the assembled value wins.
pub fn assemble(
    api: Api,
    system: &str,
    tools: &[Value],
    items: &[Item],
    settings: &Map<String, Value>,
) -> Value {
    let mut body = Map::new();
    let mut conversation = Vec::new();
    match api {
        Api::Anthropic if !system.is_empty() => {
            body.insert("system".into(), system.into());
        }
        Api::OpenAiChat if !system.is_empty() => {
            conversation.push(json!({"role": "system", "content": system}));
        }
        Api::OpenAiResponses if !system.is_empty() => {
            body.insert("instructions".into(), system.into());
        }
        _ => {}
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools.to_vec()));
    }
    for item in items {
        push_item(api, item, &mut conversation);
    }
    body.insert(api.conversation_key().into(), Value::Array(conversation));
    for (k, v) in settings {
        if !body.contains_key(k) && !ASSEMBLED.contains(&k.as_str()) {
            body.insert(k.clone(), v.clone());
        }
    }
    Value::Object(body)
}

/// The size of the conversation array [`assemble`] writes for a growing list of items, kept as
/// items are added, so that a caller that needs only sizes (a replay's report of every turn) does
/// not assemble and serialise the whole conversation again on every turn.
///
/// Each item maps to its own messages whatever comes before or after it (see the module
/// documentation), so the array's canonical length is the sum of its messages' lengths plus the
/// brackets and commas around them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConversationSize {
    messages: usize,
    bytes: usize,
}

impl ConversationSize {
    /// Counts the messages `item` adds to the conversation in `api`.
    pub fn add(&mut self, api: Api, item: &Item) {
        let mut out = Vec::new();
        push_item(api, item, &mut out);
        self.add_messages(&out);
    }

    /// A conversation holding only what [`assemble`] writes before the items: OpenAI Chat's
    /// system message, for a non-empty `system`. Returns it with that message's own length.
    pub fn opening(api: Api, system: &str) -> (Self, usize) {
        let mut size = Self::default();
        if api != Api::OpenAiChat || system.is_empty() {
            return (size, 0);
        }
        let message = json!({"role": "system", "content": system});
        size.add_messages(std::slice::from_ref(&message));
        let len = size.bytes;
        (size, len)
    }

    fn add_messages(&mut self, messages: &[Value]) {
        for m in messages {
            self.messages += 1;
            self.bytes += canonical_json(m).len();
        }
    }

    /// The length of `canonical_json` of the conversation array.
    pub fn bytes(&self) -> usize {
        // `[` and `]`, and a comma between each two messages.
        2 + self.bytes + self.messages.saturating_sub(1)
    }
}

/// Top-level keys [`assemble`] writes itself, in any API; settings cannot replace them.
const ASSEMBLED: [&str; 5] = ["system", "tools", "messages", "input", "instructions"];

/// `text` as the user's query: wrapped, so the injected blocks after it cannot be mistaken for
/// it.
fn user_query(text: &str) -> String {
    format!("<user_query>{text}</user_query>")
}

/// A text block of a user message in `api`.
fn user_text(api: Api, text: &str) -> Value {
    match api {
        Api::OpenAiResponses => json!({"type": "input_text", "text": text}),
        _ => json!({"type": "text", "text": text}),
    }
}

/// A user message holding `blocks` (already in the API's block format).
fn user_message(api: Api, blocks: Vec<Value>) -> Value {
    match api {
        Api::OpenAiResponses => json!({"type": "message", "role": "user", "content": blocks}),
        _ => json!({"role": "user", "content": blocks}),
    }
}

/// The entry the OpenAI APIs carry injected `blocks` in, after an item's own messages: one user
/// message whose text is the blocks joined by a blank line, as the proxy writes it.
fn injected_message(api: Api, blocks: &[String]) -> Value {
    let text = blocks.join("\n\n");
    match api {
        Api::OpenAiResponses => user_message(api, vec![user_text(api, &text)]),
        _ => json!({"role": "user", "content": text}),
    }
}

/// Appends the messages of one item.
fn push_item(api: Api, item: &Item, out: &mut Vec<Value>) {
    // Blank text is nothing (Anthropic refuses a text block without text): it is left out.
    let injected_blocks = |injected: &[String]| -> Vec<String> {
        injected.iter().filter(|b| !is_blank(b)).cloned().collect()
    };
    match item {
        Item::User { text, injected } => {
            let injected = injected_blocks(injected);
            let mut blocks = vec![user_text(api, &user_query(text))];
            if api == Api::Anthropic {
                blocks.extend(injected.iter().map(|b| user_text(api, b)));
            }
            out.push(user_message(api, blocks));
            if api != Api::Anthropic && !injected.is_empty() {
                out.push(injected_message(api, &injected));
            }
        }
        Item::Assistant { text, calls } => {
            let text = text.as_deref().filter(|t| !is_blank(t));
            if text.is_none() && calls.is_empty() {
                return;
            }
            push_assistant(api, text, calls, out);
        }
        Item::Results { results, injected } => {
            let injected = injected_blocks(injected);
            if results.is_empty() && injected.is_empty() {
                return;
            }
            push_results(api, results, &injected, out);
        }
    }
}

/// Whether `text` holds nothing but whitespace.
fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

fn push_assistant(api: Api, text: Option<&str>, calls: &[ToolCall], out: &mut Vec<Value>) {
    match api {
        Api::Anthropic => {
            let mut content: Vec<Value> = text
                .map(|t| json!({"type": "text", "text": t}))
                .into_iter()
                .collect();
            content.extend(calls.iter().map(
                |c| json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input}),
            ));
            out.push(json!({"role": "assistant", "content": content}));
        }
        Api::OpenAiChat => {
            let mut message = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                message["tool_calls"] = calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.name, "arguments": c.arguments_in(api)}})
                    })
                    .collect();
            }
            out.push(message);
        }
        Api::OpenAiResponses => {
            if let Some(t) = text {
                out.push(json!({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": t}]}));
            }
            out.extend(calls.iter().map(|c| {
                json!({"type": "function_call", "call_id": c.id, "name": c.name,
                    "arguments": c.arguments_in(api)})
            }));
        }
    }
}

fn push_results(api: Api, results: &[ToolResult], injected: &[String], out: &mut Vec<Value>) {
    match api {
        Api::Anthropic => {
            let mut content: Vec<Value> = results
                .iter()
                .map(|r| {
                    let content = if r.by_proxy {
                        json!([{"type": "text", "text": r.content}])
                    } else {
                        Value::String(r.content.clone())
                    };
                    let mut block = json!({"type": "tool_result", "tool_use_id": r.id,
                        "content": content});
                    if r.is_error {
                        block["is_error"] = true.into();
                    }
                    block
                })
                .collect();
            content.extend(injected.iter().map(|b| user_text(api, b)));
            out.push(user_message(api, content));
        }
        Api::OpenAiChat | Api::OpenAiResponses => {
            out.extend(results.iter().map(|r| match api {
                Api::OpenAiChat => {
                    json!({"role": "tool", "tool_call_id": r.id, "content": r.content})
                }
                _ => json!({"type": "function_call_output", "call_id": r.id, "output": r.content}),
            }));
            if !injected.is_empty() {
                out.push(injected_message(api, injected));
            }
        }
    }
}

/// `value` as compact JSON with every object's keys sorted (by bytes, recursively).
///
/// Strings are escaped and numbers written exactly as `serde_json` writes them, so equal values
/// give equal bytes whatever the key order they were built or parsed in: `"\u00e9"` and `"é"` are
/// the same bytes, and so are `1e2` and `100.0`. `1` and `1.0` stay different, as they are
/// different values on the wire.
pub fn canonical_json(value: &Value) -> String {
    serde_json::to_string(&Canonical(value))
        .expect("a JSON value with string keys always serializes to a string")
}

/// Serializes a value with sorted object keys.
struct Canonical<'a>(&'a Value);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Canonical(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut out = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    out.serialize_entry(k, &Canonical(v))?;
                }
                out.end()
            }
            // Numbers by value, not as written: serde_json keeps a number's text when built with
            // `arbitrary_precision` (the Starlark crate turns it on), and `1e2` must still be
            // written like `100.0`. An integer too large for 64 bits keeps its digits: as a
            // float, 18446744073709551616 and 18446744073709551617 would be one number.
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    s.serialize_u64(u)
                } else if let Some(i) = n.as_i64() {
                    s.serialize_i64(i)
                } else if n
                    .to_string()
                    .trim_start_matches('-')
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                {
                    n.serialize(s)
                } else if let Some(f) = n.as_f64().filter(|f| f.is_finite()) {
                    s.serialize_f64(f)
                } else {
                    n.serialize(s)
                }
            }
            other => other.serialize(s),
        }
    }
}

/// The parts of a request body a prompt cache depends on, read back from any of the three APIs.
///
/// - `system`: Anthropic's `system` (a string or an array of blocks), the leading `system` and
///   `developer` messages of Chat Completions (as an array), Responses' `instructions`; `null`
///   when there is none;
/// - `tools`: the `tools` array as written, `null` when absent;
/// - `conversation`: the rest of `messages` (Chat Completions: after the leading system
///   messages) or `input`; `first` is the index in that array of its first element, so a
///   message is named by its place in the body.
///
/// Anthropic's `cache_control` markers are left out of system blocks, tool definitions and
/// message content blocks: clients move the breakpoint to the newest block every turn (as
/// Anthropic's own multi-turn example does), and doing so keeps the cached prefix. A marker also
/// changes the shape it sits in: to mark a message whose content is a string, a client sends it
/// as one text block, and the string again once the marker moved on (Claude Code does). Both are
/// the same prompt, so a content (or an Anthropic `system`) of one bare text block is compared as
/// its string, and a Responses input item written as a string or without its `type` as the
/// `message` item it stands for. These forms are read alike whatever the API, so that a body
/// whose API cannot be told (plain user and assistant messages) splits into the same sections
/// read either way.
#[derive(Debug, Clone, PartialEq)]
pub struct Sections {
    /// The API the body was read as.
    pub api: Api,
    /// The system part, `null` when absent.
    pub system: Value,
    /// The tool definitions, `null` when absent.
    pub tools: Value,
    /// The growing part, in order.
    pub conversation: Vec<Value>,
    /// Index in the body's `messages` / `input` array of `conversation[0]`.
    pub first: usize,
}

impl Sections {
    /// Reads `body` as a request for `api`. The error says what is missing or malformed.
    pub fn of(api: Api, body: &Value) -> Result<Self, String> {
        let mut sections = Self::as_sent(api, body)?;
        sections.normalise();
        Ok(sections)
    }

    /// [`Self::of`] without reading alike the forms a prompt cache takes alike: each part as the
    /// body writes it, `cache_control` markers included, for what its bytes cost. Its
    /// `conversation` has the same elements in the same places as [`Self::of`]'s.
    pub fn as_sent(api: Api, body: &Value) -> Result<Self, String> {
        let body = body
            .as_object()
            .ok_or("a request body must be a JSON object")?;
        let key = api.conversation_key();
        let array = match body.get(key) {
            Some(Value::Array(a)) => a.clone(),
            // Responses also takes `input` as a plain string: one user message.
            Some(s @ Value::String(_)) if api == Api::OpenAiResponses => vec![s.clone()],
            Some(_) => return Err(format!("`{key}` must be an array ({} request)", api.name())),
            None => return Err(format!("no `{key}` array ({} request)", api.name())),
        };
        let tools = body.get("tools").cloned().unwrap_or(Value::Null);
        let sections = match api {
            Api::Anthropic => Sections {
                api,
                system: body.get("system").cloned().unwrap_or(Value::Null),
                tools,
                conversation: array,
                first: 0,
            },
            Api::OpenAiChat => {
                let leading = array
                    .iter()
                    .take_while(|m| {
                        matches!(
                            m.get("role").and_then(Value::as_str),
                            Some("system" | "developer")
                        )
                    })
                    .count();
                let mut conversation = array;
                let system: Vec<Value> = conversation.drain(..leading).collect();
                Sections {
                    api,
                    system: if system.is_empty() {
                        Value::Null
                    } else {
                        Value::Array(system)
                    },
                    tools,
                    conversation,
                    first: leading,
                }
            }
            Api::OpenAiResponses => Sections {
                api,
                system: body.get("instructions").cloned().unwrap_or(Value::Null),
                tools,
                conversation: array,
                first: 0,
            },
        };
        Ok(sections)
    }

    /// The name of `conversation[i]` in the body: `messages[k]` or `input[k]`.
    pub fn element_name(&self, i: usize) -> String {
        format!("{}[{}]", self.api.conversation_key(), self.first + i)
    }

    fn normalise(&mut self) {
        /// Collapses lone text blocks in `blocks` (and in a tool result's own content), and
        /// with `strip` drops the `cache_control` markers.
        fn blocks(list: &mut Value, strip: bool) {
            for block in list.as_array_mut().into_iter().flatten() {
                if let Some(b) = block.as_object_mut() {
                    if strip {
                        b.remove("cache_control");
                    }
                    // A tool_result's own content blocks may carry the marker too.
                    if let Some(inner) = b.get_mut("content") {
                        blocks(inner, strip);
                        as_string_if_lone_text(inner);
                    }
                }
            }
        }
        fn as_string_if_lone_text(content: &mut Value) {
            let lone = match content.as_array().map(Vec::as_slice) {
                Some([b])
                    if b.as_object().is_some_and(|o| o.len() == 2)
                        && matches!(
                            b.get("type").and_then(Value::as_str),
                            Some("text" | "input_text")
                        ) =>
                {
                    b.get("text").and_then(Value::as_str).map(str::to_owned)
                }
                _ => None,
            };
            if let Some(text) = lone {
                *content = Value::String(text);
            }
        }
        // Only Anthropic has the markers; elsewhere the key is content like any other.
        let strip = self.api == Api::Anthropic;
        if strip {
            blocks(&mut self.system, true);
            as_string_if_lone_text(&mut self.system);
            blocks(&mut self.tools, true);
        }
        for message in &mut self.conversation {
            if self.api == Api::OpenAiResponses {
                if let Value::String(text) = message {
                    *message = serde_json::json!({"role": "user", "content": text});
                }
                if let Some(item) = message.as_object_mut()
                    && item.contains_key("role")
                    && !item.contains_key("type")
                {
                    item.insert("type".into(), Value::String("message".into()));
                }
            }
            if let Some(content) = message.get_mut("content") {
                blocks(content, strip);
                as_string_if_lone_text(content);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str, input: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            input,
            arguments: None,
        }
    }

    fn result(id: &str, content: &str, is_error: bool) -> ToolResult {
        ToolResult {
            id: id.into(),
            content: content.into(),
            is_error,
            by_proxy: false,
        }
    }

    fn user(text: &str, injected: &[&str]) -> Item {
        Item::User {
            text: text.into(),
            injected: injected.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Empty or blank text is nothing: an assistant item holding only that is left out, one with
    /// calls carries them alone, and a blank injected block is dropped, in every API (Anthropic
    /// refuses a text block without text).
    #[test]
    fn blank_text_is_left_out() {
        let with = vec![
            user("hi", &["", "<r>1</r>", " \n"]),
            Item::Assistant {
                text: Some(String::new()),
                calls: vec![],
            },
            Item::Assistant {
                text: Some(" \n".into()),
                calls: vec![call("c1", "ls", json!({}))],
            },
            Item::Results {
                results: vec![result("c1", "a.rs", false)],
                injected: vec![String::new()],
            },
            Item::Results {
                results: vec![],
                injected: vec![" ".into()],
            },
        ];
        let without = vec![
            user("hi", &["<r>1</r>"]),
            Item::Assistant {
                text: None,
                calls: vec![call("c1", "ls", json!({}))],
            },
            Item::Results {
                results: vec![result("c1", "a.rs", false)],
                injected: vec![],
            },
        ];
        for (name, api) in Api::ALL {
            let body = assemble(api, "s", &[], &with, &Map::new());
            assert_eq!(
                canonical_json(&body),
                canonical_json(&assemble(api, "s", &[], &without, &Map::new())),
                "{name}"
            );
            let mut size = ConversationSize::default();
            with.iter().for_each(|i| size.add(api, i));
            let mut expected = ConversationSize::default();
            without.iter().for_each(|i| expected.add(api, i));
            assert_eq!(size, expected, "{name}");
        }
    }

    /// Ten items: every kind, with and without text, injected blocks, errors and several calls.
    fn conversation() -> Vec<Item> {
        vec![
            user("list the files", &["<env>cwd=/repo</env>"]),
            Item::Assistant {
                text: Some("Looking.".into()),
                calls: vec![call("c1", "ls", json!({"path": ".", "all": true}))],
            },
            Item::Results {
                results: vec![result("c1", "a.rs\nb.rs", false)],
                injected: vec!["<reminder>tests are slow</reminder>".into()],
            },
            Item::Assistant {
                text: None,
                calls: vec![
                    call("c2", "read", json!({"path": "a.rs"})),
                    call("c3", "read", json!({"path": "missing.rs"})),
                ],
            },
            Item::Results {
                results: vec![
                    result("c2", "fn main() {}", false),
                    result("c3", "no such file", true),
                ],
                injected: vec![],
            },
            Item::Assistant {
                text: Some("a.rs has an empty main.".into()),
                calls: vec![],
            },
            user(
                "now \"quote\" it",
                &["<tools_changed>+git_log</tools_changed>", "<r>2</r>"],
            ),
            Item::Assistant {
                text: None,
                calls: vec![call(
                    "c4",
                    "git_log",
                    json!({"n": 1, "b": {"z": 1, "a": [2, 1]}}),
                )],
            },
            Item::Results {
                results: vec![result("c4", "commit 1", false)],
                injected: vec!["<a/>".into(), "<b/>".into()],
            },
            Item::Assistant {
                text: Some("Done.".into()),
                calls: vec![],
            },
        ]
    }

    const APIS: [Api; 3] = [Api::Anthropic, Api::OpenAiChat, Api::OpenAiResponses];

    fn tools(api: Api) -> Vec<Value> {
        ["ls", "read", "git_log"]
            .iter()
            .map(|n| {
                crate::wire::definition_from_parts(
                    n,
                    &format!("The {n} tool."),
                    &Map::from_iter([("type".into(), json!("object"))]),
                    api.tool_format(),
                )
            })
            .collect()
    }

    fn growing(api: Api, body: &Value) -> Vec<String> {
        body[api.conversation_key()]
            .as_array()
            .expect("conversation array")
            .iter()
            .map(canonical_json)
            .collect()
    }

    #[test]
    fn each_request_is_a_prefix_of_the_next() {
        let items = conversation();
        let settings =
            Map::from_iter([("model".into(), json!("m")), ("stream".into(), json!(true))]);
        for api in APIS {
            let tools = tools(api);
            let bodies: Vec<Value> = (0..=items.len())
                .map(|n| assemble(api, "Be brief.", &tools, &items[..n], &settings))
                .collect();
            for pair in bodies.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                let (ga, gb) = (growing(api, a), growing(api, b));
                assert!(gb.len() >= ga.len(), "{api:?}");
                assert_eq!(ga, gb[..ga.len()], "{api:?}: earlier messages changed");
                assert_eq!(
                    ga.concat(),
                    gb[..ga.len()].concat(),
                    "{api:?}: the concatenation is a prefix too"
                );
                for key in ["system", "instructions", "tools", "model", "stream"] {
                    assert_eq!(
                        a.get(key).map(canonical_json),
                        b.get(key).map(canonical_json),
                        "{api:?} {key}"
                    );
                }
                let (sa, sb) = (
                    Sections::of(api, a).expect("sections"),
                    Sections::of(api, b).expect("sections"),
                );
                assert_eq!(canonical_json(&sa.system), canonical_json(&sb.system));
                assert_eq!(
                    sa.conversation[..],
                    sb.conversation[..sa.conversation.len()]
                );
            }
            // The whole conversation grew: a change that rewrote earlier messages would not
            // have been hidden by a constant body.
            assert!(growing(api, &bodies[10]).len() > growing(api, &bodies[1]).len());
            // And the check can fail: merging two items into one message breaks it.
            let merged = assemble(
                api,
                "Be brief.",
                &tools,
                &[user("list the files", &["<env>cwd=/repo</env>", "x"])],
                &settings,
            );
            assert_ne!(growing(api, &bodies[1]), growing(api, &merged));
        }
    }

    #[test]
    fn system_tools_and_settings_are_placed_per_api() {
        let settings = Map::from_iter([
            ("model".into(), json!("m")),
            ("max_tokens".into(), json!(100)),
            ("tools".into(), json!("ignored")),
            ("system".into(), json!("ignored")),
            ("messages".into(), json!("ignored")),
        ]);
        let items = [user("hi", &[])];
        let a = assemble(
            Api::Anthropic,
            "S",
            &tools(Api::Anthropic),
            &items,
            &settings,
        );
        assert_eq!(a["system"], "S");
        assert_eq!(a["tools"][0]["name"], "ls");
        assert_eq!(a["messages"][0]["role"], "user");
        assert_eq!((&a["model"], &a["max_tokens"]), (&json!("m"), &json!(100)));
        let c = assemble(
            Api::OpenAiChat,
            "S",
            &tools(Api::OpenAiChat),
            &items,
            &settings,
        );
        assert_eq!(c["messages"][0], json!({"role": "system", "content": "S"}));
        assert_eq!(c["messages"][1]["role"], "user");
        assert!(c.get("system").is_none(), "{c}");
        assert_eq!(c["tools"][0]["function"]["name"], "ls");
        let r = assemble(
            Api::OpenAiResponses,
            "S",
            &tools(Api::OpenAiResponses),
            &items,
            &settings,
        );
        assert_eq!(r["instructions"], "S");
        assert_eq!(r["input"][0]["type"], "message");
        assert_eq!(r["tools"][0]["name"], "ls");
        assert!(
            r.get("messages").is_none() && r.get("system").is_none(),
            "{r}"
        );
        // Empty system and tools are left out.
        let bare = assemble(Api::OpenAiChat, "", &[], &items, &Map::new());
        assert_eq!(bare.as_object().map(Map::len), Some(1), "{bare}");
        assert_eq!(bare["messages"][0]["role"], "user");
        let bare = assemble(Api::Anthropic, "", &[], &items, &Map::new());
        assert!(bare.get("system").is_none() && bare.get("tools").is_none());
    }

    /// Injected blocks follow the user's text, as the proxy puts them after the client's last
    /// entry: Anthropic appends them to the user's message, the OpenAI APIs send them in one
    /// more user message, joined by a blank line.
    #[test]
    fn injected_blocks_follow_the_users_text() {
        let items = [user("do it", &["first", "second"])];
        let a = assemble(Api::Anthropic, "", &[], &items, &Map::new());
        assert_eq!(
            a["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "<user_query>do it</user_query>"},
                {"type": "text", "text": "first"},
                {"type": "text", "text": "second"}]}])
        );
        let c = assemble(Api::OpenAiChat, "", &[], &items, &Map::new());
        assert_eq!(
            c["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "<user_query>do it</user_query>"}]},
                {"role": "user", "content": "first\n\nsecond"}])
        );
        let r = assemble(Api::OpenAiResponses, "", &[], &items, &Map::new());
        assert_eq!(
            r["input"],
            json!([
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "<user_query>do it</user_query>"}]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "first\n\nsecond"}]}])
        );
        // Without injected blocks, no extra message.
        for api in [Api::OpenAiChat, Api::OpenAiResponses] {
            let b = assemble(api, "", &[], &[user("do it", &[])], &Map::new());
            assert_eq!(b[api.conversation_key()].as_array().map(Vec::len), Some(1));
        }
    }

    #[test]
    fn anthropic_tool_results_open_their_message() {
        let items = [Item::Results {
            results: vec![result("c1", "ok", false), result("c2", "boom", true)],
            injected: vec!["<note/>".into()],
        }];
        let a = assemble(Api::Anthropic, "", &[], &items, &Map::new());
        assert_eq!(a["messages"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            a["messages"][0],
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
                {"type": "tool_result", "tool_use_id": "c2", "content": "boom", "is_error": true},
                {"type": "text", "text": "<note/>"}]})
        );
    }

    /// The proxy's own answers carry their text as Anthropic's proxy writes them, one text
    /// block; a result the client sent stays a string. The OpenAI APIs take a string either way.
    #[test]
    fn the_proxys_own_answers_are_one_text_block_in_anthropic() {
        let own = ToolResult {
            by_proxy: true,
            ..result("c1", "No tool named x.", true)
        };
        let items = [Item::Results {
            results: vec![own, result("c2", "ok", false)],
            injected: vec![],
        }];
        let a = assemble(Api::Anthropic, "", &[], &items, &Map::new());
        assert_eq!(
            a["messages"][0]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "c1", "is_error": true,
                 "content": [{"type": "text", "text": "No tool named x."}]},
                {"type": "tool_result", "tool_use_id": "c2", "content": "ok"}])
        );
        let c = assemble(Api::OpenAiChat, "", &[], &items, &Map::new());
        assert_eq!(
            c["messages"][0],
            json!({"role": "tool", "tool_call_id": "c1", "content": "No tool named x."})
        );
        let r = assemble(Api::OpenAiResponses, "", &[], &items, &Map::new());
        assert_eq!(
            r["input"][0],
            json!({"type": "function_call_output", "call_id": "c1", "output": "No tool named x."})
        );
    }

    #[test]
    fn openai_injected_blocks_follow_the_tool_messages_in_one_user_message() {
        let items = [Item::Results {
            results: vec![result("c1", "ok", false), result("c2", "boom", true)],
            injected: vec!["<a/>".into(), "<b/>".into()],
        }];
        let c = assemble(Api::OpenAiChat, "", &[], &items, &Map::new());
        assert_eq!(
            c["messages"],
            json!([
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "tool", "tool_call_id": "c2", "content": "boom"},
                {"role": "user", "content": "<a/>\n\n<b/>"}])
        );
        let r = assemble(Api::OpenAiResponses, "", &[], &items, &Map::new());
        assert_eq!(
            r["input"],
            json!([
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                {"type": "function_call_output", "call_id": "c2", "output": "boom"},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "<a/>\n\n<b/>"}]}])
        );
        // Without injected blocks, no extra message.
        let plain = [Item::Results {
            results: vec![result("c1", "ok", false)],
            injected: vec![],
        }];
        for api in [Api::OpenAiChat, Api::OpenAiResponses] {
            let b = assemble(api, "", &[], &plain, &Map::new());
            assert_eq!(b[api.conversation_key()].as_array().map(Vec::len), Some(1));
        }
    }

    #[test]
    fn assistant_turns_carry_text_then_calls() {
        let items = [Item::Assistant {
            text: Some("On it.".into()),
            calls: vec![call("c1", "ls", json!({"z": 1, "a": "x"}))],
        }];
        let a = assemble(Api::Anthropic, "", &[], &items, &Map::new());
        assert_eq!(
            a["messages"][0],
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "c1", "name": "ls", "input": {"z": 1, "a": "x"}}]})
        );
        let c = assemble(Api::OpenAiChat, "", &[], &items, &Map::new());
        assert_eq!(
            c["messages"][0],
            json!({"role": "assistant", "content": "On it.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"a\":\"x\",\"z\":1}"}}]})
        );
        let r = assemble(Api::OpenAiResponses, "", &[], &items, &Map::new());
        assert_eq!(
            r["input"],
            json!([
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]},
                {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{\"a\":\"x\",\"z\":1}"}])
        );
        // No text: Chat Completions says null, the others leave the text out.
        let silent = [Item::Assistant {
            text: None,
            calls: vec![call("c1", "ls", json!({}))],
        }];
        let c = assemble(Api::OpenAiChat, "", &[], &silent, &Map::new());
        assert!(c["messages"][0]["content"].is_null());
        let a = assemble(Api::Anthropic, "", &[], &silent, &Map::new());
        assert_eq!(a["messages"][0]["content"][0]["type"], "tool_use");
        let r = assemble(Api::OpenAiResponses, "", &[], &silent, &Map::new());
        assert_eq!(r["input"][0]["type"], "function_call");
        // An empty item adds nothing.
        let empty = [
            Item::Assistant {
                text: None,
                calls: vec![],
            },
            Item::Results {
                results: vec![],
                injected: vec![],
            },
        ];
        for api in APIS {
            let b = assemble(api, "", &[], &empty, &Map::new());
            assert_eq!(b[api.conversation_key()], json!([]), "{api:?}");
        }
    }

    /// Arguments the model wrote as text go out as the proxy sends them: Responses as written,
    /// Chat Completions compact in the order written; given as an object, canonical.
    #[test]
    fn arguments_written_as_text_keep_the_models_text() {
        let written = "{\"z\": 1, \"a\": \"\\u00e9\"}";
        let c = ToolCall {
            arguments: Some(written.into()),
            ..call("c1", "ls", json!({"z": 1, "a": "é"}))
        };
        let items = [Item::Assistant {
            text: None,
            calls: vec![c],
        }];
        let r = assemble(Api::OpenAiResponses, "", &[], &items, &Map::new());
        assert_eq!(r["input"][0]["arguments"], written);
        let chat = assemble(Api::OpenAiChat, "", &[], &items, &Map::new());
        assert_eq!(
            chat["messages"][0]["tool_calls"][0]["function"]["arguments"],
            "{\"z\":1,\"a\":\"é\"}"
        );
        let a = assemble(Api::Anthropic, "", &[], &items, &Map::new());
        assert_eq!(
            a["messages"][0]["content"][0]["input"],
            json!({"z": 1, "a": "é"})
        );
    }

    #[test]
    fn canonical_json_ignores_key_order() {
        let a: Value =
            serde_json::from_str(r#"{"b": {"y": 1, "x": [{"q": 1, "p": 2}]}, "a": null, "B": 0}"#)
                .expect("json");
        let b: Value =
            serde_json::from_str(r#"{"B": 0, "a": null, "b": {"x": [{"p": 2, "q": 1}], "y": 1}}"#)
                .expect("json");
        // The map keeps insertion order, so the plain serialization differs...
        assert_ne!(a.to_string(), b.to_string());
        // ...and the canonical one does not.
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            canonical_json(&a),
            r#"{"B":0,"a":null,"b":{"x":[{"p":2,"q":1}],"y":1}}"#
        );
        // Byte order: upper case before lower case, "é" after "z", a prefix first.
        let keys: Value =
            serde_json::from_str(r#"{"é": 1, "z": 2, "ab": 3, "a": 4, "Z": 5}"#).expect("json");
        assert_eq!(canonical_json(&keys), r#"{"Z":5,"a":4,"ab":3,"z":2,"é":1}"#);
        // Array order is content, not layout.
        assert_ne!(
            canonical_json(&json!([1, 2])),
            canonical_json(&json!([2, 1]))
        );
    }

    #[test]
    fn canonical_json_numbers_and_escapes() {
        let parse = |s: &str| canonical_json(&serde_json::from_str::<Value>(s).expect("json"));
        assert_eq!(parse("1e2"), "100.0");
        assert_eq!(parse("1e2"), parse("100.0"));
        assert_ne!(parse("1"), parse("1.0"));
        assert_eq!(parse("-7"), "-7");
        assert_eq!(parse("18446744073709551615"), "18446744073709551615");
        assert_eq!(parse("0.1"), "0.1");
        assert_eq!(parse("[ 1 , 2 ]"), "[1,2]");
        assert_eq!(parse(r#""\u00e9""#), parse(r#""é""#));
        assert_eq!(parse(r#""\u00e9""#), "\"é\"");
        assert_eq!(parse(r#""\/""#), r#""/""#);
        assert_eq!(
            parse(r#""q\"b\\n\nt\tc\u0001""#),
            r#""q\"b\\n\nt\tc\u0001""#
        );
        assert_eq!(parse(r#""\ud83d\ude00""#), "\"😀\"");
    }

    #[test]
    fn detection_follows_the_documented_rule() {
        let d = |v: Value| Api::detect(&v);
        assert_eq!(d(json!({"input": []})), Some(Api::OpenAiResponses));
        assert_eq!(
            d(json!({"instructions": "x", "model": "m"})),
            Some(Api::OpenAiResponses)
        );
        assert_eq!(
            d(json!({"system": "s", "messages": []})),
            Some(Api::Anthropic)
        );
        assert_eq!(
            d(json!({"messages": [{"role": "developer", "content": "s"}]})),
            Some(Api::OpenAiChat)
        );
        assert_eq!(
            d(
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "1", "content": "r"}]})
            ),
            Some(Api::OpenAiChat)
        );
        assert_eq!(
            d(json!({"messages": [{"role": "assistant", "content": null, "tool_calls": []}]})),
            Some(Api::OpenAiChat)
        );
        assert_eq!(
            d(json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}]})),
            Some(Api::OpenAiChat)
        );
        assert_eq!(
            d(json!({"messages": [{"role": "user", "content": "q"}]})),
            Some(Api::Anthropic)
        );
        // Only the last rule's answer is a guess.
        let c = |v: Value| Api::detect_certain(&v);
        assert_eq!(
            c(json!({"messages": [{"role": "user", "content": "q"}]})),
            None
        );
        assert_eq!(
            c(json!({"system": "s", "messages": []})),
            Some(Api::Anthropic)
        );
        assert_eq!(
            c(json!({"messages": [{"role": "system", "content": "s"}]})),
            Some(Api::OpenAiChat)
        );
        assert_eq!(c(json!({"input": "q"})), Some(Api::OpenAiResponses));
        // Blocks and tools only Anthropic has.
        assert_eq!(
            c(json!({"messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]})),
            Some(Api::Anthropic)
        );
        assert_eq!(
            c(json!({"messages": [], "tools": [{"name": "f", "input_schema": {}}]})),
            Some(Api::Anthropic)
        );
        assert_eq!(c(json!({"model": "m"})), None);
        assert_eq!(d(json!({"model": "m"})), None);
        assert_eq!(d(json!({"messages": "x"})), None);
        assert_eq!(d(json!([1])), None);
        // Plain messages may be Anthropic or Chat, but are never Responses.
        let k = |v: Value| Api::candidates(&v);
        assert_eq!(
            k(json!({"messages": [{"role": "user", "content": "q", "type": "message"}]})),
            [Api::Anthropic, Api::OpenAiChat]
        );
        assert_eq!(k(json!({"input": "q"})), [Api::OpenAiResponses]);
        assert_eq!(k(json!({"system": "s", "messages": []})), [Api::Anthropic]);
        assert_eq!(
            k(json!({"messages": [{"role": "tool", "content": "r"}]})),
            [Api::OpenAiChat]
        );
        assert!(k(json!({"model": "m"})).is_empty());
        for api in APIS {
            let body = assemble(api, "S", &tools(api), &conversation(), &Map::new());
            assert_eq!(Api::detect(&body), Some(api), "{api:?}");
        }
    }

    #[test]
    fn sections_split_each_api_and_name_elements_by_their_place() {
        let items = &conversation()[..3];
        let c = Sections::of(
            Api::OpenAiChat,
            &assemble(Api::OpenAiChat, "S", &[], items, &Map::new()),
        )
        .expect("chat");
        assert_eq!(c.system, json!([{"role": "system", "content": "S"}]));
        assert_eq!(c.tools, Value::Null);
        assert_eq!(c.first, 1);
        assert_eq!(c.element_name(0), "messages[1]");
        assert_eq!(c.conversation[0]["role"], "user");
        let r = Sections::of(
            Api::OpenAiResponses,
            &assemble(
                Api::OpenAiResponses,
                "S",
                &tools(Api::OpenAiResponses),
                items,
                &Map::new(),
            ),
        )
        .expect("responses");
        assert_eq!((r.system.as_str(), r.first), (Some("S"), 0));
        assert_eq!(r.element_name(2), "input[2]");
        assert_eq!(r.tools.as_array().map(Vec::len), Some(3));
        let e = Sections::of(Api::Anthropic, &json!({"input": []})).expect_err("no messages");
        assert!(e.contains("no `messages` array"), "{e}");
        let e = Sections::of(Api::OpenAiChat, &json!({"messages": {}})).expect_err("object");
        assert!(e.contains("`messages` must be an array"), "{e}");
        assert!(Sections::of(Api::Anthropic, &json!(3)).is_err());
    }

    #[test]
    fn a_content_marked_as_one_text_block_compares_as_its_string() {
        let marked = json!({"system": "s", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}]});
        let plain = json!({"system": "s", "messages": [{"role": "user", "content": "q"}]});
        let a = Sections::of(Api::Anthropic, &marked).expect("reads");
        let b = Sections::of(Api::Anthropic, &plain).expect("reads");
        assert_eq!(a.conversation, b.conversation);
        let two = json!({"system": "s", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "q"}, {"type": "text", "text": "r"}]}]});
        let c = Sections::of(Api::Anthropic, &two).expect("reads");
        assert_ne!(
            c.conversation, b.conversation,
            "more than one block keeps its shape"
        );
    }

    #[test]
    fn anthropic_cache_control_markers_are_not_compared() {
        let marked = json!({
            "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "t", "input_schema": {"type": "object", "properties": {"cache_control": {"type": "string"}}}, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "1", "content": [{"type": "text", "text": "r", "cache_control": {"type": "ephemeral"}}]},
                {"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}]
        });
        let s = Sections::of(Api::Anthropic, &marked).expect("sections");
        let all = canonical_json(&json!([s.system, s.tools, s.conversation]));
        assert_eq!(all.matches("cache_control").count(), 1, "{all}");
        assert!(
            all.contains(r#""properties":{"cache_control""#),
            "a parameter of that name is kept: {all}"
        );
        // Other APIs keep every key.
        let chat = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": 1}]}]});
        let s = Sections::of(Api::OpenAiChat, &chat).expect("sections");
        assert!(canonical_json(&s.conversation[0]).contains("cache_control"));
    }
}
