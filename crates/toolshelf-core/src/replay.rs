//! Replaying a conversation: what a proxy does for every model request, without the network.
//!
//! A transcript is a list of events, one JSON object a line: `{"user": "..."}`, `{"assistant":
//! "..."}` (the model's text), `{"call": {"name", "input"}}` (a tool call the model made),
//! `{"result": {"content": ..., "is_error": false}}` (the recorded result of a call), `{"context":
//! "..."}` (environment context for the next request) and `{"tools_changed": {"add": [...],
//! "remove": [...]}}` (the tool set changed). A call's `arguments` and a result's `isError`, the
//! spellings of MCP and OpenAI, are read as `input` and `is_error`; any other key an event does
//! not take is refused, as a misspelt key would be read as absent. Replaying it runs one session: a request is
//! assembled whenever the model would be asked to continue (after a user message, and after the
//! results of its calls), and each is reported. Calls are carried out against the catalog as the
//! session would: `tool_search` for real, `defer_execute` and pinned tools as a dry run that
//! resolves, checks activation, validates and authorizes but runs nothing (`tool_define` reads the
//! script's top level, as the proxy's runner does before it keeps a definition; a direct call of
//! a tool the frozen list holds with its schema is not validated, as the proxy hands it to the
//! client as written). A recorded result
//! replaces the computed one in the request, its error flag and all, but the call still has its
//! effect on the session (a search still activates what it found). A result is written as the
//! one who writes it does: the proxy's own answers (a search's, a refusal, a tool it runs) as the
//! proxy writes them, and in a round of both before the results of the calls the client ran,
//! which read as the client sends them. A call the client runs counts
//! as made (its activation refreshed, its `after_tools` reminders fired) only when its recorded
//! result is not an error, as the proxy counts it from the results the client sends back (only
//! Anthropic's requests say so; in the OpenAI APIs every result counts).
//!
//! Turns are counted as the proxy counts them: a turn is one request of the client (the harness),
//! which starts with a user message or with the results of calls the client ran. The proxy
//! answers some calls itself within that request and asks the model again (one more upstream
//! round): `tool_search`, a call it refuses (a malformed or refused `defer_execute`, a call of a
//! tool the client no longer offers, refused as gone; a direct call of any other name no tool has
//! exactly goes to the client), `tool_define`, a tool the model wrote and a
//! script tool of the configuration (`mcp__scripts__NAME` with `[tools.NAME] script`). A
//! model request after a round made only of such calls is reported with the same turn, and nothing
//! is evaluated or injected for it but the environment context the transcript puts there; a round
//! with a call the client runs (a deferred tool through `defer_execute`, a pinned one) ends the
//! client request, and the request that carries its results starts the next turn. So does the
//! round after `[proxy] max_search_rounds` requests of one turn, where the proxy gives up and
//! answers the client. The reminders a tool the proxy runs fires (`after_tools`, a path in its
//! arguments) go on that call's result, as the proxy puts them; the queries of a turn's
//! searches reach the reminders of the next turn.
//!
//! A result answers the call right before it. Calls in a row followed by as many results are one
//! round of parallel calls, paired in order; a call with no result right after it takes a round
//! of its own, with a computed result. `context` and `tools_changed` events between a round's
//! calls and its results belong to the request that carries the results, as in the proxy (the
//! client sends them with the results): they apply once the calls are judged, against the tools
//! they were made with. More results than calls in a row leave one answering nothing, which is an
//! error that names its line, and so is any other event between a call and its result, a round
//! with something between its calls and fewer results than calls, and a call before the first
//! user message (a conversation opens with the user).
//!
//! Injected blocks go with the new item of a turn's first request, where the proxy puts them:
//! after the client's last entry of the turn (the user's message, or the results of the calls
//! it ran), in Anthropic as text blocks at the end of that user message, in the OpenAI APIs as
//! one more user message holding them joined by a blank line (see [`crate::request`]). Their
//! order is fixed: the tool-set change notice, reminders (rule order), as the proxy writes them,
//! then environment context. Earlier items keep the blocks they were given, so each request's
//! messages are a byte prefix of the next one's.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::authoring;
use crate::catalog::{Catalog, Resolution};
use crate::compile::Compiled;
use crate::invoke::{self, Authorization, Refusal, Via};
use crate::meta::DeferExecuteArgs;
use crate::name::{DEFER_EXECUTE, TOOL_SEARCH};
use crate::policy::{Exposure, State};
use crate::reminder::{Call, Note, TurnInput};
use crate::request::{Api, ConversationSize, Item, ToolCall, ToolResult, assemble, canonical_json};
use crate::search::render::{SessionView, search_for};
use crate::search::{SearchIndex, SearchRequest};
use crate::session::{Activity, FrozenSurface, SessionState};

/// One event of a transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The user's text.
    User(String),
    /// The model's text (before its calls, if any follow).
    Assistant(String),
    /// A tool call the model made.
    Call {
        /// The tool's name, as the model wrote it.
        name: String,
        /// Its arguments.
        input: Map<String, Value>,
        /// The arguments as the model wrote them, when the transcript gives them as a string of
        /// JSON (the `arguments` of OpenAI's function calls): the OpenAI APIs carry that text
        /// (see [`ToolCall::arguments`]). `None` when they were given as an object.
        arguments: Option<String>,
    },
    /// The recorded result of a call: its content (a string, or content blocks) and whether
    /// the call failed.
    Result {
        /// The content the model read.
        content: Value,
        /// Whether the call failed (`is_error`, default false).
        is_error: bool,
    },
    /// Environment context for the next request.
    Context(String),
    /// The tool set changed: tools added (any catalog item shape, with `"server"` for MCP
    /// tools) and removed (canonical names).
    ToolsChanged {
        /// Tools added.
        add: Vec<Value>,
        /// Canonical names removed.
        remove: Vec<String>,
    },
}

/// The events a transcript line may hold, one a line.
const EVENTS: &[&str] = &[
    "user",
    "assistant",
    "call",
    "result",
    "context",
    "tools_changed",
];

/// The keys of a `call`: `arguments` is the spelling of MCP's `tools/call` and of OpenAI's
/// function calls, read as `input`.
const CALL_KEYS: &[&str] = &["name", "input", "arguments"];

/// The keys of a `result`: `isError` is MCP's spelling of `is_error`.
const RESULT_KEYS: &[&str] = &["content", "is_error", "isError"];

/// The keys of a `tools_changed`.
const TOOLS_CHANGED_KEYS: &[&str] = &["add", "remove"];

/// Refuses a key of `event`'s object outside `known`: a misspelt key would be read as absent
/// and change the replay without a word. The error names the key and, for a slip of a known
/// one, the key it is a slip for (as the catalog loader judges slips).
fn known_keys(event: &str, obj: &Map<String, Value>, known: &[&'static str]) -> Result<(), String> {
    let Some(key) = obj.keys().find(|k| !known.contains(&k.as_str())) else {
        return Ok(());
    };
    Err(match crate::catalog::near_miss(key, known, &[]) {
        Some(meant) => format!(
            "unknown key {key:?} in \"{event}\"; did you mean {meant:?}? (a misspelt key would be read as absent)"
        ),
        None => format!(
            "unknown key {key:?} in \"{event}\": it takes {}",
            known
                .iter()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// The one of two spellings of a key `obj` gives (`None` for neither); both is an error, as
/// either value would be lost.
fn one_of<'v>(
    event: &str,
    obj: &'v Map<String, Value>,
    key: &str,
    alias: &str,
) -> Result<Option<(&'v str, &'v Value)>, String> {
    match (obj.get_key_value(key), obj.get_key_value(alias)) {
        (Some(_), Some(_)) => Err(format!(
            "\"{event}\" gives both {key:?} and {alias:?}, two spellings of one key; give one"
        )),
        (Some((k, v)), None) | (None, Some((k, v))) => Ok(Some((k.as_str(), v))),
        (None, None) => Ok(None),
    }
}

impl Event {
    /// Reads one transcript line, as strictly as a catalog (an object that gives a key twice is
    /// refused, not read as its last value, and so is a key an event does not take); the error
    /// says what a line may be.
    pub fn parse(line: &str) -> Result<Self, String> {
        let v: Value = crate::json::parse(line).map_err(|e| {
            let words = crate::json::in_words(&e, line, true);
            if e.is_data() {
                words
            } else {
                format!("not valid JSON: {words}")
            }
        })?;
        let obj = v.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
            "expected an object with one key: user, assistant, call, result, context or tools_changed"
                .to_owned()
        })?;
        let (key, value) = obj.iter().next().ok_or("empty object")?;
        let text = |v: &Value| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("\"{key}\" must be a string"))
        };
        let fields = |shape: &str| {
            value.as_object().ok_or_else(|| {
                format!(
                    "\"{key}\" must be an object: {shape}, found {}",
                    crate::catalog::kind_of(value)
                )
            })
        };
        match key.as_str() {
            "user" => Ok(Self::User(text(value)?)),
            "assistant" => Ok(Self::Assistant(text(value)?)),
            "context" => Ok(Self::Context(text(value)?)),
            "call" => {
                let call = fields("{\"name\": \"...\", \"input\": {...}}")?;
                known_keys(key, call, CALL_KEYS)?;
                let name = call
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("\"call\" needs a \"name\" string")?;
                let (input, arguments) = match one_of(key, call, "input", "arguments")? {
                    None | Some((_, Value::Null)) => (Map::new(), None),
                    Some((_, Value::Object(m))) => (m.clone(), None),
                    // OpenAI writes a function call's arguments as a string of JSON, which is
                    // kept as written.
                    Some(("arguments", Value::String(s))) => match crate::json::parse(s) {
                        Ok(Value::Object(m)) => (m, Some(s.clone())),
                        _ => {
                            return Err(
                                "\"call\".arguments must be an object, or a string of a JSON object"
                                    .into(),
                            );
                        }
                    },
                    Some((k, _)) => return Err(format!("\"call\".{k} must be an object")),
                };
                Ok(Self::Call {
                    name: name.to_owned(),
                    input,
                    arguments,
                })
            }
            "result" => {
                let result = fields("{\"content\": ..., \"is_error\": false}")?;
                known_keys(key, result, RESULT_KEYS)?;
                let content = result
                    .get("content")
                    .cloned()
                    .ok_or("\"result\" needs \"content\"")?;
                match &content {
                    Value::String(_) => {}
                    Value::Array(blocks) if blocks.iter().all(Value::is_object) => {}
                    Value::Array(_) => {
                        return Err(
                            "\"result\".content must be a string or content blocks (objects such as {\"type\": \"text\", \"text\": \"...\"}), found an array holding something else"
                                .into(),
                        );
                    }
                    other => {
                        return Err(format!(
                            "\"result\".content must be a string or content blocks (an array), found {}",
                            crate::catalog::kind_of(other)
                        ));
                    }
                }
                let is_error = match one_of(key, result, "is_error", "isError")? {
                    None | Some((_, Value::Null)) => false,
                    Some((_, Value::Bool(b))) => *b,
                    Some((k, _)) => {
                        return Err(format!("\"result\".{k} must be true or false"));
                    }
                };
                Ok(Self::Result { content, is_error })
            }
            "tools_changed" => {
                let change = value.as_object().ok_or(
                    "\"tools_changed\" must be an object: {\"add\": [...], \"remove\": [...]}",
                )?;
                known_keys(key, change, TOOLS_CHANGED_KEYS)?;
                let add = match change.get("add") {
                    None => Vec::new(),
                    Some(Value::Array(a)) => a.clone(),
                    Some(_) => return Err("\"tools_changed\".add must be an array".into()),
                };
                let remove = match change.get("remove") {
                    None => Vec::new(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|n| n.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or("\"tools_changed\".remove must hold names")?,
                    Some(_) => return Err("\"tools_changed\".remove must be an array".into()),
                };
                Ok(Self::ToolsChanged { add, remove })
            }
            other => Err(match crate::catalog::near_miss(other, EVENTS, &[]) {
                Some(meant) => format!("unknown event {other:?}; did you mean {meant:?}?"),
                None => format!(
                    "unknown event {other:?}: expected user, assistant, call, result, context or tools_changed"
                ),
            }),
        }
    }
}

/// What happened in one model request, for `replay --explain`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnReport {
    /// The model request, from 1, in the order they are made.
    pub request: u64,
    /// The turn, from 1: the client request the model request belongs to (the rounds in which
    /// the proxy answers the model's calls itself share the turn of their request).
    pub turn: u64,
    /// The request body, canonical JSON.
    #[serde(skip)]
    pub body: String,
    /// Characters of `system`, `tools` and the conversation in the body.
    pub bytes: Parts,
    /// Reminder events.
    pub reminders: Vec<Note>,
    /// Deferred tools that became active this turn (their schema reached the model); a resident
    /// tool's schema is in the list all along.
    pub activated: Vec<String>,
    /// Calls refused because the tool's activation had expired.
    pub expired: Vec<String>,
    /// For each tool of `expired`, the turns since its last use: more than
    /// `[session] activation_ttl_turns`.
    pub unused_turns: Vec<u64>,
    /// Calls the session refused (the dry run's verdict), as `name: kind`.
    pub refused: Vec<String>,
    /// The blocks injected into this request's new item.
    pub injected: Vec<String>,
}

/// Sizes of a body's parts, in bytes of canonical JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Parts {
    /// The system instruction.
    pub system: usize,
    /// The tool list.
    pub tools: usize,
    /// The conversation (messages or input).
    pub messages: usize,
}

/// Builds the search index of a catalog's visible tools (the CLI may add the embedding ranker).
pub type IndexBuilder<'a> = dyn Fn(&Catalog, &[usize]) -> SearchIndex + 'a;

/// A session being replayed.
pub struct Replay<'a> {
    compiled: &'a Compiled,
    api: Api,
    system: String,
    build_index: &'a IndexBuilder<'a>,
    catalog: Catalog,
    exposure: Exposure,
    index: SearchIndex,
    state: SessionState,
    tools: Vec<Value>,
    items: Vec<Item>,
    /// The size of the conversation `items` assemble to, kept as they are added.
    conversation: ConversationSize,
    /// The length of OpenAI Chat's opening system message (0 in the other APIs).
    system_message: usize,
    context: Vec<String>,
    calls_made: u64,
    /// Tools the model defined with `tool_define` in this session, a redefinition in the place of
    /// the tool it replaced, as the proxy keeps them.
    defined: Vec<authoring::Authored>,
    /// Descriptions rendered from templates, by canonical name: search results show them.
    described: BTreeMap<String, String>,
    /// Whether reports carry their request bodies.
    bodies: bool,
    /// The session values the top level of a script given to `tool_define` is read with.
    script_session: crate::template::SessionValues,
    /// Changes of the tool set so far.
    generation: u64,
    /// Model requests of the current turn so far (the proxy's upstream rounds of one client
    /// request).
    rounds: u32,
    /// The queries of the current turn's searches, which the next turn's reminders see.
    searches: Vec<String>,
    /// Tools the model wrote with `tool_define`, which the proxy runs itself.
    authored: BTreeSet<String>,
    /// Model requests reported so far.
    requests: u64,
    /// Warnings about the transcript (a tool it adds named otherwise than it wrote), each with
    /// its file and line; known once the replay has started.
    warnings: Vec<String>,
    /// Whether the frozen list has `tool_search` (something was deferred): reminders point at
    /// it only then.
    searchable: bool,
    /// The tools the frozen list holds with their schemas: a direct call of one is handed to the
    /// client as the model wrote it, unchecked against the schema, as the proxy hands it.
    frozen_resident: BTreeSet<String>,
    /// Reads the top level of a script given to `tool_define` (see [`Replay::set_top_level`]);
    /// `None`: in this process ([`authoring::check_top_level`]).
    top_level: Option<Box<TopLevelCheck<'a>>>,
}

/// Reads the top level of a script given to `tool_define` as the proxy would: `Err` is what the
/// model reads.
pub type TopLevelCheck<'a> = dyn FnMut(&authoring::Authored) -> Result<(), String> + 'a;

impl std::fmt::Debug for Replay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("turn", &self.state.turn())
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

fn visible(catalog: &Catalog, exposure: &Exposure) -> Vec<usize> {
    (0..catalog.tools().len())
        .filter(|&i| exposure.decisions[i].state != State::Hidden)
        .collect()
}

/// What one round of the model's calls did to the session, for its report.
#[derive(Default)]
struct Turn {
    activated: Vec<String>,
    expired: Vec<String>,
    unused_turns: Vec<u64>,
    refused: Vec<String>,
    /// Reminder events of the calls of tools the proxy runs itself.
    notes: Vec<Note>,
}

impl Turn {
    /// Lists a refused call of `name` (as the model wrote it, cut as echoes are) with its kind.
    fn refuse(&mut self, name: &str, kind: invoke::RefusalKind) {
        self.refused
            .push(format!("{}: {}", crate::echo::echo(name), kind.as_str()));
    }
}

/// A computed (or recorded) call with its effect on the session.
struct Done {
    call: ToolCall,
    result: ToolResult,
    /// Name and params of the client's tool the call reached, for the next turn's reminder
    /// triggers.
    target: Option<(String, Map<String, Value>)>,
    query: Vec<String>,
    /// Whether the client runs the call (the proxy hands it over and the client request ends),
    /// rather than the proxy answering it within the request.
    client: bool,
}

/// What the call pipeline made of a call that is not `tool_search`.
struct Outcome {
    /// The text the model reads.
    text: String,
    is_error: bool,
    /// Whether the client runs it.
    client: bool,
    /// A tool the proxy runs itself that ran (name and params): its reminders go on its result.
    ran_inside: Option<(String, Map<String, Value>)>,
}

impl Outcome {
    /// An answer the proxy gives itself, with nothing run.
    fn answered(text: String, is_error: bool) -> Self {
        Self {
            text,
            is_error,
            client: false,
            ran_inside: None,
        }
    }
}

impl<'a> Replay<'a> {
    /// A session over `catalog` with `compiled`'s rules, assembling `api` requests with the
    /// fixed instruction `system`. The surface is rendered here, once, with the catalog's own
    /// descriptions (see [`Self::with_descriptions`] for a session's rendered templates).
    pub fn new(
        compiled: &'a Compiled,
        catalog: Catalog,
        api: Api,
        system: &str,
        build_index: &'a IndexBuilder<'a>,
    ) -> Self {
        Self::with_descriptions(
            compiled,
            catalog,
            api,
            system,
            build_index,
            crate::template::Descriptions::default(),
        )
    }

    /// [`Self::new`] for a session whose description templates rendered to `descriptions`
    /// ([`Compiled::session_surface`]): its frozen list shows them.
    pub fn with_descriptions(
        compiled: &'a Compiled,
        catalog: Catalog,
        api: Api,
        system: &str,
        build_index: &'a IndexBuilder<'a>,
        descriptions: crate::template::Descriptions,
    ) -> Self {
        // With authoring on, the session's catalog has `tool_define` (a deferred built-in) from the
        // start, so the frozen index lists it (a catalog that has it already, as the commands load
        // it, is kept as it is). Rendered descriptions follow their tools by name.
        let (catalog, descriptions) = if compiled.config().authoring.enabled
            && catalog.position(authoring::TOOL_DEFINE).is_none()
        {
            let by_name: Vec<(String, String)> = descriptions
                .tools
                .iter()
                .map(|(&i, d)| (catalog.tools()[i].name.clone(), d.clone()))
                .collect();
            let catalog = match crate::catalog::rebuilt(
                &catalog,
                &[authoring::tool_define_item()],
                &[],
                "transcript",
            ) {
                Ok(c) => c,
                Err(_) => catalog,
            };
            let tools = by_name
                .into_iter()
                .filter_map(|(n, d)| catalog.position(&n).map(|i| (i, d)))
                .collect();
            (
                catalog,
                crate::template::Descriptions {
                    tools,
                    servers: descriptions.servers,
                },
            )
        } else {
            (catalog, descriptions)
        };
        let exposure = compiled.expose(&catalog);
        let index = build_index(&catalog, &visible(&catalog, &exposure));
        let described = descriptions.tools_by_name(&catalog);
        let mut state = SessionState::default();
        let names: BTreeSet<String> = visible(&catalog, &exposure)
            .into_iter()
            .map(|i| catalog.tools()[i].name.clone())
            .collect();
        let mut searchable = false;
        let mut frozen_resident = BTreeSet::new();
        let frozen = state.freeze(names, || {
            let surface = crate::surface::Surface::with_descriptions(
                &catalog,
                &exposure,
                compiled.config(),
                descriptions,
            );
            searchable = surface.index.is_some();
            frozen_resident = surface
                .resident
                .iter()
                .map(|&i| catalog.tools()[i].name.clone())
                .collect();
            FrozenSurface {
                format: api.name().to_owned(),
                tools: canonical_json(&Value::Array(surface.tools(&catalog, api.tool_format()))),
            }
        });
        let tools = match serde_json::from_str(&frozen.tools) {
            Ok(Value::Array(t)) => t,
            _ => Vec::new(),
        };
        let (conversation, system_message) = ConversationSize::opening(api, system);
        Self {
            compiled,
            api,
            system: system.to_owned(),
            build_index,
            catalog,
            exposure,
            index,
            state,
            tools,
            items: Vec::new(),
            conversation,
            system_message,
            context: Vec::new(),
            calls_made: 0,
            defined: Vec::new(),
            described,
            bodies: true,
            script_session: crate::template::SessionValues {
                mode: None,
                client: None,
                workspace: compiled.config().template.workspace.clone(),
            },
            generation: 0,
            rounds: 0,
            searches: Vec::new(),
            authored: BTreeSet::new(),
            requests: 0,
            warnings: Vec::new(),
            searchable,
            frozen_resident,
            top_level: None,
        }
    }

    /// The session state.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// Warnings about the transcript, each naming its file and line: a tool that
    /// `tools_changed.add` gives a name the session cannot use as written (`"bad name!"`) and
    /// that the session names otherwise (`bad_name_`), or an input schema that does not compile.
    /// All of them are known before the first report is handed over.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Replays `events`, returning one report (with its request body) per model request. Errors
    /// name the event by its number, from 1.
    pub fn run(&mut self, events: &[Event]) -> Result<Vec<TurnReport>, String> {
        let mut out = Vec::new();
        self.replay(events, &|i| format!("event {}", i + 1), &mut |_, r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// Replays a parsed transcript, handing each turn's report to `on_report` as soon as it is
    /// made (with the session as it stands after that turn). Errors name the file and line.
    pub fn run_transcript(
        &mut self,
        transcript: &Transcript,
        on_report: &mut dyn FnMut(&Self, TurnReport) -> Result<(), String>,
    ) -> Result<(), String> {
        if transcript.events.is_empty() {
            return Err(format!(
                "{}: the transcript has no events (one JSON object a line: user, assistant, call, result, context or tools_changed)",
                transcript.source
            ));
        }
        self.replay(&transcript.events, &|i| transcript.at(i), on_report)
    }

    fn replay(
        &mut self,
        events: &[Event],
        at: &dyn Fn(usize) -> String,
        on_report: &mut dyn FnMut(&Self, TurnReport) -> Result<(), String>,
    ) -> Result<(), String> {
        let uneven = check_pairing(events, at)?;
        self.warnings = self.check_tool_changes(events, at)?;
        self.warnings.extend(uneven);
        let mut i = 0;
        while i < events.len() {
            match &events[i] {
                Event::User(text) => {
                    self.next_turn();
                    // The queries of the previous turn's searches, which the proxy reads from
                    // the turn it recorded.
                    let searches = std::mem::take(&mut self.searches);
                    let input = TurnInput {
                        user_text: Some(text),
                        calls: &[],
                        searches: &searches,
                    };
                    let (injected, notes) = self.injected(&input);
                    self.push(Item::User {
                        text: text.clone(),
                        injected: injected.clone(),
                    });
                    let report = self.report(notes, Turn::default(), injected);
                    on_report(self, report)?;
                    i += 1;
                }
                Event::Context(text) => {
                    self.context.push(text.clone());
                    i += 1;
                }
                Event::ToolsChanged { add, remove } => {
                    self.change_tools(add, remove, Adder::Client)
                        .map_err(|e| format!("{}: {e}", at(i)))?;
                    i += 1;
                }
                Event::Result { .. } => {
                    return Err(format!(
                        "{}: a result with no call before it to answer",
                        at(i)
                    ));
                }
                Event::Assistant(_) | Event::Call { .. } => {
                    let mut text = None;
                    if let Event::Assistant(t) = &events[i] {
                        text = Some(t.clone());
                        i += 1;
                    }
                    // Calls followed by as many results are one round of parallel calls, the
                    // results in call order. Otherwise the first call is a round of its own, its
                    // result computed (the model saw it before making the next call).
                    let Round {
                        calls,
                        between,
                        results,
                    } = round_at(events, i);
                    // Context and tool changes between a round's calls and its results belong to
                    // the request that carries the results: applied once the calls are judged
                    // (against the tools they were made with).
                    let mut later = i + calls..i + calls;
                    let group: Vec<(&Event, Option<(&Value, bool)>)> =
                        if calls > 0 && results == calls {
                            let group = (0..calls)
                                .map(|k| match &events[i + calls + between + k] {
                                    Event::Result { content, is_error } => {
                                        (&events[i + k], Some((content, *is_error)))
                                    }
                                    _ => (&events[i + k], None),
                                })
                                .collect();
                            later = i + calls..i + calls + between;
                            i += calls + between + results;
                            group
                        } else if calls > 0 {
                            i += 1;
                            vec![(&events[i - 1], None)]
                        } else {
                            Vec::new()
                        };
                    let mut done: Vec<Done> = Vec::new();
                    let mut turn = Turn::default();
                    for (event, recorded) in group {
                        if let Event::Call {
                            name,
                            input,
                            arguments,
                        } = event
                        {
                            done.push(self.call(
                                name,
                                input,
                                arguments.as_deref(),
                                recorded,
                                &mut turn,
                            ));
                        }
                    }
                    if done.is_empty() {
                        // Text alone ends the model's turn; the next request starts with the user.
                        self.push(Item::Assistant {
                            text,
                            calls: Vec::new(),
                        });
                        continue;
                    }
                    self.push(Item::Assistant {
                        text,
                        calls: done.iter().map(|d| d.call.clone()).collect(),
                    });
                    self.searches
                        .extend(done.iter().flat_map(|d| d.query.iter().cloned()));
                    for k in later {
                        match &events[k] {
                            Event::Context(text) => self.context.push(text.clone()),
                            Event::ToolsChanged { add, remove } => self
                                .change_tools(add, remove, Adder::Client)
                                .map_err(|e| format!("{}: {e}", at(k)))?,
                            _ => {}
                        }
                    }
                    // The proxy asks the model again within the client's request while the round
                    // holds only calls it answered, for at most `max_search_rounds` rounds.
                    let max = self.compiled.config().proxy.max_search_rounds;
                    let (injected, notes) = if done.iter().any(|d| d.client) || self.rounds >= max {
                        // The client's next request, with the results: a new turn.
                        self.next_turn();
                        let searches = std::mem::take(&mut self.searches);
                        let targets: Vec<(usize, &Map<String, Value>)> = done
                            .iter()
                            .filter_map(|d| d.target.as_ref())
                            .filter_map(|(name, params)| {
                                Some((self.catalog.position(name)?, params))
                            })
                            .collect();
                        let calls: Vec<Call<'_>> = targets
                            .iter()
                            .map(|&(t, params)| Call {
                                tool: &self.catalog.tools()[t],
                                params,
                            })
                            .collect();
                        let input = TurnInput {
                            user_text: None,
                            calls: &calls,
                            searches: &searches,
                        };
                        inject(
                            self.compiled,
                            &mut self.state,
                            &self.catalog,
                            &self.exposure,
                            &mut self.context,
                            &input,
                            self.searchable,
                        )
                    } else {
                        // One more round of the same request: the turn's blocks were injected
                        // with its first request; only context the transcript put here comes.
                        self.rounds += 1;
                        (std::mem::take(&mut self.context), Vec::new())
                    };
                    let mut notes_all = std::mem::take(&mut turn.notes);
                    notes_all.extend(notes);
                    // The proxy's own answers open the request that carries the client's results,
                    // before those (each in call order), as the proxy puts them back.
                    let (own, ran): (Vec<Done>, Vec<Done>) =
                        done.into_iter().partition(|d| !d.client);
                    self.push(Item::Results {
                        results: own.into_iter().chain(ran).map(|d| d.result).collect(),
                        injected: injected.clone(),
                    });
                    let report = self.report(notes_all, turn, injected);
                    on_report(self, report)?;
                }
            }
        }
        Ok(())
    }

    /// Whether an event leads to a model request (a user message, or a call).
    fn asks_the_model(e: &Event) -> bool {
        matches!(e, Event::User(_) | Event::Call { .. })
    }

    /// Starts the next turn: a new request of the client.
    fn next_turn(&mut self) {
        self.state.next_turn();
        self.rounds = 1;
    }

    /// Whether reports carry their request bodies (the default). Without them a turn costs the
    /// sizes of its parts only, which is all `--explain` prints.
    pub fn set_bodies(&mut self, on: bool) {
        self.bodies = on;
    }

    /// The session values a `tool_define` script's top level is read with, as the proxy's runner
    /// has them (no mode or client; by default the configured `[template] workspace`, where the
    /// proxy falls back on its working directory).
    pub fn set_script_session(&mut self, values: crate::template::SessionValues) {
        self.script_session = values;
    }

    /// How the top level of a script given to `tool_define` is read: the CLI reads it in a
    /// runner process under the `[scripts]` limits, as the proxy does, so that one the proxy
    /// refuses (a memory limit reached) is refused with the same words. Without it the top level
    /// is read in this process, under the same step and heap bounds.
    pub fn set_top_level(&mut self, check: Box<TopLevelCheck<'a>>) {
        self.top_level = Some(check);
    }

    /// Every tool the model may see now, each with its full definition: the tool list the
    /// session would send with nothing deferred.
    pub fn all_resident_tools(&self) -> Vec<Value> {
        visible(&self.catalog, &self.exposure)
            .into_iter()
            .map(|i| crate::wire::definition(&self.catalog.tools()[i], self.api.tool_format()))
            .collect()
    }

    /// Counts the changes of the tool set so far; it moves whenever
    /// [`Self::all_resident_tools`] may have changed.
    pub fn tools_generation(&self) -> u64 {
        self.generation
    }

    /// The blocks for this turn's new item: the change notice, reminders, environment context.
    fn injected(&mut self, input: &TurnInput<'_>) -> (Vec<String>, Vec<Note>) {
        inject(
            self.compiled,
            &mut self.state,
            &self.catalog,
            &self.exposure,
            &mut self.context,
            input,
            self.searchable,
        )
    }

    /// Adds an item to the conversation.
    fn push(&mut self, item: Item) {
        self.conversation.add(self.api, &item);
        self.items.push(item);
    }

    fn report(&mut self, reminders: Vec<Note>, turn: Turn, injected: Vec<String>) -> TurnReport {
        self.requests += 1;
        // The sizes come from the parts themselves and the conversation's running size, so a
        // report without its body costs nothing that grows with the conversation.
        let text = |t: &str| {
            if t.is_empty() {
                0
            } else {
                canonical_json(&Value::String(t.to_owned())).len()
            }
        };
        let tools = if self.tools.is_empty() {
            0
        } else {
            self.tools
                .iter()
                .map(|t| canonical_json(t).len())
                .sum::<usize>()
                + self.tools.len()
                + 1
        };
        let bytes = Parts {
            system: match self.api {
                Api::OpenAiChat => self.system_message,
                Api::Anthropic | Api::OpenAiResponses => text(&self.system),
            },
            tools,
            messages: self.conversation.bytes() - self.system_message,
        };
        let body = if self.bodies {
            canonical_json(&assemble(
                self.api,
                &self.system,
                &self.tools,
                &self.items,
                &Map::new(),
            ))
        } else {
            String::new()
        };
        TurnReport {
            request: self.requests,
            turn: self.state.turn(),
            body,
            bytes,
            reminders,
            activated: turn.activated,
            expired: turn.expired,
            unused_turns: turn.unused_turns,
            refused: turn.refused,
            injected,
        }
    }

    fn change_tools(&mut self, add: &[Value], remove: &[String], by: Adder) -> Result<(), String> {
        // The transcript's own changes were warned about before the replay started.
        (self.catalog, _) = changed_catalog(&self.catalog, add, remove, by)?;
        let catalog = &self.catalog;
        self.authored.retain(|n| catalog.position(n).is_some());
        self.exposure = self.compiled.expose(&self.catalog);
        self.index = (self.build_index)(&self.catalog, &visible(&self.catalog, &self.exposure));
        self.generation += 1;
        Ok(())
    }

    /// Carries out one call (search for real, everything else as a dry run); `arguments` are
    /// its arguments as the model wrote them, when the transcript gives that text.
    fn call(
        &mut self,
        name: &str,
        input: &Map<String, Value>,
        arguments: Option<&str>,
        recorded: Option<(&Value, bool)>,
        turn: &mut Turn,
    ) -> Done {
        self.calls_made += 1;
        let id = format!("call_{:04}", self.calls_made);
        let call = ToolCall {
            id: id.clone(),
            name: name.to_owned(),
            input: Value::Object(input.clone()),
            arguments: arguments.map(str::to_owned),
        };
        let mut query = Vec::new();
        let mut target = None;
        // A recorded result flagged as an error: the client's tool did not run (its user
        // declined it, its hook blocked it, or it failed). Only Anthropic's requests carry the
        // flag; the proxy counts every result of the OpenAI APIs as a call that ran.
        let failed = self.api == Api::Anthropic && recorded.is_some_and(|(_, is_error)| is_error);
        let Outcome {
            text: content,
            is_error,
            client,
            ran_inside,
        } = match name {
            TOOL_SEARCH => match SearchRequest::from_json(&Value::Object(input.clone())) {
                Err(text) => Outcome::answered(text, true),
                Ok(request) => {
                    if let SearchRequest::Queries { queries, .. } = &request {
                        query = queries.clone();
                    }
                    let ttl = self.compiled.config().session.activation_ttl_turns;
                    let held = self.state.active_names(ttl);
                    let tools = self.catalog.tools();
                    // A resident tool is in the session's list with its schema, under its
                    // canonical name.
                    let decisions = &self.exposure.decisions;
                    let view = SessionView {
                        active: &|i| held.binary_search(&tools[i].name).is_ok(),
                        pinned: &|i| {
                            (decisions[i].state == State::Resident).then(|| tools[i].name.clone())
                        },
                        described: &self.described,
                    };
                    let response = search_for(
                        &self.index,
                        &self.catalog,
                        &request,
                        &self.compiled.config().search,
                        &view,
                    );
                    let names: Vec<String> = response
                        .loaded
                        .iter()
                        .map(|&i| tools[i].name.clone())
                        .collect();
                    self.state.activate(names.iter().map(String::as_str));
                    turn.activated.extend(names);
                    Outcome::answered(response.text, false)
                }
            },
            DEFER_EXECUTE => match DeferExecuteArgs::parse(input) {
                Err(message) => {
                    // Refused as the proxy refuses it: the tool it names, if it names one.
                    let named = input.get("tool_name").and_then(Value::as_str);
                    turn.refuse(
                        named.unwrap_or(DEFER_EXECUTE),
                        invoke::RefusalKind::BadArguments,
                    );
                    Outcome::answered(message, true)
                }
                Ok(args) => self.dry_run(
                    &args.tool_name,
                    args.params,
                    Via::DeferExecute,
                    failed,
                    turn,
                    &mut target,
                ),
            },
            other => self.dry_run(other, input.clone(), Via::Direct, failed, turn, &mut target),
        };
        let (mut content, is_error) = match recorded {
            Some((recorded, failed)) => (recorded_text(recorded), failed),
            None => (content, is_error),
        };
        if let Some((tool, params)) = ran_inside {
            for block in self.fired_by(&tool, &params, turn) {
                content.push_str("\n\n");
                content.push_str(&block);
            }
        }
        Done {
            call,
            result: ToolResult {
                id,
                content,
                is_error,
                by_proxy: !client,
            },
            target,
            query,
            client,
        }
    }

    /// The blocks of the reminder rules that a call of `tool` with `params`, which the proxy ran
    /// itself, fires: the proxy puts them on its result, which the model reads in the next round.
    /// Evaluated in the current turn with that call alone; the events go to the round's report
    /// (a rule still showing is reported by its turn's first request, not again here).
    fn fired_by(
        &mut self,
        tool: &str,
        params: &Map<String, Value>,
        turn: &mut Turn,
    ) -> Vec<String> {
        let reminders = self.compiled.reminders();
        let Some(i) = self.catalog.position(tool) else {
            return Vec::new();
        };
        if reminders.is_empty() {
            return Vec::new();
        }
        let calls = [Call {
            tool: &self.catalog.tools()[i],
            params,
        }];
        let input = TurnInput {
            user_text: None,
            calls: &calls,
            searches: &[],
        };
        let eval = reminders.evaluate(&mut self.state, &input);
        turn.notes
            .extend(eval.notes.into_iter().filter(|n| n.event != "showing"));
        eval.fired
            .iter()
            .map(|&r| reminders.block_in(r, self.searchable))
            .collect()
    }

    /// Carries out a `tool_define` call that passed the pipeline: the new tool joins the session's
    /// catalog (searchable at once, announced by the next change notice) and is active, since the
    /// model wrote its schema. A definition of a name the model gave a tool before replaces that
    /// tool, as in the proxy.
    fn define(&mut self, params: &Map<String, Value>, turn: &mut Turn) -> (String, bool) {
        let (tool, replaces) = match authoring::check_redefinition(
            params,
            &self.catalog,
            &self.exposure,
            self.compiled,
            &self.defined,
        ) {
            Ok(found) => found,
            Err(e) => return (e, true),
        };
        // Its top level is read as the proxy's runner reads it: a script whose every call would
        // fail is refused here too.
        let read = match &mut self.top_level {
            Some(check) => check(&tool),
            None => authoring::check_top_level(
                &tool,
                &self.compiled.config().template.vars,
                &self.script_session,
            ),
        };
        if let Err(e) = read {
            return (e, true);
        }
        let name = tool.name().to_owned();
        // The replaced tool leaves the catalog, unless the transcript removed it already.
        let remove: Vec<String> = replaces
            .filter(|_| self.catalog.position(&name).is_some())
            .map(|_| name.clone())
            .into_iter()
            .collect();
        if let Err(e) = self.change_tools(std::slice::from_ref(&tool.item), &remove, Adder::Model) {
            return (format!("tool_define: {e}"), true);
        }
        match replaces {
            Some(k) => self.defined[k] = tool,
            None => self.defined.push(tool),
        }
        self.authored.insert(name.clone());
        self.state.activate([name.as_str()]);
        turn.activated.push(name.clone());
        let mut text = authoring::defined_text(&name);
        if replaces.is_some() {
            text.insert_str(0, &format!("Replaced your earlier tool {name:?}. "));
        }
        (text, false)
    }

    /// The call pipeline up to the point where the call would go out: to the client, or to the
    /// proxy's own runner for `tool_define` and a tool the model wrote.
    fn dry_run(
        &mut self,
        requested: &str,
        params: Map<String, Value>,
        via: Via,
        failed: bool,
        turn: &mut Turn,
        target: &mut Option<(String, Map<String, Value>)>,
    ) -> Outcome {
        if self.client_dropped(requested, via) {
            turn.refuse(requested, invoke::RefusalKind::Gone);
            return Outcome::answered(invoke::client_gone_text(requested), true);
        }
        let ttl = self.compiled.config().session.activation_ttl_turns;
        let require_search = self.compiled.config().execute.require_search;
        let outcome = (|| -> Result<(usize, Option<String>), Refusal> {
            let i = match via {
                Via::Direct => self.resolve_direct(requested)?,
                Via::DeferExecute => invoke::resolve(&self.catalog, &self.exposure, requested)?,
            };
            let name = &self.catalog.tools()[i].name;
            let define = self.compiled.config().authoring.enabled && name == authoring::TOOL_DEFINE;
            // A tool the proxy runs itself never reaches the client, whose prompt would ask:
            // under an `ask` rule the proxy refuses it.
            let inside = define || self.runs_inside(i);
            // A direct call of a tool the model has in its list with its schema goes to the
            // client as written: the provider and the client judge it against the schema.
            let resident =
                matches!(via, Via::Direct) && !inside && self.frozen_resident.contains(name);
            // The rules first, as the proxy judges them: a denied call is refused before the
            // schema is asked for; an `ask` is judged once the params are valid.
            let verdict =
                invoke::authorize(&self.catalog, self.compiled.permissions(), i, &params)?;
            if !resident {
                invoke::require_loaded(
                    &self.exposure,
                    i,
                    require_search,
                    self.state.activity(name, ttl),
                    self.state.turn(),
                )?;
                let validator = invoke::ParamsValidator::new(&self.catalog.tools()[i].input_schema);
                if define {
                    authoring::validate(i, &validator, &params)?;
                } else {
                    invoke::validate(i, &validator, &params)?;
                }
            }
            let ask = match verdict {
                Authorization::Allowed => None,
                Authorization::Ask { because } if inside => {
                    invoke::approved(i, &because, Err(invoke::AskRefusal::RunsInside))?;
                    None
                }
                Authorization::Ask { because } => Some(because),
            };
            Ok((i, ask))
        })();
        match outcome {
            Ok((i, _))
                if self.compiled.config().authoring.enabled
                    && self.catalog.tools()[i].name == authoring::TOOL_DEFINE =>
            {
                self.state.record_call(authoring::TOOL_DEFINE);
                let (text, is_error) = self.define(&params, turn);
                Outcome {
                    text,
                    is_error,
                    client: false,
                    ran_inside: Some((authoring::TOOL_DEFINE.to_owned(), params)),
                }
            }
            Ok((i, ask)) => {
                let name = self.catalog.tools()[i].name.clone();
                // The proxy runs script tools and the tools the model wrote; the client runs the
                // rest. A call the client ran counts as made only when its recorded result is not
                // an error, as the proxy counts it from the result the client sends back.
                let inside = self.runs_inside(i);
                if inside || !failed {
                    self.state.record_call(&name);
                }
                if !inside && !failed {
                    *target = Some((name.clone(), params.clone()));
                }
                let asked = ask
                    .map(|because| format!(" after asking the user ({because})"))
                    .unwrap_or_default();
                let via = match via {
                    Via::DeferExecute => "through defer_execute",
                    Via::Direct => "directly",
                };
                let text = format!(
                    "[dry run] {name} would run {via}{asked} with {}",
                    canonical_json(&Value::Object(params.clone()))
                );
                Outcome {
                    text,
                    is_error: false,
                    client: !inside,
                    ran_inside: inside.then_some((name, params)),
                }
            }
            Err(refusal) => {
                turn.refuse(requested, refusal.kind());
                if let Some(i) = refusal.loads() {
                    let name = self.catalog.tools()[i].name.clone();
                    if let Refusal::Expired { idle_turns, .. } = refusal {
                        turn.expired.push(name.clone());
                        turn.unused_turns.push(idle_turns);
                    }
                    self.state.activate([name.as_str()]);
                    // A resident tool's schema was in the list all along: none became active.
                    if self.exposure.decisions[i].state != State::Resident {
                        turn.activated.push(name);
                    }
                }
                // The proxy answers a refusal itself, except a direct call of a name no tool has
                // exactly, which goes to the client as it came.
                let client =
                    matches!(via, Via::Direct) && refusal.kind() == invoke::RefusalKind::Unknown;
                Outcome {
                    text: refusal.text(&self.catalog),
                    is_error: true,
                    client,
                    ran_inside: None,
                }
            }
        }
    }

    /// Whether a call of `requested` is of a tool the client no longer offers, which the proxy
    /// refuses itself as gone (not as an unknown name): called directly, a name of the session's
    /// frozen list that no tool of the session has now; through `defer_execute`, a name no tool
    /// has that the session activated or called.
    fn client_dropped(&self, requested: &str, via: Via) -> bool {
        match via {
            Via::Direct => {
                self.frozen_resident.contains(requested)
                    && self.catalog.position(requested).is_none()
            }
            Via::DeferExecute => {
                matches!(
                    invoke::resolve(&self.catalog, &self.exposure, requested),
                    Err(refusal) if refusal.kind() == invoke::RefusalKind::Unknown
                ) && (self.state.activity(requested, u64::MAX) != Activity::Inactive
                    || self.state.last_called(requested).is_some())
            }
        }
    }

    /// Whether the proxy runs catalog tool `i` itself: a tool the model wrote, or a script tool
    /// of the configuration (`mcp__scripts__NAME` with `[tools.NAME] script`).
    fn runs_inside(&self, i: usize) -> bool {
        let tool = &self.catalog.tools()[i];
        self.authored.contains(&tool.name)
            || (tool.original_server.as_deref() == Some(crate::config::SCRIPTS_SERVER)
                && self
                    .compiled
                    .config()
                    .tools
                    .get(&tool.original_name)
                    .is_some_and(|t| t.script.is_some()))
    }

    /// A direct call's tool: the proxy matches a direct call only by a name exactly as the
    /// model's list has it, so a name no tool has exactly is unknown, even one that case and
    /// separators fold onto a tool (which is then the suggestion). Through `defer_execute` the
    /// name folds ([`invoke::resolve`]).
    fn resolve_direct(&self, requested: &str) -> Result<usize, Refusal> {
        if self.catalog.resolve_exact(requested) != Resolution::NotFound {
            return invoke::resolve(&self.catalog, &self.exposure, requested);
        }
        let suggestions = match invoke::resolve(&self.catalog, &self.exposure, requested) {
            Ok(i) => vec![self.catalog.tools()[i].name.clone()],
            Err(Refusal::Unknown { suggestions, .. } | Refusal::Hidden { suggestions, .. }) => {
                suggestions
            }
            Err(Refusal::Ambiguous { candidates, .. }) => candidates,
            Err(other) => return Err(other),
        };
        Err(Refusal::Unknown {
            requested: requested.to_owned(),
            suggestions,
        })
    }

    /// The activity of `name` now, for tests and reports.
    pub fn activity(&self, name: &str) -> Activity {
        self.state
            .activity(name, self.compiled.config().session.activation_ttl_turns)
    }
}

/// The round of calls that starts at event `i`: its calls in a row, the `context` and
/// `tools_changed` events between them and their results (counted only when results follow),
/// and the results in a row.
#[derive(Debug, Clone, Copy)]
struct Round {
    calls: usize,
    between: usize,
    results: usize,
}

fn round_at(events: &[Event], i: usize) -> Round {
    let count = |from: usize, what: fn(&Event) -> bool| {
        events[from.min(events.len())..]
            .iter()
            .take_while(|e| what(e))
            .count()
    };
    let calls = count(i, |e| matches!(e, Event::Call { .. }));
    let between = if calls == 0 {
        0
    } else {
        count(i + calls, |e| {
            matches!(e, Event::Context(_) | Event::ToolsChanged { .. })
        })
    };
    match count(i + calls + between, |e| matches!(e, Event::Result { .. })) {
        0 => Round {
            calls,
            between: 0,
            results: count(i + calls, |e| matches!(e, Event::Result { .. })),
        },
        results => Round {
            calls,
            between,
            results,
        },
    }
}

/// Event `k`'s place within its file, `line N` (or the place itself, `event N`, for events that
/// came from no file).
fn line_of(at: &dyn Fn(usize) -> String, k: usize) -> String {
    let place = at(k);
    match place.rsplit_once(':') {
        Some((_, n)) if n.parse::<usize>().is_ok() => format!("line {n}"),
        _ => place,
    }
}

/// The name of an event's kind, as a transcript line gives it.
fn kind_of(e: &Event) -> &'static str {
    match e {
        Event::User(_) => "user",
        Event::Assistant(_) => "assistant",
        Event::Call { .. } => "call",
        Event::Result { .. } => "result",
        Event::Context(_) => "context",
        Event::ToolsChanged { .. } => "tools_changed",
    }
}

/// The error for result `r`, which no call right before it (past `context` and `tools_changed`)
/// answers: the call it follows, when something else stands between them, and that event; else
/// a result with no call at all.
fn misplaced_result(events: &[Event], r: usize, at: &dyn Fn(usize) -> String) -> String {
    let line = |k| line_of(at, k);
    let call = events[..r]
        .iter()
        .rposition(|e| matches!(e, Event::Call { .. } | Event::Result { .. }))
        .filter(|&c| matches!(events[c], Event::Call { .. }));
    let Some(c) = call else {
        return format!("{}: a result with no call before it to answer", at(r));
    };
    let between = (c + 1..r)
        .find(|&k| !matches!(events[k], Event::Context(_) | Event::ToolsChanged { .. }))
        .unwrap_or(c + 1);
    format!(
        "{}: a result must come right after its call ({}); {} ({}) is between them",
        at(r),
        line(c),
        line(between),
        kind_of(&events[between])
    )
}

/// The name `tool` would have if it kept the names it was given: its original name, or
/// `mcp__SERVER__TOOL` with its server's and its own original names.
fn as_written(tool: &crate::catalog::Tool) -> String {
    match &tool.original_server {
        Some(server) => crate::name::mcp_name(server, &tool.original_name),
        None => tool.original_name.clone(),
    }
}

/// Whose tools a change of the session's tool set adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adder {
    /// The client's (a transcript's `tools_changed`): read as the proxy reads a client's tools
    /// ([`crate::catalog::ToolSpec::as_client_tool`]), so `mcp__svc__住处` is server `svc`'s tool
    /// `住处`, named `mcp__svc__tool_1d75284e`.
    Client,
    /// The model's (`tool_define`), added as written, as the proxy adds them.
    Model,
}

/// `catalog` after a `tools_changed` event, with warnings about it (without a location): a tool
/// added under a name the session cannot use as written is named otherwise, and one whose input
/// schema does not compile has every call refused. A name to remove is
/// a canonical name or, for a tool named otherwise than written, the name as written (see
/// [`as_written`]); one no tool has is an error, and so is a tool to add under the name of a
/// tool the session keeps.
fn changed_catalog(
    catalog: &Catalog,
    add: &[Value],
    remove: &[String],
    by: Adder,
) -> Result<(Catalog, Vec<String>), String> {
    let mut removed = Vec::with_capacity(remove.len());
    for name in remove {
        if catalog.position(name).is_some() {
            removed.push(name.clone());
            continue;
        }
        let written: Vec<&str> = catalog
            .tools()
            .iter()
            .filter(|t| as_written(t) == *name)
            .map(|t| t.name.as_str())
            .collect();
        match written.as_slice() {
            [one] => removed.push((*one).to_owned()),
            [] => {
                return Err(format!(
                    "tools_changed.remove names {name:?}, which no tool of the session has (give canonical names, such as mcp__server__tool)"
                ));
            }
            several => {
                return Err(format!(
                    "tools_changed.remove names {name:?}, which several tools of the session were given ({}): give the canonical name",
                    several.join(", ")
                ));
            }
        }
    }
    // What each added item is, for the checks below; an item that does not load is refused by
    // the rebuild, with its own error.
    let specs: Vec<Option<crate::catalog::ToolSpec>> = add
        .iter()
        .enumerate()
        .map(|(k, item)| {
            crate::catalog::ToolSpec::from_value(
                item.clone(),
                "transcript",
                &format!("tools_changed.add[{k}]"),
            )
            .ok()
            .map(|spec| match by {
                Adder::Client => spec.as_client_tool(),
                Adder::Model => spec,
            })
        })
        .collect();
    for (k, spec) in specs.iter().enumerate() {
        let Some(spec) = spec else { continue };
        if let Some(kept) = catalog.tools().iter().find(|t| {
            !removed.contains(&t.name)
                && t.original_server == spec.server
                && t.original_name == spec.name
        }) {
            return Err(format!(
                "tools_changed.add[{k}] {:?}: duplicate tool name; the session's tool {:?} has the same name (remove it first, in this tools_changed or an earlier one)",
                spec.name, kept.name
            ));
        }
    }
    let rebuilt = match by {
        Adder::Client => {
            crate::catalog::rebuilt_with_client_tools(catalog, add, &removed, "transcript")?
        }
        Adder::Model => crate::catalog::rebuilt(catalog, add, &removed, "transcript")?,
    };
    let mut warnings = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        let Some(spec) = spec else { continue };
        let Some(tool) = rebuilt
            .tools()
            .iter()
            .find(|t| t.original_server == spec.server && t.original_name == spec.name)
        else {
            continue;
        };
        // A schema that does not compile is kept, and every call to the tool refused, as a
        // catalog file's is: said here, where the transcript added it.
        if let Some(w) = crate::invoke::schema_warning(tool) {
            warnings.push(format!("tools_changed.add[{k}]: {w}"));
        }
        let written = as_written(tool);
        if tool.name != written {
            let why = if crate::name::tool_segment(&spec.name) != spec.name {
                " (a tool name holds ASCII letters, digits, `_` and `-` only)"
            } else {
                ""
            };
            // A written name that is another tool's canonical name removes that tool.
            let removal = if rebuilt.position(&written).is_some() {
                format!(
                    "tools_changed.remove {written:?} removes the tool of that canonical name, so remove this one as {:?}",
                    tool.name
                )
            } else {
                "tools_changed.remove finds it by either name".to_owned()
            };
            warnings.push(format!(
                "tools_changed.add[{k}] {written:?} is named {:?} in the session{why}; {removal}",
                tool.name
            ));
        }
    }
    Ok((rebuilt, warnings))
}

impl Replay<'_> {
    /// Applies every `tools_changed` event to a copy of the catalog before the replay starts,
    /// so that one it cannot apply fails before any turn's output; returns their warnings, each
    /// with its place.
    fn check_tool_changes(
        &self,
        events: &[Event],
        at: &dyn Fn(usize) -> String,
    ) -> Result<Vec<String>, String> {
        let mut warnings = Vec::new();
        let mut catalog: Option<Catalog> = None;
        // Names the model may define on the way: their removal is judged when the replay
        // reaches it, as whether the definition succeeds is known only then.
        let mut definable: Vec<&str> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            match e {
                Event::Call { name, input, .. } => {
                    let args = match name.as_str() {
                        authoring::TOOL_DEFINE => Some(input),
                        DEFER_EXECUTE
                            if input.get("tool_name").and_then(Value::as_str)
                                == Some(authoring::TOOL_DEFINE) =>
                        {
                            input.get("params").and_then(Value::as_object)
                        }
                        _ => None,
                    };
                    definable.extend(args.and_then(|a| a.get("name")).and_then(Value::as_str));
                }
                Event::ToolsChanged { add, remove } => {
                    let current = catalog.as_ref().unwrap_or(&self.catalog);
                    let judged: Vec<String> = remove
                        .iter()
                        .filter(|n| {
                            current.position(n).is_some() || !definable.contains(&n.as_str())
                        })
                        .cloned()
                        .collect();
                    let (changed, said) = changed_catalog(current, add, &judged, Adder::Client)
                        .map_err(|e| format!("{}: {e}", at(i)))?;
                    warnings.extend(said.into_iter().map(|w| format!("{}: {w}", at(i))));
                    catalog = Some(changed);
                }
                _ => {}
            }
        }
        Ok(warnings)
    }
}

/// Checks a transcript's shape before anything is replayed, so that a malformed file yields an
/// error and no partial output: a user message comes before the first call, calls and results
/// pair up, no context trails the last request. Returns a warning for each run of calls
/// followed by fewer results (but some): paired from the last call back, the first calls get
/// computed results, which is seldom what such a recording means.
fn check_pairing(events: &[Event], at: &dyn Fn(usize) -> String) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    // A result is carried by a request too; one out of place is the error to report, not the
    // context before it.
    let last_request = events
        .iter()
        .rposition(|e| Replay::asks_the_model(e) || matches!(e, Event::Result { .. }));
    let mut user_seen = false;
    let mut i = 0;
    while i < events.len() {
        let Round {
            calls,
            between,
            results,
        } = round_at(events, i);
        if calls > 0 && !user_seen {
            return Err(format!(
                "{}: a call before the first user message: the first request would open with the model's call, and a conversation opens with the user (put a {{\"user\": ...}} line before it)",
                at(i)
            ));
        }
        user_seen |= matches!(events[i], Event::User(_));
        if calls + results == 0 {
            if matches!(events[i], Event::Context(_)) && last_request.is_none_or(|l| l < i) {
                return Err(format!(
                    "{}: context after the last request: no request follows to carry it",
                    at(i)
                ));
            }
            i += 1;
            continue;
        }
        if calls == 0 {
            return Err(misplaced_result(events, i, at));
        }
        if results > calls {
            let first = at(i + calls + between + calls);
            return Err(format!(
                "{first}: a result with no call before it to answer (from {}, {} followed by {results} results)",
                at(i),
                if calls == 1 {
                    "1 call is".to_owned()
                } else {
                    format!("{calls} calls are")
                },
            ));
        }
        if between > 0 && results < calls {
            // Which calls the results answer is told by their place, which the events between
            // blur: a round with something between needs every result.
            return Err(format!(
                "{}: {calls} calls followed by {results} result{}, with {} ({}) between them: when context or tools_changed comes between a round's calls and its results, give every call its result, in call order",
                at(i + calls + between),
                if results == 1 { "" } else { "s" },
                line_of(at, i + calls),
                kind_of(&events[i + calls]),
            ));
        }
        if results > 0 && results < calls {
            let answered = match results {
                1 => "the result answers the last call".to_owned(),
                r => format!("the results answer the last {r} calls as one round"),
            };
            let computed = match calls - results {
                1 => "the first call gets a computed result in a round of its own".to_owned(),
                c => {
                    format!("the first {c} calls get computed results, each in a round of its own")
                }
            };
            warnings.push(format!(
                "{}: {calls} calls followed by {results} result{}: {answered}, and {computed} (give every call of a round its result, in call order)",
                at(i),
                if results == 1 { "" } else { "s" },
            ));
        }
        i += calls + between + results;
    }
    Ok(warnings)
}

/// The blocks for a turn's new item: the change notice, reminders (rule order; pointing at
/// `tool_search` only in a `searchable` session), environment context (taken).
fn inject(
    compiled: &Compiled,
    state: &mut SessionState,
    catalog: &Catalog,
    exposure: &Exposure,
    context: &mut Vec<String>,
    input: &TurnInput<'_>,
    searchable: bool,
) -> (Vec<String>, Vec<Note>) {
    let reminders = compiled.reminders();
    let evaluation = reminders.evaluate(state, input);
    let names: BTreeSet<String> = visible(catalog, exposure)
        .into_iter()
        .map(|i| catalog.tools()[i].name.clone())
        .collect();
    // The proxy's order: the change notice, then the reminders.
    let mut blocks: Vec<String> = state.change_notice(&names).into_iter().collect();
    blocks.extend(
        evaluation
            .showing
            .iter()
            .map(|&r| reminders.block_in(r, searchable)),
    );
    blocks.append(context);
    (blocks, evaluation.notes)
}

/// A one-line summary of a turn, for `replay --explain`.
pub fn explain_line(report: &TurnReport) -> String {
    let mut parts = vec![format!(
        "turn {}: system {} B, tools {} B, messages {} B",
        report.turn, report.bytes.system, report.bytes.tools, report.bytes.messages
    )];
    for n in &report.reminders {
        parts.push(format!("reminder {} {}: {}", n.id, n.event, n.why));
    }
    if !report.activated.is_empty() {
        parts.push(format!("activated: {}", report.activated.join(", ")));
    }
    if !report.expired.is_empty() {
        let expired: Vec<String> = report
            .expired
            .iter()
            .enumerate()
            .map(|(k, name)| match report.unused_turns.get(k) {
                Some(1) => format!("{name} (unused for 1 turn)"),
                Some(n) => format!("{name} (unused for {n} turns)"),
                None => name.clone(),
            })
            .collect();
        parts.push(format!("expired: {}", expired.join(", ")));
    }
    if !report.refused.is_empty() {
        parts.push(format!("refused: {}", report.refused.join(", ")));
    }
    if !report.injected.is_empty() {
        parts.push(format!("injected: {} block(s)", report.injected.len()));
    }
    parts.join("\n  ")
}

/// A recorded result's content as the text the model reads: a string as it is, content blocks
/// as their texts one per line, a block that holds no text (an image, a resource) as its type in
/// brackets (`[image]`): its data (base64, a blob) is not text the model reads, and counted as
/// text it would swamp the request's size.
fn recorded_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b.get("text").and_then(Value::as_str) {
                Some(text) if b.get("type").and_then(Value::as_str) == Some("text") => {
                    text.to_owned()
                }
                _ => format!(
                    "[{}]",
                    crate::echo::echo(b.get("type").and_then(Value::as_str).unwrap_or("block"))
                ),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => canonical_json(other),
    }
}

/// A transcript: its events and the line each came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// Where it was read from, for messages.
    pub source: String,
    /// Its events, in order.
    pub events: Vec<Event>,
    /// The line (from 1) of each event.
    lines: Vec<usize>,
}

impl Transcript {
    /// Where event `i` is: `source:line`.
    pub fn at(&self, i: usize) -> String {
        format!(
            "{}:{}",
            self.source,
            self.lines.get(i).copied().unwrap_or(0)
        )
    }
}

/// A transcript's events from its text, one JSON object a line (blank lines and a leading byte
/// order mark are skipped); errors name the line.
pub fn parse_transcript(text: &str, source: &str) -> Result<Transcript, String> {
    let text = crate::json::without_bom(text);
    let mut events = Vec::new();
    let mut lines = Vec::new();
    for (n, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        events.push(Event::parse(l).map_err(|e| format!("{source}:{}: {e}", n + 1))?);
        lines.push(n + 1);
    }
    Ok(Transcript {
        source: source.to_owned(),
        events,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_an_event_does_not_take_is_refused_naming_it() {
        for (line, says) in [
            (
                r#"{"call": {"name": "Read", "input": {}, "inptu": {}}}"#,
                r#"unknown key "inptu" in "call"; did you mean "input"?"#,
            ),
            (
                r#"{"result": {"content": "x", "is_eror": true}}"#,
                r#"unknown key "is_eror" in "result"; did you mean "is_error"?"#,
            ),
            (
                r#"{"result": {"contents": "the file text"}}"#,
                r#"unknown key "contents" in "result"; did you mean "content"?"#,
            ),
            (
                r#"{"tools_changed": {"add": [], "remvoe": ["Read"]}}"#,
                r#"unknown key "remvoe" in "tools_changed"; did you mean "remove"?"#,
            ),
            (
                r#"{"call": {"name": "Read", "id": "toolu_1"}}"#,
                r#"unknown key "id" in "call": it takes "name", "input", "arguments""#,
            ),
            (
                r#"{"result": {"content": "x", "structuredContent": {}}}"#,
                r#"unknown key "structuredContent" in "result": it takes "content", "is_error", "isError""#,
            ),
            (
                r#"{"usr": "hi"}"#,
                r#"unknown event "usr"; did you mean "user"?"#,
            ),
            (
                r#"{"call": {"name": "Read", "input": {}, "arguments": {}}}"#,
                r#""call" gives both "input" and "arguments""#,
            ),
            (
                r#"{"result": {"content": "x", "is_error": true, "isError": true}}"#,
                r#""result" gives both "is_error" and "isError""#,
            ),
            (
                r#"{"result": {"content": "x", "isError": "yes"}}"#,
                r#""result".isError must be true or false"#,
            ),
            (
                r#"{"call": {"name": "Read", "arguments": "[1]"}}"#,
                r#""call".arguments must be an object, or a string of a JSON object"#,
            ),
            (r#"{"call": "Read"}"#, r#""call" must be an object"#),
        ] {
            let e = Event::parse(line).expect_err(line);
            assert!(e.contains(says), "{line}: {e}");
        }
    }

    #[test]
    fn the_spellings_of_mcp_and_openai_are_read_as_aliases() {
        let failed = Event::parse(r#"{"result": {"content": "boom", "isError": true}}"#);
        assert_eq!(
            failed,
            Ok(Event::Result {
                content: json!("boom"),
                is_error: true
            })
        );
        let input = json!({"file_path": "/a"})
            .as_object()
            .cloned()
            .expect("an object");
        let call = |line: &str| Event::parse(line).expect(line);
        let expected = Event::Call {
            name: "Read".into(),
            input: input.clone(),
            arguments: None,
        };
        assert_eq!(
            call(r#"{"call": {"name": "Read", "arguments": {"file_path": "/a"}}}"#),
            expected
        );
        // A string of JSON is kept as written too: the OpenAI APIs carry it so.
        assert_eq!(
            call(r#"{"call": {"name": "Read", "arguments": "{\"file_path\": \"/a\"}"}}"#),
            Event::Call {
                name: "Read".into(),
                input,
                arguments: Some(r#"{"file_path": "/a"}"#.into()),
            }
        );
        assert_eq!(
            call(r#"{"call": {"name": "Read", "input": {"file_path": "/a"}}}"#),
            expected
        );
    }

    #[test]
    fn a_transcript_error_names_the_file_and_line() {
        let e = parse_transcript(
            "{\"user\": \"hi\"}\n\n{\"tools_changed\": {\"remvoe\": [\"Read\"]}}\n",
            "t.jsonl",
        )
        .expect_err("refused");
        assert!(
            e.starts_with(
                r#"t.jsonl:3: unknown key "remvoe" in "tools_changed"; did you mean "remove"?"#
            ),
            "{e}"
        );
    }
}
