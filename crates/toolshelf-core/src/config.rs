//! The configuration file (TOML).
//!
//! Only plain data lives here: parsing checks the shape (unknown keys are errors, because a
//! misspelt `index_budget_chars` silently falling back to the default is exactly the kind of bug
//! nobody finds). What the values mean, and whether they make sense together, is decided once in
//! [`crate::compile`], which turns a `Config` into the compiled rules every surface uses.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result};

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
    /// `[servers.NAME]`: the MCP servers the gateway fronts.
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
    /// `[execute]`: how `defer_execute` runs calls.
    #[serde(default)]
    pub execute: ExecuteConfig,
    /// `[permissions]`: allow / ask / deny rules on target tools.
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// `[hooks]`: commands run on gateway events.
    #[serde(default)]
    pub hooks: HooksConfig,
    /// `[audit]`: the JSON-lines audit log.
    #[serde(default)]
    pub audit: AuditConfig,
    /// `[cache]`: the on-disk catalog cache.
    #[serde(default)]
    pub cache: CacheConfig,
    /// `[session]`: activation expiry and reminder limits.
    #[serde(default)]
    pub session: SessionConfig,
    /// `[gateway]`: how the gateway presents its tools to MCP clients.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// `[[reminders]]`: system reminders that bring a category of deferred tools back to the
    /// model's attention when their trigger fires.
    #[serde(default)]
    pub reminders: Vec<ReminderConfig>,
    /// `[http]`: the streamable HTTP listener of `serve --http`.
    #[serde(default)]
    pub http: HttpConfig,
    /// `[proxy]`: the LLM-API proxy of `toolshelf proxy`.
    #[serde(default)]
    pub proxy: ProxyConfig,
    /// `[ui]`: the dashboard served at `/ui` on the proxy's listener.
    #[serde(default)]
    pub ui: UiConfig,
    /// `[store]`: where the proxy keeps sessions (embedded, or Redis shared by replicas).
    #[serde(default)]
    pub store: StoreConfig,
    /// `[tools.NAME]`: per-tool settings (a description template).
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
    /// `[template]`: the values description templates read.
    #[serde(default)]
    pub template: TemplateConfig,
    /// `[scripts]`: how script tools (`[tools.NAME] script`) run.
    #[serde(default)]
    pub scripts: ScriptsConfig,
    /// `[authoring]`: whether and how much the model may define tools of its own.
    #[serde(default)]
    pub authoring: AuthoringConfig,
    /// The directory of the file the configuration was read from, which relative paths in it
    /// are relative to; `None` for one of no file (the bundled example). Set by the reader of
    /// the file, never by the file.
    #[serde(skip)]
    pub dir: Option<std::path::PathBuf>,
    /// The line of each key of the file's tables, by table (dotted) and key: where an error
    /// found once the file is read (a value out of range) points. Set by
    /// [`Config::from_toml_str`], never by the file.
    #[serde(skip)]
    key_lines: BTreeMap<(String, String), usize>,
}

/// The sections of [`Config`] that are one table each (`[defer]`); `modes`, `servers` and
/// `tools` hold one table per name (`[modes.NAME]`).
const TABLES: &[&str] = &[
    "defer",
    "modes",
    "search",
    "servers",
    "execute",
    "permissions",
    "hooks",
    "audit",
    "cache",
    "session",
    "gateway",
    "http",
    "proxy",
    "ui",
    "store",
    "tools",
    "template",
    "scripts",
    "authoring",
];

/// The sections of [`Config`] that hold one table per name.
const NAMED_TABLES: &[&str] = &["modes", "servers", "tools"];

/// The sections of [`Config`] that are arrays of tables (`[[reminders]]`).
const ARRAYS_OF_TABLES: &[&str] = &["reminders"];

/// A section written with the other kind of header: `[[defer]]` (an array of tables) for the
/// table `[defer]`, `[[modes.NAME]]` for `[modes.NAME]`, or `[reminders]` for the array of tables
/// `[[reminders]]`. The message names the line of its header (or its key) and says how to write
/// it. `None` when the text is no TOML at all or has no such section.
fn section_shape(text: &str) -> Option<String> {
    let doc: toml::Table = toml::from_str(text).ok()?;
    let (path, table) = doc.iter().find_map(|(key, value)| {
        let key = key.as_str();
        match value {
            toml::Value::Array(_) if TABLES.contains(&key) => Some((vec![key], true)),
            toml::Value::Table(_) if ARRAYS_OF_TABLES.contains(&key) => Some((vec![key], false)),
            toml::Value::Table(named) if NAMED_TABLES.contains(&key) => named
                .iter()
                .find(|(_, v)| v.is_array())
                .map(|(name, _)| (vec![key, name.as_str()], true)),
            _ => None,
        }
    })?;
    let dotted = path.join(".");
    let (written, meant) = if table {
        (format!("[[{dotted}]]"), format!("[{dotted}]"))
    } else {
        (format!("[{dotted}]"), format!("[[{dotted}]]"))
    };
    let line = header_line(text, &path)
        .map(|n| format!("line {n}: "))
        .unwrap_or_default();
    Some(if table {
        format!(
            "{line}{written} makes {dotted:?} an array of tables, but {meant} is one table: write {meant}, with one pair of brackets"
        )
    } else {
        format!(
            "{line}{written} makes {dotted:?} one table, but {meant} is an array of tables, one for each {}: write {meant}, with two pairs of brackets",
            dotted.trim_end_matches('s')
        )
    })
}

/// The line (from 1) of each key of `text`'s tables (not arrays of tables), by the table's
/// dotted path (`modes.ask`) and the key; empty for text that does not parse.
fn key_lines(text: &str) -> BTreeMap<(String, String), usize> {
    fn walk(
        text: &str,
        path: &str,
        table: &toml::de::DeTable<'_>,
        out: &mut BTreeMap<(String, String), usize>,
    ) {
        for (key, value) in table {
            let start = key.span().start.min(text.len());
            let line = text[..start].matches('\n').count() + 1;
            out.insert((path.to_owned(), key.get_ref().to_string()), line);
            let path = match path {
                "" => key.get_ref().to_string(),
                _ => format!("{path}.{}", key.get_ref()),
            };
            match value.get_ref() {
                toml::de::DeValue::Table(inner) => walk(text, &path, inner, out),
                // An array of tables' elements, by `path[i]`: the line of each element's
                // header under the key "", and its keys under their own.
                toml::de::DeValue::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let toml::de::DeValue::Table(inner) = item.get_ref() {
                            let start = item.span().start.min(text.len());
                            let element = format!("{path}[{i}]");
                            let line = text[..start].matches('\n').count() + 1;
                            out.insert((element.clone(), String::new()), line);
                            walk(text, &element, inner, out);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = BTreeMap::new();
    if let Ok(doc) = toml::de::DeTable::parse(text) {
        walk(text, "", doc.get_ref(), &mut out);
    }
    out
}

/// The line (from 1) of the first header (`[path]` or `[[path]]`) or `key =` line that gives
/// `path`, its keys compared without their quotes and spaces.
fn header_line(text: &str, path: &[&str]) -> Option<usize> {
    let keys = |dotted: &str| -> Vec<String> {
        dotted
            .split('.')
            .map(|k| k.trim().trim_matches(['"', '\'']).to_owned())
            .collect()
    };
    text.lines()
        .position(|l| {
            let l = l.trim();
            let header = l
                .strip_prefix('[')
                .and_then(|h| h.split_once(']'))
                .map(|(h, _)| h.trim_start_matches('['));
            match header {
                Some(h) => keys(h) == path,
                None => l
                    .split_once('=')
                    .is_some_and(|(k, _)| path.len() == 1 && keys(k) == path),
            }
        })
        .map(|i| i + 1)
}

/// `[ui]`, read by the dashboard.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UiConfig {
    /// `enabled`: serve `/ui`.
    pub enabled: bool,
    /// `token`: the bearer token the dashboard (and `/metrics`, and the proxy's status) requires,
    /// on any listener; without one the dashboard is served on a loopback listener only.
    pub token: Option<String>,
    /// `show_arguments`: show the queries the model searched for (tool arguments) in session
    /// timelines.
    pub show_arguments: bool,
}

impl Default for UiConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token: None,
            show_arguments: false,
        }
    }
}

/// Why the dashboard is not served on a listener, whatever a request carries
/// ([`UiConfig::unserved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unserved {
    /// `[ui] enabled = false`.
    Off,
    /// The listener is not on loopback, and no `[ui] token` is set.
    NoToken,
}

impl UiConfig {
    /// The token requests must carry, when one is set.
    pub fn required_token(&self) -> Option<&str> {
        self.token.as_deref().filter(|t| !t.is_empty())
    }

    /// Why the dashboard is not served on a listener (on loopback or not); `None` when it is, to
    /// requests that carry the token when one is set.
    pub fn unserved(&self, loopback: bool) -> Option<Unserved> {
        if !self.enabled {
            Some(Unserved::Off)
        } else if self.required_token().is_none() && !loopback {
            Some(Unserved::NoToken)
        } else {
            None
        }
    }
}

/// `[authoring]`: model-authored tools (`tool_define`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthoringConfig {
    /// `enabled`: offer the deferred tool `tool_define`.
    pub enabled: bool,
    /// `max_tools`: tools one session may define.
    pub max_tools: usize,
    /// `max_description_chars`: the longest description of a defined tool.
    pub max_description_chars: usize,
    /// `max_script_bytes`: the largest script of a defined tool.
    pub max_script_bytes: usize,
    /// `keep_dir`: where each defined tool is written as a script-tool file, for the operator
    /// to read and promote (`[tools.NAME] script = FILE`); default `CACHE/authored`. `""` keeps
    /// nothing.
    pub keep_dir: Option<String>,
    /// `allow_hosts`: hosts a defined tool's `http` may reach (its own list: `[scripts]
    /// allow_hosts`, written for vetted script tools, does not extend to the model's code).
    pub allow_hosts: Vec<String>,
}

impl Default for AuthoringConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_tools: 8,
            max_description_chars: 1024,
            max_script_bytes: 16 * 1024,
            keep_dir: None,
            allow_hosts: Vec::new(),
        }
    }
}

/// The server group script tools are served in: `mcp__scripts__NAME`.
pub const SCRIPTS_SERVER: &str = "scripts";

/// How the description of a script tool whose script could not be defined begins; the reason
/// follows. Such a tool is still listed, and every call of it fails with that reason
/// ([`crate::catalog::Tool::unavailable_script`]).
pub const SCRIPT_UNAVAILABLE: &str = "This script tool is unavailable: ";

/// The description of the script tools' server group, its header in the index, wherever they are
/// served (the gateway and the proxy alike).
pub const SCRIPTS_DESCRIPTION: &str = "Tools defined by Starlark scripts of this configuration.";

/// The least `[scripts] max_memory_mb`: a runner is the toolshelf binary itself (about 90 MB of
/// it mapped, in a release build), with its threads and allocator, and a release build needs
/// about 100 MiB of address space before a script runs at all (below that it dies at start with
/// no message); this leaves room for a script's own heap.
pub const MIN_MEMORY_MB: u64 = 256;

/// `[scripts]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScriptsConfig {
    /// `allow_hosts`: hosts a script's `http` may reach, `host` (any port) or `host:port`;
    /// anything else is refused before a connection is made.
    pub allow_hosts: Vec<String>,
    /// `max_steps`: function calls and loop iterations one run may take.
    pub max_steps: u64,
    /// `max_heap_mb`: Starlark heap one run may use.
    pub max_heap_mb: u64,
    /// `max_memory_mb`: address space of the process a run happens in; at least
    /// [`MIN_MEMORY_MB`].
    pub max_memory_mb: u64,
    /// `max_call_depth`: nested calls (recursion included).
    pub max_call_depth: usize,
    /// `timeout_secs`: wall-clock time one run may take, HTTP included.
    pub timeout_secs: u64,
    /// `max_result_bytes`: the largest result one run may return (as JSON); a larger one is an
    /// error, since the proxy sends a hidden round's results again on every later request. An
    /// error's text is cut to this size.
    pub max_result_bytes: usize,
    /// `max_concurrent`: runner processes one process (the proxy, the gateway's scripts server,
    /// the gateway for model-written tools) runs at once; a call beyond them waits for one to
    /// finish, within its `timeout_secs`.
    pub max_concurrent: usize,
}

impl Default for ScriptsConfig {
    fn default() -> Self {
        Self {
            allow_hosts: Vec::new(),
            max_steps: 10_000_000,
            max_heap_mb: 64,
            max_memory_mb: 1024,
            max_call_depth: 200,
            timeout_secs: 30,
            max_result_bytes: 256 * 1024,
            max_concurrent: 4,
        }
    }
}

/// `[tools.NAME]`: settings of the catalog tool NAME (its canonical name, or another name that
/// resolves to it alone). A section that sets neither key is refused where it is written, as an
/// empty mode is: it would do nothing, and is most likely a key misplaced or forgotten.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(try_from = "ToolSection")]
pub struct ToolConfig {
    /// A description template (Starlark, see [`crate::template`]) rendered once per session in
    /// place of the tool's description.
    pub description_template: Option<String>,
    /// `script`: a Starlark file (relative to the configuration's directory) that defines a tool
    /// NAME of its own, served as `mcp__scripts__NAME`: its `description` (rendered like a
    /// description template), its `schema` and `def run(params)`.
    pub script: Option<String>,
}

/// `[tools.NAME]` as written, before [`ToolConfig`] refuses one that sets nothing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolSection {
    description_template: Option<String>,
    script: Option<String>,
}

impl TryFrom<ToolSection> for ToolConfig {
    type Error = String;

    fn try_from(s: ToolSection) -> std::result::Result<Self, String> {
        if s.description_template.is_none() && s.script.is_none() {
            return Err(
                "this [tools.NAME] section sets neither `script` (a script tool of that name) nor `description_template` (the description of the catalog tool of that name): give one, or leave the section out"
                    .into(),
            );
        }
        Ok(Self {
            description_template: s.description_template,
            script: s.script,
        })
    }
}

/// `[template]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateConfig {
    /// `workspace`: `session.workspace` (default: the directory the edge runs in).
    pub workspace: Option<String>,
    /// `[template.vars]`: package values every template reads as `pkg.NAME`, as JSON (see
    /// `toml_to_json`).
    #[serde(default, deserialize_with = "template_vars")]
    pub vars: BTreeMap<String, serde_json::Value>,
}

fn template_vars<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<BTreeMap<String, serde_json::Value>, D::Error> {
    json_table(d, "[template.vars]")
}

/// A TOML table whose values are kept as JSON; `section` heads the key path an error names.
fn json_table<'de, D: Deserializer<'de>>(
    d: D,
    section: &str,
) -> std::result::Result<BTreeMap<String, serde_json::Value>, D::Error> {
    struct Table<'a>(&'a str);
    impl<'de> serde::de::Visitor<'de> for Table<'_> {
        type Value = BTreeMap<String, serde_json::Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                let at = format!("{} {}", self.0, toml_key(&key));
                let value = map.next_value_seed(JsonSeed(&at))?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Table(section))
}

/// Reads one TOML value as JSON where it stands, so that a refusal points at its line: see
/// [`toml_to_json`]. The key path is `.0`.
struct JsonSeed<'a>(&'a str);

impl<'de> serde::de::DeserializeSeed<'de> for JsonSeed<'_> {
    type Value = serde_json::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for JsonSeed<'_> {
    type Value = serde_json::Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E>(self, b: bool) -> std::result::Result<Self::Value, E> {
        Ok(b.into())
    }
    fn visit_i64<E>(self, n: i64) -> std::result::Result<Self::Value, E> {
        Ok(n.into())
    }
    fn visit_u64<E>(self, n: u64) -> std::result::Result<Self::Value, E> {
        Ok(n.into())
    }
    fn visit_f64<E: serde::de::Error>(self, f: f64) -> std::result::Result<Self::Value, E> {
        json_float(f, self.0).map_err(E::custom)
    }
    fn visit_str<E>(self, s: &str) -> std::result::Result<Self::Value, E> {
        Ok(s.into())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) =
            seq.next_element_seed(JsonSeed(&format!("{}[{}]", self.0, out.len())))?
        {
            out.push(v);
        }
        Ok(out.into())
    }
    /// A table, or a date-time, which the toml crate hands over as a table of its own making:
    /// read by [`toml::Value`], which tells them apart.
    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let value = toml::Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        toml_to_json(value, self.0).map_err(serde::de::Error::custom)
    }
}

/// A TOML value as JSON, at any depth. A date, time or date-time becomes its TOML text
/// (`1979-05-27T07:32:00Z`), since JSON has no such type (read straight into JSON it would be
/// toml's internal `{"$__toml_private_datetime": ...}`). NaN and the infinities are refused,
/// naming the key path `at`: JSON has none (read straight into JSON they would be null).
fn toml_to_json(value: toml::Value, at: &str) -> std::result::Result<serde_json::Value, String> {
    use serde_json::Value as Json;
    Ok(match value {
        toml::Value::String(s) => Json::String(s),
        toml::Value::Integer(n) => Json::from(n),
        toml::Value::Float(f) => json_float(f, at)?,
        toml::Value::Boolean(b) => Json::Bool(b),
        toml::Value::Datetime(d) => Json::String(d.to_string()),
        toml::Value::Array(items) => Json::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| toml_to_json(v, &format!("{at}[{i}]")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        toml::Value::Table(table) => Json::Object(
            table
                .into_iter()
                .map(|(k, v)| {
                    let value = toml_to_json(v, &format!("{at}.{}", toml_key(&k)))?;
                    Ok((k, value))
                })
                .collect::<std::result::Result<_, String>>()?,
        ),
    })
}

/// A TOML float as a JSON number; NaN and the infinities are refused, naming the key path `at`.
fn json_float(f: f64, at: &str) -> std::result::Result<serde_json::Value, String> {
    serde_json::Number::from_f64(f)
        .map(serde_json::Value::Number)
        .ok_or_else(|| {
            let written = match f {
                f if f.is_nan() => "nan",
                f if f > 0.0 => "inf",
                _ => "-inf",
            };
            format!(
                "{at}: {written} is not allowed: the value is read as JSON, which has no NaN or infinity; write a string (\"{written}\") or a number instead"
            )
        })
}

/// `key` as a TOML file writes it: bare when it may be, else quoted.
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
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
    /// `window`: context window in tokens, for `auto:N` and the ledger; at least 1.
    #[serde(deserialize_with = "window_tokens")]
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

/// What `[defer] window` takes, as every refusal of it says: a value that is no whole number at
/// all is refused in the same words as a 0 (by [`crate::compile`]), so that neither message
/// invites a value the other refuses.
pub const WINDOW_RANGE: &str = "a whole number of tokens, at least 1";

/// `[defer] window` as a `u64` whose refusal names [`WINDOW_RANGE`] rather than the type's own
/// range (at least 0, which the compile step refuses for 0).
fn window_tokens<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    struct Tokens;
    impl serde::de::Visitor<'_> for Tokens {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(WINDOW_RANGE)
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }
    }
    d.deserialize_u64(Tokens)
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

/// `[servers.NAME]`: one downstream MCP server, over stdio (`command`) or streamable HTTP
/// (`url`). Strings in `command`, `args`, `env`, `cwd`, `url` and `headers` may use `${VAR}`
/// (or `${env:VAR}`), `${VAR:-default}` and a leading `~/`; the gateway expands them when it
/// starts the server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Program to run (stdio transport).
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<String>,
    /// Streamable HTTP endpoint (instead of `command`).
    pub url: Option<String>,
    /// HTTP headers sent with every request to `url` (`Authorization = "Bearer ${TOKEN}"`).
    /// Their values are secrets: no message shows them.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// What the server is for; heads its group in the index (default: the description in the
    /// server's `serverInfo`, else the first line of its instructions, a heading's `#` marks
    /// taken off).
    pub description: Option<String>,
    /// Seconds allowed for start-up (spawn, initialize, tools/list).
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_secs: u64,
    /// Per-call timeout for this server (default `[execute] call_timeout_secs`).
    pub call_timeout_secs: Option<u64>,
    /// First delay before restarting the server after it crashed; doubles per failure, at most
    /// 60 seconds.
    #[serde(default = "default_restart_delay")]
    pub restart_delay_secs: u64,
    /// `false` keeps the server out of the gateway.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// A template for the group's header in the index (Starlark, see [`crate::template`]),
    /// rendered once per session in place of `description`.
    pub description_template: Option<String>,
}

fn default_startup_timeout() -> u64 {
    30
}
fn default_restart_delay() -> u64 {
    1
}
fn yes() -> bool {
    true
}

/// `[execute]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecuteConfig {
    /// `require_search`: a deferred tool must be loaded (by `tool_search`, or by a refused call
    /// that returned its schema) before `defer_execute` runs it.
    pub require_search: bool,
    /// `call_timeout_secs`: default per-call timeout.
    pub call_timeout_secs: u64,
}

impl Default for ExecuteConfig {
    fn default() -> Self {
        Self {
            require_search: true,
            call_timeout_secs: 60,
        }
    }
}

/// What a permission rule (or the default) does with a call.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Run it.
    #[default]
    Allow,
    /// Ask the user first (MCP elicitation), refuse when that is impossible.
    Ask,
    /// Refuse it.
    Deny,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        })
    }
}

/// `[permissions]`: rules `"PATTERN"` or `"PATTERN(argument glob)"`, see [`crate::permission`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionsConfig {
    /// Rules that run a call without asking.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules that ask the user first.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Rules that refuse a call.
    #[serde(default)]
    pub deny: Vec<String>,
    /// What happens to a call no rule matches.
    #[serde(default)]
    pub default: Action,
}

/// `[hooks]`: per event, the commands to run, in order.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    /// Before a call runs; may deny it, rewrite its params or add guidance.
    #[serde(default)]
    pub pre_call: Vec<HookCommand>,
    /// After a call succeeded; may rewrite the result or add guidance.
    #[serde(default)]
    pub post_call: Vec<HookCommand>,
    /// After a call failed (downstream error, timeout, crash); may add guidance.
    #[serde(default)]
    pub call_failed: Vec<HookCommand>,
    /// After `tool_search` answered; may withhold or rewrite its result or add guidance.
    #[serde(default)]
    pub post_search: Vec<HookCommand>,
    /// When a client session starts.
    #[serde(default)]
    pub session_start: Vec<HookCommand>,
    /// When a client session ends.
    #[serde(default)]
    pub session_end: Vec<HookCommand>,
}

/// One hook command.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookCommand {
    /// Program to run; it reads the event as JSON on stdin.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Only for target tools matching this pattern (call events only); default every tool.
    pub tools: Option<String>,
    /// Seconds the hook may take.
    #[serde(default = "default_hook_timeout")]
    pub timeout_secs: u64,
    /// What a hook that fails or times out means: `"allow"` (fail open) or `"deny"` (closed).
    #[serde(default)]
    pub on_error: OnError,
}

fn default_hook_timeout() -> u64 {
    10
}

/// Fail-open or fail-closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Go on as if the hook had allowed the call (the failure is reported).
    #[default]
    Allow,
    /// Refuse the call.
    Deny,
}

/// `[gateway]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// `always_load`: mark `tool_search`, `defer_execute` and pinned tools with
    /// `_meta["anthropic/alwaysLoad"] = true`, so clients that defer MCP tools on their own
    /// (Claude Code) keep them resident.
    pub always_load: bool,
    /// `pinned_names`: how pinned tools are named to clients.
    pub pinned_names: PinnedNames,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            always_load: true,
            pinned_names: PinnedNames::Short,
        }
    }
}

/// How the gateway names pinned server tools in `tools/list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinnedNames {
    /// `SERVER__TOOL`: clients prefix the gateway's tools themselves (`mcp__toolshelf__`), so
    /// this reads `mcp__toolshelf__git__git_status` there instead of a doubled prefix.
    #[default]
    Short,
    /// `mcp__SERVER__TOOL`, the canonical name.
    Canonical,
}

/// `[session]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// `activation_ttl_turns`: a tool whose schema the model received and that goes unused for
    /// more than this many turns (requests of the client, whose rounds the proxy answers itself
    /// belong to them) expires (its next call is refused with the schema).
    pub activation_ttl_turns: u64,
    /// `activation_ttl_calls`: the same for the gateway, which sees no model requests and counts
    /// each `tools/call` of the session as a turn (a model request often makes several).
    pub activation_ttl_calls: u64,
    /// `reminder_max_chars`: the longest reminder message accepted.
    pub reminder_max_chars: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            activation_ttl_turns: 6,
            activation_ttl_calls: 20,
            reminder_max_chars: 400,
        }
    }
}

/// One `[[reminders]]` rule: see [`crate::reminder`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReminderConfig {
    /// Unique name of the rule.
    pub id: String,
    /// The category of tools it points at, e.g. "database migration checks".
    pub category: String,
    /// What the model reads: a colleague's suggestion about the category, never a schema or a
    /// parameter.
    pub message: String,
    /// Queries that find the category's tools; shown with the message.
    #[serde(default)]
    pub search_hint: Vec<String>,
    /// Trigger: globs over file paths in the latest call's arguments or the user's text.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Trigger: keywords or phrases in the user's text (English or Chinese, matched as search
    /// terms, so "migrations" matches "migration" and 迁移 matches 数据库迁移).
    #[serde(default)]
    pub intents: Vec<String>,
    /// Trigger: tool-name patterns just called.
    #[serde(default)]
    pub after_tools: Vec<String>,
    /// Suppression: tool-name patterns of the category; while one was called within
    /// `unless_used_turns` turns, the rule does not fire.
    #[serde(default)]
    pub unless_used: Vec<String>,
    /// How recent a use of `unless_used` suppresses the rule, in turns.
    #[serde(default = "default_unless_used_turns")]
    pub unless_used_turns: u64,
    /// Turns between two firings of the rule.
    #[serde(default = "default_cooldown")]
    pub cooldown_turns: u64,
    /// Turns a fired reminder stays in the injected blocks (unless the model searched its
    /// category meanwhile).
    #[serde(default = "default_reminder_ttl")]
    pub ttl_turns: u64,
}

fn default_unless_used_turns() -> u64 {
    3
}
fn default_cooldown() -> u64 {
    4
}
fn default_reminder_ttl() -> u64 {
    2
}

/// The most seconds any setting in seconds may hold (about 31 years).
pub const MAX_SECS: u64 = 1_000_000_000;

/// `[audit]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// `false` writes no audit log.
    pub enabled: bool,
    /// File to append to (default `audit.jsonl` in the cache directory; a leading `~/` is the
    /// home directory).
    pub path: Option<String>,
    /// `true` (the default) refuses calls while the audit log cannot be written, so no call runs
    /// unrecorded; `false` runs them and counts the records lost.
    pub required: bool,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            path: None,
            required: true,
        }
    }
}

/// `[cache]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// `false` starts every server at start-up and keeps no catalog on disk.
    pub enabled: bool,
    /// Directory (default `$XDG_CACHE_HOME/toolshelf` or `~/.cache/toolshelf`; a leading `~/` is
    /// the home directory).
    pub path: Option<String>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            path: None,
        }
    }
}

/// `[http]`, checked and interpreted by [`crate::http::Listener`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// `max_sessions`: client sessions served at once; a new one past it is refused.
    pub max_sessions: usize,
    /// `session_idle_secs`: a session without traffic this long is closed (default 900, raised
    /// to outlast the longest tool call).
    pub session_idle_secs: Option<u64>,
    /// `allowed_origins`: browser origins accepted besides loopback ones, `scheme://host[:port]`
    /// (`:*` for any port; without a port, the scheme's default), or `null`.
    pub allowed_origins: Vec<String>,
    /// `allowed_hosts`: `Host` header values accepted besides loopback ones, `name` (any port) or
    /// `name:port`; needed when listening on a non-loopback address.
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_sessions: 256,
            session_idle_secs: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
        }
    }
}

/// What the proxy does with a request it cannot rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnRewriteFailure {
    /// Closed when something governs calls or the tool list (permission rules or a default other
    /// than allow, call hooks, a mode), else open.
    #[default]
    Auto,
    /// Send the request upstream as the client sent it.
    Open,
    /// Answer the client with an error.
    Closed,
}

/// `[proxy]`, read by `toolshelf proxy`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// `anthropic_upstream`: where Anthropic Messages requests go; the request's path is appended.
    pub anthropic_upstream: String,
    /// `openai_upstream`: where OpenAI requests (and every other path) go; the request's path
    /// is appended. Any OpenAI-compatible server (vLLM, llama.cpp, Ollama) by URL.
    pub openai_upstream: String,
    /// `max_search_rounds`: upstream rounds per client request while the proxy answers its
    /// searches (the last round's answers open the next request).
    pub max_search_rounds: u32,
    /// `session_ttl_secs`: a session unused this long is forgotten.
    pub session_ttl_secs: u64,
    /// `max_sessions`: sessions kept at once; the least recently used goes first past it.
    pub max_sessions: usize,
    /// `take_over_deferral`: rewrite requests that already use the provider's own deferral
    /// (`defer_loading`, a tool-search tool) instead of passing them through. Unset, they are
    /// taken over when permission rules, call hooks or a mode are in force, else passed through.
    pub take_over_deferral: Option<bool>,
    /// `on_rewrite_failure`: `auto`, `open` or `closed`.
    pub on_rewrite_failure: OnRewriteFailure,
    /// `persist_sessions`: keep sessions in files under the cache directory, so a restart loses
    /// nothing.
    pub persist_sessions: bool,
    /// `max_body_bytes`: the largest request body accepted.
    pub max_body_bytes: usize,
    /// `upstream_timeout_secs`: how long one upstream round may take in total.
    pub upstream_timeout_secs: u64,
    /// `stream_hold_secs`: how long a stream's status may wait for its first output, so that a
    /// failure before it still gets an HTTP status; 0 sends it at once.
    pub stream_hold_secs: u64,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            anthropic_upstream: "https://api.anthropic.com".into(),
            openai_upstream: "https://api.openai.com".into(),
            max_search_rounds: 4,
            session_ttl_secs: 6 * 3600,
            max_sessions: 10_000,
            take_over_deferral: None,
            on_rewrite_failure: OnRewriteFailure::Auto,
            persist_sessions: false,
            max_body_bytes: 32 << 20,
            upstream_timeout_secs: 600,
            stream_hold_secs: 10,
        }
    }
}

/// `[store]`, read by `toolshelf proxy`: where sessions live between requests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `url`: a Redis server shared by proxy replicas (`redis://[:PASSWORD@]HOST[:PORT][/DB]` or
    /// `unix:///PATH`); absent, the embedded store (`[proxy] max_sessions`, `persist_sessions`).
    pub url: Option<String>,
    /// `key_prefix`: every Redis key starts with it.
    pub key_prefix: String,
    /// `timeout_ms`: the longest a request waits for one store operation (connecting included)
    /// before it goes on as if the session were missing.
    pub timeout_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: None,
            key_prefix: "toolshelf:".into(),
            timeout_ms: 1000,
        }
    }
}

impl Config {
    /// Parses TOML text; `source_name` labels errors. Only the shape is checked here; see
    /// [`crate::compile::Compiled::new`] for everything else.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Self> {
        let mut config: Self = toml::from_str(text).map_err(|e| {
            // A table written as an array of tables, or the other way round, fails deep inside
            // (serde reads a list into a table's keys in order), so its shape is named first.
            if let Some(message) = section_shape(text) {
                return Error::Config {
                    source_name: source_name.to_owned(),
                    message,
                };
            }
            // serde stops at the first unknown key: when the file has more, each is named at
            // once, by its line and table, so that fixing one does not only reveal the next.
            let unknown = unknown_keys(text);
            if unknown.len() > 1 {
                let listed: Vec<String> = unknown
                    .iter()
                    .map(|k| {
                        let table = match k.table.as_str() {
                            "" => String::new(),
                            t => format!("{t} "),
                        };
                        format!("  line {}: {table}{}", k.line, in_words(&k.message))
                    })
                    .collect();
                return Error::Config {
                    source_name: source_name.to_owned(),
                    message: format!("{} unknown keys:\n{}", unknown.len(), listed.join("\n")),
                };
            }
            // The parser's report (line, column, the line itself) with its last word, serde's
            // message, said in plain words.
            let mut report = e.to_string();
            let message = e.message();
            if let Some(at) = report.rfind(message).filter(|_| !message.is_empty()) {
                report.replace_range(at..at + message.len(), &in_words(message));
            }
            Error::Config {
                source_name: source_name.to_owned(),
                message: report.trim_end().to_owned(),
            }
        })?;
        config.key_lines = key_lines(text);
        Ok(config)
    }

    /// `message`, an error about the configuration that starts `[TABLE] KEY` (`[defer] window
    /// must be ...`), with the line of that key when the file gave it: `line 2: [defer] ...`.
    /// A message about the table as a whole (`[servers.s] sets both command and url`) gets the
    /// line of the table's header.
    pub fn located(&self, message: String) -> String {
        // `[[reminders]] 2 ...`: the element's header.
        let element = message.strip_prefix("[[").and_then(|rest| {
            let (table, rest) = rest.split_once("]] ")?;
            let i: usize = rest.split([' ', ':']).next()?.parse().ok()?;
            self.key_lines
                .get(&(format!("{table}[{i}]"), String::new()))
        });
        if let Some(line) = element {
            return format!("line {line}: {message}");
        }
        let place = message.strip_prefix('[').and_then(|rest| {
            let (table, rest) = rest.split_once("] ")?;
            // Messages quote names that may need it (`tools."x"`); the lines are by bare key.
            let bare: String = table
                .split('.')
                .map(|k| k.trim_matches('"'))
                .collect::<Vec<_>>()
                .join(".");
            let key = rest.split([' ', '[', '=']).next().filter(|k| !k.is_empty());
            let of_key = key.and_then(|key| {
                self.key_lines
                    .get(&(table.to_owned(), key.to_owned()))
                    .or_else(|| self.key_lines.get(&(bare.clone(), key.to_owned())))
            });
            of_key.or_else(|| {
                let (parent, last) = bare.rsplit_once('.').unwrap_or(("", &bare));
                self.key_lines.get(&(parent.to_owned(), last.to_owned()))
            })
        });
        match place {
            Some(line) => format!("line {line}: {message}"),
            None => message,
        }
    }

    /// Reads the `mcpServers` of a client configuration (`mcp.json` shape) into server
    /// sections. Keys other clients add (`alwaysAllow`, `autoApprove`, `timeout`, ...) are not
    /// ours to judge, so they are returned as warnings instead of failing the whole file.
    pub fn servers_from_mcp_json(
        text: &str,
        source_name: &str,
    ) -> Result<(BTreeMap<String, ServerConfig>, Vec<String>)> {
        let err = |message: String| Error::Config {
            source_name: source_name.to_owned(),
            message,
        };
        let text = crate::json::without_bom(text);
        let value = crate::json::parse(text).map_err(|e| {
            err(format!(
                "not valid JSON: {}",
                crate::json::in_words(&e, text, false)
            ))
        })?;
        let servers = value
            .get("mcpServers")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| err("expected an object {\"mcpServers\": {NAME: {...}}}".into()))?;
        let mut out = BTreeMap::new();
        let mut warnings = Vec::new();
        for (name, entry) in servers {
            let at = format!("mcpServers.{name}");
            let obj = entry
                .as_object()
                .ok_or_else(|| err(format!("{at}: expected an object")))?;
            let string = |key: &str| -> Result<Option<String>> {
                match obj.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                    Some(other) => {
                        Err(err(format!("{at}.{key}: expected a string, found {other}")))
                    }
                }
            };
            let args = match obj.get("args") {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|a| {
                        a.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| err(format!("{at}.args: expected strings, found {a}")))
                    })
                    .collect::<Result<_>>()?,
                Some(other) => {
                    return Err(err(format!("{at}.args: expected an array, found {other}")));
                }
            };
            let map = |key: &str| -> Result<BTreeMap<String, String>> {
                match obj.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(BTreeMap::new()),
                    Some(serde_json::Value::Object(m)) => m
                        .iter()
                        .map(|(k, v)| match v {
                            serde_json::Value::String(s) => Ok((k.clone(), s.clone())),
                            // Header values are secrets: the message leaves them out.
                            _ if key == "headers" => {
                                Err(err(format!("{at}.{key}.{k}: expected a string")))
                            }
                            other => Err(err(format!(
                                "{at}.{key}.{k}: expected a string, found {other}"
                            ))),
                        })
                        .collect(),
                    Some(other) => Err(err(format!(
                        "{at}.{key}: expected an object, found {other}"
                    ))),
                }
            };
            let env = map("env")?;
            let headers = map("headers")?;
            let disabled = match obj.get("disabled") {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(err(format!(
                        "{at}.disabled: expected true or false, found {other}"
                    )));
                }
            };
            let kind = string("type")?;
            let kind_problem = match kind.as_deref() {
                None => None,
                Some("stdio") if obj.contains_key("url") => Some(format!(
                    "{at}: \"type\": \"stdio\" runs a command, but the entry sets url; use \
\"type\": \"http\" for a URL, or give command instead"
                )),
                Some(k @ ("http" | "streamable-http" | "streamableHttp"))
                    if obj.contains_key("command") =>
                {
                    Some(format!(
                        "{at}: \"type\": {k:?} connects to a URL, but the entry sets command; use \
\"type\": \"stdio\" for a command, or give url instead"
                    ))
                }
                Some("stdio" | "http" | "streamable-http" | "streamableHttp") => None,
                Some(other) => Some(format!(
                    "{at}.type: {other:?} is not supported (use \"stdio\" or \"http\", streamable HTTP; or set \"disabled\": true on the entry, which toolshelf then skips with a warning)"
                )),
            };
            for key in obj.keys() {
                if !matches!(
                    key.as_str(),
                    "command"
                        | "args"
                        | "env"
                        | "cwd"
                        | "url"
                        | "headers"
                        | "type"
                        | "description"
                        | "disabled"
                ) {
                    warnings.push(format!(
                        "{source_name}: {at}.{key} is not used by toolshelf"
                    ));
                }
            }
            let server = ServerConfig {
                command: string("command")?,
                args,
                env,
                cwd: string("cwd")?,
                url: string("url")?,
                headers,
                description: string("description")?,
                startup_timeout_secs: default_startup_timeout(),
                call_timeout_secs: None,
                restart_delay_secs: default_restart_delay(),
                enabled: !disabled,
                description_template: None,
            };
            // A server's name heads its tools' names, and a catalog refuses an empty one.
            let name_problem = name
                .trim()
                .is_empty()
                .then(|| format!("mcpServers.{name:?}: a server's name is empty"));
            let problem = name_problem
                .or(kind_problem)
                .or_else(|| server.check().err().map(|e| format!("{at}: {e}")));
            match problem {
                None => {
                    out.insert(name.clone(), server);
                }
                // Clients keep entries toolshelf cannot run (`"type": "sse"`) switched off: a
                // disabled one is skipped, not judged.
                Some(problem) if disabled => warnings.push(format!(
                    "{source_name}: {at} is disabled and skipped ({problem})"
                )),
                Some(problem) => return Err(err(problem)),
            }
        }
        Ok((out, warnings))
    }
}

/// Headers the MCP HTTP transport sets itself, which `headers` may not replace.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

impl ServerConfig {
    /// The section of the server `name` with `${VAR}` and `~/` expanded in `command`, `args`,
    /// `env`, `cwd`, `url` and `headers` values ([`expand`]), as the server is started with it.
    /// An error names the variable and the key it is used in (`[servers.time] env.API_KEY:
    /// environment variable KEY is not set`), never the value, which may be a secret.
    pub fn expanded(
        &self,
        name: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> std::result::Result<Self, String> {
        let section = format!("[servers.{}]", toml_key(name));
        let at = |key: &str| format!("{section} {key}");
        let one = |text: &str, key: &str| expand_at(text, &at(key), lookup);
        let map = |m: &BTreeMap<String, String>, key: &str| {
            m.iter()
                .map(|(k, v)| Ok((k.clone(), one(v, &format!("{key}.{}", toml_key(k)))?)))
                .collect::<std::result::Result<BTreeMap<_, _>, String>>()
        };
        Ok(Self {
            command: self
                .command
                .as_deref()
                .map(|c| one(c, "command"))
                .transpose()?,
            args: self
                .args
                .iter()
                .enumerate()
                .map(|(i, a)| one(a, &format!("args[{i}]")))
                .collect::<std::result::Result<_, _>>()?,
            env: map(&self.env, "env")?,
            cwd: self.cwd.as_deref().map(|c| one(c, "cwd")).transpose()?,
            url: self.url.as_deref().map(|u| one(u, "url")).transpose()?,
            headers: map(&self.headers, "headers")?,
            ..self.clone()
        })
    }

    /// Checks one server section; the message names the key.
    pub fn check(&self) -> std::result::Result<(), String> {
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => return Err("sets both command and url; give one".into()),
            (None, None) => {
                return Err(
                    "needs command (a stdio server) or url (a streamable HTTP server)".into(),
                );
            }
            (Some(c), None) if c.trim().is_empty() => return Err("command is empty".into()),
            (None, Some(u))
                if !(u.starts_with("http://")
                    || u.starts_with("https://")
                    || u.starts_with("${")) =>
            {
                return Err(format!("url {u:?} must start with http:// or https://"));
            }
            _ => {}
        }
        if self.url.is_some()
            && (!self.args.is_empty() || self.cwd.is_some() || !self.env.is_empty())
        {
            return Err("args, env and cwd apply to command servers only, not to url".into());
        }
        // `NAME=VALUE` is how the environment holds a variable: a name with `=` (or none)
        // cannot be passed on as written.
        for key in self.env.keys() {
            if key.is_empty() || key.contains(['=', '\0']) {
                return Err(format!(
                    "env: {key:?} is not a variable name (a name is not empty and holds no \"=\")"
                ));
            }
        }
        if self.command.is_some() && !self.headers.is_empty() {
            return Err(
                "headers apply to url servers only; give a command server its secrets in env"
                    .into(),
            );
        }
        let mut seen: Vec<String> = Vec::new();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if seen.contains(&lower) {
                return Err(format!(
                    "headers: {name:?} is given twice (header names ignore case); keep one"
                ));
            }
            seen.push(lower);
            // A value is checked as written; one from a variable is checked when it is sent.
            if value.chars().any(|c| c.is_control() || !c.is_ascii()) {
                return Err(format!(
                    "headers: the value of {name:?} holds a control or non-ASCII character, which HTTP does not carry"
                ));
            }
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if name.is_empty() || !name.bytes().all(token) {
                return Err(format!("headers: {name:?} is not a valid HTTP header name"));
            }
            if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "headers: {name:?} is set by the MCP transport itself; leave it out"
                ));
            }
        }
        if self.startup_timeout_secs == 0 {
            return Err("startup_timeout_secs must be at least 1".into());
        }
        if self.call_timeout_secs == Some(0) {
            return Err("call_timeout_secs must be at least 1".into());
        }
        Ok(())
    }
}

/// Expands `${VAR}`, `${VAR:-default}` and a leading `~/` (with `HOME`) in `text`, looking
/// variables up with `lookup`; `${env:VAR}` (Cursor's spelling) is `${VAR}`. A default may hold
/// `${...}` of its own (`${A:-${B}}`): a `${` closes at its matching `}`, as in the shell. An
/// unset variable without a default is an error naming it, so a missing install prefix fails at
/// start-up with its name instead of as "file not found". A variable set to the empty string is
/// set (`env` may pass an empty value on); `:-` takes the default for it too, as the shell does.
/// No error quotes `text`, which may hold a secret: [`expand_at`] names where it is used.
pub fn expand(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    if let Some(tail) = rest.strip_prefix("~/") {
        let home = lookup("HOME").ok_or("~ used but HOME is not set")?;
        out.push_str(&home);
        out.push('/');
        rest = tail;
    }
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let body_len =
            closing_brace(&rest[start + 2..]).ok_or("unclosed ${ (each ${ needs its closing })")?;
        let body = &rest[start + 2..start + 2 + body_len];
        let (name, default) = match body.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (body, None),
        };
        let name = name.strip_prefix("env:").unwrap_or(name);
        let value = lookup(name).filter(|v| default.is_none() || !v.is_empty());
        match (value, default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(&expand(d, lookup)?),
            (None, None) => {
                return Err(format!("environment variable {name} is not set"));
            }
        }
        rest = &rest[start + 2 + body_len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// [`expand`] of the value at `at` (a key path such as `[servers.time] env.API_KEY`), which an
/// error names in place of the value.
pub fn expand_at(
    text: &str,
    at: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<String, String> {
    expand(text, lookup).map_err(|e| format!("{at}: {e}"))
}

/// Where the `}` closing a `${` ends in `body` (the text after the `${`): the first `}` not
/// closing a `${` nested in it. POSIX counts only nested expansions, so a bare `{` is text.
fn closing_brace(body: &str) -> Option<usize> {
    let mut depth = 0usize;
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The key serde's "unknown field `KEY`, expected ..." names.
fn unknown_key(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(key, _)| key)
}

/// A serde message about the configuration in plain words ([`serde_in_words`]); an unknown key's
/// with the key of its table it is likely a slip for, and the tables it is a key of when it is
/// one elsewhere.
fn in_words(message: &str) -> String {
    let mut words = serde_in_words(message);
    if let Some(key) = unknown_key(message) {
        if let Some(meant) = slip_for(key, message) {
            words.push_str(&format!("; did you mean `{meant}`?"));
        }
        if let Some(home) = tables_with_key(key) {
            words.push_str(&format!(" (it is a key of {home})"));
        }
    }
    words
}

/// The key of its table that the unknown `key` is likely a slip for
/// ([`crate::catalog::near_miss`]), among those serde's message lists: "unknown field `KEY`,
/// expected one of `A`, `B`" (or "expected `A` or `B`", "expected `A`").
fn slip_for<'m>(key: &str, message: &'m str) -> Option<&'m str> {
    let (_, expected) = message.split_once("`, expected ")?;
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    crate::catalog::near_miss(key, &known, &[])
}

/// An unknown key of a configuration file, as [`unknown_keys`] finds it.
struct UnknownKey {
    /// Its line (from 1).
    line: usize,
    /// Its table as a header names it (`[servers.time]`, `[[reminders]]`); empty at the top level.
    table: String,
    /// serde's message about it.
    message: String,
}

/// Every unknown key of `text`, in the order of the file. serde stops at the first fault, and
/// reads the tables in the order of their names, not of the file: the document is read again
/// without each fault found (an unknown key, or any other fault it can place, so that one does
/// not hide the keys after it) until it reads, or a fault cannot be placed. Empty for text that
/// is no TOML.
fn unknown_keys(text: &str) -> Vec<UnknownKey> {
    let Ok(mut doc) = toml::de::DeTable::parse(text) else {
        return Vec::new();
    };
    let mut found: Vec<(usize, UnknownKey)> = Vec::new();
    while let Err(e) = Config::deserialize(toml::de::Deserializer::from(doc.clone())) {
        let Some(span) = e.span() else { break };
        let Some(table) = remove_at(doc.get_mut(), &span, &mut Vec::new(), false) else {
            break;
        };
        if unknown_key(e.message()).is_some() {
            let start = span.start.min(text.len());
            found.push((
                start,
                UnknownKey {
                    line: text[..start].matches('\n').count() + 1,
                    table,
                    message: e.message().to_owned(),
                },
            ));
        }
    }
    found.sort_by_key(|(start, _)| *start);
    found.into_iter().map(|(_, k)| k).collect()
}

/// Removes from `table` (at `path`, an element of an array of tables when `in_array`), or from a
/// table within it, the entry whose key or value is at `span`; returns the table it was in, as a
/// header names it ([`UnknownKey::table`]), or `None` when no entry is there.
fn remove_at(
    table: &mut toml::de::DeTable<'_>,
    span: &std::ops::Range<usize>,
    path: &mut Vec<String>,
    in_array: bool,
) -> Option<String> {
    let at = table
        .iter()
        .find(|(k, v)| k.span() == *span || v.span() == *span)
        .map(|(k, _)| k.clone());
    if let Some(key) = at {
        table.remove(&key);
        let dotted = path.join(".");
        return Some(match (dotted.is_empty(), in_array) {
            (true, _) => String::new(),
            (false, true) => format!("[[{dotted}]]"),
            (false, false) => format!("[{dotted}]"),
        });
    }
    for (key, value) in table.iter_mut() {
        path.push(toml_key(key.get_ref()));
        let found = match value.get_mut() {
            toml::de::DeValue::Table(inner) => remove_at(inner, span, path, false),
            toml::de::DeValue::Array(items) => {
                items.iter_mut().find_map(|item| match item.get_mut() {
                    toml::de::DeValue::Table(inner) => remove_at(inner, span, path, true),
                    _ => None,
                })
            }
            _ => None,
        };
        path.pop();
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The tables that take `key` (`[execute]` for `require_search`), for an unknown key that is a
/// known key of another table: read by serde itself, each table given `key` alone, so the list
/// cannot drift from the tables' fields. `None` when no table takes it.
fn tables_with_key(key: &str) -> Option<String> {
    fn takes<T: serde::de::DeserializeOwned>(key: &str) -> bool {
        let mut table = toml::Table::new();
        table.insert(key.to_owned(), toml::Value::Integer(0));
        match toml::Value::Table(table).try_into::<T>() {
            Ok(_) => true,
            Err(e) => !e.message().starts_with("unknown field"),
        }
    }
    type Takes = fn(&str) -> bool;
    let tables: [(&str, Takes); 19] = [
        ("[defer]", takes::<DeferConfig>),
        ("[modes.NAME]", takes::<ModeConfig>),
        ("[search]", takes::<SearchConfig>),
        ("[servers.NAME]", takes::<ServerConfig>),
        ("[execute]", takes::<ExecuteConfig>),
        ("[permissions]", takes::<PermissionsConfig>),
        ("[audit]", takes::<AuditConfig>),
        ("[cache]", takes::<CacheConfig>),
        ("[session]", takes::<SessionConfig>),
        ("[gateway]", takes::<GatewayConfig>),
        ("[[reminders]]", takes::<ReminderConfig>),
        ("[http]", takes::<HttpConfig>),
        ("[proxy]", takes::<ProxyConfig>),
        ("[ui]", takes::<UiConfig>),
        ("[store]", takes::<StoreConfig>),
        ("[tools.NAME]", takes::<ToolConfig>),
        ("[template]", takes::<TemplateConfig>),
        ("[scripts]", takes::<ScriptsConfig>),
        ("[authoring]", takes::<AuthoringConfig>),
    ];
    let homes: Vec<&str> = tables
        .iter()
        .filter(|(_, takes)| takes(key))
        .map(|(name, _)| *name)
        .collect();
    match homes.as_slice() {
        [] => None,
        [one] => Some((*one).to_owned()),
        [init @ .., last] => Some(format!("{} and {last}", init.join(", "))),
    }
}

/// A serde message about a configuration value in plain words: what the file should have there
/// and what it has, without Rust's type names (`u64`, `a sequence`, `struct`) or serde's terms
/// (`variant`, `field`).
fn serde_in_words(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some((found, expected)) = message
            .strip_prefix(prefix)
            .and_then(|rest| rest.rsplit_once(", expected "))
        {
            return format!(
                "expected {}, found {}",
                expected_in_words(expected),
                found_in_words(found)
            );
        }
    }
    [
        ("unknown variant", "unknown value"),
        ("unknown field", "unknown key"),
        ("missing field", "missing key"),
        ("duplicate field", "duplicate key"),
    ]
    .iter()
    .find_map(|(serde, plain)| {
        message
            .strip_prefix(serde)
            .map(|rest| format!("{plain}{rest}"))
    })
    .unwrap_or_else(|| message.to_owned())
}

/// What serde says a value should be, as a TOML file has it.
fn expected_in_words(expected: &str) -> String {
    match expected {
        // A key's own minimum (1 for most counts) is checked when the configuration compiles;
        // "at least 0" here would invite a 0 that check then refuses.
        "u64" | "usize" | "u128" => "a whole number, not negative",
        "u32" => "a whole number from 0 to 4294967295",
        "u16" => "a whole number from 0 to 65535",
        "u8" => "a whole number from 0 to 255",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a sequence" => "a list [...]",
        "a map" => "a table",
        "a boolean" => "true or false",
        "a borrowed string" => "a string",
        other if other.starts_with("struct ") => "a table",
        other => other,
    }
    .to_owned()
}

/// What serde says a value is, as a TOML file has it: `string "x"` is the string "x",
/// ``integer `-5` `` is -5, `sequence` a list.
fn found_in_words(found: &str) -> String {
    let literal = |kind: &str| {
        found
            .strip_prefix(kind)
            .map(|v| v.trim_matches('`').to_owned())
    };
    if let Some(s) = found.strip_prefix("string ") {
        return format!("the string {s}");
    }
    if let Some(v) = literal("integer ")
        .or_else(|| literal("floating point "))
        .or_else(|| literal("boolean "))
    {
        return v;
    }
    match found {
        "sequence" => "a list",
        "map" => "a table",
        "unit value" => "nothing",
        other => other,
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Parses and compiles: validation happens in the compile step.
    fn parse(t: &str) -> Result<Config> {
        let c = Config::from_toml_str(t, "test.toml")?;
        crate::compile::Compiled::new(c.clone(), "test.toml", None)?;
        Ok(c)
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
    fn modes_need_a_whitelist() {
        let e = parse("[modes.x]\ndescription = \"nothing\"")
            .expect_err("empty mode")
            .to_string();
        assert!(e.contains("[modes.x]"), "{e}");
        let c = parse("[modes.ask]\nread_only = true\n[modes.f]\ntools = [\"^mcp__fs__\"]")
            .expect("ok");
        let compiled = |mode| crate::compile::Compiled::new(c.clone(), "t", Some(mode));
        let ask = compiled("ask").expect("ask");
        assert!(ask.policy().mode().expect("active").read_only);
        let e = compiled("nope").expect_err("unknown").to_string();
        assert!(e.contains("ask, f"), "{e}");
    }

    #[test]
    fn search_limits_are_checked() {
        let e = parse("[search]\nresponse_budget_chars = 0")
            .expect_err("tiny budget")
            .to_string();
        assert!(e.contains("response_budget_chars"), "{e}");
        let e = parse("[search]\ndefault_limit = 20")
            .expect_err("over max")
            .to_string();
        assert!(e.contains("default_limit"), "{e}");
    }

    #[test]
    fn gateway_sections_parse_with_defaults() {
        let c = parse(
            "[servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"x\"]\n[servers.web]\nurl = \"http://localhost:1/mcp\"\ncall_timeout_secs = 5\n\
             [permissions]\ndeny = [\"^mcp__fs__write*\"]\ndefault = \"ask\"\n\
             [[hooks.pre_call]]\ncommand = \"/bin/true\"\non_error = \"deny\"\n",
        )
        .expect("config");
        let fs = &c.servers["fs"];
        assert_eq!(
            (fs.startup_timeout_secs, fs.enabled, fs.call_timeout_secs),
            (30, true, None)
        );
        assert_eq!(c.servers["web"].call_timeout_secs, Some(5));
        assert!(c.execute.require_search);
        assert_eq!(c.execute.call_timeout_secs, 60);
        assert_eq!(c.permissions.default, Action::Ask);
        assert_eq!(c.hooks.pre_call[0].on_error, OnError::Deny);
        assert_eq!(c.hooks.pre_call[0].timeout_secs, 10);
        assert!(c.audit.enabled && c.cache.enabled);
    }

    #[test]
    fn bad_gateway_sections_are_named() {
        let cases = [
            ("[servers.a]\nargs = []", "[servers.a] needs command"),
            (
                "[servers.a]\ncommand = \"x\"\nurl = \"http://h\"",
                "[servers.a] sets both",
            ),
            ("[servers.a]\nurl = \"ftp://h\"", "must start with http"),
            (
                "[servers.a]\ncommand = \"x\"\nstartup_timeout_secs = 0",
                "startup_timeout_secs",
            ),
            ("[servers.a]\ncommand = \"x\"\ncomand = 1", "comand"),
            ("[permissions]\ndeny = [\"x(\"]", "deny[0]"),
            ("[permissions]\ndefault = \"maybe\"", "maybe"),
            (
                "[[hooks.pre_call]]\ncommand = \"\"",
                "[hooks] pre_call[0]: command is empty",
            ),
            (
                "[[hooks.post_call]]\ncommand = \"x\"\ntools = \"\"",
                "[hooks] post_call[0] tools",
            ),
            (
                "[[hooks.post_search]]\ncommand = \"x\"\ntools = \"^mcp__a__\"",
                "[hooks] post_search[0]: tools only applies to call events",
            ),
            (
                "[execute]\ncall_timeout_secs = 0",
                "[execute] call_timeout_secs",
            ),
        ];
        for (text, expected) in cases {
            let e = parse(text).expect_err(text).to_string();
            assert!(
                e.starts_with("test.toml: ") && e.contains(expected),
                "{e:?} lacks {expected:?}"
            );
        }
    }

    /// Reading `text` as mcp.json fails with a message naming the file and holding `expected`.
    fn assert_mcp_json_error(text: &str, expected: &str) {
        let e = Config::servers_from_mcp_json(text, "mcp.json")
            .expect_err(text)
            .to_string();
        assert!(
            e.starts_with("mcp.json: ") && e.contains(expected),
            "{e:?} lacks {expected:?}"
        );
    }

    #[test]
    fn mcp_json_servers_are_read() {
        let (servers, warnings) = Config::servers_from_mcp_json(
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "env": {"A": "1"}, "alwaysAllow": []},
                "web": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
                "off": {"command": "x", "disabled": true}
            }}"#,
            "mcp.json",
        )
        .expect("mcp.json");
        assert_eq!(servers["fs"].args.len(), 3);
        assert_eq!(servers["fs"].env["A"], "1");
        assert_eq!(
            servers["web"].url.as_deref(),
            Some("http://127.0.0.1:9/mcp")
        );
        assert!(!servers["off"].enabled);
        assert_eq!(
            warnings,
            ["mcp.json: mcpServers.fs.alwaysAllow is not used by toolshelf"]
        );
        for (text, expected) in [
            (r#"{"servers": {}}"#, "mcpServers"),
            (
                r#"{"mcpServers": {"a": {"args": []}}}"#,
                "mcpServers.a: needs command",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h"}}}"#,
                "mcpServers.a.type: \"sse\" is not supported (use \"stdio\" or \"http\", streamable HTTP; or set \"disabled\": true on the entry",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "args": [1]}}}"#,
                "mcpServers.a.args",
            ),
        ] {
            assert_mcp_json_error(text, expected);
        }
    }

    #[test]
    fn mcp_json_headers_are_read_and_kept_out_of_messages() {
        let (servers, warnings) = Config::servers_from_mcp_json(
            r#"{"mcpServers": {"gh": {"type": "http", "url": "https://h/mcp",
                "headers": {"Authorization": "Bearer ${GH_TOKEN}"}}}}"#,
            "mcp.json",
        )
        .expect("mcp.json");
        assert_eq!(servers["gh"].headers["Authorization"], "Bearer ${GH_TOKEN}");
        assert!(warnings.is_empty(), "{warnings:?}");
        let e = Config::servers_from_mcp_json(
            r#"{"mcpServers": {"gh": {"url": "https://h/mcp", "headers": {"X-Key": 12345678}}}}"#,
            "mcp.json",
        )
        .expect_err("number")
        .to_string();
        assert!(
            e.contains("mcpServers.gh.headers.X-Key: expected a string"),
            "{e}"
        );
        assert!(!e.contains("12345678"), "{e}");
    }

    #[test]
    fn mcp_json_entries_are_not_misread() {
        for (text, expected) in [
            (
                r#"{"mcpServers": {"off": {"command": "x", "disabled": "true"}}}"#,
                "mcpServers.off.disabled: expected true or false, found \"true\"",
            ),
            (
                r#"{"mcpServers": {"typed": {"type": "http", "command": "x"}}}"#,
                "mcpServers.typed: \"type\": \"http\" connects to a URL, but the entry sets command",
            ),
            (
                r#"{"mcpServers": {"su": {"type": "stdio", "url": "http://h/mcp"}}}"#,
                "mcpServers.su: \"type\": \"stdio\" runs a command, but the entry sets url",
            ),
        ] {
            assert_mcp_json_error(text, expected);
        }
        let (servers, warnings) = Config::servers_from_mcp_json(
            r#"{"mcpServers": {"old": {"type": "sse", "url": "http://h/sse", "disabled": true},
                "t": {"command": "x"}}}"#,
            "mcp.json",
        )
        .expect("a disabled entry is not judged");
        assert_eq!(servers.keys().collect::<Vec<_>>(), ["t"]);
        assert!(
            warnings.len() == 1 && warnings[0].contains("mcpServers.old is disabled and skipped"),
            "{warnings:?}"
        );
    }

    #[test]
    fn server_headers_are_checked() {
        let c = parse(
            "[servers.gh]\nurl = \"https://h/mcp\"\nheaders = { Authorization = \"Bearer ${T}\" }\n",
        )
        .expect("headers");
        assert_eq!(c.servers["gh"].headers["Authorization"], "Bearer ${T}");
        for (text, expected) in [
            (
                "[servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }",
                "[servers.a] headers apply to url servers only",
            ),
            (
                "[servers.a]\nurl = \"http://h\"\nheaders = { \"A B\" = \"b\" }",
                "\"A B\" is not a valid HTTP header name",
            ),
            (
                "[servers.a]\nurl = \"http://h\"\nheaders = { Accept = \"b\" }",
                "\"Accept\" is set by the MCP transport itself",
            ),
            (
                "[servers.a]\nurl = \"http://h\"\nheaders = { X-Key = \"a\", x-key = \"b\" }",
                "\"x-key\" is given twice (header names ignore case)",
            ),
            (
                "[servers.a]\nurl = \"http://h\"\nheaders = { X-Key = \"caf\u{e9}\" }",
                "the value of \"X-Key\" holds a control or non-ASCII character",
            ),
        ] {
            let e = parse(text).expect_err(text).to_string();
            assert!(e.contains(expected), "{e:?} lacks {expected:?}");
        }
    }

    #[test]
    fn expand_substitutes_variables_and_home() {
        let env = |k: &str| match k {
            "HOME" => Some("/home/u".to_owned()),
            "P" => Some("/opt/p".to_owned()),
            _ => None,
        };
        assert_eq!(
            expand("~/x/${P}/bin", &env).expect("ok"),
            "/home/u/x//opt/p/bin"
        );
        assert_eq!(
            expand("${Q:-~/.cache}/y", &env).expect("ok"),
            "/home/u/.cache/y"
        );
        assert_eq!(expand("plain", &env).expect("ok"), "plain");
        assert_eq!(expand("${env:P}/x", &env).expect("ok"), "/opt/p/x");
        assert_eq!(expand("${env:Q:-d}", &env).expect("ok"), "d");
        assert!(
            expand("${env:Q}", &env)
                .expect_err("unset")
                .contains("environment variable Q is not set")
        );
        let empty = |k: &str| (k == "E").then(String::new);
        assert_eq!(expand("[${E}]", &empty).expect("set but empty"), "[]");
        assert_eq!(expand("${E:-d}", &empty).expect("default"), "d");
        assert!(
            expand("${Q}", &env)
                .expect_err("unset")
                .contains("Q is not set")
        );
        assert!(
            expand("${P", &env)
                .expect_err("unclosed")
                .contains("unclosed")
        );
    }

    #[test]
    fn an_unset_variable_is_named_with_where_it_is_used_never_its_value() {
        let env = |k: &str| (k == "SET").then(|| "v".to_owned());
        let secret = "sk-ENVSECRET-";
        for text in [
            "sk-ENVSECRET-${LEAK_SUFFIX}",
            "sk-ENVSECRET-${LEAK_SUFFIX",
            "sk-ENVSECRET-${SET}${LEAK_SUFFIX:-${LEAK_SUFFIX}}",
        ] {
            let e = expand(text, &env).expect_err(text);
            assert!(!e.contains(secret), "{text}: {e}");
            let e = expand_at(text, "[servers.time] env.API_KEY", &env).expect_err(text);
            assert!(
                e.starts_with("[servers.time] env.API_KEY: ") && !e.contains(secret),
                "{text}: {e}"
            );
        }
        assert_eq!(
            expand("sk-ENVSECRET-${LEAK_SUFFIX}", &env).expect_err("unset"),
            "environment variable LEAK_SUFFIX is not set"
        );
        let server = |toml: &str| {
            Config::from_toml_str(toml, "t.toml")
                .expect("config")
                .servers["time"]
                .clone()
        };
        for (toml, at) in [
            (
                "command = \"x\"\nenv = { API_KEY = \"sk-ENVSECRET-${LEAK_SUFFIX}\" }",
                "[servers.time] env.API_KEY",
            ),
            (
                "command = \"x\"\nargs = [\"a\", \"b\", \"--key=sk-ENVSECRET-${LEAK_SUFFIX}\"]",
                "[servers.time] args[2]",
            ),
            (
                "command = \"${LEAK_SUFFIX}/sk-ENVSECRET-\"",
                "[servers.time] command",
            ),
            (
                "command = \"x\"\ncwd = \"${LEAK_SUFFIX}\"",
                "[servers.time] cwd",
            ),
            (
                "url = \"https://h/mcp?key=sk-ENVSECRET-${LEAK_SUFFIX}\"",
                "[servers.time] url",
            ),
            (
                "url = \"https://h/mcp\"\nheaders = { X-Api-Key = \"sk-ENVSECRET-${LEAK_SUFFIX}\" }",
                "[servers.time] headers.X-Api-Key",
            ),
        ] {
            let e = server(&format!("[servers.time]\n{toml}"))
                .expanded("time", &env)
                .expect_err(toml);
            assert_eq!(
                e,
                format!("{at}: environment variable LEAK_SUFFIX is not set"),
                "{toml}"
            );
        }
        let e = server("[servers.time]\ncommand = \"x\"\nenv = { \"A B\" = \"${U}\" }")
            .expanded("time", &env)
            .expect_err("quoted key");
        assert!(e.starts_with("[servers.time] env.\"A B\": "), "{e}");
        let ok = server(
            "[servers.time]\ncommand = \"${SET}/bin\"\nargs = [\"${SET:-d}\", \"${U:-d}\"]\n\
             env = { K = \"${SET}\" }\ncwd = \"/${SET}\"\ndescription = \"${U}\"",
        )
        .expanded("time", &env)
        .expect("all set or defaulted");
        assert_eq!(ok.command.as_deref(), Some("v/bin"));
        assert_eq!(ok.args, ["v", "d"]);
        assert_eq!(ok.env["K"], "v");
        assert_eq!(ok.cwd.as_deref(), Some("/v"));
        // Only the strings the server is started with are expanded.
        assert_eq!(ok.description.as_deref(), Some("${U}"));
    }

    #[test]
    fn nested_defaults_expand_as_in_the_shell() {
        let env = |k: &str| match k {
            "HOME" => Some("/home/u".to_owned()),
            "P" => Some("/opt/p".to_owned()),
            "E" => Some(String::new()),
            _ => None,
        };
        for (text, expected) in [
            ("${Q:-${P}}/bin", "/opt/p/bin"),
            ("${P:-${Q}}/bin", "/opt/p/bin"),
            ("${Q:-${R:-${P}/x}}/y", "/opt/p/x/y"),
            ("${Q:-${R:-~/.cache}}/m", "/home/u/.cache/m"),
            ("${E:-${P}}", "/opt/p"),
            ("${env:Q:-${env:P}}", "/opt/p"),
            ("${Q:-a}${Q:-${P}}", "a/opt/p"),
            ("${Q:-{x}}", "{x}"),
            ("${Q:-{x}}}", "{x}}"),
            ("${Q:-}", ""),
        ] {
            assert_eq!(expand(text, &env).as_deref(), Ok(expected), "{text}");
        }
        for (text, says) in [
            ("${Q:-${R}}", "environment variable R is not set"),
            ("${Q:-${P}", "unclosed ${"),
            ("${Q:-${P", "unclosed ${"),
        ] {
            let e = expand(text, &env).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains(text), "{text}: {e}");
        }
        let prefix = "${TOOLSHELF_MCP_PREFIX:-${HOME}/.cache/toolshelf-mcp}/venv/bin/x";
        assert_eq!(
            expand(prefix, &env).as_deref(),
            Ok("/home/u/.cache/toolshelf-mcp/venv/bin/x")
        );
    }

    #[test]
    fn mcp_json_refuses_an_empty_server_name() {
        for name in ["", " "] {
            let text = json!({"mcpServers": {name: {"command": "x"}}}).to_string();
            assert_mcp_json_error(
                &text,
                &format!("mcpServers.{name:?}: a server's name is empty"),
            );
        }
        // A disabled entry is skipped, not judged.
        let (servers, warnings) = Config::servers_from_mcp_json(
            r#"{"mcpServers": {"": {"command": "x", "disabled": true}, "t": {"command": "x"}}}"#,
            "mcp.json",
        )
        .expect("skipped");
        assert_eq!(servers.keys().collect::<Vec<_>>(), ["t"]);
        assert!(
            warnings.len() == 1 && warnings[0].contains("a server's name is empty"),
            "{warnings:?}"
        );
        assert_mcp_json_error(
            r#"{"mcpServers": {"a": {"command": "x", "env": {"K=V": "1"}}}}"#,
            "mcpServers.a: env: \"K=V\" is not a variable name",
        );
    }

    #[test]
    fn the_directory_is_never_read_from_the_file() {
        let e = Config::from_toml_str("dir = \"/x\"", "t.toml")
            .expect_err("not a key")
            .to_string();
        assert!(e.contains("unknown key `dir`"), "{e}");
        assert_eq!(parse("").expect("empty").dir, None);
    }

    #[test]
    fn template_vars_read_dates_as_their_text_at_any_depth() {
        let c = parse(
            "[template.vars]\nwhen = 1979-05-27T07:32:00Z\nday = 1979-05-27\nat = 07:32:00\n\
             local = 1979-05-27T07:32:00.5\nlist = [1979-05-27, { off = 1979-05-27T00:32:00-07:00 }]\n\
             big = 9223372036854775807\nrate = 1.5\nteam = \"x\"\n\
             [template.vars.nested]\nd = 2000-01-01\n",
        )
        .expect("config");
        assert_eq!(
            serde_json::to_value(&c.template.vars).expect("json"),
            serde_json::json!({
                "when": "1979-05-27T07:32:00Z",
                "day": "1979-05-27",
                "at": "07:32:00",
                "local": "1979-05-27T07:32:00.5",
                "list": ["1979-05-27", {"off": "1979-05-27T00:32:00-07:00"}],
                "big": 9_223_372_036_854_775_807_i64,
                "rate": 1.5,
                "team": "x",
                "nested": {"d": "2000-01-01"},
            })
        );
    }

    #[test]
    fn template_vars_refuse_nan_and_infinity_naming_the_key() {
        for (toml, says) in [
            ("rate = nan", "[template.vars] rate: nan is not allowed"),
            ("limit = inf", "[template.vars] limit: inf is not allowed"),
            ("floor = -inf", "[template.vars] floor: -inf is not allowed"),
            (
                "rates = [1.0, +inf]",
                "[template.vars] rates[1]: inf is not allowed",
            ),
            (
                "deep = { \"a b\" = [{ x = -nan }] }",
                "[template.vars] deep.\"a b\"[0].x: nan is not allowed",
            ),
        ] {
            let text = format!("[template.vars]\nok = 1\n{toml}\n");
            let e = Config::from_toml_str(&text, "t.toml")
                .expect_err(toml)
                .to_string();
            assert!(
                e.starts_with("t.toml: ")
                    && e.contains(says)
                    && e.contains("JSON, which has no NaN or infinity"),
                "{toml:?}: {e}"
            );
        }
        // The error points at the value, as the parser's own errors do.
        let e = Config::from_toml_str("[template.vars]\nrate = nan\n", "t.toml")
            .expect_err("nan")
            .to_string();
        insta::assert_snapshot!("template_vars_nan", e);
        let e = Config::from_toml_str(
            "[template.vars.limits]\nlow = 1\nhigh = [[0.5, -inf]]\n",
            "t.toml",
        )
        .expect_err("-inf")
        .to_string();
        insta::assert_snapshot!("template_vars_nested_infinity", e);
    }

    #[test]
    fn wrong_values_are_said_in_plain_words() {
        for (toml, says) in [
            (
                "[session]\nactivation_ttl_turns = \"x\"",
                "expected a whole number, not negative, found the string \"x\"",
            ),
            (
                "[defer]\nwindow = -5",
                "expected a whole number of tokens, at least 1, found -5",
            ),
            (
                "[proxy]\nmax_sessions = -3",
                "expected a whole number, not negative, found -3",
            ),
            (
                "[defer]\nrules = \"NoDefer(x)\"",
                "expected a list [...], found the string \"NoDefer(x)\"",
            ),
            (
                "[defer]\nwindow = 1.5",
                "expected a whole number of tokens, at least 1, found 1.5",
            ),
            ("[modes]\nx = 3", "expected a table, found 3"),
            (
                "[defer]\ndefualt = true",
                "unknown key `defualt`, expected one of `default`",
            ),
            // A key of another table says which.
            (
                "[servers.time]\ncommand = \"t\"\nrequire_search = true",
                "unknown key `require_search`, expected one of `command`",
            ),
            (
                "[servers.time]\ncommand = \"t\"\nrequire_search = true",
                "`description_template` (it is a key of [execute])",
            ),
            ("window = 5", "(it is a key of [defer])"),
            (
                "[execute]\nmax_sessions = 1",
                "(it is a key of [http] and [proxy])",
            ),
        ] {
            let e = Config::from_toml_str(toml, "t.toml")
                .expect_err(toml)
                .to_string();
            assert!(
                e.starts_with("t.toml: ") && e.contains(says),
                "{toml:?}: {e}"
            );
            for jargon in ["u64", "sequence", "variant", "field", "struct"] {
                assert!(!e.contains(jargon), "{toml:?}: {e}");
            }
        }
        let e = Config::from_toml_str("[permissions]\ndefault = \"maybe\"", "t.toml")
            .expect_err("bad default")
            .to_string();
        assert!(
            e.contains("unknown value `maybe`, expected one of `allow`, `ask`, `deny`"),
            "{e}"
        );
    }

    /// `[defer] window` is refused with the range it takes, the same whether the value is no
    /// whole number at all or one below it: a message about -5 must not invite a 0 that is
    /// refused in turn.
    #[test]
    fn window_names_the_range_it_takes_for_every_value_it_refuses() {
        for value in ["-5", "0", "1.5", "\"big\""] {
            let toml = format!("[defer]\nwindow = {value}");
            let e = parse(&toml).expect_err(&toml).to_string();
            assert!(
                e.contains("a whole number of tokens, at least 1") && !e.contains("at least 0"),
                "{toml:?}: {e}"
            );
        }
        assert_eq!(parse("[defer]\nwindow = 1").expect("1").defer.window, 1);
    }

    /// Every unknown key of a file is reported at once, in the order of the file (not of the
    /// tables' names), each with its line, its table, the keys the table takes and the one it is
    /// likely a slip for; a single one is reported as the parser reports it, with that slip.
    #[test]
    fn every_unknown_key_is_reported_in_file_order() {
        let text = "[search]\nmax_limt = 3\n\n[defer]\ndefualt = true\nwindow = 5\n\
                    require_search = true\n\n[servers.time]\ncommand = \"t\"\ncwdir = \"/\"\n\n\
                    [[reminders]]\nid = \"r\"\ncategory = \"c\"\nmessage = \"m\"\nttl = 2\n";
        let e = Config::from_toml_str(text, "t.toml")
            .expect_err("unknown keys")
            .to_string();
        insta::assert_snapshot!("several_unknown_keys", e);
        let lines: Vec<usize> = e
            .lines()
            .skip(1)
            .filter_map(|l| {
                l.trim_start()
                    .strip_prefix("line ")?
                    .split(':')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(lines, [2, 5, 7, 11, 17], "{e}");
        // One alone keeps the parser's report, with the key it is a slip for.
        let e = Config::from_toml_str("[defer]\ndefualt = true\n", "t.toml")
            .expect_err("unknown key")
            .to_string();
        assert!(
            e.starts_with("t.toml: TOML parse error at line 2, column 1")
                && e.ends_with(
                    "unknown key `defualt`, expected one of `default`, `rules`, `window`, \
                     `index_budget_chars`, `server_description_chars`; did you mean `default`?"
                ),
            "{e}"
        );
    }

    #[test]
    fn a_table_written_as_an_array_of_tables_is_named_with_its_line() {
        for (toml, says) in [
            (
                "[[defer]]",
                "t.toml: line 1: [[defer]] makes \"defer\" an array of tables, but [defer] is one table: write [defer], with one pair of brackets",
            ),
            (
                "[search]\nmax_limit = 3\n\n[[session]]\nactivation_ttl_turns = 2\n",
                "t.toml: line 4: [[session]] makes \"session\" an array of tables, but [session] is one table",
            ),
            (
                "[[ proxy ]]\n",
                "line 1: [[proxy]] makes \"proxy\" an array of tables, but [proxy] is one table",
            ),
            (
                "[modes.ask]\nread_only = true\n[[modes.files]]\ntools = [\"x\"]\n",
                "line 3: [[modes.files]] makes \"modes.files\" an array of tables, but [modes.files] is one table: write [modes.files]",
            ),
            (
                "# servers\n[[servers.git]]\ncommand = \"git\"\n",
                "line 2: [[servers.git]] makes",
            ),
            (
                "[reminders]\nid = \"x\"\n",
                "t.toml: line 1: [reminders] makes \"reminders\" one table, but [[reminders]] is an array of tables, one for each reminder: write [[reminders]], with two pairs of brackets",
            ),
        ] {
            let e = Config::from_toml_str(toml, "t.toml")
                .expect_err(toml)
                .to_string();
            assert!(e.contains(says), "{toml:?}: {e}");
            assert!(!e.contains("expected"), "{toml:?}: {e}");
        }
    }

    /// A `[tools.NAME]` section that sets neither of its keys is refused with its file, line
    /// and section, as an empty mode is.
    #[test]
    fn a_tools_section_that_sets_nothing_is_refused_with_its_line() {
        let e = Config::from_toml_str(
            "[defer]\ndefault = true\n\n[tools.lookup]\n[tools.other]\nscript = \"o.star\"\n",
            "t.toml",
        )
        .expect_err("empty")
        .to_string();
        for says in [
            "t.toml: TOML parse error at line 4",
            "[tools.lookup]",
            "sets neither `script`",
        ] {
            assert!(e.contains(says), "{says:?}: {e}");
        }
        for one in ["script = \"x.star\"", "description_template = \"'d'\""] {
            Config::from_toml_str(&format!("[tools.lookup]\n{one}\n"), "t.toml").expect(one);
        }
    }

    /// The sections checked for the shape of their header are every section the file takes.
    #[test]
    fn every_section_is_known_as_a_table_or_an_array_of_tables() {
        let e = Config::from_toml_str("[no_such_section]", "t.toml")
            .expect_err("unknown")
            .to_string();
        let (_, expected) = e.split_once("expected one of ").expect("the keys");
        let mut keys: Vec<&str> = expected
            .split(", ")
            .map(|k| k.trim().trim_matches('`'))
            .collect();
        keys.sort();
        let mut known: Vec<&str> = TABLES.iter().chain(ARRAYS_OF_TABLES).copied().collect();
        known.sort();
        assert_eq!(keys, known);
        for key in TABLES {
            Config::from_toml_str(&format!("[{key}]"), "t.toml").expect(key);
        }
    }
}
