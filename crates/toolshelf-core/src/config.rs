//! The configuration file (TOML).
//!
//! Only data lives here; [`crate::policy`] gives it meaning. Unknown keys are errors, because a
//! misspelt `index_budget_chars` silently falling back to the default is exactly the kind of bug
//! nobody finds. Every error names the file and the key or rule.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result};
use crate::pattern::Pattern;

/// The whole configuration. Every section is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[defer]`: what is deferred and how the index is budgeted.
    #[serde(default)]
    pub defer: DeferConfig,
    /// `[modes.NAME]`: whitelists selected with `--mode`.
    #[serde(default)]
    pub modes: BTreeMap<String, ModeConfig>,
    /// `[search]`: limits of `tool_search`.
    #[serde(default)]
    pub search: SearchConfig,
}

/// The global default for tools that do not declare `defer_loading`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DeferDefault {
    /// Defer them.
    Always,
    /// Keep them resident.
    Never,
    /// Defer them only when the deferrable definitions exceed this percentage of the window.
    Auto(f64),
}

impl<'de> Deserialize<'de> for DeferDefault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Str(String),
        }
        let bad = || {
            serde::de::Error::custom(
                "expected true, false or \"auto:N\" (N a percentage of the context window, 0 to 100)",
            )
        };
        match Raw::deserialize(d).map_err(|_| bad())? {
            Raw::Bool(true) => Ok(Self::Always),
            Raw::Bool(false) => Ok(Self::Never),
            Raw::Str(s) => {
                let n: f64 = s
                    .strip_prefix("auto:")
                    .and_then(|n| n.trim().parse().ok())
                    .ok_or_else(bad)?;
                if (0.0..=100.0).contains(&n) {
                    Ok(Self::Auto(n))
                } else {
                    Err(bad())
                }
            }
        }
    }
}

impl std::fmt::Display for DeferDefault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Always => f.write_str("true"),
            Self::Never => f.write_str("false"),
            Self::Auto(n) => write!(f, "auto:{n}"),
        }
    }
}

/// `[defer]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeferConfig {
    /// `default`: true, false or "auto:N".
    pub default: DeferDefault,
    /// `rules`: `Defer(PATTERN)` / `NoDefer(PATTERN)`, as written.
    pub rules: Vec<String>,
    /// `window`: context window in tokens, for `auto:N` and the ledger.
    pub window: u64,
    /// `index_budget_chars`: the deferred index's whole block must fit this.
    pub index_budget_chars: usize,
    /// `server_description_chars`: server descriptions in the index are cut past this.
    pub server_description_chars: usize,
}

impl Default for DeferConfig {
    fn default() -> Self {
        Self {
            default: DeferDefault::Always,
            rules: Vec::new(),
            window: 200_000,
            index_budget_chars: 20_000,
            server_description_chars: 160,
        }
    }
}

/// `[modes.NAME]`: a whitelist. Both keys given means both must hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModeConfig {
    /// `tools`: patterns; a tool is in the mode when one matches.
    pub tools: Option<Vec<String>>,
    /// `read_only`: only tools with `readOnlyHint: true` (absent counts as not read-only).
    #[serde(default)]
    pub read_only: bool,
    /// `description`: what the mode is for (shown by `explain`).
    #[serde(default)]
    pub description: String,
}

/// `[search]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    /// `default_limit`: hits returned when the call gives no `limit`.
    pub default_limit: usize,
    /// `max_limit`: cap on `limit` for fuzzy queries.
    pub max_limit: usize,
    /// `response_budget_chars`: the response text never exceeds this.
    pub response_budget_chars: usize,
    /// `full_schemas`: how many top hits carry their full schema.
    pub full_schemas: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            default_limit: 5,
            max_limit: 10,
            response_budget_chars: 16_000,
            full_schemas: 3,
        }
    }
}

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
        let pattern = Pattern::new(inner).map_err(|e| format!("rule {text:?}: {e}"))?;
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

impl Config {
    /// Parses TOML text; `source_name` labels errors.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Self> {
        let config: Self = toml::from_str(text).map_err(|e| Error::Config {
            source_name: source_name.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        // Compile everything once so a bad rule fails at load, not at first use.
        config.rules(source_name)?;
        for name in config.modes.keys() {
            config.mode(name, source_name)?;
        }
        let s = &config.search;
        if s.default_limit == 0 || s.max_limit == 0 || s.default_limit > s.max_limit {
            return Err(Error::Config {
                source_name: source_name.to_owned(),
                message: format!(
                    "[search] needs 1 <= default_limit <= max_limit (got default_limit = {}, max_limit = {})",
                    s.default_limit, s.max_limit
                ),
            });
        }
        if config.defer.window == 0 {
            return Err(Error::Config {
                source_name: source_name.to_owned(),
                message: "[defer] window must be a positive number of tokens".into(),
            });
        }
        Ok(config)
    }

    /// The override rules, compiled, in file order.
    pub fn rules(&self, source_name: &str) -> Result<Vec<Rule>> {
        self.defer
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                Rule::parse(r).map_err(|message| Error::Config {
                    source_name: source_name.to_owned(),
                    message: format!("[defer] rules[{i}]: {message}"),
                })
            })
            .collect()
    }

    /// The mode called `name`, compiled.
    pub fn mode(&self, name: &str, source_name: &str) -> Result<Mode> {
        let m = self.modes.get(name).ok_or_else(|| Error::UnknownMode {
            name: name.to_owned(),
            available: self.modes.keys().cloned().collect(),
        })?;
        let tools = match &m.tools {
            None => None,
            Some(list) => Some(
                list.iter()
                    .enumerate()
                    .map(|(i, p)| {
                        Pattern::new(p).map_err(|e| Error::Config {
                            source_name: source_name.to_owned(),
                            message: format!("[modes.{name}] tools[{i}]: {e}"),
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        if tools.is_none() && !m.read_only {
            return Err(Error::Config {
                source_name: source_name.to_owned(),
                message: format!(
                    "[modes.{name}] must set `tools = [PATTERN, ...]` and/or `read_only = true`"
                ),
            });
        }
        Ok(Mode {
            name: name.to_owned(),
            tools,
            read_only: m.read_only,
            description: m.description.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Config> {
        Config::from_toml_str(t, "test.toml")
    }

    #[test]
    fn defaults_without_a_file() {
        let c = parse("").expect("empty config");
        assert_eq!(c.defer.default, DeferDefault::Always);
        assert_eq!(c.defer.index_budget_chars, 20_000);
        assert_eq!(c.defer.server_description_chars, 160);
        assert_eq!(c.defer.window, 200_000);
        assert_eq!(c.search.default_limit, 5);
        assert_eq!(c.search.max_limit, 10);
    }

    #[test]
    fn default_accepts_bool_and_auto() {
        assert_eq!(
            parse("[defer]\ndefault = false").expect("ok").defer.default,
            DeferDefault::Never
        );
        assert_eq!(
            parse("[defer]\ndefault = \"auto:10\"")
                .expect("ok")
                .defer
                .default,
            DeferDefault::Auto(10.0)
        );
        for bad in ["\"auto\"", "\"auto:x\"", "\"auto:101\"", "3", "\"yes\""] {
            let e = parse(&format!("[defer]\ndefault = {bad}"))
                .expect_err(bad)
                .to_string();
            assert!(e.contains("test.toml") && e.contains("auto:N"), "{e}");
        }
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse("[defer]\nindex_budget = 5")
            .expect_err("typo")
            .to_string();
        assert!(e.contains("index_budget"), "{e}");
    }

    #[test]
    fn bad_rules_are_named_with_their_index() {
        let e = parse("[defer]\nrules = [\"Defer(a)\", \"Hide(b)\"]")
            .expect_err("bad rule")
            .to_string();
        assert!(e.contains("rules[1]") && e.contains("Hide(b)"), "{e}");
        let e = parse("[defer]\nrules = [\"Defer(a\"]")
            .expect_err("unclosed")
            .to_string();
        assert!(e.contains("closing parenthesis"), "{e}");
        let e = parse("[defer]\nrules = [\"NoDefer()\"]")
            .expect_err("empty")
            .to_string();
        assert!(e.contains("empty pattern"), "{e}");
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
    fn modes_need_a_whitelist() {
        let e = parse("[modes.x]\ndescription = \"nothing\"")
            .expect_err("empty mode")
            .to_string();
        assert!(e.contains("[modes.x]"), "{e}");
        let c = parse("[modes.ask]\nread_only = true\n[modes.f]\ntools = [\"^mcp__fs__\"]")
            .expect("ok");
        assert!(c.mode("ask", "t").expect("ask").read_only);
        let e = c.mode("nope", "t").expect_err("unknown").to_string();
        assert!(e.contains("ask, f"), "{e}");
    }

    #[test]
    fn search_limits_are_checked() {
        let e = parse("[search]\ndefault_limit = 20")
            .expect_err("over max")
            .to_string();
        assert!(e.contains("default_limit"), "{e}");
    }
}
