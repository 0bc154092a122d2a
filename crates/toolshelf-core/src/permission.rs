//! Permission rules: may this call of that tool run?
//!
//! Rules are checked against the *target* tool's canonical name (`mcp__git__git_commit`), never
//! against `defer_execute`, so hiding a tool behind the meta-tool changes nothing. Each rule is
//! `PATTERN` or `PATTERN(ARGS)`, with PATTERN as in [`crate::pattern`]. Precedence is by action,
//! not by order: any matching deny beats any matching ask, which beats any matching allow; with
//! no match, `[permissions] default` decides.
//!
//! `ARGS`, the argument glob, looks at the call's params (`*` any run, `?` one character, always
//! matched against the whole value):
//! - `key=GLOB` matches when the top-level param `key` is present and its value matches: a string
//!   as is, anything else as compact JSON (`count=1?` matches 10 to 19);
//! - `GLOB` alone matches when *any* string anywhere in the params matches, which suits deny rules
//!   (`deny = ["^mcp__filesystem__(*/.ssh/*)"]`). For allow rules prefer `key=GLOB`: "some string
//!   matches" is a weak reason to allow.
//!
//! A deny rule without ARGS denies every call, so the tool is hidden like a tool outside the mode
//! ([`Permissions::hide_denied`]): offering the model a tool it may never run only wastes a turn.

use serde_json::{Map, Value};

use crate::catalog::Catalog;
use crate::config::{Action, PermissionsConfig};
use crate::error::{Error, Result};
use crate::pattern::Pattern;
use crate::policy::{Exposure, State};

/// What a rule's argument glob looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgGlob {
    /// `key=GLOB`: one top-level param.
    Field {
        /// The param name.
        key: String,
        /// Whole-value glob.
        glob: Pattern,
    },
    /// `GLOB`: any string value, at any depth.
    Any(Pattern),
}

impl ArgGlob {
    fn parse(text: &str) -> std::result::Result<Self, String> {
        let whole = |g: &str| Pattern::new(&format!("^{g}$"));
        match text.split_once('=') {
            Some((key, glob))
                if !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                Ok(Self::Field {
                    key: key.to_owned(),
                    glob: whole(glob).map_err(|_| format!("empty argument glob after {key}="))?,
                })
            }
            _ => Ok(Self::Any(
                whole(text).map_err(|_| "empty argument glob ()".to_owned())?,
            )),
        }
    }

    /// Whether the call's params match.
    pub fn matches(&self, params: &Map<String, Value>) -> bool {
        match self {
            Self::Field { key, glob } => params.get(key).is_some_and(|v| match v {
                Value::String(s) => glob.matches(s),
                other => glob.matches(&other.to_string()),
            }),
            Self::Any(glob) => params.values().any(|v| any_string(v, glob)),
        }
    }
}

fn any_string(v: &Value, glob: &Pattern) -> bool {
    match v {
        Value::String(s) => glob.matches(s),
        Value::Array(items) => items.iter().any(|i| any_string(i, glob)),
        Value::Object(m) => m.values().any(|i| any_string(i, glob)),
        _ => false,
    }
}

/// One compiled rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRule {
    /// What it does.
    pub action: Action,
    /// The tool-name pattern.
    pub pattern: Pattern,
    /// The argument glob, if any.
    pub args: Option<ArgGlob>,
    /// Where it was written: `deny[2] "PATTERN(ARGS)"`.
    pub label: String,
}

impl PermissionRule {
    /// Parses `PATTERN` or `PATTERN(ARGS)`.
    pub fn parse(action: Action, index: usize, text: &str) -> std::result::Result<Self, String> {
        let label = format!("{action}[{index}] {text:?}");
        let t = text.trim();
        let (pattern, inner) = match t.split_once('(') {
            Some((p, rest)) => {
                let inner = rest
                    .strip_suffix(')')
                    .ok_or_else(|| format!("{label}: missing closing parenthesis"))?;
                (p, Some(inner))
            }
            None => (t, None),
        };
        let pattern = Pattern::new(pattern).map_err(|e| format!("{label}: {e}"))?;
        let args = inner
            .map(ArgGlob::parse)
            .transpose()
            .map_err(|e| format!("{label}: {e}"))?;
        Ok(Self {
            action,
            pattern,
            args,
            label,
        })
    }

    /// Whether the rule applies to this call.
    pub fn matches(&self, tool: &str, params: &Map<String, Value>) -> bool {
        self.pattern.matches(tool) && self.args.as_ref().is_none_or(|a| a.matches(params))
    }
}

/// The verdict on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What to do.
    pub action: Action,
    /// The deciding rule's label; `None` when the default decided.
    pub rule: Option<String>,
}

impl Verdict {
    /// "deny[0] \"^mcp__x__\"" or "the default (deny)", for messages and the audit log.
    pub fn because(&self) -> String {
        match &self.rule {
            Some(r) => format!("[permissions] {r}"),
            None => format!("[permissions] default = \"{}\"", self.action),
        }
    }
}

/// All rules, compiled.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    rules: Vec<PermissionRule>,
    default: Action,
}

impl Permissions {
    /// Compiles `[permissions]`; errors name the file and the rule.
    pub fn new(config: &PermissionsConfig, source_name: &str) -> Result<Self> {
        let mut rules = Vec::new();
        for (action, list) in [
            (Action::Deny, &config.deny),
            (Action::Ask, &config.ask),
            (Action::Allow, &config.allow),
        ] {
            for (i, text) in list.iter().enumerate() {
                rules.push(PermissionRule::parse(action, i, text).map_err(|message| {
                    Error::Config {
                        source_name: source_name.to_owned(),
                        message: format!("[permissions] {message}"),
                    }
                })?);
            }
        }
        Ok(Self {
            rules,
            default: config.default,
        })
    }

    /// The verdict on calling `tool` (canonical name) with `params`: deny beats ask beats allow.
    pub fn check(&self, tool: &str, params: &Map<String, Value>) -> Verdict {
        // Rules are stored deny, ask, allow, so the first match has the strongest action.
        match self.rules.iter().find(|r| r.matches(tool, params)) {
            Some(r) => Verdict {
                action: r.action,
                rule: Some(r.label.clone()),
            },
            None => Verdict {
                action: self.default,
                rule: None,
            },
        }
    }

    /// The deny rule that forbids every call of `tool`, whatever its params.
    pub fn denies_unconditionally(&self, tool: &str) -> Option<&PermissionRule> {
        self.rules
            .iter()
            .find(|r| r.action == Action::Deny && r.args.is_none() && r.pattern.matches(tool))
    }

    /// Hides every visible tool that a deny rule forbids unconditionally, with the rule as the
    /// reason (what `explain` and the audit log show).
    pub fn hide_denied(&self, catalog: &Catalog, exposure: &mut Exposure) {
        for (tool, d) in catalog.tools().iter().zip(exposure.decisions.iter_mut()) {
            if d.state == State::Hidden {
                continue;
            }
            if let Some(r) = self.denies_unconditionally(&tool.name) {
                d.state = State::Hidden;
                d.reason = format!("[permissions] {} denies every call", r.label);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn perms(allow: &[&str], ask: &[&str], deny: &[&str], default: Action) -> Permissions {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        Permissions::new(
            &PermissionsConfig {
                allow: s(allow),
                ask: s(ask),
                deny: s(deny),
                default,
            },
            "t.toml",
        )
        .expect("rules")
    }

    fn params(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("object"),
        }
    }

    #[test]
    fn deny_beats_ask_beats_allow_whatever_the_order() {
        let p = perms(
            &["^mcp__git__"],
            &["commit"],
            &["git_commit$"],
            Action::Allow,
        );
        let empty = Map::new();
        assert_eq!(p.check("mcp__git__git_commit", &empty).action, Action::Deny);
        assert_eq!(p.check("mcp__git__commit_x", &empty).action, Action::Ask);
        assert_eq!(p.check("mcp__git__git_log", &empty).action, Action::Allow);
        let v = p.check("mcp__git__git_commit", &empty);
        assert_eq!(v.because(), "[permissions] deny[0] \"git_commit$\"");
        let d = perms(&[], &[], &[], Action::Deny).check("x", &empty);
        assert_eq!(
            (d.action, d.because().as_str()),
            (Action::Deny, "[permissions] default = \"deny\"")
        );
    }

    #[test]
    fn argument_globs_match_a_field_or_any_string() {
        let p = perms(
            &["^mcp__git__git_commit(message=fix:*)"],
            &[],
            &["^mcp__fs__(*/.ssh/*)", "count(n=1?)"],
            Action::Ask,
        );
        let call = |tool, v| p.check(tool, &params(v)).action;
        assert_eq!(
            call("mcp__git__git_commit", json!({"message": "fix: x"})),
            Action::Allow
        );
        assert_eq!(
            call("mcp__git__git_commit", json!({"message": "feat: x"})),
            Action::Ask
        );
        assert_eq!(
            call("mcp__git__git_commit", json!({"other": "fix: x"})),
            Action::Ask
        );
        assert_eq!(
            call("mcp__fs__read", json!({"paths": ["/a", "/home/u/.ssh/id"]})),
            Action::Deny
        );
        assert_eq!(
            call("mcp__fs__read", json!({"path": {"deep": "/h/.ssh/k"}})),
            Action::Deny
        );
        assert_eq!(
            call("mcp__fs__read", json!({"path": "/h/ssh"})),
            Action::Ask
        );
        assert_eq!(
            call("count", json!({"n": 12})),
            Action::Deny,
            "non-strings as JSON"
        );
        assert_eq!(call("count", json!({"n": 120})), Action::Ask, "whole value");
    }

    #[test]
    fn only_unconditional_denies_hide() {
        let p = perms(&[], &[], &["^mcp__a__(x)", "^mcp__b__"], Action::Allow);
        assert!(p.denies_unconditionally("mcp__a__t").is_none());
        assert!(p.denies_unconditionally("mcp__b__t").is_some());
        let catalog = Catalog::from_value(
            &json!({"servers": [{"name": "a", "tools": [{"name": "t"}]}, {"name": "b", "tools": [{"name": "t"}]}]}),
            "c",
        )
        .expect("catalog");
        let config = crate::Config::default();
        let mut e = crate::Policy::new(&config, "c", None)
            .expect("policy")
            .apply(&catalog);
        p.hide_denied(&catalog, &mut e);
        let states: Vec<State> = e.decisions.iter().map(|d| d.state).collect();
        assert_eq!(states, [State::Deferred, State::Hidden]);
        assert!(
            e.decisions[1].reason.contains("deny[1]"),
            "{}",
            e.decisions[1].reason
        );
    }

    #[test]
    fn bad_rules_are_named() {
        for (rule, expected) in [
            ("x(", "missing closing parenthesis"),
            ("()", "empty pattern"),
            ("x()", "empty argument glob"),
            ("x(k=)", "empty argument glob after k="),
        ] {
            let e = Permissions::new(
                &PermissionsConfig {
                    deny: vec![rule.into()],
                    ..Default::default()
                },
                "t.toml",
            )
            .expect_err(rule)
            .to_string();
            assert!(e.contains("deny[0]") && e.contains(expected), "{e}");
        }
    }
}
