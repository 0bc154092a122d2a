//! Per-session state: what one conversation has been shown, loaded and used.
//!
//! A session renders its surface once, when it starts, and every turn reads those frozen bytes,
//! so the prompt prefix stays byte-identical even while servers come and go; what changed is told
//! to the model once, as a notice. Tools the model received a schema for are *active*, with the
//! turn of their last use: an active tool runs through `defer_execute` with no new search, and one
//! left unused for longer than the activation TTL expires (its next call is refused with the schema
//! attached, which activates it again). Names, not catalog indices, are kept, because the catalog
//! is rebuilt whenever a server's tools change.
//!
//! A turn is one model request. Edges that see no model requests count something else: the
//! gateway counts each `tools/call` of the session (see the README). The state is plain data
//! that serialises (`serde`), small and versioned, so a session store can keep it outside the
//! process.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::reminder::ReminderMark;

/// Version of the serialised layout; another version is not read.
pub const STATE_VERSION: u32 = 1;

/// The surface as rendered when the session started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenSurface {
    /// The wire format it was rendered in (`anthropic`, `openai`, `openai-responses`, `mcp`).
    pub format: String,
    /// The tool list, canonical JSON.
    pub tools: String,
}

/// Where a tool stands in the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// The model holds its schema and used it (or received it) recently enough.
    Active {
        /// Turn of its last use (or of the schema being shown).
        last_used: u64,
    },
    /// The model received its schema, but longer ago than the TTL.
    Expired {
        /// Turn of its last use.
        last_used: u64,
    },
    /// The model never received its schema in this session.
    Inactive,
}

/// One session's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The current turn; 0 before the first.
    turn: u64,
    /// The surface rendered at the start; `None` until then.
    frozen: Option<FrozenSurface>,
    /// How many times a surface was rendered for this session (1 once started, ever).
    renders: u32,
    /// Canonical names of tools whose schema the model received, with the turn of last use.
    active: BTreeMap<String, u64>,
    /// Canonical names of tools called, with the turn of the last call.
    called: BTreeMap<String, u64>,
    /// Visible tool names the model was last told about.
    known: BTreeSet<String>,
    /// Reminder rules' marks, by rule id (rules never fired are absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    reminders: BTreeMap<String, ReminderMark>,
}

impl Default for SessionState {
    fn default() -> Self {
        Self {
            version: STATE_VERSION,
            turn: 0,
            frozen: None,
            renders: 0,
            active: BTreeMap::new(),
            called: BTreeMap::new(),
            known: BTreeSet::new(),
            reminders: BTreeMap::new(),
        }
    }
}

impl SessionState {
    /// Freezes the surface and remembers which tools were visible: done once, when the session
    /// starts. `render` produces the surface; it is called only if nothing is frozen yet, so a
    /// session renders exactly once however many turns it has.
    pub fn freeze(
        &mut self,
        visible: BTreeSet<String>,
        render: impl FnOnce() -> FrozenSurface,
    ) -> &FrozenSurface {
        if self.frozen.is_none() {
            self.renders += 1;
            self.known = visible;
        }
        self.frozen.get_or_insert_with(render)
    }

    /// The frozen surface, once the session started.
    pub fn frozen(&self) -> Option<&FrozenSurface> {
        self.frozen.as_ref()
    }

    /// How many surfaces were rendered for this session.
    pub fn renders(&self) -> u32 {
        self.renders
    }

    /// The current turn (0 before the first).
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// Starts the next turn and returns its number (the first is 1); the last one, `u64::MAX`,
    /// stays the turn.
    pub fn next_turn(&mut self) -> u64 {
        self.turn = self.turn.saturating_add(1);
        self.turn
    }

    /// Marks tools active as of now: their schema was shown to the model.
    pub fn activate<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for n in names {
            self.active.insert(n.to_owned(), self.turn);
        }
    }

    /// Drops `name`'s activation: the tool behind the name changed, and the model must be shown
    /// it again before it is called.
    pub fn deactivate(&mut self, name: &str) {
        self.active.remove(name);
    }

    /// Records a call of `name` now: an active tool's activation is refreshed.
    pub fn record_call(&mut self, name: &str) {
        self.called.insert(name.to_owned(), self.turn);
        if let Some(t) = self.active.get_mut(name) {
            *t = self.turn;
        }
    }

    /// Where `name` stands, with activations expiring after `ttl` turns without use: a tool used
    /// at turn `t` is active through turn `t + ttl` and expired from `t + ttl + 1`.
    pub fn activity(&self, name: &str, ttl: u64) -> Activity {
        match self.active.get(name) {
            None => Activity::Inactive,
            Some(&last_used) if self.turn.saturating_sub(last_used) <= ttl => {
                Activity::Active { last_used }
            }
            Some(&last_used) => Activity::Expired { last_used },
        }
    }

    /// Names of the tools active now (see [`Self::activity`]), sorted.
    pub fn active_names(&self, ttl: u64) -> Vec<String> {
        self.active
            .iter()
            .filter(|(_, t)| self.turn.saturating_sub(**t) <= ttl)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The turn `name` was last called, if it was.
    pub fn last_called(&self, name: &str) -> Option<u64> {
        self.called.get(name).copied()
    }

    /// Adds what another writer of the same session recorded meanwhile (two requests of one
    /// conversation answered at once): its activations and calls, the later turn of each
    /// winning, and its turn if later. The frozen surface, the tools told and the reminder marks
    /// stay this one's.
    pub fn absorb(&mut self, other: &SessionState) {
        self.turn = self.turn.max(other.turn);
        for (mine, theirs) in [
            (&mut self.active, &other.active),
            (&mut self.called, &other.called),
        ] {
            for (name, &t) in theirs {
                let e = mine.entry(name.clone()).or_insert(t);
                *e = (*e).max(t);
            }
        }
    }

    /// Adds the work of a request that could not read this session and went on with a new one
    /// (`unread`, its turns counted from 1, and the calls it counted from earlier requests at
    /// turn 0): its turns are read as the ones after this session's, or, for a request this
    /// session already counted (`again`: the same request once more, a retry), its turn 1 as this
    /// session's last. Its activations, calls and reminder marks are added as [`Self::absorb`]
    /// adds another writer's, the later turn of each winning, and a call refreshes the
    /// activation of its tool here, as [`Self::record_call`] would have on this session. The
    /// frozen surface and the tools told stay this one's.
    pub fn absorb_unread(&mut self, unread: &SessionState, again: bool) {
        let shift = self.turn.saturating_sub(u64::from(again));
        let mut shifted = unread.clone();
        shifted.turn = shifted.turn.saturating_add(shift);
        for t in shifted
            .active
            .values_mut()
            .chain(shifted.called.values_mut())
        {
            *t = t.saturating_add(shift);
        }
        self.absorb(&shifted);
        for (name, &t) in &shifted.called {
            if let Some(used) = self.active.get_mut(name) {
                *used = (*used).max(t);
            }
        }
        for (id, mark) in &unread.reminders {
            let later = |mine: Option<u64>, theirs: Option<u64>| match (mine, theirs) {
                (a, None) => a,
                (None, Some(b)) => Some(b + shift),
                (Some(a), Some(b)) => Some(a.max(b + shift)),
            };
            let mine = self.reminders.entry(id.clone()).or_default();
            mine.last_fired = later(mine.last_fired, mark.last_fired);
            mine.showing_until = later(mine.showing_until, mark.showing_until);
        }
    }

    /// Tools called at or after turn `since`, sorted.
    pub fn called_since(&self, since: u64) -> impl Iterator<Item = &str> {
        self.called
            .iter()
            .filter(move |(_, t)| **t >= since)
            .map(|(n, _)| n.as_str())
    }

    /// The notice for tools that appeared or went away since the model was last told, if any;
    /// remembers `visible` as told. Empty before the list is frozen.
    pub fn change_notice(&mut self, visible: &BTreeSet<String>) -> Option<String> {
        self.change_notice_for(visible, |n| n.to_owned(), NoticeHint::ToolSearch)
    }

    /// [`Self::change_notice`] naming each tool as `shown` gives it (the name the session's list
    /// shows it by) and ending with what `hint` says the session can do about it.
    pub fn change_notice_for(
        &mut self,
        visible: &BTreeSet<String>,
        shown: impl Fn(&str) -> String,
        hint: NoticeHint,
    ) -> Option<String> {
        if self.frozen.is_none() || &self.known == visible {
            return None;
        }
        let known = std::mem::replace(&mut self.known, visible.clone());
        let appeared: Vec<String> = visible.difference(&known).map(|n| shown(n)).collect();
        let gone: Vec<String> = known.difference(visible).map(|n| shown(n)).collect();
        let mut parts = Vec::new();
        if !appeared.is_empty() {
            parts.push(format!("new: {}", list(&appeared)));
        }
        if !gone.is_empty() {
            parts.push(format!("gone: {}", list(&gone)));
        }
        let last = match hint {
            NoticeHint::ToolSearch if appeared.is_empty() => "",
            NoticeHint::ToolSearch => " Use tool_search to load new ones.",
            NoticeHint::FixedList if appeared.is_empty() => {
                " This session's tool list stays as it is, so a tool that is gone may still be in it; calling one is refused."
            }
            NoticeHint::FixedList => {
                " This session's tool list stays as it is, so new tools are not in it: a new session lists them, and a client that lets the model call tools its list lacks can call them by the names shown here."
            }
        };
        Some(format!(
            "[toolshelf: the available tools changed; {}.{last}]",
            parts.join("; ")
        ))
    }

    /// Reminder rule `id`'s mark (default when it never fired).
    pub fn reminder_mark(&self, id: &str) -> ReminderMark {
        self.reminders.get(id).cloned().unwrap_or_default()
    }

    /// Sets rule `id`'s mark; a default mark is dropped, keeping the state small.
    pub fn set_reminder_mark(&mut self, id: &str, mark: ReminderMark) {
        if mark == ReminderMark::default() {
            self.reminders.remove(id);
        } else {
            self.reminders.insert(id.to_owned(), mark);
        }
    }

    /// The state as JSON, for a session store.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a state written by [`Self::to_json`]; another layout version is an error.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("session state: {e}"))?;
        match v.get("version").and_then(serde_json::Value::as_u64) {
            Some(n) if n == u64::from(STATE_VERSION) => {}
            other => {
                return Err(format!(
                    "session state: layout version {other:?}, this build reads {STATE_VERSION}"
                ));
            }
        }
        serde_json::from_value(v).map_err(|e| format!("session state: {e}"))
    }
}

/// The longest input schema a schema notice carries whole; a longer one is pointed at.
pub const SCHEMA_NOTICE_MAX_CHARS: usize = 2_000;

/// The notice for a tool of the session's frozen list whose input schema changed since the list
/// was made: the list keeps the old schema (its bytes cannot change), so the notice carries the
/// new one, or, when that is longer than [`SCHEMA_NOTICE_MAX_CHARS`], says where to read it.
/// `shown` is the name the list shows, `canonical` the name `tool_search` takes.
pub fn schema_notice(
    shown: &str,
    canonical: &str,
    schema: &serde_json::Map<String, serde_json::Value>,
    hint: NoticeHint,
) -> String {
    let text = serde_json::to_string(schema).unwrap_or_default();
    let tail = if text.chars().count() <= SCHEMA_NOTICE_MAX_CHARS {
        format!("Its input schema now: {text}")
    } else {
        match hint {
            NoticeHint::ToolSearch => {
                format!("Call tool_search with {{\"tool_names\": [{canonical:?}]}} to read them.")
            }
            NoticeHint::FixedList => {
                "A call whose params do not fit them is refused with the new schema.".to_owned()
            }
        }
    };
    format!(
        "[toolshelf: the parameters of {shown} changed; this session's tool list still shows the old ones. {tail}]"
    )
}

/// What a session can do about a change of tools, as its notice ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeHint {
    /// Its list has `tool_search`, which loads new tools.
    ToolSearch,
    /// Its list has no meta-tools: only the tools it was given can be called.
    FixedList,
}

/// Up to 20 names, then a count: the notice must stay short.
fn list<S: AsRef<str>>(names: &[S]) -> String {
    const SHOWN: usize = 20;
    let mut s = names
        .iter()
        .take(SHOWN)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored turn at the end of the range (a corrupt or hostile session store) stays there:
    /// no step of a session overflows on it.
    #[test]
    fn the_last_turn_saturates() {
        let mut v: serde_json::Value =
            serde_json::from_str(&SessionState::default().to_json()).expect("json");
        v["turn"] = u64::MAX.into();
        let mut s = SessionState::from_json(&v.to_string()).expect("state");
        assert_eq!(s.next_turn(), u64::MAX);
        s.activate(["a"]);
        assert!(matches!(s.activity("a", 6), Activity::Active { .. }));
        let mut unread = SessionState::default();
        unread.next_turn();
        unread.next_turn();
        unread.record_call("b");
        s.absorb_unread(&unread, false);
        assert_eq!(s.turn(), u64::MAX);
        assert_eq!(s.last_called("b"), Some(u64::MAX));
        let rules = crate::reminder::Reminders::new(
            &[serde_json::from_value(serde_json::json!({
                "id": "r", "category": "c", "message": "m", "intents": ["migration"],
                "ttl_turns": 3,
            }))
            .expect("rule")],
            400,
        )
        .expect("rules");
        let e = rules.evaluate(
            &mut s,
            &crate::reminder::TurnInput {
                user_text: Some("the migration"),
                ..Default::default()
            },
        );
        assert_eq!(e.fired, [0]);
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn frozen() -> FrozenSurface {
        FrozenSurface {
            format: "anthropic".into(),
            tools: "[]".into(),
        }
    }

    #[test]
    fn absorbing_another_writer_keeps_both_activations_and_the_later_turns() {
        let mut base = SessionState::default();
        base.next_turn();
        base.activate(["a"]);
        let (mut x, mut y) = (base.clone(), base.clone());
        x.next_turn();
        x.activate(["b"]);
        x.record_call("a");
        y.next_turn();
        y.next_turn();
        y.activate(["c"]);
        x.absorb(&y);
        assert_eq!(x.turn(), 3);
        assert_eq!(x.active_names(10), ["a", "b", "c"]);
        assert_eq!(x.activity("a", 10), Activity::Active { last_used: 2 });
        assert_eq!(x.activity("c", 10), Activity::Active { last_used: 3 });
        assert_eq!(x.last_called("a"), Some(2));
    }

    /// A request that could not read the session worked on a new one from turn 1: its turns
    /// follow the stored session's, so what it activated in its turn 1 was activated in the
    /// stored session's next turn, and its reminder marks move with it.
    #[test]
    fn absorbing_an_unread_request_reads_its_turns_as_the_next_ones() {
        let mut stored = SessionState::default();
        for _ in 0..4 {
            stored.next_turn();
        }
        stored.activate(["a"]);
        stored.reminders.insert(
            "r".into(),
            ReminderMark {
                last_fired: Some(2),
                showing_until: Some(3),
            },
        );
        let mut unread = SessionState::default();
        unread.next_turn();
        unread.activate(["b"]);
        unread.record_call("b");
        unread.reminders.insert(
            "s".into(),
            ReminderMark {
                last_fired: Some(1),
                showing_until: Some(2),
            },
        );
        stored.absorb_unread(&unread, false);
        assert_eq!(stored.turn(), 5);
        assert_eq!(stored.activity("a", 10), Activity::Active { last_used: 4 });
        assert_eq!(stored.activity("b", 10), Activity::Active { last_used: 5 });
        assert_eq!(stored.last_called("b"), Some(5));
        assert_eq!(
            stored.reminders["r"],
            ReminderMark {
                last_fired: Some(2),
                showing_until: Some(3),
            }
        );
        assert_eq!(
            stored.reminders["s"],
            ReminderMark {
                last_fired: Some(5),
                showing_until: Some(6),
            }
        );
    }

    /// A call the unread request counted (a client's result, recorded at its turn 0 before it
    /// advanced) refreshes the stored activation of its tool, as it would have read stored: it
    /// was used in the stored session's last turn. A retry's turn is that last turn itself.
    #[test]
    fn an_unread_requests_calls_refresh_stored_activations_and_a_retry_is_no_new_turn() {
        let mut stored = SessionState::default();
        for _ in 0..4 {
            stored.next_turn();
        }
        stored.activate(["x"]);
        stored.next_turn();
        let mut read = stored.clone();
        let mut unread = SessionState::default();
        for s in [&mut read, &mut unread] {
            s.record_call("x");
            s.next_turn();
        }
        stored.absorb_unread(&unread, false);
        assert_eq!(stored.turn(), read.turn());
        assert_eq!(stored.activity("x", 3), read.activity("x", 3));
        assert_eq!(stored.activity("x", 3), Activity::Active { last_used: 5 });
        let mut again = read.clone();
        let mut retry = SessionState::default();
        retry.next_turn();
        retry.activate(["y"]);
        again.absorb_unread(&retry, true);
        assert_eq!(again.turn(), read.turn());
        assert_eq!(again.activity("y", 3), Activity::Active { last_used: 6 });
    }

    #[test]
    fn deactivating_a_tool_leaves_the_others() {
        let mut s = SessionState::default();
        s.next_turn();
        s.activate(["a", "b"]);
        s.deactivate("a");
        assert_eq!(s.active_names(5), ["b"]);
    }

    #[test]
    fn notice_names_changes_once() {
        let mut s = SessionState::default();
        assert_eq!(s.change_notice(&set(&["a"])), None, "not frozen yet");
        s.freeze(set(&["a", "b"]), frozen);
        assert_eq!(s.change_notice(&set(&["a", "b"])), None);
        let n = s.change_notice(&set(&["a", "c", "d"])).expect("changed");
        assert_eq!(
            n,
            "[toolshelf: the available tools changed; new: c, d; gone: b. Use tool_search to load new ones.]"
        );
        assert_eq!(s.change_notice(&set(&["a", "c", "d"])), None, "told once");
        assert_eq!(
            s.change_notice(&set(&["a", "c"])).as_deref(),
            Some("[toolshelf: the available tools changed; gone: d.]"),
            "nothing new to load"
        );
    }

    #[test]
    fn a_notice_names_tools_as_the_list_does_and_fits_a_list_without_tool_search() {
        let mut s = SessionState::default();
        s.freeze(set(&["mcp__b__ping", "mcp__b__x"]), frozen);
        let shown = |n: &str| n.strip_prefix("mcp__").unwrap_or(n).to_owned();
        let n = s
            .change_notice_for(&set(&["mcp__b__x"]), shown, NoticeHint::FixedList)
            .expect("changed");
        assert_eq!(
            n,
            "[toolshelf: the available tools changed; gone: b__ping. This session's tool list stays as it is, so a tool that is gone may still be in it; calling one is refused.]"
        );
        let n = s
            .change_notice_for(
                &set(&["mcp__b__x", "mcp__b__y"]),
                shown,
                NoticeHint::FixedList,
            )
            .expect("changed");
        assert!(
            n.contains("new: b__y.")
                && n.contains("a new session lists them")
                && n.contains("can call them by the names shown here"),
            "{n}"
        );
        assert!(!n.contains("Use tool_search"), "{n}");
    }

    #[test]
    fn a_schema_notice_carries_the_new_schema_or_says_where_to_read_it() {
        let small: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"type":"object","properties":{"y":{"type":"integer"}},"required":["y"]}"#,
        )
        .expect("schema");
        assert_eq!(
            schema_notice("a__alpha", "mcp__a__alpha", &small, NoticeHint::ToolSearch),
            r#"[toolshelf: the parameters of a__alpha changed; this session's tool list still shows the old ones. Its input schema now: {"type":"object","properties":{"y":{"type":"integer"}},"required":["y"]}]"#
        );
        let mut big = small.clone();
        big.insert(
            "description".into(),
            "x".repeat(SCHEMA_NOTICE_MAX_CHARS).into(),
        );
        let n = schema_notice("a__alpha", "mcp__a__alpha", &big, NoticeHint::ToolSearch);
        assert!(
            n.ends_with(
                r#"Call tool_search with {"tool_names": ["mcp__a__alpha"]} to read them.]"#
            ),
            "{n}"
        );
        let n = schema_notice("a__alpha", "mcp__a__alpha", &big, NoticeHint::FixedList);
        assert!(
            !n.contains("tool_search") && n.ends_with("refused with the new schema.]"),
            "{n}"
        );
    }

    #[test]
    fn long_lists_are_cut() {
        let names: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(list(&refs).ends_with("t19 and 5 more"));
    }

    #[test]
    fn a_fifty_turn_session_renders_once() {
        let mut s = SessionState::default();
        let mut calls = 0;
        for _ in 0..50 {
            s.next_turn();
            let f = s.freeze(set(&["a"]), || {
                calls += 1;
                frozen()
            });
            assert_eq!(f.tools, "[]");
        }
        assert_eq!((calls, s.renders()), (1, 1));
    }

    #[test]
    fn activations_expire_after_the_ttl_and_use_refreshes_them() {
        let mut s = SessionState::default();
        s.next_turn(); // 1
        s.activate(["x"]);
        assert_eq!(s.activity("y", 6), Activity::Inactive);
        for _ in 2..=7 {
            s.next_turn();
        }
        assert_eq!(s.turn(), 7);
        assert_eq!(
            s.activity("x", 6),
            Activity::Active { last_used: 1 },
            "6 turns unused: still active"
        );
        s.next_turn(); // 8
        assert_eq!(
            s.activity("x", 6),
            Activity::Expired { last_used: 1 },
            "7 turns unused: expired"
        );
        s.activate(["x"]); // the refusal carried the schema
        assert_eq!(s.activity("x", 6), Activity::Active { last_used: 8 });
        for _ in 9..=13 {
            s.next_turn();
        }
        s.record_call("x"); // used at 13
        for _ in 14..=19 {
            s.next_turn();
        }
        assert_eq!(s.activity("x", 6), Activity::Active { last_used: 13 });
        assert_eq!(s.last_called("x"), Some(13));
        assert_eq!(s.called_since(13).collect::<Vec<_>>(), ["x"]);
        assert_eq!(s.called_since(14).count(), 0);
    }

    #[test]
    fn state_round_trips_and_refuses_other_versions() {
        let mut s = SessionState::default();
        s.next_turn();
        s.freeze(set(&["a"]), frozen);
        s.activate(["a"]);
        s.record_call("a");
        let text = s.to_json();
        assert!(text.len() < 300, "small: {text}");
        assert_eq!(SessionState::from_json(&text).expect("reads"), s);
        let other = text.replace("\"version\":1", "\"version\":2");
        assert!(
            SessionState::from_json(&other)
                .expect_err("v2")
                .contains("layout version")
        );
    }
}
