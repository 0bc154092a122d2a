//! toolshelf-proxy: deferred tool loading for any model and any harness, as an LLM-API proxy.
//!
//! A client points `ANTHROPIC_BASE_URL` or `OPENAI_BASE_URL` here and changes nothing else. Its
//! `tools` array becomes a toolshelf catalog ([`shelf`]); the upstream sees the frozen surface
//! (resident tools, `tool_search` with the index of deferred names, `defer_execute`); the proxy
//! answers `tool_search` itself and turns valid `defer_execute` calls into ordinary calls of the
//! real tool, which the client runs with its own executor ([`exchange`]). The three wire formats
//! are in [`api`]; what a conversation needs between requests is in [`session`] and [`store`].
//!
//! Everything the proxy does not understand passes through untouched: other endpoints byte for
//! byte ([`server`]), and inside a rewritten request every block type it has no business with.

pub mod api;
pub mod error;
pub mod exchange;
pub mod metrics;
pub mod redis_store;
pub mod results;
pub mod server;
pub mod session;
pub mod shelf;
pub mod sse;
pub mod store;
pub mod ui;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use toolshelf_core::Compiled;
use toolshelf_core::hook::HookEventKind;

use crate::api::{Dialect, Tokens};
use crate::session::ProxySession;
use crate::shelf::{OwnTools, Shelf, Shelves};
use crate::store::{Cas, Logged, SessionStore};

pub use error::{ProxyError, Result};

/// The header that names a session explicitly.
pub const SESSION_HEADER: &str = "x-toolshelf-session";

/// The header in which Claude Code sends its session's id with every model request: it tells
/// apart conversations that open alike (see [`session::harness_id`]).
pub const HARNESS_SESSION_HEADER: &str = "x-claude-code-session-id";

/// Something that adds rankers to a search index (the embedding ranker): the gateway's.
pub use toolshelf_runtime::enrich::Enricher;
pub use toolshelf_runtime::scripts::ScriptTools;

/// Totals since start, for `/toolshelf/status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Client requests.
    pub requests: u64,
    /// Requests rewritten (the rest passed through).
    pub rewritten: u64,
    /// Requests passed through.
    pub passed: u64,
    /// Upstream rounds.
    pub rounds: u64,
    /// `tool_search` calls answered.
    pub searches: u64,
    /// Calls refused.
    pub refused: u64,
    /// Prefix breaks seen.
    pub prefix_breaks: u64,
    /// Requests whose conversation had earlier turns but no session (see
    /// [`exchange::Prefix::Missing`]).
    pub sessions_missing: u64,
    /// Upstream tokens.
    pub tokens: Tokens,
    /// Tool-list tokens saved.
    pub tokens_saved: u64,
    /// Requests that failed (upstream errors, bad requests).
    pub errors: u64,
    /// Rewritten requests whose client went away before their answer was whole (a turn the
    /// user cancelled, a client that timed out).
    pub abandoned: u64,
    /// Session writes that met a concurrent write.
    pub store_conflicts: u64,
    /// Store operations that failed.
    pub store_errors: u64,
}

/// The proxy's shared state.
#[derive(Debug)]
pub struct Proxy {
    /// The compiled configuration.
    pub compiled: Arc<Compiled>,
    shelves: Shelves,
    /// Where sessions live: the store given to [`Proxy::new`], each operation's failure or
    /// success logged ([`store::Logged`]).
    pub store: Arc<dyn SessionStore>,
    /// The upstream client.
    pub http: reqwest::Client,
    enrich: Option<Enricher>,
    /// Script tools and the runner of the model's tools; without them the proxy offers neither.
    scripts: Option<Arc<ScriptTools>>,
    /// `scripts`' catalog items.
    script_items: Vec<serde_json::Value>,
    /// Whether requests that use the provider's own deferral are rewritten (see
    /// [`Self::takes_over_deferral`]).
    take_over_deferral: bool,
    /// Totals.
    pub totals: Mutex<Totals>,
    /// The audit log: none until [`Proxy::with_audit`] gives one.
    pub audit: toolshelf_runtime::audit::Audit,
}

/// What of the configuration governs calls and the tool list: permission rules (or a default
/// other than allow), call hooks, the active mode. Empty when there is none.
pub fn governance(compiled: &Compiled) -> Vec<String> {
    use toolshelf_core::config::Action;
    let c = compiled.config();
    let p = &c.permissions;
    let mut found = Vec::new();
    if !(p.allow.is_empty() && p.ask.is_empty() && p.deny.is_empty()) {
        found.push("[permissions] rules".to_owned());
    }
    if p.default != Action::Allow {
        found.push(format!("[permissions] default = \"{}\"", p.default));
    }
    for (kind, name) in [
        (HookEventKind::PreCall, "pre_call"),
        (HookEventKind::PostCall, "post_call"),
        (HookEventKind::CallFailed, "call_failed"),
    ] {
        if !compiled.hooks().of(kind).is_empty() {
            found.push(format!("[hooks] {name}"));
        }
    }
    if let Some(mode) = compiled.mode() {
        found.push(format!("the mode {mode:?}"));
    }
    found
}

impl Proxy {
    /// A proxy over `store`, whose failures and recoveries it logs (see [`store::FailureLog`]).
    pub fn new(
        compiled: Arc<Compiled>,
        store: Arc<dyn SessionStore>,
        enrich: Option<Enricher>,
    ) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ProxyError::Upstream {
                url: "(client)".into(),
                message: e.to_string(),
            })?;
        let faults = compiled.templates().faults();
        if !faults.is_empty() {
            return Err(ProxyError::Templates(faults));
        }
        // Hooks of events the proxy has no place to run: said once, not left to be found out.
        let unrun: Vec<&str> = [
            (HookEventKind::SessionStart, "session_start"),
            (HookEventKind::SessionEnd, "session_end"),
        ]
        .into_iter()
        .filter(|(kind, _)| !compiled.hooks().of(*kind).is_empty())
        .map(|(_, name)| name)
        .collect();
        if !unrun.is_empty() {
            tracing::warn!(
                "[hooks] {}: the proxy does not run hooks of these events (only the gateway does), so they never fire here",
                unrun.join(", ")
            );
        }
        // Deferral never weakens governance: a request that defers on its own is taken over
        // when rules, call hooks or a mode are in force, unless the operator said otherwise.
        let governs = governance(&compiled);
        let take_over_deferral = match compiled.config().proxy.take_over_deferral {
            Some(on) => on,
            None => !governs.is_empty(),
        };
        if !take_over_deferral && !governs.is_empty() {
            tracing::warn!(
                "[proxy] take_over_deferral = false: requests that use the provider's own deferral (defer_loading, a tool-search tool) pass through with none of {} applied",
                governs.join(", ")
            );
        }
        Ok(Self {
            compiled,
            shelves: Shelves::default(),
            store: Arc::new(Logged::new(store)),
            http,
            enrich,
            scripts: None,
            script_items: Vec::new(),
            take_over_deferral,
            totals: Mutex::new(Totals::default()),
            audit: toolshelf_runtime::audit::Audit::disabled(),
        })
    }

    /// The proxy, recording every search and call it decides in `audit` (see
    /// [`toolshelf_runtime::audit::Audit::configured`] for the log `[audit]` asks for).
    pub fn with_audit(mut self, audit: toolshelf_runtime::audit::Audit) -> Self {
        self.audit = audit;
        self
    }

    /// The proxy with script tools, run by the proxy itself; their runner also runs the tools
    /// the model writes when `[authoring] enabled`.
    pub fn with_scripts(mut self, scripts: ScriptTools) -> Self {
        self.script_items = scripts.items();
        self.scripts = Some(Arc::new(scripts));
        self
    }

    /// Whether requests that use the provider's own deferral are rewritten: as
    /// `[proxy] take_over_deferral` says, or when unset, whenever [`governance`] finds any.
    pub fn takes_over_deferral(&self) -> bool {
        self.take_over_deferral
    }

    /// The script tools, if the proxy runs any.
    pub fn scripts(&self) -> Option<&ScriptTools> {
        self.scripts.as_deref()
    }

    /// Whether this proxy offers `tool_define` and runs the tools models wrote. When it does
    /// not, a session's model-written tools stay in its record (a replica that does may serve
    /// its next request) but are left out of every catalog here.
    pub fn authoring(&self) -> bool {
        self.scripts.is_some() && self.compiled.config().authoring.enabled
    }

    /// The shelf of a tools array in a session whose model wrote `authored` tools (left out
    /// when [`Self::authoring`] is off). One not built yet is built on the blocking pool: it
    /// compiles and checks every schema, the model's own among them, which cost what their
    /// authors chose, and embeds the tools for the search.
    pub async fn shelf(
        &self,
        dialect: Dialect,
        tools: &[serde_json::Value],
        authored: &[toolshelf_core::authoring::Authored],
    ) -> std::result::Result<Arc<Shelf>, String> {
        let on = self.authoring();
        let authored = if on { authored } else { &[] };
        let key = Shelves::key(tools, authored);
        if let Some(shelf) = self.shelves.cached(key, dialect) {
            return Ok(shelf);
        }
        let (tools, scripts, authored) =
            (tools.to_vec(), self.script_items.clone(), authored.to_vec());
        let (compiled, enrich) = (self.compiled.clone(), self.enrich.clone());
        let built = tokio::task::spawn_blocking(move || {
            let own = OwnTools {
                scripts: &scripts,
                define: on,
                authored: &authored,
            };
            Shelf::build(dialect, &tools, own, &compiled, enrich.as_ref())
        })
        .await
        .map_err(|e| format!("building the request's catalog failed: {e}"))??;
        Ok(self.shelves.keep(key, dialect, built))
    }

    /// The catalog of the most recent request with tools, for the dashboard.
    pub fn latest_shelf(&self) -> Option<Arc<Shelf>> {
        self.shelves.latest()
    }

    /// The most recent catalog without model-written tools: its index is the one a session's
    /// frozen list holds (a session's own tools are searched, never listed there).
    pub fn latest_index(&self) -> Option<Arc<Shelf>> {
        self.shelves.latest_without_authored()
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(self.compiled.config().proxy.session_ttl_secs)
    }

    /// Updates the totals (and the metrics that mirror them).
    pub fn count(&self, f: impl FnOnce(&mut Totals)) {
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let before = totals.clone();
        f(&mut totals);
        metrics::totals_moved(&before, &totals);
    }

    /// Counts a failed store operation. [`Self::store`] logged it already, as a read or a write
    /// (at most once per [`store::LOG_EVERY`]).
    pub fn store_failed(&self) {
        self.count(|t| t.store_errors += 1);
    }

    /// The session under `key` with its version; a new one when missing, unreadable or when the
    /// store fails (counted and logged, and said in [`Loaded::failed`]).
    pub async fn load_session(&self, key: &str) -> Loaded {
        let got = self.store.get(key).await;
        let (session, version, failed) = match got {
            Ok(Some(v)) => match ProxySession::from_bytes(&v.value) {
                Ok(s) => (s, Some(v.version), false),
                Err(why) => {
                    tracing::warn!(
                        "session store: ignoring the stored session {}: {why}; the request goes \
                         on as its first, and its write replaces it",
                        shown_key(key)
                    );
                    (ProxySession::default(), Some(v.version), false)
                }
            },
            Ok(None) => (ProxySession::default(), None, false),
            Err(_) => {
                self.store_failed();
                (ProxySession::default(), None, true)
            }
        };
        Loaded {
            session,
            version,
            failed,
        }
    }

    /// Writes a session back. Each write that meets another's (a compare-and-set conflict) is
    /// merged with it, read back, and written again (at most 16 times).
    ///
    /// A request whose session could not be read (`unread`) went on with a new session standing
    /// in for one that may be stored. Where nothing is stored, its session is written as it is.
    /// Where one is, this request's work is added to it as the turns after the stored ones
    /// ([`SessionState::absorb_unread`](toolshelf_core::session::SessionState::absorb_unread):
    /// its activations, calls and reminder marks), with its figures, model-written tools and
    /// recorded blocks merged as another writer's are; the stored session's frozen surface and
    /// the tools it told stay.
    pub async fn save_session(
        &self,
        key: &str,
        mut session: ProxySession,
        bytes: Vec<u8>,
        version: Option<u64>,
        unread: bool,
        base: &crate::session::Figures,
    ) -> Saved {
        let ttl = self.ttl();
        let (mut bytes, mut version, mut base) = (bytes, version, base.clone());
        let (mut merged, mut unread) = (false, unread);
        // Each conflict means another writer stored first: take its session, add this one's
        // work, and try again on top of it. Nothing is ever written over another's work.
        for _ in 0..MERGES {
            match self.store.compare_and_set(key, version, bytes, ttl).await {
                Ok(Cas::Written(_)) if merged => return Saved::Merged,
                Ok(Cas::Written(_)) => return Saved::Written,
                // Not another writer's: the session this request could not read.
                Ok(Cas::Conflict) if unread => {}
                Ok(Cas::Conflict) => self.count(|t| t.store_conflicts += 1),
                Err(_) => {
                    self.store_failed();
                    return Saved::Failed;
                }
            }
            let Loaded {
                session: other,
                version: v,
                failed,
            } = self.load_session(key).await;
            if failed {
                // Counted and logged by the read: merging into nothing would only conflict again.
                return Saved::Failed;
            }
            let other_figures = other.figures.clone();
            // What the stored session fixed when its list froze stays: the values its
            // templates read and the descriptions they rendered.
            let mut frozen = None;
            if unread {
                // This request's turns come after the stored session's (a retry of the request
                // it ended at is that request's turn); its surface and the tools it told are the
                // stored session's.
                let again = session.last_entry.is_some() && session.last_entry == other.last_entry;
                let mut state = other.state.clone();
                state.absorb_unread(&session.state, again);
                session.state = state;
                if other.values.is_some() {
                    frozen = Some((
                        other.values.clone(),
                        other.described.clone(),
                        other.described_on.clone(),
                    ));
                }
                unread = false;
            }
            session.merge_from(other, &base, self.compiled.config().authoring.max_tools);
            if let Some((values, described, on)) = frozen {
                session.values = values;
                session.described = described;
                session.described_on = on;
            }
            merged = true;
            // The merged figures are the other's plus this request's additions: measured from
            // the other's, the next merge adds those again, and only those.
            base = other_figures;
            bytes = session.to_bytes();
            version = v;
        }
        tracing::warn!(
            session = %shown_key(key),
            "this request's session update was not stored: {MERGES} other writers stored first, one after another"
        );
        Saved::Failed
    }
}

/// What [`Proxy::save_session`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// The request's session was written as it was.
    Written,
    /// It was written merged with the sessions other writers had stored first (or with the
    /// stored session this request could not read).
    Merged,
    /// It was not written: the store failed (counted and logged), or other writers kept
    /// storing first.
    Failed,
}

/// A session as read from the store.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The session; a new one when missing, unreadable or unread.
    pub session: ProxySession,
    /// Its stored version; `None` when nothing is stored under its key (or the store failed).
    pub version: Option<u64>,
    /// Whether the store failed to answer: the new session stands in for one that may exist.
    pub failed: bool,
}

/// How many times a session update is merged into a newer stored one before it is given up.
const MERGES: usize = 16;

/// A session key as shown (the log, the status, the dashboard): hashes cut to 12 digits, other
/// keys (a header's value) in full up to `SHOWN_KEY` characters; a longer one is cut, with a
/// digest of the whole key after it so that two keys that start alike stay apart. Control
/// characters (a tab too, which reads as spaces) and invisible format characters are written as
/// escapes, so that a key cannot forge or reorder a log line; a backslash is written `\\` and `…`
/// is written `\u{2026}`, so that no key spells another's escapes or another's cut form (`…` only
/// ever marks a cut).
///
/// This is for reading only: what names a session where it must be told apart from every other
/// (the status's list, the dashboard's links and timelines) is [`session_id`].
pub fn shown_key(key: &str) -> String {
    if let Some(h) = key.strip_prefix("r:") {
        return format!("r:{}", &h[..h.len().min(12)]);
    }
    // Each character escaped takes at most 10: nothing is cut here.
    let shown = |s: &str| {
        let escaped = s
            .replace('\\', "\\\\")
            .replace(CUT, "\\u{2026}")
            .replace('\t', "\\u{9}");
        toolshelf_core::echo::for_log(&escaped, SHOWN_KEY * 10)
    };
    if key.chars().count() <= SHOWN_KEY {
        return shown(key);
    }
    let head: String = key.chars().take(SHOWN_KEY - 16).collect();
    let digest = crate::session::digest(&[key]);
    format!("{}{CUT}{}", shown(&head), &digest[..12])
}

/// What marks a key shown cut.
const CUT: char = '…';

/// The id of the session under `key`: 32 hex digits of its digest, the same for the same key
/// whatever process computes it. The status lists sessions with it and the dashboard links a
/// session's page with it (`/ui/sessions/ID`): two keys that are shown alike (or a key of any
/// length) still have an id of their own, of bounded length.
pub fn session_id(key: &str) -> String {
    crate::session::digest(&[key])
}

/// The longest session key shown in full.
const SHOWN_KEY: usize = 64;

/// At most 200 characters of `s`, for messages.
pub fn short(s: &str) -> String {
    toolshelf_core::echo::echo(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreFuture, Versioned};

    /// A store whose every write conflicts and whose every read fails.
    #[derive(Debug)]
    struct Contested;

    impl SessionStore for Contested {
        fn get<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Option<Versioned>> {
            Box::pin(async { Err("connection refused".to_owned()) })
        }
        fn compare_and_set<'a>(
            &'a self,
            _: &'a str,
            _: Option<u64>,
            _: Vec<u8>,
            _: Duration,
        ) -> StoreFuture<'a, Cas> {
            Box::pin(async { Ok(Cas::Conflict) })
        }
        fn put<'a>(&'a self, _: &'a str, _: Vec<u8>, _: Duration) -> StoreFuture<'a, u64> {
            Box::pin(async { Ok(1) })
        }
        fn len(&self) -> usize {
            0
        }
    }

    #[tokio::test]
    async fn a_save_whose_reread_fails_stops_at_the_failure() {
        let config = toolshelf_core::Config::default();
        let compiled = Arc::new(Compiled::new(config, "t.toml", None).expect("compiles"));
        let proxy = Proxy::new(compiled, Arc::new(Contested), None).expect("proxy");
        let session = ProxySession::default();
        let bytes = session.to_bytes();
        proxy
            .save_session(
                "k",
                session,
                bytes,
                None,
                false,
                &crate::session::Figures::default(),
            )
            .await;
        let t = proxy.totals.lock().expect("totals").clone();
        // One conflict, then the failed read: no merge into nothing, conflicting again.
        assert_eq!((t.store_conflicts, t.store_errors), (1, 1), "{t:?}");
    }

    /// A request whose session could not be read went on with a new session at turn 1. Where
    /// nothing is stored, that session is written as it is; where a session is stored, the
    /// request's work is added to it as its next turn: an activation made in the request's turn
    /// 1 is the stored session's turn 4 when it stood at 3, and expires from there.
    #[tokio::test]
    async fn a_session_that_could_not_be_read_is_added_to_the_stored_one_as_its_next_turn() {
        let config = toolshelf_core::Config::default();
        let compiled = Arc::new(Compiled::new(config, "t.toml", None).expect("compiles"));
        let store = Arc::new(crate::store::MemoryStore::new(10, None));
        let proxy = Proxy::new(compiled, store.clone(), None).expect("proxy");
        let base = crate::session::Figures::default();
        let mut stored = ProxySession::default();
        for _ in 0..3 {
            stored.state.next_turn();
        }
        stored.state.activate(["mcp__git__git_log"]);
        let bytes = stored.to_bytes();
        let saved = proxy.save_session("k", stored, bytes.clone(), None, false, &base);
        assert_eq!(saved.await, Saved::Written);
        let mut stand_in = ProxySession::default();
        stand_in.state.next_turn();
        stand_in.state.activate(["mcp__fs__read_file"]);
        let standing = stand_in.to_bytes();
        let saved = proxy.save_session("k", stand_in, standing.clone(), None, true, &base);
        assert_eq!(saved.await, Saved::Merged);
        let v = store.get("k").await.expect("ok").expect("stored");
        assert_eq!(v.version, 2);
        let now = ProxySession::from_bytes(&v.value).expect("a session");
        assert_eq!(now.state.turn(), 4);
        use toolshelf_core::session::Activity;
        assert_eq!(
            now.state.activity("mcp__fs__read_file", 6),
            Activity::Active { last_used: 4 }
        );
        assert_eq!(
            now.state.activity("mcp__git__git_log", 6),
            Activity::Active { last_used: 3 }
        );
        // Merging with the session this request could not read is no conflict with a writer.
        let t = proxy.totals.lock().expect("totals").clone();
        assert_eq!((t.store_conflicts, t.store_errors), (0, 0), "{t:?}");
        // Nothing stored: the new session is the session.
        let saved = proxy.save_session("new", ProxySession::default(), standing, None, true, &base);
        assert_eq!(saved.await, Saved::Written);
    }

    /// A retry of the request the stored session ended at, whose read failed, is that request's
    /// turn again, not one more; and what the stored session fixed when its list froze (the
    /// values its templates read, the descriptions they rendered) stays, whatever the unread
    /// request fixed for itself.
    #[tokio::test]
    async fn an_unread_retry_keeps_the_turn_and_the_stored_session_keeps_its_frozen_values() {
        use toolshelf_core::template::SessionValues;
        let config = toolshelf_core::Config::default();
        let compiled = Arc::new(Compiled::new(config, "t.toml", None).expect("compiles"));
        let store = Arc::new(crate::store::MemoryStore::new(10, None));
        let proxy = Proxy::new(compiled, store.clone(), None).expect("proxy");
        let base = crate::session::Figures::default();
        let values = |client: &str| SessionValues {
            client: Some(client.to_owned()),
            ..SessionValues::default()
        };
        let mut stored = ProxySession::default();
        for _ in 0..3 {
            stored.state.next_turn();
        }
        stored.last_entry = Some("entry".to_owned());
        stored.values = Some(values("first"));
        stored
            .described
            .insert("t".into(), "as first rendered".into());
        let bytes = stored.to_bytes();
        let saved = proxy.save_session("k", stored, bytes, None, false, &base);
        assert_eq!(saved.await, Saved::Written);
        let mut retry = ProxySession::default();
        retry.state.next_turn();
        retry.last_entry = Some("entry".to_owned());
        retry.values = Some(values("second"));
        retry
            .described
            .insert("t".into(), "as rendered again".into());
        let bytes = retry.to_bytes();
        let saved = proxy.save_session("k", retry, bytes, None, true, &base);
        assert_eq!(saved.await, Saved::Merged);
        let v = store.get("k").await.expect("ok").expect("stored");
        let now = ProxySession::from_bytes(&v.value).expect("a session");
        assert_eq!(now.state.turn(), 3);
        assert_eq!(now.values, Some(values("first")));
        assert_eq!(now.described["t"], "as first rendered");
    }
}
