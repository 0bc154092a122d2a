//! System reminders: bring a category of deferred tools back to the model's attention at the
//! moment it matters, without ever carrying a schema.
//!
//! A rule (`[[reminders]]`) names a category ("database migration checks"), a message written as a
//! colleague's suggestion, the queries that find the category's tools, and narrow triggers, any
//! of which fires it: a file path in the latest call's arguments or the user's text that matches
//! one of its globs, an intent (keywords in the user's text, compared as search terms, so
//! "migrations" matches "migration" and 迁移 matches 数据库迁移), or a tool just called. A rule
//! never fires on general chatter, and reminders that fire every turn teach the model to ignore
//! them, so a fired rule waits `cooldown_turns` before it can fire again, stays quiet while a tool
//! of its category was used within `unless_used_turns`, and stays in the injected blocks for
//! `ttl_turns` unless the model searched for its category meanwhile. Evaluation is a pure
//! function of the rules, the session state and the turn: the same transcript gives the same
//! reminders, in rule order.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::{Catalog, Tool};
use crate::config::ReminderConfig;
use crate::pattern::{Pattern, normalize_path, path_matches};
use crate::search::analyze::analyze;
use crate::session::SessionState;

/// What a rule remembers between turns (kept in the session state).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReminderMark {
    /// Turn it last fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fired: Option<u64>,
    /// Last turn its block is shown, unless cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub showing_until: Option<u64>,
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Reminder {
    /// Its configuration.
    pub config: ReminderConfig,
    paths: Vec<String>,
    intents: Vec<(String, Vec<String>)>,
    after_tools: Vec<Pattern>,
    unless_used: Vec<Pattern>,
    /// The category and each search hint, with their search terms: a query holding at least
    /// half of the terms of one of them is a search for the category and clears the reminder.
    category_phrases: Vec<(String, Vec<String>)>,
}

/// Every rule, in configuration order.
#[derive(Debug, Clone, Default)]
pub struct Reminders {
    rules: Vec<Reminder>,
}

/// What happened to one rule in one turn, for `replay --explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    /// The rule.
    pub id: String,
    /// `fired`, `suppressed`, `showing`, `cleared` or `expired`.
    pub event: &'static str,
    /// Why, in words.
    pub why: String,
}

/// A call the model just made, as reminders see it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool called.
    pub tool: &'a Tool,
    /// Its arguments.
    pub params: &'a Map<String, Value>,
}

/// Everything a turn offers the triggers.
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnInput<'a> {
    /// The user's text, when the turn starts with one.
    pub user_text: Option<&'a str>,
    /// The calls the model made in the previous turn (their results are in this request).
    pub calls: &'a [Call<'a>],
    /// Queries the model sent to `tool_search` in those calls.
    pub searches: &'a [String],
}

/// The outcome of one turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// Rules that fired this turn (indices, in rule order).
    pub fired: Vec<usize>,
    /// Rules whose block is shown this turn: fired now or still within their TTL.
    pub showing: Vec<usize>,
    /// Per-rule events, in rule order.
    pub notes: Vec<Note>,
}

fn strong_terms(text: &str) -> Vec<String> {
    let terms = analyze(text);
    let strong: Vec<String> = terms
        .iter()
        .filter(|t| !t.starts_with('~'))
        .cloned()
        .collect();
    let mut out = if strong.is_empty() { terms } else { strong };
    out.sort();
    out.dedup();
    out
}

impl Reminders {
    /// A warning for each `after_tools` or `unless_used` pattern that matches no tool of
    /// `catalog` (by canonical name or alias): most likely a typo, and a rule whose `unless_used`
    /// matches nothing is never kept quiet by a call. `note` adds to a pattern's warning (see
    /// [`crate::Compiled::unmatched_while_down`]).
    pub fn unmatched(&self, catalog: &Catalog, note: &dyn Fn(&Pattern) -> String) -> Vec<String> {
        let tools = catalog.tools();
        let mut out = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            for (key, patterns) in [
                ("after_tools", &r.after_tools),
                ("unless_used", &r.unless_used),
            ] {
                for p in patterns {
                    if !tools.iter().any(|t| names_match(p, t)) {
                        out.push(format!(
                            "[[reminders]] {i} {:?} {key} pattern {:?} matches no tool{}",
                            r.config.id,
                            p.as_str(),
                            note(p)
                        ));
                    }
                }
            }
        }
        out
    }

    /// Compiles `[[reminders]]`; the error names the rule and the key.
    pub fn new(configs: &[ReminderConfig], max_chars: usize) -> Result<Self, String> {
        let mut rules = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (i, c) in configs.iter().enumerate() {
            let at = format!("[[reminders]] {i} {:?}", c.id);
            if c.id.trim().is_empty() {
                return Err(format!("[[reminders]] {i}: id is empty"));
            }
            if !seen.insert(c.id.clone()) {
                return Err(format!("{at}: id used twice"));
            }
            if c.category.trim().is_empty() {
                return Err(format!("{at}: category is empty"));
            }
            let len = c.message.chars().count();
            if c.message.trim().is_empty() {
                return Err(format!("{at}: message is empty"));
            }
            if len > max_chars {
                return Err(format!(
                    "{at}: message is {len} characters, over [session] reminder_max_chars = {max_chars}; a reminder is a short suggestion"
                ));
            }
            let lower = c.message.to_lowercase();
            if ["inputschema", "input_schema", "\"properties\"", "\"type\":"]
                .iter()
                .any(|k| lower.contains(k))
            {
                return Err(format!(
                    "{at}: message looks like a schema; a reminder points at a category and never carries schemas"
                ));
            }
            if c.paths.is_empty() && c.intents.is_empty() && c.after_tools.is_empty() {
                return Err(format!(
                    "{at}: needs a trigger (paths, intents or after_tools); a rule without one would fire on nothing"
                ));
            }
            if c.ttl_turns == 0 {
                return Err(format!("{at}: ttl_turns must be at least 1"));
            }
            let pattern = |key: &str, list: &[String]| -> Result<Vec<Pattern>, String> {
                list.iter()
                    .enumerate()
                    .map(|(k, p)| Pattern::of_tools(p).map_err(|e| format!("{at} {key}[{k}]: {e}")))
                    .collect()
            };
            let mut intents = Vec::new();
            for (k, phrase) in c.intents.iter().enumerate() {
                let terms = strong_terms(phrase);
                if terms.is_empty() {
                    return Err(format!(
                        "{at} intents[{k}] {phrase:?}: has no searchable word (only stop words?)"
                    ));
                }
                intents.push((phrase.clone(), terms));
            }
            for (k, p) in c.paths.iter().enumerate() {
                if p.trim().is_empty() {
                    return Err(format!("{at} paths[{k}]: empty glob"));
                }
            }
            let category_phrases: Vec<(String, Vec<String>)> = std::iter::once(c.category.as_str())
                .chain(c.search_hint.iter().map(String::as_str))
                .map(|p| (p.to_owned(), strong_terms(p)))
                .filter(|(_, terms)| !terms.is_empty())
                .collect();
            rules.push(Reminder {
                paths: c.paths.iter().map(|p| normalize_path(p.trim())).collect(),
                intents,
                after_tools: pattern("after_tools", &c.after_tools)?,
                unless_used: pattern("unless_used", &c.unless_used)?,
                category_phrases,
                config: c.clone(),
            });
        }
        Ok(Self { rules })
    }

    /// The rules, in configuration order.
    pub fn rules(&self) -> &[Reminder] {
        &self.rules
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The text of rule `i`'s block as the model reads it, in a session that has `tool_search`
    /// when `searchable`: one without it (nothing deferred) is not pointed at it, as its tools are
    /// all in its list. Every caller says which, so no session is sent a tool it lacks.
    pub fn block_in(&self, i: usize, searchable: bool) -> String {
        let c = &self.rules[i].config;
        let mut text = format!("<system-reminder>\n{}", c.message.trim());
        if searchable && !c.search_hint.is_empty() {
            let queries = serde_json::to_string(&c.search_hint).unwrap_or_default();
            text.push_str(&format!(
                "\nTo find these tools: tool_search {{\"queries\": {queries}}}"
            ));
        }
        text.push_str("\n</system-reminder>");
        text
    }

    /// Messages that name a parameter of a tool they point at: a reminder suggests a category and
    /// never carries parameters. The tools a rule points at are those matching its `unless_used`
    /// patterns and those `hits(query)` returns for its search hints. One line per problem.
    pub fn check_against(
        &self,
        catalog: &Catalog,
        hits: impl Fn(&str) -> Vec<usize>,
    ) -> Vec<String> {
        let tools = catalog.tools();
        let mut out = Vec::new();
        for r in &self.rules {
            let mut pointed: Vec<usize> = (0..tools.len())
                .filter(|&i| r.unless_used.iter().any(|p| names_match(p, &tools[i])))
                .collect();
            for q in &r.config.search_hint {
                pointed.extend(hits(q));
            }
            pointed.sort_unstable();
            pointed.dedup();
            for i in pointed {
                let t = &tools[i];
                let props = t.input_schema.get("properties").and_then(Value::as_object);
                for name in props.into_iter().flat_map(|p| p.keys()) {
                    if names_parameter(&r.config.message, name) {
                        out.push(format!(
                            "[[reminders]] {:?}: the message names the parameter {name:?} of {}; a reminder suggests a category and never carries parameters",
                            r.config.id, t.name
                        ));
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Evaluates every rule for the session's current turn, updating its marks.
    pub fn evaluate(&self, state: &mut SessionState, input: &TurnInput<'_>) -> Evaluation {
        let turn = state.turn();
        let text_terms: Vec<String> = input.user_text.map(strong_terms).unwrap_or_default();
        let search_terms: Vec<(&str, Vec<String>)> = input
            .searches
            .iter()
            .map(|q| (q.as_str(), strong_terms(q)))
            .collect();
        let mut paths: Vec<String> = Vec::new();
        for c in input.calls {
            for v in c.params.values() {
                paths_in_value(v, &mut paths);
            }
        }
        if let Some(text) = input.user_text {
            paths_in_text(text, &mut paths);
        }
        let mut eval = Evaluation::default();
        for (i, r) in self.rules.iter().enumerate() {
            let id = &r.config.id;
            let note = |event: &'static str, why: String| Note {
                id: id.clone(),
                event,
                why,
            };
            let mut mark = state.reminder_mark(id);
            // A search for the category since the last turn clears a showing reminder: one
            // query holding at least half of the terms of the category or of one search hint (a
            // word shared by chance, "create" of "create a git branch", is no search for it).
            if mark.showing_until.is_some_and(|u| u >= turn)
                && let Some((query, phrase)) = search_terms.iter().find_map(|(q, terms)| {
                    r.category_phrases
                        .iter()
                        .find(|(_, p)| {
                            let held = p.iter().filter(|t| terms.binary_search(t).is_ok());
                            held.count() * 2 >= p.len()
                        })
                        .map(|(phrase, _)| (*q, phrase))
                })
            {
                mark.showing_until = None;
                eval.notes.push(note(
                    "cleared",
                    format!("the model searched for its category ({query:?} for {phrase:?})"),
                ));
            }
            // So does a call of a tool of its category: the model is doing what it suggests.
            if mark.showing_until.is_some_and(|u| u >= turn)
                && let Some(tool) = input.calls.iter().find_map(|c| {
                    r.unless_used
                        .iter()
                        .any(|p| p.matches(&c.tool.name))
                        .then_some(c.tool.name.as_str())
                })
            {
                mark.showing_until = None;
                eval.notes.push(note(
                    "cleared",
                    format!("the model called {tool} of its category"),
                ));
            }
            if let Some(why) = r.trigger(&paths, &text_terms, input.calls) {
                let recent = r.unless_used.iter().find_map(|p| {
                    state
                        .called_since(turn.saturating_sub(r.config.unless_used_turns))
                        .find(|name| p.matches(name))
                        .map(str::to_owned)
                });
                match (mark.last_fired, recent) {
                    (Some(last), _) if turn.saturating_sub(last) < r.config.cooldown_turns => {
                        eval.notes.push(note(
                            "suppressed",
                            format!(
                                "{why}, but it fired at turn {last} and waits {} turns between firings",
                                r.config.cooldown_turns
                            ),
                        ));
                    }
                    (_, Some(tool)) => {
                        eval.notes.push(note(
                            "suppressed",
                            format!(
                                "{why}, but {tool} of its category was called within {} turns",
                                r.config.unless_used_turns
                            ),
                        ));
                    }
                    _ => {
                        mark.last_fired = Some(turn);
                        mark.showing_until = Some(turn.saturating_add(r.config.ttl_turns - 1));
                        eval.fired.push(i);
                        eval.notes.push(note("fired", why));
                    }
                }
            }
            match mark.showing_until {
                Some(until) if until >= turn => {
                    eval.showing.push(i);
                    if !eval.fired.contains(&i) {
                        eval.notes.push(note(
                            "showing",
                            format!(
                                "fired at turn {}, shown until turn {until}",
                                mark.last_fired.unwrap_or(turn)
                            ),
                        ));
                    }
                }
                Some(until) => {
                    mark.showing_until = None;
                    eval.notes
                        .push(note("expired", format!("shown until turn {until}")));
                }
                None => {}
            }
            state.set_reminder_mark(id, mark);
        }
        eval
    }
}

impl Reminder {
    /// Why the rule triggers this turn, if it does: the first matching path, intent or tool.
    fn trigger(
        &self,
        paths: &[String],
        text_terms: &[String],
        calls: &[Call<'_>],
    ) -> Option<String> {
        for glob in &self.paths {
            if let Some(p) = paths.iter().find(|p| path_glob_matches(glob, p)) {
                return Some(format!("path {p:?} matches {glob:?}"));
            }
        }
        for (phrase, terms) in &self.intents {
            if !text_terms.is_empty() && terms.iter().all(|t| text_terms.binary_search(t).is_ok()) {
                return Some(format!("the user's text matches the intent {phrase:?}"));
            }
        }
        for p in &self.after_tools {
            if let Some(c) = calls.iter().find(|c| names_match(p, c.tool)) {
                return Some(format!("{} was just called ({p})", c.tool.name));
            }
        }
        None
    }
}

fn names_match(p: &Pattern, tool: &Tool) -> bool {
    p.matches(&tool.name) || tool.aliases.iter().any(|a| p.matches(a))
}

/// Whether `glob` matches `path`, any trailing part of it, or its file name.
pub fn path_glob_matches(glob: &str, path: &str) -> bool {
    let path = normalize_path(path);
    let segments: Vec<&str> = path.split('/').collect();
    (0..segments.len()).any(|k| path_matches(glob, &segments[k..].join("/")))
}

/// Whether `word` looks like a file path: no spaces, and a `/` or a file extension.
fn looks_like_path(word: &str) -> bool {
    if word.is_empty() || word.len() > 1024 || word.chars().any(char::is_whitespace) {
        return false;
    }
    if word.contains('/') {
        return true;
    }
    match word.rsplit_once('.') {
        Some((stem, ext)) => {
            !stem.is_empty()
                && (1..=8).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

fn paths_in_value(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if looks_like_path(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| paths_in_value(i, out)),
        Value::Object(m) => m.values().for_each(|i| paths_in_value(i, out)),
        _ => {}
    }
}

fn paths_in_text(text: &str, out: &mut Vec<String>) {
    for word in text.split_whitespace() {
        let w = word.trim_matches(|c: char| "\"'`()[]{}<>,;:!?。，".contains(c));
        let w = w.strip_suffix('.').unwrap_or(w);
        if looks_like_path(w) {
            out.push(w.to_owned());
        }
    }
}

/// Whether `message` names the parameter `name`: an identifier-like name (with `_`, a digit or
/// an inner capital) anywhere as a whole word; a plain word only when marked as a name (in
/// backticks or quotes, or followed by `=` or `:`), since plain words are also just words.
fn names_parameter(message: &str, name: &str) -> bool {
    if name.chars().count() < 3 {
        return false;
    }
    let marked = [
        format!("`{name}`"),
        format!("\"{name}\""),
        format!("'{name}'"),
        format!("{name}="),
        format!("{name}:"),
        format!("{name} ="),
    ];
    if marked.iter().any(|m| message.contains(m.as_str())) {
        return true;
    }
    let identifier = name.contains('_')
        || name.chars().any(|c| c.is_ascii_digit())
        || name.chars().skip(1).any(char::is_uppercase);
    identifier
        && message
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(extra: Value) -> ReminderConfig {
        let mut base = json!({
            "id": "migrations",
            "category": "database migration checks",
            "message": "Schema changes usually go with the migration checks; a colleague would run them first.",
            "search_hint": ["migration check", "数据库迁移"],
        });
        for (k, v) in extra.as_object().expect("object") {
            base[k] = v.clone();
        }
        serde_json::from_value(base).expect("reminder config")
    }

    fn catalog() -> Catalog {
        Catalog::from_value(
            &json!({"servers": [
                {"name": "db", "tools": [{"name": "check_migrations", "inputSchema": {"type": "object", "properties": {"dir_path": {"type": "string"}, "strict": {"type": "boolean"}}}}]},
                {"name": "git", "tools": [{"name": "git_commit", "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}]}
            ]}),
            "c",
        )
        .expect("catalog")
    }

    fn run(r: &Reminders, s: &mut SessionState, input: TurnInput<'_>) -> Evaluation {
        s.next_turn();
        r.evaluate(s, &input)
    }

    /// A turn whose only input is the model's searches for `queries`.
    fn searched(r: &Reminders, s: &mut SessionState, queries: &[&str]) -> Evaluation {
        let searches: Vec<String> = queries.iter().map(|q| (*q).to_owned()).collect();
        run(
            r,
            s,
            TurnInput {
                searches: &searches,
                ..TurnInput::default()
            },
        )
    }

    fn user(text: &str) -> TurnInput<'_> {
        TurnInput {
            user_text: Some(text),
            ..TurnInput::default()
        }
    }

    #[test]
    fn bad_rules_are_named() {
        let one = |extra: Value| {
            Reminders::new(&[rule(extra)], 100)
                .map(|_| ())
                .expect_err("bad")
        };
        assert!(one(json!({})).contains("needs a trigger"));
        assert!(
            one(json!({"paths": ["*.sql"], "message": "x".repeat(101)}))
                .contains("reminder_max_chars = 100")
        );
        assert!(
            one(json!({"paths": ["*.sql"], "message": "use {\"type\": \"object\"}"}))
                .contains("looks like a schema")
        );
        assert!(one(json!({"intents": ["the of"]})).contains("no searchable word"));
        assert!(one(json!({"after_tools": [""]})).contains("after_tools[0]"));
        assert!(one(json!({"paths": ["*.sql"], "ttl_turns": 0})).contains("ttl_turns"));
        let twice = Reminders::new(
            &[rule(json!({"paths": ["a"]})), rule(json!({"paths": ["b"]}))],
            400,
        );
        assert!(twice.expect_err("dup").contains("id used twice"));
    }

    #[test]
    fn each_trigger_fires_on_its_own_and_not_on_chatter() {
        let r = Reminders::new(
            &[rule(json!({"paths": ["migrations/**", "*.sql"], "intents": ["migration", "迁移"], "after_tools": ["^mcp__git__git_commit$"]}))],
            400,
        )
        .expect("rules");
        let c = catalog();
        let fires = |input: TurnInput<'_>| {
            let mut s = SessionState::default();
            run(&r, &mut s, input).fired == [0]
        };
        assert!(
            fires(user("please look at db/migrations/002_add_index.rb")),
            "glob on a trailing part"
        );
        assert!(fires(user("open schema.sql")), "glob on the file name");
        assert!(
            fires(user("I need to run the migrations tonight")),
            "stemmed intent"
        );
        assert!(fires(user("帮我做一下数据库迁移")), "Chinese intent");
        assert!(!fires(user("what's the weather like?")), "chatter");
        let commit = &c.tools()[c.position("mcp__git__git_commit").expect("t")];
        let params = Map::new();
        let calls = [Call {
            tool: commit,
            params: &params,
        }];
        assert!(
            fires(TurnInput {
                calls: &calls,
                ..TurnInput::default()
            }),
            "after a tool"
        );
        let args: Map<String, Value> =
            serde_json::from_value(json!({"files": [{"path": "/repo/migrations/001.py"}]}))
                .expect("o");
        let check = &c.tools()[c.position("mcp__db__check_migrations").expect("t")];
        let calls = [Call {
            tool: check,
            params: &args,
        }];
        assert!(
            fires(TurnInput {
                calls: &calls,
                ..TurnInput::default()
            }),
            "path deep in call arguments"
        );
    }

    fn migration_rule(extra: Value) -> Reminders {
        let mut base = json!({"intents": ["migration"], "cooldown_turns": 4, "ttl_turns": 2});
        for (k, v) in extra.as_object().expect("object") {
            base[k] = v.clone();
        }
        Reminders::new(&[rule(base)], 400).expect("rules")
    }

    #[test]
    fn cooldown_holds_a_rule_back_until_the_turn_it_ends() {
        let r = migration_rule(json!({}));
        let mut s = SessionState::default();
        assert_eq!(run(&r, &mut s, user("run the migration")).fired, [0]); // turn 1
        for turn in 2..=4 {
            let e = run(&r, &mut s, user("the migration again"));
            assert!(e.fired.is_empty(), "turn {turn}: within the cooldown");
            assert!(
                e.notes
                    .iter()
                    .any(|n| n.event == "suppressed" && n.why.contains("fired at turn 1"))
            );
        }
        assert_eq!(
            run(&r, &mut s, user("the migration again")).fired,
            [0],
            "turn 5: 4 turns later"
        );
    }

    #[test]
    fn a_fired_reminder_shows_for_its_ttl_and_then_expires() {
        let r = migration_rule(json!({"cooldown_turns": 10}));
        let mut s = SessionState::default();
        assert_eq!(run(&r, &mut s, user("run the migration")).showing, [0]); // turn 1
        let e = run(&r, &mut s, user("ok")); // turn 2: ttl 2 covers turns 1 and 2
        assert_eq!(e.showing, [0]);
        assert_eq!(e.notes[0].event, "showing");
        let e = run(&r, &mut s, user("ok")); // turn 3
        assert!(e.showing.is_empty());
        assert_eq!(
            (e.notes[0].event, e.notes[0].why.as_str()),
            ("expired", "shown until turn 2")
        );
        assert!(
            run(&r, &mut s, user("ok")).notes.is_empty(),
            "turn 4: nothing left to say"
        );
    }

    #[test]
    fn a_search_for_the_category_clears_a_showing_reminder() {
        let r = migration_rule(json!({"ttl_turns": 5}));
        let mut s = SessionState::default();
        run(&r, &mut s, user("run the migration")); // turn 1
        let e = searched(&r, &mut s, &["weather"]); // 2
        assert_eq!(e.showing, [0], "another search does not clear it");
        let e = searched(&r, &mut s, &["database migration"]); // 3
        assert!(e.showing.is_empty());
        assert_eq!(e.notes[0].event, "cleared");
    }

    /// One word a query shares with the category or a hint is not a search for the category: a
    /// query clears the reminder when it holds at least half of the words of the category or of
    /// one hint: one of a two-word category ("read a file" for "note files") does.
    #[test]
    fn a_search_sharing_one_word_with_the_category_leaves_it_showing() {
        let r = Reminders::new(
            &[rule(json!({
                "id": "memory",
                "category": "knowledge-graph memory",
                "search_hint": ["create entities in memory", "在记忆中创建实体"],
                "intents": ["remember"],
                "ttl_turns": 9,
                "cooldown_turns": 9,
            }))],
            400,
        )
        .expect("rules");
        let mut s = SessionState::default();
        assert_eq!(run(&r, &mut s, user("remember this")).fired, [0]); // turn 1
        for query in [
            "create a git branch",
            "read a file into memory",
            "graph of the call tree",
        ] {
            let e = searched(&r, &mut s, &[query]);
            assert_eq!(e.showing, [0], "{query:?}: {:?}", e.notes);
        }
        // Words spread over several queries are no search for the category either.
        let e = searched(&r, &mut s, &["create a branch", "list entities"]);
        assert_eq!(e.showing, [0], "{:?}", e.notes);
        for (query, phrase) in [
            ("memory graph", "knowledge-graph memory"),
            ("create memory entities", "create entities in memory"),
            ("创建实体", "在记忆中创建实体"),
        ] {
            let mut s = SessionState::default();
            run(&r, &mut s, user("remember this"));
            let e = searched(&r, &mut s, &[query]);
            assert!(e.showing.is_empty(), "{query:?}: {:?}", e.notes);
            assert_eq!(e.notes[0].event, "cleared");
            assert!(e.notes[0].why.contains(phrase), "{:?}", e.notes[0].why);
        }
    }

    /// Half the words of a two-word category is a search for it: "read a file" clears a reminder
    /// of "note files" (a client's own search for the file it then reads).
    #[test]
    fn half_the_words_of_a_short_category_clear_it() {
        let r = Reminders::new(
            &[rule(json!({
                "id": "notes",
                "category": "note files",
                "intents": ["marker"],
                "ttl_turns": 9,
            }))],
            400,
        )
        .expect("rules");
        let mut s = SessionState::default();
        assert_eq!(run(&r, &mut s, user("the marker")).fired, [0]);
        let e = searched(&r, &mut s, &["read a file"]);
        assert!(e.showing.is_empty(), "{:?}", e.notes);
        assert_eq!(e.notes[0].event, "cleared");
    }

    #[test]
    fn a_call_of_the_category_clears_a_showing_reminder() {
        let r = migration_rule(json!({"ttl_turns": 5, "unless_used": ["^mcp__db__"]}));
        let c = catalog();
        let mut s = SessionState::default();
        run(&r, &mut s, user("run the migration")); // turn 1
        let params = Map::new();
        let other = [Call {
            tool: &c.tools()[c.position("mcp__git__git_commit").expect("t")],
            params: &params,
        }];
        let e = run(
            &r,
            &mut s,
            TurnInput {
                calls: &other,
                ..TurnInput::default()
            },
        ); // 2
        assert_eq!(
            e.showing,
            [0],
            "a call outside the category does not clear it"
        );
        let check = [Call {
            tool: &c.tools()[c.position("mcp__db__check_migrations").expect("t")],
            params: &params,
        }];
        let e = run(
            &r,
            &mut s,
            TurnInput {
                calls: &check,
                ..TurnInput::default()
            },
        ); // 3
        assert!(e.showing.is_empty(), "{:?}", e.notes);
        assert_eq!(e.notes[0].event, "cleared");
        assert!(e.notes[0].why.contains("mcp__db__check_migrations"));
    }

    #[test]
    fn a_recent_use_of_the_category_suppresses_the_rule() {
        let r = migration_rule(json!({"unless_used": ["^mcp__db__"], "unless_used_turns": 3}));
        let mut s = SessionState::default();
        s.next_turn(); // 1
        s.record_call("mcp__db__check_migrations");
        for turn in 2..=4 {
            let e = run(&r, &mut s, user("migration now"));
            assert!(
                e.fired.is_empty(),
                "turn {turn}: used {} turns ago",
                turn - 1
            );
            assert!(
                e.notes[0].why.contains("mcp__db__check_migrations"),
                "{:?}",
                e.notes
            );
        }
        assert_eq!(
            run(&r, &mut s, user("migration now")).fired,
            [0],
            "turn 5: used 4 turns ago"
        );
    }

    #[test]
    fn the_same_transcript_gives_the_same_reminders_in_rule_order() {
        let rules = Reminders::new(
            &[
                rule(json!({"id": "b", "intents": ["deploy"]})),
                rule(json!({"id": "a", "intents": ["deploy", "migration"]})),
            ],
            400,
        )
        .expect("rules");
        let turns = [
            "deploy the migration",
            "x",
            "deploy",
            "y",
            "z",
            "deploy migration",
        ];
        let mut outcomes = Vec::new();
        for _ in 0..2 {
            let mut s = SessionState::default();
            let mut got = Vec::new();
            for t in turns {
                got.push(run(&rules, &mut s, user(t)));
            }
            outcomes.push(got);
        }
        assert_eq!(outcomes[0], outcomes[1]);
        assert_eq!(outcomes[0][0].fired, [0, 1], "rule order, not id order");
    }

    #[test]
    fn blocks_carry_the_message_and_hints_but_never_parameters() {
        let r = Reminders::new(
            &[rule(
                json!({"paths": ["*.sql"], "unless_used": ["^mcp__db__"]}),
            )],
            400,
        )
        .expect("rules");
        assert_eq!(
            r.block_in(0, true),
            "<system-reminder>\nSchema changes usually go with the migration checks; a colleague would run them first.\nTo find these tools: tool_search {\"queries\": [\"migration check\",\"数据库迁移\"]}\n</system-reminder>"
        );
        // A session without tool_search is not pointed at it.
        assert_eq!(
            r.block_in(0, false),
            "<system-reminder>\nSchema changes usually go with the migration checks; a colleague would run them first.\n</system-reminder>"
        );
        let c = catalog();
        assert!(r.check_against(&c, |_| Vec::new()).is_empty());
        let bad = Reminders::new(
            &[rule(json!({"paths": ["*.sql"], "unless_used": ["^mcp__db__"], "message": "Run the checks with dir_path set to the folder, `strict` on."}))],
            400,
        )
        .expect("rules");
        let problems = bad.check_against(&c, |_| Vec::new());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("\"dir_path\" of mcp__db__check_migrations"),
            "{problems:?}"
        );
        // Plain words count only when marked as names.
        assert!(!names_parameter("keep the message short", "message"));
        assert!(names_parameter("set message: hi", "message"));
    }

    #[test]
    fn tool_patterns_that_match_no_tool_are_warned_about() {
        let c = catalog();
        let r = Reminders::new(
            &[rule(json!({
                "after_tools": ["^mcp__db__check_migrations$", "^mcp__nope__nothing$"],
                "unless_used": ["^mcp__db__", "^mcp__nope2__"]
            }))],
            400,
        )
        .expect("rules");
        assert_eq!(
            r.unmatched(&c, &|_| String::new()),
            [
                "[[reminders]] 0 \"migrations\" after_tools pattern \"^mcp__nope__nothing$\" matches no tool",
                "[[reminders]] 0 \"migrations\" unless_used pattern \"^mcp__nope2__\" matches no tool",
            ]
        );
    }
}
