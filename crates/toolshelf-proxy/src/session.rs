//! One conversation as the proxy remembers it between requests.
//!
//! The client resends its whole conversation with every request, but it never saw what the
//! proxy did inside: the `tool_search` rounds it answered, the `defer_execute` calls that became
//! ordinary calls, the reminders it injected. To send the upstream the same conversation again
//! (so the model's view stays consistent and the provider's prompt cache keeps hitting), the
//! proxy records, per client-visible assistant turn, the upstream entries that produced it, and,
//! per client entry, the blocks it injected after it. Both are looked up by fingerprints of what
//! the client sends back, so a retried or resent request rebuilds the same bytes; a turn the
//! client edited no longer matches its record and goes upstream as the client sent it.
//!
//! ## Which conversation a request belongs to
//! An `x-toolshelf-session` header names it. Without one, the key is a hash of the
//! conversation's root: the API, the system prompt, the set of client tool names, the first user
//! message and, when the harness sends one, the id it gives its conversation ([`harness_id`]:
//! Claude Code's `x-claude-code-session-id` header; in the OpenAI formats the body's
//! `prompt_cache_key`, which Codex and other agents set to their conversation's id). A Responses
//! request chained by `previous_response_id` follows that id to its session; an id the proxy
//! cannot place names a session of its own.
//!
//! Limits of that rule. Two conversations that open with the same system prompt, tools and first
//! message and carry no harness id (or the same one: a harness's subagents share its session
//! id) share a session. Their recorded rounds and injected blocks are told apart by call ids and
//! places in the conversation, so they do not mix, but the session state is one: activations
//! (a tool one conversation searched for runs in the other), the tool set the model was told of
//! (a change notice is injected into whichever conversation sends the next request, and never
//! into the other), the reminder rules' marks (a rule that fired in one waits out its cooldown in
//! the other) and the tools the model wrote. The ids that name a user rather than a conversation
//! are not read: Anthropic's `metadata.user_id` (Claude Code's also carries, in its remote mode,
//! a key that changes every turn, which would start a new session every turn), OpenAI's `user`
//! and `safety_identifier`. A client that rewrites its first message or system prompt
//! mid-conversation, or whose harness id changes (Claude Code resumed with `--fork-session`),
//! starts a new session (the model then sees its `defer_execute` calls without the searches
//! before them, and can search again).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolshelf_core::authoring::Authored;
use toolshelf_core::request::Api;
use toolshelf_core::session::SessionState;

use crate::api::{Call, Dialect, ProxyResult, Tokens, text_of};

/// Version of the serialised layout.
pub const LAYOUT: u32 = 2;

/// The upstream side of one client-visible assistant turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    /// Entries of the rounds the proxy answered (assistant output, then the proxy's results).
    pub prelude: Vec<Value>,
    /// The last round's assistant output, as the upstream produced it.
    pub last: Vec<Value>,
    /// Results of calls in `last` that the proxy answered (they open the next client entries).
    pub pending: Vec<ProxyResult>,
    /// The [`turn_print`] of the turn as the client received it: the record stands for the
    /// client's copy only while that copy still prints the same (a client may edit its history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<String>,
}

/// Blocks injected after one client entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Injected {
    /// The blocks.
    pub blocks: Vec<String>,
}

/// Running figures of one session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Client requests handled.
    pub requests: u64,
    /// Upstream rounds sent.
    pub rounds: u64,
    /// `tool_search` calls answered.
    pub searches: u64,
    /// Calls refused (answered with an error instead of reaching the client).
    pub refused: u64,
    /// Requests whose upstream prefix was not a byte prefix of the previous one's.
    pub prefix_breaks: u64,
    /// Upstream token figures, summed.
    pub tokens: Tokens,
    /// Tool-list tokens saved against sending every tool, summed over rounds: negative when the
    /// deferred list cost more than the client's own.
    pub tokens_saved: i64,
}

impl Figures {
    /// Adds what `now` holds beyond `base`.
    pub fn add_since(&mut self, now: &Figures, base: &Figures) {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        self.requests += d(now.requests, base.requests);
        self.rounds += d(now.rounds, base.rounds);
        self.searches += d(now.searches, base.searches);
        self.refused += d(now.refused, base.refused);
        self.prefix_breaks += d(now.prefix_breaks, base.prefix_breaks);
        self.tokens_saved += now.tokens_saved - base.tokens_saved;
        let (t, n, b) = (&mut self.tokens, &now.tokens, &base.tokens);
        t.input += d(n.input, b.input);
        t.output += d(n.output, b.output);
        t.cache_read += d(n.cache_read, b.cache_read);
        t.cache_creation += d(n.cache_creation, b.cache_creation);
    }
}

/// Fingerprints of an upstream request's cacheable parts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrefixPrint {
    /// Of everything but the conversation (tools, system, settings that shape the prompt).
    pub head: String,
    /// Of each conversation entry.
    pub entries: Vec<String>,
}

impl PrefixPrint {
    /// Whether `next` starts with this request's prefix.
    pub fn continued_by(&self, next: &PrefixPrint) -> bool {
        self.head == next.head
            && next.entries.len() >= self.entries.len()
            && next.entries[..self.entries.len()] == self.entries[..]
    }
}

/// One session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxySession {
    /// [`LAYOUT`].
    pub layout: u32,
    /// Turns, the frozen surface, activations, reminder marks.
    pub state: SessionState,
    /// Recorded rounds by the key of the client-visible assistant turn.
    pub recorded: BTreeMap<String, Recorded>,
    /// Injected blocks by the [`chains`] digest of the client's conversation up to the entry
    /// they follow: keyed by the whole prefix, not by a position, so that two conversations
    /// sharing a session (the same opening, or one `x-toolshelf-session`) keep their own blocks.
    pub injected: BTreeMap<String, Injected>,
    /// The last upstream request's fingerprints.
    pub last_prefix: Option<PrefixPrint>,
    /// The [`chains`] key of the client's last entry in the last request (with a Responses
    /// chain's `previous_response_id`): a request ending at the same entry is the same request
    /// again (a retry, a regenerated answer), which is no new turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_entry: Option<String>,
    /// Figures.
    pub figures: Figures,
    /// Tools the model wrote with `tool_define`, in the order written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authored: Vec<toolshelf_core::authoring::Authored>,
    /// Descriptions rendered from templates when the list froze, by canonical name: search
    /// results show them too.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub described: BTreeMap<String, String>,
    /// The values the session's templates read, fixed when its list first froze: a tool that
    /// arrives later is rendered with them, whatever a later request says of its client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<toolshelf_core::template::SessionValues>,
    /// The [`crate::shelf::Shelf::names_digest`] of the tools `described` covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub described_on: Option<String>,
    /// Names of model-written tools a client tool of the same name hides, as the model was
    /// last told.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub shadowed: BTreeSet<String>,
    /// Definitions a merge with another writer's session did not keep, until the conversation
    /// that made them is told.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<Lost>,
    /// The model-written tools as loaded, which a merge compares both writers' with.
    #[serde(skip)]
    pub loaded_authored: Vec<Authored>,
}

/// A model-written tool's definition that a merge did not keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lost {
    /// Its name.
    pub name: String,
    /// [`definition_print`] of the definition.
    pub print: String,
    /// Why, as the model reads it.
    pub why: String,
}

/// A digest of a tool definition: its name, description, schema and script.
pub fn definition_print(name: &str, description: &str, schema: &Value, script: &str) -> String {
    digest(&[name, description, &schema.to_string(), script])
}

/// [`definition_print`] of a model-written tool.
pub fn authored_print(t: &Authored) -> String {
    let item = &t.item;
    definition_print(
        t.name(),
        item["description"].as_str().unwrap_or_default(),
        &item["input_schema"],
        &t.script,
    )
}

impl Default for ProxySession {
    fn default() -> Self {
        Self {
            layout: LAYOUT,
            state: SessionState::default(),
            recorded: BTreeMap::new(),
            injected: BTreeMap::new(),
            last_prefix: None,
            last_entry: None,
            figures: Figures::default(),
            authored: Vec::new(),
            described: BTreeMap::new(),
            values: None,
            described_on: None,
            shadowed: BTreeSet::new(),
            lost: Vec::new(),
            loaded_authored: Vec::new(),
        }
    }
}

impl ProxySession {
    /// Reads a stored session; why not, for another layout or a damaged value.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        match serde_json::from_slice::<Self>(bytes) {
            Ok(mut s) if s.layout == LAYOUT => {
                s.loaded_authored = s.authored.clone();
                Ok(s)
            }
            Ok(s) => Err(format!(
                "it has layout {}, and this build reads {LAYOUT}",
                s.layout
            )),
            Err(e) => Err(format!("it is damaged ({e})")),
        }
    }

    /// The stored form.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Adds what another writer recorded meanwhile: its recorded rounds, injected blocks,
    /// activations, calls, figures (`base` being the figures this writer loaded), the tools its
    /// model defined and the descriptions it rendered. The rest (the frozen surface, the last
    /// prefix) stays this session's.
    ///
    /// Model-written tools: the stored session's stay as they are; this writer's new or changed
    /// ones are added while the session holds fewer than `max_tools`, and a name both writers
    /// changed keeps the stored definition (the first stored wins). Each definition of this
    /// writer's not kept is remembered in [`Self::lost`], for its conversation to be told.
    pub fn merge_from(&mut self, other: ProxySession, base: &Figures, max_tools: usize) {
        // This writer's figures are the loaded ones plus what its request added; the other's
        // already hold its own additions.
        let mut figures = other.figures.clone();
        figures.add_since(&self.figures, base);
        self.figures = figures;
        self.state.absorb(&other.state);
        // A name this writer saw a client tool take: the other writer's activation of it, made
        // without knowing, was of the model's tool, not of the client's.
        for name in self.shadowed.difference(&other.shadowed) {
            self.state.deactivate(name);
        }
        self.shadowed.extend(other.shadowed.iter().cloned());
        for (k, v) in other.recorded {
            self.recorded.entry(k).or_insert(v);
        }
        for (k, v) in other.injected {
            self.injected.entry(k).or_insert(v);
        }
        let stored = other.authored.clone();
        let mine = std::mem::replace(&mut self.authored, other.authored);
        for tool in mine {
            let loaded = self
                .loaded_authored
                .iter()
                .find(|t| t.name() == tool.name());
            let changed = loaded != Some(&tool);
            let why = match self.authored.iter().position(|t| t.name() == tool.name()) {
                Some(k) if self.authored[k] == tool => None,
                // Only the other writer changed it, or both did: the stored one stays.
                Some(_) if !changed => None,
                // Only this writer changed it.
                Some(k) if loaded == Some(&self.authored[k]) => {
                    self.authored[k] = tool.clone();
                    None
                }
                Some(_) => Some(format!(
                    "your definition of {:?} was replaced by another conversation's definition of it in this session",
                    tool.name()
                )),
                // This writer's alone: changed from what it loaded, or new.
                None if self.authored.len() < max_tools => {
                    self.authored.push(tool.clone());
                    None
                }
                None => Some(format!(
                    "your tool {:?} was not kept: this session reached [authoring] max_tools ({max_tools}) with tools another conversation of it defined",
                    tool.name()
                )),
            };
            if let Some(why) = why {
                let print = authored_print(&tool);
                if !self.lost.iter().any(|l| l.print == print) {
                    self.lost.push(Lost {
                        name: tool.name().to_owned(),
                        print,
                        why,
                    });
                }
            }
        }
        // A further merge compares with what this one started from.
        self.loaded_authored = stored;
        for l in other.lost {
            if !self.lost.iter().any(|m| m.print == l.print) {
                self.lost.push(l);
            }
        }
        // A conversation that never comes back leaves its entry: at most one per tool the
        // session may hold.
        self.lost.truncate(max_tools);
        for (k, v) in other.described {
            self.described.entry(k).or_insert(v);
        }
        if self.values.is_none() {
            self.values = other.values;
        }
    }
}

/// For each entry of `conv`, a digest of the entries up to and including it (each link the
/// digest of the previous link and the entry's [`fingerprint`]).
pub fn chains(conv: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(conv.len());
    for e in conv {
        let previous = out.last().map_or("", String::as_str);
        let link = digest(&[previous, &fingerprint(e)]);
        out.push(link);
    }
    out
}

/// A short hex digest.
pub fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The text of `[{"type": "text", "text": T}]`, cache mark aside (nothing else in the array or
/// the block).
fn lone_text(v: &Value) -> Option<&str> {
    let [block] = v.as_array()?.as_slice() else {
        return None;
    };
    let b = block.as_object()?;
    let extra = b
        .keys()
        .filter(|k| !matches!(k.as_str(), "type" | "text" | "cache_control"));
    if extra.count() > 0 || b.get("type").and_then(Value::as_str) != Some("text") {
        return None;
    }
    b.get("text")?.as_str()
}

/// Fingerprint of one conversation entry, cache marks ignored. Clients move their cache marks
/// from turn to turn, and a mark also changes the shape it sits in: a client marks a message
/// whose content is a string by sending that content as one text block (Claude Code does, for
/// the last message of each request), and sends the string again once the mark has moved on.
/// Both are the same prompt, so a content of one bare text block reads as its text. Fed to the
/// digest as it is walked: long conversations are fingerprinted on every request, so nothing is
/// copied.
pub fn fingerprint(entry: &Value) -> String {
    fn feed(v: &Value, h: &mut Sha256) {
        match v {
            Value::Null => h.update([0]),
            Value::Bool(b) => h.update([1, u8::from(*b)]),
            Value::Number(n) => {
                let s = n.to_string();
                h.update([2]);
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            Value::String(s) => {
                h.update([3]);
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            Value::Array(a) => {
                h.update([4]);
                h.update((a.len() as u64).to_le_bytes());
                for x in a {
                    feed(x, h);
                }
            }
            Value::Object(m) => {
                h.update([5]);
                for (k, x) in m.iter().filter(|(k, _)| k.as_str() != "cache_control") {
                    h.update((k.len() as u64).to_le_bytes());
                    h.update(k.as_bytes());
                    match lone_text(x) {
                        Some(text) if k == "content" => feed(&Value::String(text.to_owned()), h),
                        _ => feed(x, h),
                    }
                }
                h.update([6]);
            }
        }
    }
    let mut h = Sha256::new();
    feed(entry, &mut h);
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The id a harness sends of its own accord for the conversation a request belongs to: the
/// value of Claude Code's session header (`header`, [`crate::HARNESS_SESSION_HEADER`]), else, in
/// the OpenAI formats, the body's `prompt_cache_key` (a key the client keeps for the
/// provider's prompt cache, which agents set to their conversation's id). Blank values are none.
pub fn harness_id(
    dialect: Dialect,
    header: Option<&str>,
    body: &serde_json::Map<String, Value>,
) -> Option<String> {
    let cache_key = match dialect.api() {
        Api::Anthropic => None,
        Api::OpenAiChat | Api::OpenAiResponses => {
            body.get("prompt_cache_key").and_then(Value::as_str)
        }
    };
    header
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("header:{h}"))
        .or_else(|| {
            cache_key
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| format!("prompt_cache_key:{k}"))
        })
}

/// The session key of a request without an `x-toolshelf-session` header; `harness` is its
/// [`harness_id`] (without one the key is the root's alone).
pub fn root_key(
    dialect: Dialect,
    body: &serde_json::Map<String, Value>,
    tool_names: &[String],
    harness: Option<&str>,
) -> String {
    let mut names = tool_names.to_vec();
    names.sort();
    names.dedup();
    let first_user = crate::api::conversation(dialect, body)
        .iter()
        .find(|e| e.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|e| e.get("content"))
        .map(text_of)
        .unwrap_or_default();
    let system = dialect.system_text(body);
    let names = names.join("\n");
    let mut parts = vec![dialect.api().name(), &system, &names, &first_user];
    parts.extend(harness);
    digest(&parts)
}

/// The key of an assistant turn (its entries, request form): its first call's id, else
/// [`text_key`] of its text after `before`, the [`chains`] link of the entries before it.
pub fn turn_key(dialect: Dialect, entries: &[Value], before: &str) -> String {
    for e in entries {
        if let Some(c) = dialect.calls(e).first() {
            return format!("call:{}", c.id);
        }
    }
    let mut text = String::new();
    for e in entries {
        match e.get("content") {
            Some(Value::String(s)) => text.push_str(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                }
            }
            _ => {}
        }
    }
    text_key(before, &text)
}

/// A digest of an assistant turn as a client shows it: its text without whitespace (formats
/// join the texts of several rounds with blank lines) and its calls in order, each by id, name
/// and input (keys sorted, numbers by their double value: a client may write the arguments back
/// in another order, and a JavaScript one writes `60.0` back as `60` and `1e3` as `1000`).
pub fn turn_print(text: &str, calls: &[Call]) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Number(n) => match n.as_f64() {
                Some(f) => Value::String(format!("\u{0}number {f}")),
                None => v.clone(),
            },
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let words: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut parts = vec![words];
    for c in calls {
        parts.push(c.id.clone());
        parts.push(c.name.clone());
        parts.push(sorted(&Value::Object(c.input.clone())).to_string());
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    digest(&refs)
}

/// The key of a turn without calls: its place in the conversation (`before`, the [`chains`]
/// link of the entries before it) and its text without whitespace. Replies such as "Done."
/// recur, so the text alone would give two turns one record; and a format joins the texts of
/// several rounds with blank lines the client's copy keeps, which the key must not depend on.
pub fn text_key(before: &str, text: &str) -> String {
    let words: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    format!("text:{}", digest(&[before, &words]))
}

/// The [`chains`] link of the entries before entry `i` (`""` before the first).
pub fn link_before(links: &[String], i: usize) -> &str {
    i.checked_sub(1)
        .and_then(|j| links.get(j))
        .map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolshelf_core::request::Api;

    use super::*;

    #[test]
    fn a_merge_keeps_both_writers_work_and_figures() {
        let base = Figures {
            requests: 5,
            ..Figures::default()
        };
        let mut mine = ProxySession {
            figures: Figures {
                requests: 6,
                rounds: 2,
                ..Figures::default()
            },
            ..ProxySession::default()
        };
        mine.injected.insert(
            "a".into(),
            Injected {
                blocks: vec!["mine".into()],
            },
        );
        let mut theirs = ProxySession {
            figures: Figures {
                requests: 7,
                rounds: 3,
                ..Figures::default()
            },
            ..ProxySession::default()
        };
        theirs.injected.insert(
            "b".into(),
            Injected {
                blocks: vec!["theirs".into()],
            },
        );
        mine.merge_from(theirs, &base, 8);
        assert_eq!(mine.figures.requests, 8, "5 loaded, 1 mine, 2 theirs");
        assert_eq!(mine.figures.rounds, 5);
        assert_eq!(
            mine.injected.keys().collect::<Vec<_>>(),
            ["a", "b"],
            "both conversations' blocks"
        );
    }

    fn tool(name: &str, script: &str) -> Authored {
        Authored {
            item: json!({"name": name, "description": "d", "input_schema": {"type": "object"}}),
            script: script.into(),
        }
    }

    /// A session as loaded from the store, holding `authored`.
    fn loaded(authored: Vec<Authored>) -> ProxySession {
        let s = ProxySession {
            authored,
            ..ProxySession::default()
        };
        ProxySession::from_bytes(&s.to_bytes()).expect("reads back")
    }

    #[test]
    fn a_merge_keeps_the_tools_both_writers_models_defined_and_the_stored_one_on_a_clash() {
        let mut mine = loaded(vec![tool("old", "o")]);
        mine.authored
            .extend([tool("mine", "a"), tool("both", "mine")]);
        mine.described.insert("Read".into(), "mine".into());
        let mut theirs = ProxySession {
            authored: vec![
                tool("old", "o"),
                tool("theirs", "b"),
                tool("both", "theirs"),
            ],
            values: Some(toolshelf_core::template::SessionValues {
                client: Some("c".into()),
                ..Default::default()
            }),
            ..ProxySession::default()
        };
        theirs.described.insert("Read".into(), "theirs".into());
        theirs.described.insert("Grep".into(), "theirs".into());
        mine.merge_from(theirs, &Figures::default(), 8);
        let names: Vec<&str> = mine.authored.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["old", "theirs", "both", "mine"]);
        assert_eq!(mine.authored[2].script, "theirs", "the first stored wins");
        assert_eq!(mine.lost.len(), 1, "{:?}", mine.lost);
        assert_eq!(mine.lost[0].name, "both");
        assert_eq!(mine.lost[0].print, authored_print(&tool("both", "mine")));
        assert!(
            mine.lost[0]
                .why
                .contains("replaced by another conversation")
        );
        assert_eq!(mine.described["Read"], "mine");
        assert_eq!(mine.described["Grep"], "theirs");
        assert_eq!(mine.values.and_then(|v| v.client).as_deref(), Some("c"));
    }

    #[test]
    fn a_merge_does_not_bring_back_the_activation_of_a_name_a_client_tool_took() {
        let mut base = ProxySession::default();
        base.state.next_turn();
        base.state.activate(["X", "Y"]);
        // This writer saw the client's tool take the name X; the other did not.
        let mut mine = base.clone();
        mine.shadowed.insert("X".into());
        mine.state.deactivate("X");
        let mut theirs = base;
        theirs.state.next_turn();
        theirs.state.record_call("X");
        mine.merge_from(theirs, &Figures::default(), 8);
        assert_eq!(mine.state.active_names(5), ["Y"]);
        assert!(mine.shadowed.contains("X"));
    }

    #[test]
    fn a_merge_stays_within_max_tools_and_keeps_a_redefinition_only_one_writer_made() {
        let mut mine = loaded(vec![tool("echo", "v1")]);
        mine.authored[0] = tool("echo", "v2");
        mine.authored.push(tool("whisper", "w"));
        let theirs = ProxySession {
            authored: vec![tool("echo", "v1"), tool("shout", "s")],
            ..ProxySession::default()
        };
        mine.merge_from(theirs, &Figures::default(), 2);
        let kept: Vec<(&str, &str)> = mine
            .authored
            .iter()
            .map(|t| (t.name(), t.script.as_str()))
            .collect();
        assert_eq!(kept, [("echo", "v2"), ("shout", "s")]);
        assert_eq!(mine.lost.len(), 1, "{:?}", mine.lost);
        assert_eq!(mine.lost[0].name, "whisper");
        assert!(
            mine.lost[0].why.contains("max_tools (2)"),
            "{:?}",
            mine.lost
        );
        // The other writer redefined a tool this one left alone: theirs stands, unreported.
        let mut mine = loaded(vec![tool("echo", "v1")]);
        let theirs = ProxySession {
            authored: vec![tool("echo", "v3")],
            ..ProxySession::default()
        };
        mine.merge_from(theirs, &Figures::default(), 2);
        assert_eq!(mine.authored, [tool("echo", "v3")]);
        assert!(mine.lost.is_empty());
    }

    #[test]
    fn chains_follow_the_whole_prefix() {
        let x = [
            json!({"role": "user", "content": "hi"}),
            json!({"role": "user", "content": "a"}),
        ];
        let y = [
            json!({"role": "user", "content": "hi"}),
            json!({"role": "user", "content": "b"}),
        ];
        let (cx, cy) = (chains(&x), chains(&y));
        assert_eq!(cx[0], cy[0]);
        assert_ne!(cx[1], cy[1]);
        // The same entry after another opening is another link.
        let z = [
            json!({"role": "user", "content": "yo"}),
            json!({"role": "user", "content": "a"}),
        ];
        assert_ne!(chains(&z)[1], cx[1]);
    }

    #[test]
    fn turn_keys_follow_calls_then_text_and_ignore_cache_marks() {
        let d = Dialect(Api::Anthropic);
        let a = json!({"role": "assistant", "content": [
            {"type": "text", "text": "x"},
            {"type": "tool_use", "id": "t9", "name": "Read", "input": {}}]});
        assert_eq!(turn_key(d, &[a], "x"), "call:t9");
        let plain = json!({"role": "assistant", "content": [{"type": "text", "text": "hello"}]});
        let marked = json!({"role": "assistant", "content": [
            {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]});
        assert_eq!(
            turn_key(d, std::slice::from_ref(&plain), ""),
            turn_key(d, std::slice::from_ref(&marked), "")
        );
        assert_eq!(fingerprint(&plain), fingerprint(&marked));
        let chat = json!({"role": "assistant", "content": "hello"});
        assert_eq!(
            turn_key(Dialect(Api::OpenAiChat), &[chat], ""),
            turn_key(d, std::slice::from_ref(&plain), "")
        );
        // The same words at another place are another turn; blank lines between them are not.
        assert_ne!(
            turn_key(d, std::slice::from_ref(&plain), "a"),
            turn_key(d, std::slice::from_ref(&plain), "b")
        );
        let joined = json!({"role": "assistant", "content": "Let me look.\n\nThere is a tool."});
        assert_eq!(
            turn_key(Dialect(Api::OpenAiChat), &[joined], "a"),
            text_key("a", "Let me look.There is a tool.")
        );
    }

    #[test]
    fn a_turn_prints_the_same_whatever_its_whitespace_and_key_order() {
        let call = |id: &str, input: Value| Call {
            id: id.into(),
            name: "Read".into(),
            input: input.as_object().cloned().unwrap_or_default(),
            raw_input: None,
        };
        let a = call("t1", json!({"path": "x", "limit": 3}));
        let b = call("t2", json!({"path": "y"}));
        let print = turn_print("Reading.\n\nBoth.", &[a.clone(), b.clone()]);
        let reordered = call("t1", json!({"limit": 3, "path": "x"}));
        assert_eq!(print, turn_print("Reading. Both.", &[reordered, b.clone()]));
        assert_ne!(print, turn_print("Reading.Both.", std::slice::from_ref(&a)));
        assert_ne!(
            print,
            turn_print("Reading only x.", &[a.clone(), b.clone()])
        );
        assert_ne!(print, turn_print("Reading.Both.", &[b, a]));
    }

    #[test]
    fn a_turn_prints_the_same_when_a_client_writes_its_numbers_back_as_doubles() {
        let call = |input: &str| Call {
            id: "t1".into(),
            name: "Bash".into(),
            input: serde_json::from_str(input).expect("an object"),
            raw_input: None,
        };
        let sent = turn_print(
            "",
            &[call(
                r#"{"timeout": 60.0, "n": 1e3, "big": 9007199254740993}"#,
            )],
        );
        let back = turn_print(
            "",
            &[call(
                r#"{"timeout": 60, "n": 1000, "big": 9007199254740992}"#,
            )],
        );
        assert_eq!(sent, back);
        assert_ne!(
            sent,
            turn_print(
                "",
                &[call(
                    r#"{"timeout": 61, "n": 1000, "big": 9007199254740992}"#
                )]
            )
        );
        // A number is not the string of its digits.
        assert_ne!(
            turn_print("", &[call(r#"{"timeout": 60}"#)]),
            turn_print("", &[call(r#"{"timeout": "60"}"#)])
        );
    }

    #[test]
    fn a_content_marked_as_one_text_block_reads_as_the_string_it_was() {
        let marked = json!({"role": "system", "content": [
            {"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]});
        let plain = json!({"role": "system", "content": "# Environment"});
        assert_eq!(fingerprint(&marked), fingerprint(&plain));
        let result = json!({"type": "tool_result", "tool_use_id": "t1",
            "content": [{"type": "text", "text": "r", "cache_control": {"type": "ephemeral"}}]});
        assert_eq!(
            fingerprint(&result),
            fingerprint(&json!({"type": "tool_result", "tool_use_id": "t1", "content": "r"}))
        );
        // Anything more than one bare text block keeps its shape.
        for content in [
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
            json!([{"type": "text", "text": "a", "citations": []}]),
            json!([{"type": "image", "source": {}}]),
        ] {
            let m = json!({"role": "user", "content": content});
            let text = json!({"role": "user", "content": "a"});
            assert_ne!(fingerprint(&m), fingerprint(&text));
        }
    }

    #[test]
    fn the_root_key_ignores_tool_order_and_later_messages() {
        let d = Dialect(Api::Anthropic);
        let body = |msgs: Value| {
            json!({"system": "s", "messages": msgs})
                .as_object()
                .cloned()
                .expect("object")
        };
        let one = body(json!([{"role": "user", "content": "hi"}]));
        let two = body(json!([{"role": "user", "content": "hi"},
                              {"role": "assistant", "content": "yo"},
                              {"role": "user", "content": "more"}]));
        let k1 = root_key(d, &one, &["b".into(), "a".into()], None);
        assert_eq!(k1, root_key(d, &two, &["a".into(), "b".into()], None));
        assert_ne!(k1, root_key(d, &one, &["a".into()], None));
        // A harness's conversation id tells apart conversations that open alike.
        let mine = root_key(d, &one, &["a".into(), "b".into()], Some("header:1"));
        assert_eq!(
            mine,
            root_key(d, &two, &["a".into(), "b".into()], Some("header:1"))
        );
        assert_ne!(mine, k1);
        assert_ne!(
            mine,
            root_key(d, &one, &["a".into(), "b".into()], Some("header:2"))
        );
    }

    #[test]
    fn a_harness_id_is_its_session_header_else_an_openai_prompt_cache_key() {
        let body = |v: Value| v.as_object().cloned().expect("object");
        let keyed = body(json!({"prompt_cache_key": "conv-7", "messages": []}));
        let chat = Dialect(Api::OpenAiChat);
        assert_eq!(
            harness_id(chat, None, &keyed).as_deref(),
            Some("prompt_cache_key:conv-7")
        );
        assert_eq!(
            harness_id(Dialect(Api::OpenAiResponses), Some(" s-1 "), &keyed).as_deref(),
            Some("header:s-1")
        );
        // Anthropic has no prompt_cache_key; metadata.user_id names a user, not a conversation.
        let anthropic = Dialect(Api::Anthropic);
        let user = body(json!({"metadata": {"user_id": "u"}, "prompt_cache_key": "k"}));
        assert_eq!(harness_id(anthropic, None, &user), None);
        assert_eq!(harness_id(anthropic, Some("  "), &user), None);
        assert_eq!(harness_id(chat, None, &body(json!({"user": "u"}))), None);
    }

    #[test]
    fn prefixes_compare_by_entries() {
        let a = PrefixPrint {
            head: "h".into(),
            entries: vec!["1".into(), "2".into()],
        };
        let mut b = a.clone();
        b.entries.push("3".into());
        assert!(a.continued_by(&b));
        b.entries[1] = "x".into();
        assert!(!a.continued_by(&b));
    }
}
