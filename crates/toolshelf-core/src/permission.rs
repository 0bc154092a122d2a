//! Permission rules: may this call of that tool run?
//!
//! Rules are checked against the *target* tool, never against `defer_execute`, so hiding a tool
//! behind the meta-tool changes nothing. Each rule is `PATTERN` or `PATTERN(ARGS)`, with PATTERN
//! as in [`crate::pattern`]. Precedence is by action, not by order: any matching deny beats any
//! matching ask, which beats any matching allow; with no match, `[permissions] default` decides.
//!
//! **Which names a rule sees.** Names get rewritten (invalid characters, collisions, the 64
//! character limit), so a rule may be written for a name the tool no longer has. Deny and ask
//! rules fail closed: they apply when PATTERN matches the canonical name *or any alias* (the name
//! the tool would have had, and `mcp__<original server>__<original tool>`; see
//! [`crate::catalog::Tool::aliases`]). Allow rules apply only through the canonical name, which is
//! unique, so a rule that allows one tool can never allow another that merely shares an original
//! name.
//!
//! **Argument globs.** `ARGS` looks at the call's params. Globs are matched against the whole
//! value: `*` any run of characters, `?` one character.
//! - `key=GLOB`: the top-level param `key` is present and its value matches, textually: a string
//!   as is, anything else as compact JSON (`count=1?` matches 10 to 19);
//! - `GLOB`: *any* string anywhere in the params matches, object keys included, which suits deny
//!   rules (`deny = ["^mcp__filesystem__(*/.ssh/*)"]`). For allow rules prefer `key=GLOB`: "some
//!   string matches" is a weak reason to allow.
//! - `file:key=GLOB` and `file:GLOB`: the same, but path-aware. Both the value and the glob are
//!   normalised lexically first (a `file:` URL read as its path, `//` and `/./` folded, `..`
//!   applied), and the glob works on path segments: `*` and `?` never cross a `/`, `**` spans any
//!   number of segments. So `file:path=/etc/**` matches `//etc/passwd` and `/tmp/../etc/passwd`,
//!   which the textual `path=/etc/*` misses. A file URL is read with its scheme in any case, an
//!   empty or `localhost` host, and its escapes decoded before `..` is applied
//!   (`FILE://localhost/tmp/%2e%2e/etc/passwd` is `/etc/passwd`); a value that cannot be read
//!   safely as one local path (a file URL naming another host or holding a query, a fragment or a
//!   malformed escape; a NUL anywhere) fails closed: a deny or ask rule matches it, no allow rule
//!   does. Normalisation is lexical: symbolic links are not resolved (the core does no I/O) and
//!   relative paths stay relative. A param that holds a list of paths
//!   (`paths: ["/a", "/b"]`) is judged path by path, failing closed: a deny or ask rule matches
//!   when any of them matches, an allow rule only when every one is a path that matches. An
//!   object there matches a deny or ask rule when any string in it does, and no allow rule. (A
//!   list's or an object's JSON text is no path, so compared whole it could never match.)
//!
//! A deny rule without ARGS denies every call; [`crate::policy`] then hides the tool.

use serde_json::{Map, Value};

use crate::catalog::Tool;
use crate::config::{Action, PermissionsConfig};
use crate::error::{Error, Result};
use crate::pattern::{
    Pattern, glob_matches, local_path, normalize_lexically, normalize_path, path_matches,
};

/// How an argument glob compares a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobKind {
    /// The value's text as is.
    Text,
    /// The value as a path, normalised, segment by segment.
    Path,
}

/// What a rule's argument glob looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgGlob {
    /// `Some(key)`: one top-level param; `None`: any string, at any depth, keys included.
    pub key: Option<String>,
    /// The glob, as written (normalised for paths).
    pub glob: String,
    /// Textual or path-aware.
    pub kind: GlobKind,
}

impl ArgGlob {
    fn parse(text: &str) -> std::result::Result<Self, String> {
        let (kind, rest) = match text.strip_prefix("file:") {
            Some(rest) => (GlobKind::Path, rest),
            None => (GlobKind::Text, text),
        };
        let (key, glob) = match rest.split_once('=') {
            Some((key, glob))
                if !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                (Some(key.to_owned()), glob)
            }
            _ => (None, rest),
        };
        if glob.is_empty() {
            return Err(match &key {
                Some(k) => format!("empty argument glob after {k}="),
                None => "empty argument glob ()".to_owned(),
            });
        }
        let glob = match kind {
            GlobKind::Text => glob.to_owned(),
            GlobKind::Path => normalize_path(glob),
        };
        Ok(Self { key, glob, kind })
    }

    /// Whether the call's params match, for a rule of `action`: a list of paths under
    /// `file:key=` matches a deny or ask rule when any path does, an allow rule when all do; an
    /// object there matches a deny or ask rule when any string in it does, an allow rule never.
    pub fn matches(&self, params: &Map<String, Value>, action: Action) -> bool {
        match &self.key {
            Some(key) => params.get(key).is_some_and(|v| match v {
                Value::String(s) => self.matches_text(s, action),
                v @ (Value::Array(_) | Value::Object(_)) if self.kind == GlobKind::Path => {
                    match v {
                        Value::Array(items) if action == Action::Allow => {
                            !items.is_empty()
                                && items.iter().all(|i| {
                                    i.as_str().is_some_and(|s| self.matches_text(s, action))
                                })
                        }
                        // An object's paths could be anywhere in it: no allow.
                        _ if action == Action::Allow => false,
                        _ => self.any_string(v, action),
                    }
                }
                other => self.matches_text(&other.to_string(), action),
            }),
            None => params
                .iter()
                .any(|(k, v)| self.matches_text(k, action) || self.any_string(v, action)),
        }
    }

    /// A path glob fails closed on a value that cannot be read safely as one local path (a file
    /// URL of another host, with a query, a bad escape, a NUL): a deny or ask rule matches it,
    /// an allow rule does not.
    fn matches_text(&self, text: &str, action: Action) -> bool {
        match self.kind {
            GlobKind::Text => glob_matches(&self.glob, text),
            GlobKind::Path => match local_path(text) {
                Some(path) => path_matches(&self.glob, &normalize_lexically(&path)),
                None => action != Action::Allow,
            },
        }
    }

    fn any_string(&self, v: &Value, action: Action) -> bool {
        match v {
            Value::String(s) => self.matches_text(s, action),
            Value::Array(items) => items.iter().any(|i| self.any_string(i, action)),
            Value::Object(m) => m
                .iter()
                .any(|(k, i)| self.matches_text(k, action) || self.any_string(i, action)),
            _ => false,
        }
    }
}

/// The alternatives of a rule written as a regex group after a name prefix, like
/// `^mcp__git__git_(reset|checkout)` or `^mcp__git__git(_reset|_checkout)`: the parenthesised
/// text is only word characters separated by `|`. Argument globs with `|` (`Bash(ls | grep *)`)
/// have spaces, `=` or wildcards, so they do not take this shape; a glob that would match only
/// the literal text `a|b` is taken for the regex it looks like.
fn regex_alternation<'a>(_name: &str, inner: &'a str) -> Option<Vec<&'a str>> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let shaped = inner.contains('|') && inner.chars().all(|c| word(c) || c == '|');
    let alternatives: Vec<&str> = inner.split('|').collect();
    (shaped && alternatives.iter().all(|a| !a.is_empty())).then_some(alternatives)
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
                let inner = rest.strip_suffix(')').ok_or_else(|| {
                    // Closing it is the likely fix, unless it is a regex group.
                    let closed = if !rest.contains(')') && regex_alternation(p, rest).is_none() {
                        format!(" (did you mean {:?}?)", format!("{t})"))
                    } else {
                        String::new()
                    };
                    format!(
                        "{label}: the first \"(\" opens the argument glob, which must close the rule with \")\"{closed}; \
a tool-name pattern cannot use regex groups here, nor character classes: it knows only * (any run of \
characters), ? (one character), ^ (the start) and $ (the end), so write one rule per alternative"
                    )
                })?;
                (p, Some(inner))
            }
            None => (t, None),
        };
        if let Some(alternatives) = inner.and_then(|inner| regex_alternation(pattern, inner)) {
            let rules: Vec<String> = alternatives
                .iter()
                .map(|a| format!("{:?}", format!("{pattern}{a}")))
                .collect();
            return Err(format!(
                "{label}: \"({})\" reads as an argument glob, not as regex alternation: tool-name \
patterns are globs anchored with ^ and $ (* any run, ? one character); write one rule per \
alternative ({}) or a glob ({:?})",
                inner.unwrap_or_default(),
                rules.join(", "),
                format!("{pattern}*")
            ));
        }
        let pattern = Pattern::of_tools(pattern).map_err(|e| format!("{label}: {e}"))?;
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

    /// Whether the rule's pattern names `tool`: through any of its names for deny and ask,
    /// through its canonical name only for allow (see the module docs).
    pub fn names(&self, tool: &Tool) -> bool {
        self.pattern.matches(&tool.name)
            || (self.action != Action::Allow
                && tool.aliases.iter().any(|a| self.pattern.matches(a)))
    }

    /// Whether the rule applies to this call.
    pub fn matches(&self, tool: &Tool, params: &Map<String, Value>) -> bool {
        self.names(tool)
            && self
                .args
                .as_ref()
                .is_none_or(|a| a.matches(params, self.action))
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
    /// `deny[0] "^mcp__x__"` or `the default (deny)`, for messages and the audit log.
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

    /// Every rule: deny rules first, then ask, then allow, each in file order.
    pub fn rules(&self) -> &[PermissionRule] {
        &self.rules
    }

    /// The verdict on calling `tool` with `params`: deny beats ask beats allow.
    pub fn check(&self, tool: &Tool, params: &Map<String, Value>) -> Verdict {
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
    pub fn denies_unconditionally(&self, tool: &Tool) -> Option<&PermissionRule> {
        self.rules
            .iter()
            .find(|r| r.action == Action::Deny && r.args.is_none() && r.names(tool))
    }

    /// What forbids every call of `tool`, whatever its params, for messages: a deny rule without
    /// arguments that names it (`deny[0] "^mcp__db__"`), or `default = "deny"` when no allow or
    /// ask rule names it at all.
    pub fn forbids_every_call(&self, tool: &Tool) -> Option<String> {
        if let Some(rule) = self.denies_unconditionally(tool) {
            return Some(rule.label.clone());
        }
        let named = self
            .rules
            .iter()
            .any(|r| r.action != Action::Deny && r.names(tool));
        (self.default == Action::Deny && !named).then(|| "default = \"deny\"".to_owned())
    }

    /// What forbids every call of every tool a server could list, whatever the tool is called:
    /// [`Self::forbids_every_call`] for a server whose tools are not known. `canonical` is the
    /// prefix of the server's canonical names (`mcp__db__`); `others` are the prefixes of the
    /// other names deny and ask rules see (the server's name in full, as given). It is a deny rule
    /// without arguments that matches every name after one of the prefixes (`^mcp__db__`, not
    /// `_tool$` or `^mcp__db__query$`), or `default = "deny"` when no allow rule could match a
    /// canonical name of the server and no ask rule any of its names.
    pub fn forbids_every_call_of_server(
        &self,
        canonical: &str,
        others: &[String],
    ) -> Option<String> {
        let prefixes = || std::iter::once(canonical).chain(others.iter().map(String::as_str));
        if let Some(rule) = self.rules.iter().find(|r| {
            r.action == Action::Deny
                && r.args.is_none()
                && prefixes().any(|p| r.pattern.matches_every_name_after(p))
        }) {
            return Some(rule.label.clone());
        }
        let named = self.rules.iter().any(|r| match r.action {
            Action::Deny => false,
            Action::Allow => r.pattern.matches_some_name_after(canonical),
            Action::Ask => prefixes().any(|p| r.pattern.matches_some_name_after(p)),
        });
        (self.default == Action::Deny && !named).then(|| "default = \"deny\"".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
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

    /// A built-in tool called `name` (canonical names of built-ins are their own).
    fn tool(name: &str) -> Tool {
        Catalog::from_value(&json!([{ "name": name }]), "c")
            .expect("catalog")
            .tools()[0]
            .clone()
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
        let check = |n: &str| p.check(&tool(n), &empty).action;
        assert_eq!(check("mcp__git__git_commit"), Action::Deny);
        assert_eq!(check("mcp__git__commit_x"), Action::Ask);
        assert_eq!(check("mcp__git__git_log"), Action::Allow);
        let v = p.check(&tool("mcp__git__git_commit"), &empty);
        assert_eq!(v.because(), "[permissions] deny[0] \"git_commit$\"");
        let d = perms(&[], &[], &[], Action::Deny).check(&tool("x"), &empty);
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
        let call = |t: &str, v| p.check(&tool(t), &params(v)).action;
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
            call("mcp__fs__read", json!({"files": {"/h/.ssh/k": "read"}})),
            Action::Deny,
            "a bare glob sees object keys"
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

    /// A file URL is read as the path it names, however it is written: the scheme in any case,
    /// an empty or `localhost` host, percent-escapes decoded before `..` is applied. One that
    /// cannot be read safely as a local path (another host, a query or fragment, a bad escape, a
    /// NUL) fails closed: a deny or ask rule matches it, an allow rule does not.
    #[test]
    fn file_urls_are_read_as_their_paths_and_fail_closed() {
        let p = perms(
            &["write(file:path=/tmp/**)"],
            &["write(file:path=/home/**)"],
            &["write(file:path=/etc/**)"],
            Action::Allow,
        );
        let allowing = perms(&["write(file:path=/tmp/**)"], &[], &[], Action::Deny);
        let action = |p: &Permissions, path: &str| {
            p.check(&tool("write"), &params(json!({"path": path})))
                .action
        };
        for path in [
            "file:///etc/passwd",
            "file:///%65tc/passwd",
            "FILE:///etc/passwd",
            "File:/etc/passwd",
            "file://localhost/etc/passwd",
            "file://LOCALHOST/etc/passwd",
            "file:///tmp/%2e%2e/etc/passwd",
            "file:///tmp/%2E%2E%2Fetc/passwd",
            "file:///tmp/..%2fetc/passwd",
        ] {
            assert_eq!(action(&p, path), Action::Deny, "{path}");
            assert_eq!(action(&allowing, path), Action::Deny, "{path}");
        }
        for path in [
            "file:///tmp/x",
            "FILE://localhost/tmp/%78",
            "file:/tmp/a%20b",
        ] {
            assert_eq!(action(&p, path), Action::Allow, "{path}");
            assert_eq!(action(&allowing, path), Action::Allow, "{path}");
        }
        assert_eq!(action(&p, "file:///home/u%2Fx"), Action::Ask);
        for path in [
            "file://server/etc/passwd",
            "file:///etc/passwd?x",
            "file:///tmp/x#y",
            "file:///tmp/%zz",
            "file:///tmp/%",
            "file:///tmp/%ff",
            "file:///tmp/x%00/../../etc/passwd",
            "/tmp/x\u{0}/../../etc/passwd",
            "file:tmp/x",
        ] {
            assert_eq!(action(&p, path), Action::Deny, "{path}: fails closed");
            assert_eq!(action(&allowing, path), Action::Deny, "{path}: no allow");
        }
        // A list of paths: one unreadable item fails it closed too.
        let list = perms(
            &["write(file:paths=/tmp/**)"],
            &[],
            &["write(file:paths=/etc/**)"],
            Action::Allow,
        );
        let paths = |v: Value| {
            list.check(&tool("write"), &params(json!({"paths": v})))
                .action
        };
        assert_eq!(paths(json!(["/tmp/a", "file:///%65tc/x"])), Action::Deny);
        assert_eq!(paths(json!(["/tmp/a", "file://host/tmp/x"])), Action::Deny);
        assert_eq!(paths(json!(["/tmp/a", "file:///tmp/b"])), Action::Allow);
    }

    #[test]
    fn path_globs_normalise_before_matching() {
        let textual = perms(&[], &[], &["read(path=/etc/*)"], Action::Allow);
        let aware = perms(&[], &[], &["read(file:path=/etc/**)"], Action::Allow);
        let anywhere = perms(&[], &[], &["read(file:**/.ssh/*)"], Action::Allow);
        let deny =
            |p: &Permissions, v: Value| p.check(&tool("read"), &params(v)).action == Action::Deny;
        for path in [
            "//etc/passwd",
            "/tmp/../etc/passwd",
            "/./etc/passwd",
            "file:///etc/passwd",
            "/etc/ssl/certs/x",
        ] {
            assert!(deny(&aware, json!({"path": path})), "{path}");
        }
        assert!(
            !deny(&textual, json!({"path": "//etc/passwd"})),
            "textual globs stay textual"
        );
        assert!(!deny(&textual, json!({"path": "/tmp/../etc/passwd"})));
        assert!(deny(&textual, json!({"path": "/etc/passwd"})));
        assert!(!deny(&aware, json!({"path": "/etcetera/x"})));
        assert!(!deny(&aware, json!({"path": "/tmp/etc/passwd"})));
        assert!(
            !deny(&aware, json!({"path": "etc/passwd"})),
            "relative stays relative"
        );
        assert!(deny(
            &anywhere,
            json!({"a": {"b": ["/home/u/x/../.ssh/id"]}})
        ));
        assert!(
            deny(&anywhere, json!({"a": ".ssh/id"})),
            "** spans zero segments"
        );
        assert!(
            !deny(&anywhere, json!({"a": "/home/u/.ssh/keys/id"})),
            "* stays in one segment"
        );
        assert_eq!(normalize_path("/../../x/./y//z/.."), "/x/y");
        assert_eq!(normalize_path("../a/../../b"), "../../b");
        assert_eq!(normalize_path("a/.."), ".");
    }

    #[test]
    fn a_list_of_paths_is_judged_path_by_path_failing_closed() {
        let rules = perms(
            &["read(file:paths=/tmp/**)"],
            &["read(file:paths=/home/**)"],
            &["read(file:paths=**/.ssh/**)"],
            Action::Deny,
        );
        let check = |v: Value| rules.check(&tool("read"), &params(v)).because();
        let deny = "[permissions] deny[0] \"read(file:paths=**/.ssh/**)\"";
        let ask = "[permissions] ask[0] \"read(file:paths=/home/**)\"";
        let allow = "[permissions] allow[0] \"read(file:paths=/tmp/**)\"";
        let default = "[permissions] default = \"deny\"";
        assert_eq!(check(json!({"paths": ["/tmp/a", "/home/u/.ssh/id"]})), deny);
        assert_eq!(
            check(json!({"paths": [["/h/x/../.ssh/k"]]})),
            deny,
            "nested too"
        );
        assert_eq!(
            check(json!({"paths": {"p": "/h/.ssh/k"}})),
            deny,
            "in an object"
        );
        assert_eq!(check(json!({"paths": {"p": "/home/u/a"}})), ask);
        assert_eq!(
            check(json!({"paths": {"p": "/tmp/a"}})),
            default,
            "no allow"
        );
        assert_eq!(check(json!({"paths": ["/etc/x", "/home/u/a"]})), ask);
        assert_eq!(check(json!({"paths": ["/tmp/a", "//tmp/b"]})), allow);
        for not_all in [
            json!({"paths": ["/tmp/a", "/etc/passwd"]}),
            json!({"paths": ["/tmp/a", 1]}),
            json!({"paths": ["/tmp/a", ["/tmp/b"]]}),
            json!({"paths": []}),
        ] {
            assert_eq!(check(not_all.clone()), default, "{not_all}");
        }
    }

    #[test]
    fn deny_and_ask_see_every_name_allow_only_the_canonical_one() {
        // Servers `a` (tool `b__c`) and `a__b` (tool `c`) both have the original name
        // mcp__a__b__c; a deny rule written for it must stop both.
        let c = Catalog::from_value(
            &json!({"servers": [
                {"name": "a", "tools": [{"name": "b__c"}]},
                {"name": "a__b", "tools": [{"name": "c"}]}
            ]}),
            "c",
        )
        .expect("catalog");
        let names: Vec<&str> = c.tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["mcp__a__b__c", "mcp__a_b__c"]);
        let none = Map::new();
        let deny = perms(&[], &[], &["^mcp__a__b__c$"], Action::Allow);
        for t in c.tools() {
            assert_eq!(deny.check(t, &none).action, Action::Deny, "{}", t.name);
            assert!(deny.denies_unconditionally(t).is_some(), "{}", t.name);
        }
        let ask = perms(&[], &["^mcp__a__b__c$"], &[], Action::Allow);
        assert!(
            c.tools()
                .iter()
                .all(|t| ask.check(t, &none).action == Action::Ask)
        );
        let allow = perms(&["^mcp__a__b__c$"], &[], &[], Action::Deny);
        let allowed: Vec<&str> = c
            .tools()
            .iter()
            .filter(|t| allow.check(t, &none).action == Action::Allow)
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(
            allowed,
            ["mcp__a__b__c"],
            "allow matches one tool, by its canonical name"
        );
    }

    #[test]
    fn only_unconditional_denies_hide() {
        let p = perms(&[], &[], &["^mcp__a__(x)", "^mcp__b__"], Action::Allow);
        assert!(p.denies_unconditionally(&tool("mcp__a__t")).is_none());
        assert!(p.denies_unconditionally(&tool("mcp__b__t")).is_some());
    }

    #[test]
    fn argument_globs_with_a_bar_still_parse() {
        let p = perms(
            &[],
            &[],
            &[
                "^mcp__sh__run(ls | grep *)",
                "^mcp__x__(mode=a|b)",
                "^mcp__y__(a|b*)",
            ],
            Action::Allow,
        );
        let run = tool("mcp__sh__run");
        assert_eq!(
            p.check(&run, &params(json!({"cmd": "ls | grep foo"})))
                .action,
            Action::Deny
        );
        assert_eq!(
            p.check(&run, &params(json!({"cmd": "ls"}))).action,
            Action::Allow
        );
        assert_eq!(
            p.check(&tool("mcp__x__t"), &params(json!({"mode": "a|b"})))
                .action,
            Action::Deny
        );
        assert_eq!(
            p.check(&tool("mcp__y__t"), &params(json!({"q": "a|b"})))
                .action,
            Action::Deny
        );
    }

    #[test]
    fn bad_rules_are_named() {
        for (rule, expected) in [
            ("x(", "the first \"(\" opens the argument glob"),
            (
                "^mcp__c__(ping|echo)$",
                "a tool-name pattern cannot use regex groups here",
            ),
            ("()", "empty pattern"),
            ("x()", "empty argument glob"),
            ("x(k=)", "empty argument glob after k="),
            ("x(file:k=)", "empty argument glob after k="),
            (
                "^mcp__git__git_(reset|checkout)",
                "not as regex alternation: tool-name patterns are globs anchored with ^ and $",
            ),
            (
                "^mcp__git__git_(reset|checkout)",
                "(\"^mcp__git__git_reset\", \"^mcp__git__git_checkout\") or a glob (\"^mcp__git__git_*\")",
            ),
            (
                "^mcp__git__git(_reset|_checkout)",
                "(\"^mcp__git__git_reset\", \"^mcp__git__git_checkout\")",
            ),
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

    /// The advice on a rule that does not parse names only what patterns have: no character
    /// class, which they do not support.
    #[test]
    fn advice_on_a_bad_rule_names_only_what_patterns_support() {
        let refused = |rule: &str| {
            Permissions::new(
                &PermissionsConfig {
                    deny: vec![rule.into()],
                    ..Default::default()
                },
                "t.toml",
            )
            .expect_err(rule)
            .to_string()
        };
        let e = refused("Bash(rm -rf *");
        assert!(
            !e.contains("or a character class")
                && e.contains("did you mean \"Bash(rm -rf *)\"?")
                && e.contains(
                    "nor character classes: it knows only * (any run of characters), ? (one character), ^ (the start) and $ (the end)"
                ),
            "{e}"
        );
        // Closing a regex group would not help, so it is not offered.
        let e = refused("^mcp__git__git_(reset|checkout");
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn server_wide_judgement_sees_every_name_a_rule_sees() {
        let prefix = "mcp__db__";
        let others = ["mcp__Data Base__".to_owned()];
        let p = perms(&[], &[], &["^mcp__Data Base__"], Action::Allow);
        assert_eq!(
            p.forbids_every_call_of_server(prefix, &others).as_deref(),
            Some("deny[0] \"^mcp__Data Base__\"")
        );
        // Allow rules see canonical names only; ask rules every name.
        let p = perms(&["^mcp__Data Base__x$"], &[], &[], Action::Deny);
        assert_eq!(
            p.forbids_every_call_of_server(prefix, &others).as_deref(),
            Some("default = \"deny\"")
        );
        let p = perms(&[], &["^mcp__Data Base__x$"], &[], Action::Deny);
        assert_eq!(p.forbids_every_call_of_server(prefix, &others), None);
        let p = perms(&[], &[], &["^mcp__db__x"], Action::Allow);
        assert_eq!(p.forbids_every_call_of_server(prefix, &others), None);
    }
}
