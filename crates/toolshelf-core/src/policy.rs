//! Exposure policy: for every tool, resident, deferred or hidden, and why.
//!
//! The chain, first decisive step wins:
//! 1. the active mode: a tool outside its whitelist is hidden (appears nowhere);
//! 2. a `[permissions] deny` rule without an argument glob forbids every call, so the tool is
//!    hidden too: offering the model a tool it may never run only wastes a turn;
//! 3. model-authored tools are always deferred (a `NoDefer` that matches one is a warning);
//! 4. not-defer beats defer: `defer_loading = false` or any matching `NoDefer` keeps a tool resident;
//! 5. `defer_loading = true` or any matching `Defer` defers it;
//! 6. otherwise the global default: `true`, `false`, or `auto:N`, which defers when the
//!    deferrable definitions (of tools not hidden) exceed N% of the context window.
//!
//! This is the one place exposure is decided: the gateway, `render`, `ledger`, `explain` and
//! `search` all take their [`Exposure`] from here, so they show the same tools.
//!
//! Each decision keeps the facts that led to it, so `explain` can print the chain instead of
//! re-deriving it.

use serde::Serialize;

use crate::catalog::{Catalog, Origin, Tool};
use crate::config::DeferDefault;
use crate::pattern::Pattern;
use crate::permission::Permissions;
use crate::tokens;
use crate::wire::{Format, definition};

/// One override rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// `Defer(PATTERN)`.
    Defer(Pattern),
    /// `NoDefer(PATTERN)`.
    NoDefer(Pattern),
}

impl Rule {
    /// Parses `Defer(PATTERN)` or `NoDefer(PATTERN)`.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let t = text.trim();
        let (kind, rest) = if let Some(rest) = t.strip_prefix("NoDefer(") {
            ("NoDefer", rest)
        } else if let Some(rest) = t.strip_prefix("Defer(") {
            ("Defer", rest)
        } else {
            return Err(format!(
                "rule {text:?} must be Defer(PATTERN) or NoDefer(PATTERN)"
            ));
        };
        let inner = rest
            .strip_suffix(')')
            .ok_or_else(|| format!("rule {text:?} is missing its closing parenthesis"))?;
        let pattern = Pattern::of_tools(inner).map_err(|e| format!("rule {text:?}: {e}"))?;
        Ok(if kind == "Defer" {
            Self::Defer(pattern)
        } else {
            Self::NoDefer(pattern)
        })
    }

    /// The rule's pattern.
    pub fn pattern(&self) -> &Pattern {
        match self {
            Self::Defer(p) | Self::NoDefer(p) => p,
        }
    }

    /// Whether this is a `NoDefer` rule.
    pub fn is_no_defer(&self) -> bool {
        matches!(self, Self::NoDefer(_))
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Defer(p) => write!(f, "Defer({p})"),
            Self::NoDefer(p) => write!(f, "NoDefer({p})"),
        }
    }
}

/// A mode with its patterns compiled.
#[derive(Debug, Clone)]
pub struct Mode {
    /// The mode's name.
    pub name: String,
    /// Compiled `tools` patterns; `None` when the mode does not list tools.
    pub tools: Option<Vec<Pattern>>,
    /// `read_only`.
    pub read_only: bool,
    /// `description`.
    pub description: String,
}

/// Where a tool ends up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Sent with its full schema every turn.
    Resident,
    /// Name in the index, schema on the shelf.
    Deferred,
    /// Outside the active mode: appears nowhere.
    Hidden,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Resident => "resident",
            Self::Deferred => "deferred",
            Self::Hidden => "hidden",
        })
    }
}

/// One tool's decision and the facts behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The outcome.
    pub state: State,
    /// One sentence: the decisive step.
    pub reason: String,
    /// Whether the active mode admits the tool (`None` without a mode).
    pub in_mode: Option<bool>,
    /// Why the mode admits or hides it.
    pub mode_reason: Option<String>,
    /// Rules whose pattern matched, as written, in file order.
    pub matched_rules: Vec<String>,
    /// The `[permissions] deny` rule that forbids every call, when one does.
    pub denied_by: Option<String>,
    /// Whether the global default decided.
    pub by_default: bool,
}

/// The `auto:N` computation, when the default is `auto:N`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoDecision {
    /// N.
    pub percent: f64,
    /// The context window in tokens.
    pub window: u64,
    /// Tokens of the deferrable definitions (visible tools not forced resident).
    pub deferrable_tokens: usize,
    /// `window * percent / 100`.
    pub threshold_tokens: f64,
    /// Whether the default therefore defers.
    pub defers: bool,
}

/// Rules, default and mode, compiled.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    default: DeferDefault,
    window: u64,
    mode: Option<Mode>,
}

/// The tool name to give [`Policy::would_hide`] for a server with no known tools: the empty
/// name, which no tool has, asks for the server to be judged as a whole
/// ([`Policy::hides_server`]), not by a made-up tool.
pub const PROBE_TOOL: &str = "";

/// The policy applied to a catalog: one decision per tool, in catalog order.
#[derive(Debug, Clone)]
pub struct Exposure {
    /// Decisions, parallel to `Catalog::tools()`.
    pub decisions: Vec<Decision>,
    /// The `auto:N` computation, if any.
    pub auto: Option<AutoDecision>,
    /// Policy warnings (e.g. a `NoDefer` matching a model-authored tool).
    pub warnings: Vec<String>,
    /// Canonical names of the servers with no tools (not listed yet, or failed) that the rules
    /// or the mode would hide every tool of, whatever it is called ([`Policy::hides_server`]):
    /// they get no group in the index, so the model does not learn of them.
    pub hidden_servers: std::collections::BTreeSet<String>,
}

impl Exposure {
    /// Indices of tools in `state`, in catalog order.
    pub fn indices(&self, state: State) -> impl Iterator<Item = usize> + '_ {
        self.decisions
            .iter()
            .enumerate()
            .filter(move |(_, d)| d.state == state)
            .map(|(i, _)| i)
    }

    /// Number of tools in `state`.
    pub fn count(&self, state: State) -> usize {
        self.indices(state).count()
    }
}

impl Policy {
    /// A policy from compiled parts; [`crate::compile::Compiled`] builds it from a configuration.
    pub fn new(rules: Vec<Rule>, default: DeferDefault, window: u64, mode: Option<Mode>) -> Self {
        Self {
            rules,
            default,
            window,
            mode,
        }
    }

    /// The active mode.
    pub fn mode(&self) -> Option<&Mode> {
        self.mode.as_ref()
    }

    /// The rules, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The global default.
    pub fn default(&self) -> DeferDefault {
        self.default
    }

    /// Whether the active mode admits `tool`, and why.
    pub fn admits(&self, tool: &Tool) -> Option<(bool, String)> {
        let mode = self.mode.as_ref()?;
        if let Some(patterns) = &mode.tools {
            match patterns.iter().find(|p| p.matches(&tool.name)) {
                Some(p) => {
                    if !mode.read_only {
                        return Some((true, format!("mode {:?} lists it ({p})", mode.name)));
                    }
                }
                None => {
                    return Some((
                        false,
                        format!("mode {:?} lists no pattern matching it", mode.name),
                    ));
                }
            }
        }
        if mode.read_only {
            return Some(match tool.annotations.read_only {
                Some(true) => (
                    true,
                    format!(
                        "mode {:?} is read-only and the tool has readOnlyHint = true",
                        mode.name
                    ),
                ),
                Some(false) => (
                    false,
                    format!(
                        "mode {:?} is read-only and the tool has readOnlyHint = false",
                        mode.name
                    ),
                ),
                None => (
                    false,
                    format!(
                        "mode {:?} is read-only and the tool has no readOnlyHint (fails closed)",
                        mode.name
                    ),
                ),
            });
        }
        Some((true, String::new()))
    }

    /// Decides every tool of `catalog`; `permissions` hide the tools they deny outright.
    pub fn apply(&self, catalog: &Catalog, permissions: &Permissions) -> Exposure {
        let mut warnings = Vec::new();
        let mut decisions: Vec<Decision> = catalog
            .tools()
            .iter()
            .map(|t| self.decide_explicit(t, permissions, &mut warnings))
            .collect();
        let mut auto = None;
        let pending: Vec<usize> = decisions
            .iter()
            .enumerate()
            .filter(|(_, d)| d.by_default)
            .map(|(i, _)| i)
            .collect();
        let default_defers = match self.default {
            DeferDefault::Always => true,
            DeferDefault::Never => false,
            DeferDefault::Auto(percent) => {
                let deferrable_tokens: usize = catalog
                    .tools()
                    .iter()
                    .zip(&decisions)
                    .filter(|(_, d)| {
                        d.state != State::Hidden && (d.by_default || d.state == State::Deferred)
                    })
                    .map(|(t, _)| tokens::count(&definition(t, Format::Anthropic).to_string()))
                    .sum();
                let threshold_tokens = self.window as f64 * percent / 100.0;
                let defers = deferrable_tokens as f64 > threshold_tokens;
                auto = Some(AutoDecision {
                    percent,
                    window: self.window,
                    deferrable_tokens,
                    threshold_tokens,
                    defers,
                });
                defers
            }
        };
        for i in pending {
            let d = &mut decisions[i];
            d.state = if default_defers {
                State::Deferred
            } else {
                State::Resident
            };
            d.reason = match &auto {
                Some(a) => format!(
                    "global default auto:{}: deferrable definitions are {} tokens, {} {:.0} ({}% of {})",
                    a.percent,
                    a.deferrable_tokens,
                    if a.defers { "over" } else { "within" },
                    a.threshold_tokens,
                    a.percent,
                    a.window
                ),
                None => format!("global default {}", self.default),
            };
        }
        Exposure {
            decisions,
            auto,
            warnings,
            hidden_servers: self.hidden_empty_servers(catalog, permissions),
        }
    }

    /// The warning for an active mode that admits none of the catalog's tools (when it has
    /// some): the model is shown none of them, most often for a typo in a pattern. Part of
    /// `Compiled::unmatched`, which a gateway reads once its servers have listed their tools.
    pub(crate) fn admits_nothing(
        &self,
        catalog: &Catalog,
        decisions: &[Decision],
    ) -> Option<String> {
        let mode = self.mode.as_ref()?;
        let tools = catalog.tools();
        if tools.is_empty() || decisions.iter().any(|d| d.in_mode == Some(true)) {
            return None;
        }
        let all = match tools.len() {
            1 => "the catalog's one tool".to_owned(),
            n => format!("all {n} tools of the catalog"),
        };
        let read_only = "read_only = true admits only tools with readOnlyHint = true";
        let why = match &mode.tools {
            Some(patterns) => {
                let listed = patterns
                    .iter()
                    .map(|p| format!("{:?}", p.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ");
                match tools
                    .iter()
                    .filter(|t| patterns.iter().any(|p| p.matches(&t.name)))
                    .count()
                {
                    0 => format!("tools = [{listed}] matches none of them"),
                    1 => format!(
                        "tools = [{listed}] matches 1, and {read_only}, which it does not have"
                    ),
                    k => format!(
                        "tools = [{listed}] matches {k}, and {read_only}, which none of them has"
                    ),
                }
            }
            None => format!("{read_only}, and none has it"),
        };
        Some(format!(
            "[modes.{}] hides {all}, so the model is shown none of them: {why}",
            mode.name
        ))
    }

    /// Whether a tool `tool` of server `server` (original names), with nothing else known of it
    /// (no annotations, no schema), would be hidden: a rule written for the whole server
    /// (`^mcp__db__`), a rule for that tool, or a read-only mode hides it; a rule for another
    /// tool does not. With `tool` [`PROBE_TOOL`] (empty), no tool is named, and the server is
    /// judged as a whole: see [`Self::hides_server`]. This is how a server whose tools are not
    /// known (starting, failed) is judged.
    pub fn would_hide(&self, server: &str, tool: &str, permissions: &Permissions) -> bool {
        if tool == PROBE_TOOL {
            return self.hides_server(&crate::name::server_segment(server), server, permissions);
        }
        let probe = serde_json::json!({"servers": [{"name": server, "tools": [{"name": tool}]}]});
        Catalog::from_value(&probe, "probe").map_or(true, |c| {
            self.decide_explicit(&c.tools()[0], permissions, &mut Vec::new())
                .state
                == State::Hidden
        })
    }

    /// Whether every tool server `original` (canonical segment `segment`) could list would be
    /// hidden, whatever the tool is called, judged without making up a tool:
    /// - a mode that lists tools hides the server when none of its patterns could match a name
    ///   beginning `mcp__<segment>__` (`^mcp__web__` and `^Read$` cannot for `db`;
    ///   `^mcp__db__query$` and `query` can);
    /// - a read-only mode hides it, as it hides a tool with no `readOnlyHint` (fails closed:
    ///   nothing is known of the tools' hints);
    /// - a `[permissions]` deny rule without arguments hides it when it matches every name
    ///   beginning `mcp__<segment>__`, or beginning with the server's name in full or as given
    ///   (`^mcp__db__`, `db`, `^mcp__*__`; not `_tool$` or `^mcp__db__query$`), and
    ///   `default = "deny"` when no allow or ask rule could name a tool of it
    ///   ([`Permissions::forbids_every_call_of_server`]).
    ///
    /// Anything else (a rule that names some tools of the server, or none) leaves the server in
    /// the index: a server is hidden only when no tool of it could be shown.
    pub fn hides_server(&self, segment: &str, original: &str, permissions: &Permissions) -> bool {
        use crate::name::{MCP_PREFIX, server_segment, server_segment_in_full};
        let canonical = format!("{MCP_PREFIX}{segment}__");
        if let Some(mode) = &self.mode {
            if mode.tools.as_ref().is_some_and(|patterns| {
                !patterns
                    .iter()
                    .any(|p| p.matches_some_name_after(&canonical))
            }) {
                return true;
            }
            if mode.read_only {
                return true;
            }
        }
        let others: Vec<String> = [
            server_segment(original),
            server_segment_in_full(original),
            original.to_owned(),
        ]
        .into_iter()
        .filter(|s| s != segment)
        .map(|s| format!("{MCP_PREFIX}{s}__"))
        .collect();
        permissions
            .forbids_every_call_of_server(&canonical, &others)
            .is_some()
    }

    /// The servers of `catalog` with no tools that [`Self::hides_server`].
    fn hidden_empty_servers(
        &self,
        catalog: &Catalog,
        permissions: &Permissions,
    ) -> std::collections::BTreeSet<String> {
        let with_tools: std::collections::BTreeSet<&str> = catalog
            .tools()
            .iter()
            .filter_map(|t| t.server.as_deref())
            .collect();
        catalog
            .servers()
            .iter()
            .filter(|s| !with_tools.contains(s.name.as_str()))
            .filter(|s| self.hides_server(&s.name, &s.original_name, permissions))
            .map(|s| s.name.clone())
            .collect()
    }

    /// Steps 1 to 5; tools left to the default come back with `by_default` set.
    fn decide_explicit(
        &self,
        tool: &Tool,
        permissions: &Permissions,
        warnings: &mut Vec<String>,
    ) -> Decision {
        let matched: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| r.pattern().matches(&tool.name))
            .collect();
        let matched_rules = matched.iter().map(|r| r.to_string()).collect();
        let (in_mode, mode_reason) = match self.admits(tool) {
            Some((ok, why)) => (Some(ok), Some(why)),
            None => (None, None),
        };
        let mut d = Decision {
            state: State::Deferred,
            reason: String::new(),
            in_mode,
            mode_reason: mode_reason.clone(),
            matched_rules,
            denied_by: None,
            by_default: false,
        };
        if in_mode == Some(false) {
            d.state = State::Hidden;
            d.reason = mode_reason.unwrap_or_default();
            return d;
        }
        if let Some(label) = permissions.forbids_every_call(tool) {
            d.state = State::Hidden;
            d.reason = format!("[permissions] {label} denies every call");
            d.denied_by = Some(label);
            return d;
        }
        let no_defer = matched.iter().find(|r| r.is_no_defer());
        if tool.origin == Origin::Model {
            if let Some(r) = no_defer {
                warnings.push(format!(
                    "{r} matches {:?}, a tool written by the model; model-authored tools are always deferred",
                    tool.name
                ));
            }
            d.reason = "written by the model at run time: always deferred".into();
            return d;
        }
        if tool.defer_loading == Some(false) {
            d.state = State::Resident;
            d.reason = "declares defer_loading = false (not-defer beats defer)".into();
        } else if let Some(r) = no_defer {
            d.state = State::Resident;
            d.reason = format!("{r} matches (not-defer beats defer)");
        } else if tool.defer_loading == Some(true) {
            d.reason = "declares defer_loading = true".into();
        } else if let Some(r) = matched.first() {
            d.reason = format!("{r} matches");
        } else {
            d.by_default = true;
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::Compiled;
    use crate::config::Config;
    use serde_json::json;

    fn catalog() -> Catalog {
        Catalog::from_value(
            &json!({
                "builtin": [
                    {"name": "Read", "description": "read a file", "annotations": {"readOnlyHint": true}},
                    {"name": "Bash", "description": "run a command", "defer_loading": false},
                    {"name": "Write", "description": "write", "defer_loading": true},
                    {"name": "my_tool", "description": "model tool", "origin": "model"}
                ],
                "servers": [
                    {"name": "git", "description": "git", "tools": [
                        {"name": "git_log", "description": "log", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
                        {"name": "git_commit", "description": "commit", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": false}}
                    ]},
                    {"name": "time", "tools": [{"name": "now", "description": "now"}]}
                ]
            }),
            "test",
        )
        .expect("catalog")
    }

    fn compiled(config: &str, mode: Option<&str>) -> crate::compile::Result<Compiled> {
        Compiled::new(
            Config::from_toml_str(config, "t.toml").expect("config"),
            "t.toml",
            mode,
        )
    }

    fn expose(config: &str, c: &Catalog) -> Exposure {
        compiled(config, None).expect("compiles").expose(c)
    }

    fn states(config: &str, mode: Option<&str>) -> Vec<(String, State)> {
        let c = catalog();
        let e = compiled(config, mode).expect("compiles").expose(&c);
        c.tools()
            .iter()
            .zip(&e.decisions)
            .map(|(t, d)| (t.name.clone(), d.state))
            .collect()
    }

    fn state_of(config: &str, mode: Option<&str>, name: &str) -> State {
        states(config, mode)
            .into_iter()
            .find(|(n, _)| n == name)
            .expect("tool")
            .1
    }

    #[test]
    fn rules_parse_both_kinds() {
        assert!(matches!(
            Rule::parse("NoDefer(^mcp__x__)"),
            Ok(Rule::NoDefer(_))
        ));
        assert!(matches!(Rule::parse(" Defer(Bash) "), Ok(Rule::Defer(_))));
        assert_eq!(
            Rule::parse("Defer(a*b)").expect("ok").to_string(),
            "Defer(a*b)"
        );
    }

    #[test]
    fn unconditional_deny_hides_before_the_default_is_measured() {
        let config = "[permissions]\ndeny = [\"^mcp__git__\", \"^Read$(path=/x)\"]";
        assert_eq!(state_of(config, None, "mcp__git__git_log"), State::Hidden);
        assert_eq!(state_of(config, None, "mcp__time__now"), State::Deferred);
        assert_eq!(
            state_of(config, None, "Read"),
            State::Deferred,
            "a deny with ARGS does not hide"
        );
        let c = catalog();
        let e = expose(config, &c);
        let d = &e.decisions[c.position("mcp__git__git_log").expect("tool")];
        assert_eq!(d.denied_by.as_deref(), Some("deny[0] \"^mcp__git__\""));
        assert!(d.reason.contains("denies every call"), "{}", d.reason);
        // auto:N measures only what the model could see: denying the tools that tip the balance
        // keeps the rest resident.
        let all = expose("[defer]\ndefault = \"auto:0.1\"", &c)
            .auto
            .expect("auto");
        let some = expose(
            "[defer]\ndefault = \"auto:0.1\"\n[permissions]\ndeny = [\"^mcp__\"]",
            &c,
        )
        .auto
        .expect("auto");
        assert!(
            some.deferrable_tokens < all.deferrable_tokens,
            "{some:?} vs {all:?}"
        );
    }

    #[test]
    fn default_true_defers_undeclared_tools() {
        assert_eq!(state_of("", None, "Read"), State::Deferred);
        assert_eq!(state_of("", None, "mcp__git__git_log"), State::Deferred);
        assert_eq!(
            state_of("", None, "Bash"),
            State::Resident,
            "declared false"
        );
    }

    #[test]
    fn default_false_keeps_undeclared_tools_resident() {
        let c = "[defer]\ndefault = false";
        assert_eq!(state_of(c, None, "Read"), State::Resident);
        assert_eq!(state_of(c, None, "Write"), State::Deferred, "declared true");
        assert_eq!(
            state_of(c, None, "my_tool"),
            State::Deferred,
            "model tools always deferred"
        );
    }

    #[test]
    fn no_defer_beats_defer() {
        let c = "[defer]\ndefault = false\nrules = [\"Defer(^mcp__git__)\", \"NoDefer(commit)\"]";
        assert_eq!(state_of(c, None, "mcp__git__git_log"), State::Deferred);
        assert_eq!(state_of(c, None, "mcp__git__git_commit"), State::Resident);
        // Rule order does not matter.
        let c = "[defer]\ndefault = false\nrules = [\"NoDefer(commit)\", \"Defer(^mcp__git__)\"]";
        assert_eq!(state_of(c, None, "mcp__git__git_commit"), State::Resident);
        // NoDefer beats a declared defer_loading = true; a Defer rule cannot beat declared false.
        assert_eq!(
            state_of("[defer]\nrules = [\"NoDefer(^Write$)\"]", None, "Write"),
            State::Resident
        );
        assert_eq!(
            state_of("[defer]\nrules = [\"Defer(Bash)\"]", None, "Bash"),
            State::Resident
        );
    }

    #[test]
    fn no_defer_on_a_model_tool_warns_and_still_defers() {
        let c = catalog();
        let e = expose("[defer]\nrules = [\"NoDefer(my_tool)\"]", &c);
        let i = c.position("my_tool").expect("tool");
        assert_eq!(e.decisions[i].state, State::Deferred);
        assert_eq!(e.warnings.len(), 1);
        assert!(e.warnings[0].contains("my_tool"), "{:?}", e.warnings);
    }

    #[test]
    fn a_mode_that_hides_every_tool_is_warned_about() {
        let c = catalog();
        let hides = |compiled: &Compiled, catalog: &Catalog| -> Vec<String> {
            compiled
                .unmatched(catalog)
                .into_iter()
                .filter(|w| w.contains(" hides "))
                .collect()
        };
        let warnings =
            |config: &str, mode: &str| hides(&compiled(config, Some(mode)).expect("compiles"), &c);
        assert_eq!(
            warnings("[modes.ask]\ntools = [\"^Raed$\", \"^mcp__gti__\"]", "ask"),
            [
                "[modes.ask] hides all 7 tools of the catalog, so the model is shown none of them: tools = [\"^Raed$\", \"^mcp__gti__\"] matches none of them"
            ]
        );
        assert_eq!(
            warnings(
                "[modes.w]\ntools = [\"^Write$\", \"^Bash$\"]\nread_only = true",
                "w"
            ),
            [
                "[modes.w] hides all 7 tools of the catalog, so the model is shown none of them: tools = [\"^Write$\", \"^Bash$\"] matches 2, and read_only = true admits only tools with readOnlyHint = true, which none of them has"
            ]
        );
        let unhinted = Catalog::from_value(&json!([{"name": "Write"}]), "test").expect("catalog");
        assert_eq!(
            hides(
                &compiled("[modes.ro]\nread_only = true", Some("ro")).expect("compiles"),
                &unhinted
            ),
            [
                "[modes.ro] hides the catalog's one tool, so the model is shown none of them: read_only = true admits only tools with readOnlyHint = true, and none has it"
            ]
        );
        // A mode that admits one tool is silent, as is one over a catalog with no tools.
        assert_eq!(
            warnings("[modes.ask]\ntools = [\"^Raed$\", \"^Read$\"]", "ask"),
            Vec::<String>::new()
        );
        assert_eq!(
            warnings("[modes.ask]\nread_only = true", "ask"),
            Vec::<String>::new()
        );
        let empty = Catalog::from_value(&json!([]), "test").expect("catalog");
        assert_eq!(
            hides(
                &compiled("[modes.ask]\ntools = [\"^Raed$\"]", Some("ask")).expect("compiles"),
                &empty
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn read_only_mode_fails_closed() {
        let c = "[modes.ask]\nread_only = true";
        assert_eq!(state_of(c, Some("ask"), "Read"), State::Deferred);
        assert_eq!(
            state_of(c, Some("ask"), "mcp__git__git_log"),
            State::Deferred
        );
        assert_eq!(
            state_of(c, Some("ask"), "mcp__git__git_commit"),
            State::Hidden,
            "readOnlyHint false"
        );
        assert_eq!(
            state_of(c, Some("ask"), "mcp__time__now"),
            State::Hidden,
            "no hint"
        );
        assert_eq!(
            state_of(c, Some("ask"), "Bash"),
            State::Hidden,
            "hidden beats declared resident"
        );
    }

    #[test]
    fn tools_mode_is_a_whitelist_and_combines_with_read_only() {
        let c = "[modes.g]\ntools = [\"^mcp__git__\"]\n[modes.gr]\ntools = [\"^mcp__git__\"]\nread_only = true";
        let visible: Vec<String> = states(c, Some("g"))
            .into_iter()
            .filter(|(_, s)| *s != State::Hidden)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(visible, ["mcp__git__git_commit", "mcp__git__git_log"]);
        let visible: Vec<String> = states(c, Some("gr"))
            .into_iter()
            .filter(|(_, s)| *s != State::Hidden)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(visible, ["mcp__git__git_log"]);
    }

    #[test]
    fn unknown_mode_is_an_error() {
        let e = compiled("[modes.ask]\nread_only = true", Some("bogus"))
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("bogus") && e.contains("ask"), "{e}");
    }

    /// A server with no tools yet is judged as a whole, not by a made-up tool: it is hidden only
    /// by what would hide every tool it could list, whatever the tool is called.
    #[test]
    fn a_server_without_tools_is_hidden_only_when_no_tool_of_it_could_show() {
        let c = Catalog::from_value(
            &json!({"builtin": [{"name": "Read"}], "servers": [
                {"name": "db", "description": "database", "tools": []},
                {"name": "web", "description": "w", "tools": []},
                {"name": "Big Data", "tools": []}
            ]}),
            "test",
        )
        .expect("catalog");
        let hidden = |config: &str, mode: Option<&str>| -> Vec<String> {
            let e = compiled(config, mode).expect("compiles").expose(&c);
            e.hidden_servers.into_iter().collect()
        };
        let none: Vec<String> = Vec::new();
        let deny = |rules: &str| format!("[permissions]\ndeny = [{rules}]");
        // Rules that name some tools, or none, of a server leave it shown.
        for rules in [
            "\"_tool$\"",
            "\"^mcp__db__query$\"",
            "\"^mcp__db__q\"",
            "\"^mcp__db__(x)\"",
            "\"^mcp__db__*_admin\"",
        ] {
            assert_eq!(hidden(&deny(rules), None), none, "{rules}");
        }
        // Rules that match every name of a server hide it.
        assert_eq!(hidden(&deny("\"^mcp__db__\""), None), ["db"]);
        assert_eq!(hidden(&deny("\"db\""), None), ["db"]);
        assert_eq!(hidden(&deny("\"^mcp__db__?*\""), None), ["db"]);
        assert_eq!(
            hidden(&deny("\"^mcp__*__\""), None),
            ["Big_Data", "db", "web"]
        );
        assert_eq!(
            hidden(&deny("\"^mcp__Big Data__\""), None),
            ["Big_Data"],
            "by the server's name as given"
        );
        // A mode hides a server none of its patterns could match a tool of.
        let mode = |tools: &str| format!("[modes.m]\ntools = [{tools}]");
        assert_eq!(
            hidden(&mode("\"^mcp__db__query$\", \"^mcp__web__\""), Some("m")),
            ["Big_Data"]
        );
        assert_eq!(
            hidden(&mode("\"query\""), Some("m")),
            none,
            "any server may have a query tool"
        );
        assert_eq!(
            hidden(&mode("\"^Read$\""), Some("m")),
            ["Big_Data", "db", "web"]
        );
        // A read-only mode fails closed: nothing is known of the tools' hints.
        assert_eq!(
            hidden("[modes.ask]\nread_only = true", Some("ask")),
            ["Big_Data", "db", "web"]
        );
        // With default = "deny", a server is shown when an allow or ask rule could name a tool.
        assert_eq!(
            hidden(
                "[permissions]\ndefault = \"deny\"\nallow = [\"^mcp__db__query$\", \"^Read$\"]\nask = [\"^mcp__web__*(x=1)\"]",
                None
            ),
            ["Big_Data"]
        );
        // The gateway's judgement of a server whose tools are not known agrees.
        let p = compiled(&deny("\"_tool$\""), None).expect("compiles");
        assert!(!p.policy().would_hide("db", PROBE_TOOL, p.permissions()));
        let p = compiled(&deny("\"^mcp__db__\""), None).expect("compiles");
        assert!(p.policy().would_hide("db", PROBE_TOOL, p.permissions()));
        assert!(!p.policy().would_hide("web", PROBE_TOOL, p.permissions()));
        // Naming a tool still judges that tool.
        let p = compiled(&deny("\"^mcp__db__query$\""), None).expect("compiles");
        assert!(p.policy().would_hide("db", "query", p.permissions()));
        assert!(!p.policy().would_hide("db", "other", p.permissions()));
    }

    #[test]
    fn auto_defers_only_past_the_threshold() {
        // The whole example is a few hundred tokens: 1% of 200k (2000) keeps it resident,
        // 0.01% (20 tokens) defers it.
        assert_eq!(
            state_of("[defer]\ndefault = \"auto:1\"", None, "Read"),
            State::Resident
        );
        assert_eq!(
            state_of("[defer]\ndefault = \"auto:0.01\"", None, "Read"),
            State::Deferred
        );
        let c = catalog();
        let e = expose("[defer]\ndefault = \"auto:0.01\"", &c);
        let a = e.auto.expect("auto computed");
        assert!(a.defers && a.deferrable_tokens > 20, "{a:?}");
        assert_eq!(a.threshold_tokens, 20.0);
    }
}
