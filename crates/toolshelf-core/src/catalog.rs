//! The tool catalog: every tool the agent could use, whatever shape it arrived in.
//!
//! Catalogs come from Anthropic, OpenAI and MCP tool lists, from bare benchmark files and from
//! toolshelf's own grouped form, so loading detects the shape per item instead of asking for a
//! flag. Loading is strict: a missing name, a schema that is not an object or two tools of one name
//! in one group is an error naming the file and the item, never a silent drop. Once loaded, the
//! catalog is sorted (built-ins first, then servers by canonical name, tools by canonical name), so
//! everything rendered from it is independent of input order.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::name;

/// Where a tool comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A tool built into the agent.
    Builtin,
    /// A tool of an MCP server.
    Mcp,
    /// A tool authored by the model at run time; always deferred.
    Model,
}

/// The MCP behaviour hints toolshelf acts on. Absent hints stay `None` so policies can fail
/// closed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotations {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
    /// The annotations object as given, passed through to MCP clients.
    pub raw: Option<Map<String, Value>>,
}

/// One tool, with its canonical name and the original names calls go out under.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Canonical name, valid for every provider: `mcp__<server>__<tool>` or the built-in's name.
    pub name: String,
    /// The tool's name as its server (or the catalog) gave it.
    pub original_name: String,
    /// The server's name as configured (or as the catalog gave it); `None` for built-ins.
    pub original_server: Option<String>,
    /// Other names that mean this tool to a rule, sorted: the canonical name it would have had
    /// without a collision (of its own name or of its server's) or the length limit (with its
    /// server's segment in full, too, when a long server name was cut), and
    /// `mcp__<original server>__<original tool>` (a built-in's original name). Deny and ask rules and hooks match any of them, so a
    /// rewritten name never lets a call slip past a rule written for it.
    pub aliases: Vec<String>,
    /// The tool segment of the canonical name (for built-ins, the canonical name).
    pub bare: String,
    /// Canonical name of the tool's server; `None` for built-ins and model tools.
    pub server: Option<String>,
    /// Description, as given.
    pub description: String,
    /// JSON Schema of the input, normalised (`"dict"` read as `"object"`); an empty object schema
    /// when the tool declared none.
    pub input_schema: Map<String, Value>,
    /// MCP `title`, passed through.
    pub title: Option<String>,
    /// MCP `outputSchema`, passed through.
    pub output_schema: Option<Map<String, Value>>,
    /// MCP `_meta`, passed through to MCP clients.
    pub meta: Option<Map<String, Value>>,
    /// Declared `strict` (OpenAI's, and Anthropic's, strict schema adherence), written into the
    /// definitions of the formats that have it.
    pub strict: Option<bool>,
    /// Declared `defer_loading`: `Some(true)`, `Some(false)`, or absent.
    pub defer_loading: Option<bool>,
    /// Free-form tags, searchable.
    pub tags: Vec<String>,
    /// MCP annotations.
    pub annotations: Annotations,
    /// Where the tool comes from.
    pub origin: Origin,
    /// A description template (Starlark, see [`crate::template`]) from the catalog file; the
    /// configuration's `[tools.NAME] description_template` takes precedence.
    pub description_template: Option<String>,
}

impl Tool {
    /// The names besides the canonical one that resolve to this tool when unambiguous: bare,
    /// original, aliases, and `SERVER__TOOL` (the canonical name without `mcp__`, as the gateway
    /// may name pinned tools to clients that add a prefix of their own).
    pub fn short_names(&self) -> impl Iterator<Item = &str> {
        [self.bare.as_str(), self.original_name.as_str()]
            .into_iter()
            .chain(self.aliases.iter().map(String::as_str))
            .chain(self.client_name())
    }

    /// `SERVER__TOOL` for a server's tool: its canonical name without the `mcp__` prefix.
    pub fn client_name(&self) -> Option<&str> {
        self.server.as_ref()?;
        self.name.strip_prefix(name::MCP_PREFIX)
    }

    /// Whether the tool declares `readOnlyHint: true`. Absent means no (fail closed).
    pub fn is_read_only(&self) -> bool {
        self.annotations.read_only == Some(true)
    }

    /// Why no call of this tool can work, when it is a script tool whose script could not be
    /// defined: the reason its description gives after
    /// [`crate::config::SCRIPT_UNAVAILABLE`].
    pub fn unavailable_script(&self) -> Option<&str> {
        if self.original_server.as_deref() != Some(crate::config::SCRIPTS_SERVER) {
            return None;
        }
        self.description
            .strip_prefix(crate::config::SCRIPT_UNAVAILABLE)
    }
}

/// An MCP server's group.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// Canonical server segment, as in `mcp__<name>__tool`.
    pub name: String,
    /// The server's name as configured.
    pub original_name: String,
    /// What the server is for; shown in the deferred index.
    pub description: String,
    /// A template for the group's header (see [`crate::template`]) from the catalog file; the
    /// configuration's `[servers.NAME] description_template` takes precedence.
    pub description_template: Option<String>,
}

impl Server {
    /// The index header prefix, `mcp__<name>`.
    pub fn prefix(&self) -> String {
        format!("{}{}", name::MCP_PREFIX, self.name)
    }
}

/// How a name given by the model or a user resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The canonical name of one tool.
    Exact(usize),
    /// A bare or original name that only one tool has; or, when no tool has the name, the one
    /// tool that has it once case and separators are folded away ([`name::fold`]).
    Bare(usize),
    /// A bare name shared by several tools, or, when no tool has the name, a name several tools
    /// have once case and separators are folded away ([`name::fold`]); indices in catalog order.
    Ambiguous(Vec<usize>),
    /// No tool has that name.
    NotFound,
}

/// A tool definition before canonical naming: what one catalog item says.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Name as given.
    pub name: String,
    /// Description as given (empty when absent).
    pub description: String,
    /// Normalised input schema, if the item had one.
    pub input_schema: Option<Map<String, Value>>,
    /// MCP `title`.
    pub title: Option<String>,
    /// MCP `outputSchema`.
    pub output_schema: Option<Map<String, Value>>,
    /// MCP `_meta`.
    pub meta: Option<Map<String, Value>>,
    /// Declared `strict`.
    pub strict: Option<bool>,
    /// Declared `defer_loading`.
    pub defer_loading: Option<bool>,
    /// Tags.
    pub tags: Vec<String>,
    /// MCP annotations.
    pub annotations: Annotations,
    /// `"origin": "model"` marks a tool the model wrote.
    pub model_authored: bool,
    /// A `"server"` field: the tool joins that server's group.
    pub server: Option<String>,
    /// `"description_template"`: read from catalog files only (see [`Catalog::from_owned`]), never
    /// from a live server's or a client's tool list.
    pub description_template: Option<String>,
    /// Keys of the item that no supported shape defines (`"schema"`, `"params"`), sorted: not
    /// read, so what they hold is lost. A catalog file's loader warns of them.
    pub ignored_keys: Vec<String>,
}

/// Keys a tool item may have that a misspelling could be meant for: every key the loader reads
/// (here, and `description_template` in catalog files).
const TOOL_KEYS: &[&str] = &[
    "name",
    "title",
    "description",
    "input_schema",
    "inputSchema",
    "parameters",
    "outputSchema",
    "annotations",
    "_meta",
    "defer_loading",
    "strict",
    "tags",
    "category",
    "server",
    "origin",
    "function",
    "type",
    "description_template",
];

/// Keys the supported shapes define that the loader does not read, being for a client's display
/// or for one request to the provider rather than about what the tool is: MCP `icons` and
/// `execution`, Anthropic `cache_control`, `eager_input_streaming`, `allowed_callers` and
/// `input_examples`. They are left out without a warning.
const UNREAD_KEYS: &[&str] = &[
    "icons",
    "execution",
    "cache_control",
    "eager_input_streaming",
    "allowed_callers",
    "input_examples",
];

/// The MCP annotations, of which the loader reads `readOnlyHint` and `destructiveHint` and passes
/// every one through.
const ANNOTATION_KEYS: &[&str] = &[
    "title",
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];

/// Keys of a server in the grouped form.
const SERVER_KEYS: &[&str] = &["name", "description", "description_template", "tools"];

/// The known key `key` is a slip for: the same but for case, or a slip of one edit (an insertion,
/// a deletion, a substitution or two neighbours swapped: `tag`, `titel`) from a known key, two
/// from one of eight or more characters, when no other key of `known` or of `unread` (keys the
/// shape defines that the loader does not read) is as near. A key that is known or unread, or
/// far from every known key (`icons`, `execution`, `cache_control`), or as near to two keys as
/// each other, is no slip.
pub fn near_miss<'k>(key: &str, known: &[&'k str], unread: &[&str]) -> Option<&'k str> {
    if known.contains(&key) || unread.contains(&key) {
        return None;
    }
    let lower = key.to_ascii_lowercase();
    if let Some(k) = known
        .iter()
        .copied()
        .find(|k| k.to_ascii_lowercase() == lower)
    {
        return Some(k);
    }
    let distance = |k: &str| name::edit_distance(&lower, &k.to_ascii_lowercase());
    let (meant, edits) = known
        .iter()
        .copied()
        .map(|k| (k, distance(k)))
        .min_by_key(|&(_, d)| d)?;
    let allowed = if meant.len() >= 8 { 2 } else { 1 };
    let nearer_or_as_near = known
        .iter()
        .chain(unread)
        .any(|&k| k != meant && distance(k) <= edits);
    (edits <= allowed && edits < meant.len() && !nearer_or_as_near).then_some(meant)
}

impl ToolSpec {
    /// This spec as a client's tool, as the proxy reads the tools a client sends: a name of the
    /// form `mcp__SERVER__TOOL` (as harnesses name the tools of their MCP servers) is tool TOOL
    /// of SERVER's group, whatever a `"server"` field says, so it is named as that server's tool
    /// is (`mcp__svc__住处` is `mcp__svc__tool_1d75284e`, where a built-in of that name would be
    /// `mcp__svc____`) and its client name, `mcp__SERVER__TOOL` of its original names, is the
    /// name the client gave it. Any other name is left as it is.
    pub fn as_client_tool(mut self) -> Self {
        if let Some((server, tool)) = name::split_mcp(&self.name) {
            let (server, tool) = (server.to_owned(), tool.to_owned());
            self.server = Some(server);
            self.name = tool;
        }
        self
    }

    /// Reads one tool item in any supported shape. `location` names it in errors. The item is
    /// taken by value: its schema moves into the spec instead of being copied.
    pub fn from_value(value: Value, source_name: &str, location: &str) -> Result<Self> {
        let err = |message: String| Error::CatalogItem {
            source_name: source_name.to_owned(),
            location: location.to_owned(),
            message,
        };
        let mut obj = match value {
            Value::Object(m) => m,
            other => {
                return Err(err(format!(
                    "expected a tool object, found {}",
                    kind_of(&other)
                )));
            }
        };
        // OpenAI chat shape nests the definition under "function" (`"type": "function"`, or no
        // type at all). `obj` keeps the outer keys (`defer_loading`, `server`, ... may sit beside
        // "function"); `def` is the definition.
        let nested = matches!(
            obj.get("type").map(Value::as_str),
            None | Some(Some("function"))
        ) && obj.contains_key("function");
        let mut def = if nested {
            match obj.remove("function") {
                Some(Value::Object(f)) => f,
                _ => return Err(err("\"function\" must be an object".into())),
            }
        } else {
            std::mem::take(&mut obj)
        };
        for key in def.keys().chain(obj.keys()) {
            if let Some(meant) = near_miss(key, TOOL_KEYS, UNREAD_KEYS) {
                return Err(err(format!(
                    "unknown key {key:?}; did you mean {meant:?}? (a misspelt key would lose what it holds)"
                )));
            }
        }
        let mut ignored_keys: Vec<String> = def
            .keys()
            .chain(obj.keys())
            .filter(|k| !TOOL_KEYS.contains(&k.as_str()) && !UNREAD_KEYS.contains(&k.as_str()))
            .cloned()
            .collect();
        ignored_keys.sort();
        ignored_keys.dedup();
        // A key beside "function" is read as if inside it, so none is lost; one given in both
        // places with two values is refused, naming both, rather than one of them being dropped.
        for (key, outer) in std::mem::take(&mut obj) {
            if key == "type" {
                obj.insert(key, outer);
                continue;
            }
            match def.get(&key) {
                Some(inner) if *inner != outer => {
                    return Err(err(format!(
                        "{key:?} is {outer} beside \"function\" but {inner} inside it; give it once"
                    )));
                }
                Some(_) => {}
                None => {
                    def.insert(key, outer);
                }
            }
        }
        let name = match def.get("name") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => return Err(err("\"name\" is empty".into())),
            Some(other) => {
                return Err(err(format!(
                    "\"name\" must be a string, found {}",
                    kind_of(other)
                )));
            }
            None => return Err(err("missing \"name\"".into())),
        };
        let named = |message: String| Error::CatalogItem {
            source_name: source_name.to_owned(),
            location: format!("{location} {name:?}"),
            message,
        };
        let description = match def.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(named(format!(
                    "\"description\" must be a string, found {}",
                    kind_of(other)
                )));
            }
        };
        let mut schema_keys = ["input_schema", "inputSchema", "parameters"]
            .into_iter()
            .filter(|k| def.get(*k).is_some_and(|v| !v.is_null()));
        let input_schema = match schema_keys.next() {
            None => None,
            Some(key) => {
                if let Some(second) = schema_keys.next() {
                    return Err(named(format!(
                        "has both \"{key}\" and \"{second}\"; give one schema"
                    )));
                }
                let mut schema = match def.remove(key).unwrap_or(Value::Null) {
                    Value::Object(m) => m,
                    other => {
                        return Err(named(format!(
                            "\"{key}\" must be a JSON Schema object, found {}",
                            kind_of(&other)
                        )));
                    }
                };
                normalize_schema(&mut schema);
                match schema.get("type") {
                    None => {
                        schema.insert("type".into(), Value::String("object".into()));
                    }
                    Some(Value::String(t)) if t == "object" => {}
                    Some(t) => {
                        return Err(named(format!(
                            "\"{key}\" must describe an object (\"type\": \"object\"), found \"type\": {t}"
                        )));
                    }
                }
                if let Some(p) = schema.get("properties").filter(|p| !p.is_object()) {
                    return Err(named(format!(
                        "\"{key}\".properties must be an object, found {}",
                        kind_of(p)
                    )));
                }
                Some(schema)
            }
        };
        let field = |key: &str| {
            obj.get(key)
                .or_else(|| def.get(key))
                .filter(|v| !v.is_null())
        };
        let defer_loading = match field("defer_loading") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(named(format!(
                    "\"defer_loading\" must be true or false, found {other}"
                )));
            }
        };
        let mut tags: Vec<String> = match field("tags") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|t| {
                    t.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| named(format!("\"tags\" must hold strings, found {t}")))
                })
                .collect::<Result<_>>()?,
            Some(other) => {
                return Err(named(format!(
                    "\"tags\" must be an array of strings, found {}",
                    kind_of(other)
                )));
            }
        };
        // A category (ToolBench, RapidAPI and other flat catalogs have one) is one more tag.
        match field("category") {
            None => {}
            Some(Value::String(c)) => {
                let c = c.trim();
                let key = c.to_lowercase();
                let known = tags.iter().any(|t| t.trim().to_lowercase() == key);
                if !c.is_empty() && !known {
                    tags.push(c.to_owned());
                }
            }
            Some(other) => {
                return Err(named(format!(
                    "\"category\" must be a string, found {}",
                    kind_of(other)
                )));
            }
        }
        let annotations = match field("annotations") {
            None => Annotations::default(),
            Some(Value::Object(a)) => {
                if let Some((key, meant)) = a
                    .keys()
                    .find_map(|k| Some((k, near_miss(k, ANNOTATION_KEYS, &[])?)))
                {
                    return Err(named(format!(
                        "unknown key {key:?} in \"annotations\"; did you mean {meant:?}? (a misspelt hint would be lost)"
                    )));
                }
                let hint = |k: &str| -> Result<Option<bool>> {
                    match a.get(k) {
                        None | Some(Value::Null) => Ok(None),
                        Some(Value::Bool(b)) => Ok(Some(*b)),
                        Some(other) => Err(named(format!(
                            "annotations.{k} must be true or false, found {other}"
                        ))),
                    }
                };
                Annotations {
                    read_only: hint("readOnlyHint")?,
                    destructive: hint("destructiveHint")?,
                    raw: Some(a.clone()),
                }
            }
            Some(other) => {
                return Err(named(format!(
                    "\"annotations\" must be an object, found {}",
                    kind_of(other)
                )));
            }
        };
        let model_authored = match field("origin") {
            None => false,
            Some(Value::String(s)) if s == "model" => true,
            Some(Value::String(s)) if s == "builtin" || s == "mcp" => false,
            Some(other) => {
                return Err(named(format!(
                    "\"origin\" must be \"model\", \"builtin\" or \"mcp\", found {other}"
                )));
            }
        };
        let server = match field("server") {
            None => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(other) => {
                return Err(named(format!(
                    "\"server\" must be a non-empty string, found {other}"
                )));
            }
        };
        let title = match field("title") {
            None => None,
            Some(Value::String(t)) => Some(t.clone()),
            Some(other) => {
                return Err(named(format!(
                    "\"title\" must be a string, found {}",
                    kind_of(other)
                )));
            }
        };
        let object = |key: &str, what: &str| match field(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m.clone())),
            Some(other) => Err(named(format!(
                "{key:?} must be {what}, found {}",
                kind_of(other)
            ))),
        };
        let output_schema = object("outputSchema", "a JSON Schema object")?;
        let meta = object("_meta", "an object")?;
        let strict = match field("strict") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(named(format!(
                    "\"strict\" must be true or false, found {other}"
                )));
            }
        };
        Ok(Self {
            name,
            description,
            input_schema,
            title,
            output_schema,
            meta,
            strict,
            defer_loading,
            tags,
            annotations,
            model_authored,
            server,
            description_template: None,
            ignored_keys,
        })
    }
}

/// Reads `"type": "dict"` as `"object"` and `"float"` as `"number"` in every schema of `schema`
/// (itself and its subschemas at any depth): benchmark catalogs use Python type names, and
/// providers reject them. Only schema positions are rewritten: the recursion follows the
/// keywords whose values are schemas (`properties`, `items`, `anyOf`, `$defs`, ...), never data
/// (`default`, `const`, `enum`, `examples`, `example`) nor keywords it does not know, so a
/// default of `{"type": "float"}` stays as given.
pub fn normalize_schema(schema: &mut Map<String, Value>) {
    for (key, value) in schema.iter_mut() {
        match (key.as_str(), value) {
            ("type", Value::String(t)) => fix_type(t),
            ("type", Value::Array(types)) => {
                for t in types {
                    if let Value::String(t) = t {
                        fix_type(t);
                    }
                }
            }
            // A schema, or a list of schemas (`items` was either before draft 2020-12).
            (
                "items"
                | "additionalItems"
                | "additionalProperties"
                | "unevaluatedItems"
                | "unevaluatedProperties"
                | "contains"
                | "propertyNames"
                | "not"
                | "if"
                | "then"
                | "else"
                | "contentSchema"
                | "allOf"
                | "anyOf"
                | "oneOf"
                | "prefixItems",
                value,
            ) => match value {
                Value::Object(sub) => normalize_schema(sub),
                Value::Array(subs) => subs.iter_mut().for_each(normalize_value),
                _ => {}
            },
            // Names to schemas (`dependencies` maps a name to a schema or to a list of names).
            (
                "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas"
                | "dependencies",
                Value::Object(subs),
            ) => subs.values_mut().for_each(normalize_value),
            _ => {}
        }
    }
}

fn normalize_value(value: &mut Value) {
    if let Value::Object(schema) = value {
        normalize_schema(schema);
    }
}

fn fix_type(t: &mut String) {
    let fixed = match t.as_str() {
        "dict" => "object",
        "float" => "number",
        _ => return,
    };
    *t = fixed.to_owned();
}

/// What a JSON value is, for an error that names it: `an array`, `a string`, `null`.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A server's group before canonical naming.
#[derive(Debug, Clone, Default)]
struct Group {
    description: String,
    template: Option<String>,
    /// (item location, spec)
    tools: Vec<(String, ToolSpec)>,
    /// Tool name to its position in `tools`, for the duplicate check.
    names: HashMap<String, usize>,
}

impl Group {
    fn push(&mut self, location: &str, spec: ToolSpec) -> std::result::Result<(), String> {
        if let Some(&first) = self.names.get(&spec.name) {
            return Err(format!(
                "duplicate tool name; {} has the same name in this group",
                self.tools[first].0
            ));
        }
        self.names.insert(spec.name.clone(), self.tools.len());
        self.tools.push((location.to_owned(), spec));
        Ok(())
    }
}

/// Collects tool specs and server groups, then names and sorts them into a [`Catalog`].
///
/// The gateway uses this directly with specs from live servers; files go through
/// [`Catalog::from_json_str`]. Adding is linear in the number of tools (a name map per group), so
/// a 100,000-tool server loads as fast as 100 servers of 1,000.
#[derive(Debug, Default)]
pub struct CatalogBuilder {
    source_name: String,
    builtin: Group,
    servers: BTreeMap<String, Group>,
    declared: BTreeSet<String>,
    kept: Assignments,
    /// Keys loading did not read (keys no supported shape has), each with why: warnings of the
    /// catalog built.
    unread: Vec<String>,
    /// Items loading left out (provider tools, OpenAI custom tools), each with why: warnings of
    /// the catalog built.
    left_out: Vec<String>,
    /// The named items among them, kept by the catalog built.
    left_out_tools: Vec<LeftOut>,
}

/// An item loading left out of the catalog (a provider's tool, an OpenAI custom tool), kept so
/// that a look-up of its name can say so instead of reporting a name no tool has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// The item's `"name"`, as written.
    pub name: String,
    /// The server whose list held it, as written.
    pub server: Option<String>,
    /// Where it was: `cat.json: tools[3] "web_search"`.
    pub location: String,
    /// Why it was left out, as the load warning says.
    pub why: String,
}

impl LeftOut {
    /// The names it would be looked up by: as written and, in a server's list, the canonical
    /// name it would have had.
    fn names(&self) -> impl Iterator<Item = String> + '_ {
        let canonical = self
            .server
            .as_deref()
            .map(|s| name::mcp_name(&name::server_segment(s), &name::tool_segment(&self.name)));
        std::iter::once(self.name.clone()).chain(canonical)
    }
}

/// The canonical names an earlier catalog gave: servers by original name, tools by (original
/// server, original name).
#[derive(Debug, Default)]
struct Assignments {
    servers: HashMap<String, String>,
    tools: HashMap<(Option<String>, String), String>,
}

impl CatalogBuilder {
    /// A builder whose errors name `source_name`.
    pub fn new(source_name: impl Into<String>) -> Self {
        Self {
            source_name: source_name.into(),
            ..Self::default()
        }
    }

    /// Lets every server and tool that `previous` named keep its name (see [`Self::build`]).
    pub fn keep_names(&mut self, previous: &Catalog) {
        self.kept.servers = previous
            .servers()
            .iter()
            .map(|s| (s.original_name.clone(), s.name.clone()))
            .collect();
        self.kept.tools = previous
            .tools()
            .iter()
            .map(|t| {
                let key = (t.original_server.clone(), t.original_name.clone());
                (key, t.name.clone())
            })
            .collect();
    }

    /// Declares a server group (possibly with no tools). Declaring one name twice is an error.
    pub fn add_server(
        &mut self,
        original_name: &str,
        description: &str,
        location: &str,
    ) -> Result<()> {
        if !self.declared.insert(original_name.to_owned()) {
            return Err(Error::CatalogItem {
                source_name: self.source_name.clone(),
                location: format!("{location} {original_name:?}"),
                message: "server declared twice".into(),
            });
        }
        self.servers
            .entry(original_name.to_owned())
            .or_default()
            .description = description.to_owned();
        Ok(())
    }

    /// Gives server group `original_name` (declaring it if needed) a header template.
    pub fn set_server_template(&mut self, original_name: &str, template: String) {
        self.servers
            .entry(original_name.to_owned())
            .or_default()
            .template = Some(template);
    }

    /// Adds a tool: to `server`'s group if given (declaring the group if needed), else to its own
    /// `"server"` field's group, else to the built-ins.
    pub fn add_tool(&mut self, server: Option<&str>, spec: ToolSpec, location: &str) -> Result<()> {
        let server = server.map(str::to_owned).or_else(|| spec.server.clone());
        let group = match server {
            Some(s) => self.servers.entry(s).or_default(),
            None => &mut self.builtin,
        };
        let name = spec.name.clone();
        group
            .push(location, spec)
            .map_err(|message| Error::CatalogItem {
                source_name: self.source_name.clone(),
                location: format!("{location} {name:?}"),
                message,
            })
    }

    /// Lets tools whose own `"server"` field writes a server another way (the same but for case
    /// and for the characters a server's segment rewrites: `GitHub` and `github`, `my.s` and
    /// `my_s`) join one group, as a catalog file means: a group that only such fields made (no
    /// server declared it) joins the declared server written that way, or else the other such
    /// groups, all under the spelling that needs no rewriting (the first in byte order if
    /// several do, or if none does). Declared servers stay apart however they are written, and a
    /// field that writes two of them is refused, as is a tool name that two joined groups share.
    fn join_spellings(&mut self) -> Result<()> {
        let mut by_segment: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for original in self.servers.keys() {
            by_segment
                .entry(name::server_segment(original).to_ascii_lowercase())
                .or_default()
                .push(original.clone());
        }
        for spellings in by_segment.into_values() {
            if spellings.len() < 2 {
                continue;
            }
            let (declared, fields): (Vec<String>, Vec<String>) = spellings
                .into_iter()
                .partition(|s| self.declared.contains(s));
            let Some(first) = fields.first() else {
                continue;
            };
            let into = match declared.as_slice() {
                [one] => one.clone(),
                [] => fields
                    .iter()
                    .min_by_key(|s| (name::server_segment(s) != **s, s.as_str()))
                    .cloned()
                    .unwrap_or_else(|| first.clone()),
                several => {
                    let location = self.servers[first]
                        .tools
                        .first()
                        .map(|(location, spec)| format!("{location} {:?}", spec.name))
                        .unwrap_or_else(|| "server".to_owned());
                    return Err(Error::CatalogItem {
                        source_name: self.source_name.clone(),
                        location,
                        message: format!(
                            "\"server\" is {first:?}, which writes each of the servers {}; name one of them as it is declared",
                            several
                                .iter()
                                .map(|s| format!("{s:?}"))
                                .collect::<Vec<_>>()
                                .join(" and ")
                        ),
                    });
                }
            };
            for from in fields.iter().filter(|s| **s != into) {
                let Some(group) = self.servers.remove(from) else {
                    continue;
                };
                let target = self.servers.entry(into.clone()).or_default();
                for (location, spec) in group.tools {
                    let named = format!("{location} {:?}", spec.name);
                    target
                        .push(&location, spec)
                        .map_err(|message| Error::CatalogItem {
                            source_name: self.source_name.clone(),
                            location: named,
                            message,
                        })?;
                }
            }
        }
        Ok(())
    }

    /// Assigns canonical names, resolves collisions deterministically and sorts.
    ///
    /// A contested name (two servers, or two tools, that would get the same canonical name) goes
    /// to the one whose original name needed no rewriting, if exactly one did; every other
    /// contender gets the name plus a hash of its original. The outcome therefore never depends
    /// on how names sort, so a server cannot take a name a rule was written for by choosing a
    /// name that sorts first. A catalog tool named like a meta-tool never keeps that name.
    ///
    /// With [`Self::keep_names`], a server or tool the earlier catalog named keeps that name
    /// (an incumbent), and a newcomer that wants an incumbent's name loses the contest: a name
    /// a session was shown never moves to another tool while its own tool is there.
    pub fn build(self) -> Catalog {
        // Warnings by kind: unread keys, items left out, then names given otherwise (below).
        let mut warnings = self.unread;
        let unread_end = warnings.len();
        warnings.extend(self.left_out);
        let kinds = [unread_end, warnings.len()];
        let left_out = self.left_out_tools;

        let (server_originals, groups): (Vec<String>, Vec<Group>) =
            self.servers.into_iter().unzip();
        let wanted_servers: Vec<String> = server_originals
            .iter()
            .map(|o| name::server_segment(o))
            .collect();
        let kept = self.kept;
        let server_names = assign(
            &wanted_servers,
            |i| server_originals[i] == wanted_servers[i],
            |i| server_originals[i].as_str(),
            |_| false,
            |i| kept.servers.get(&server_originals[i]).map(String::as_str),
            HashSet::new(),
            (name::MAX_SERVER_LEN, name::server_with_suffix),
            |i, wanted, fixed| {
                warnings.push(format!(
                    "server {:?} would be named {wanted:?} like another server; named {fixed:?} instead",
                    server_originals[i]
                ))
            },
        );

        // Candidates in a fixed order (built-ins, then servers by original name, tools by
        // original name); the order only breaks ties between hash suffixes.
        struct Candidate {
            server: Option<usize>,
            spec: ToolSpec,
            segment: String,
            key: String,
        }
        let total = self.builtin.tools.len() + groups.iter().map(|g| g.tools.len()).sum::<usize>();
        let mut candidates: Vec<Candidate> = Vec::with_capacity(total);
        // The name each candidate wants, parallel to `candidates`.
        let mut wanted: Vec<String> = Vec::with_capacity(total);
        let mut builtin = self.builtin.tools;
        builtin.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        for (_, spec) in builtin {
            let segment = name::tool_segment(&spec.name);
            wanted.push(segment.clone());
            candidates.push(Candidate {
                server: None,
                segment,
                key: spec.name.clone(),
                spec,
            });
        }
        let mut descriptions = Vec::with_capacity(groups.len());
        for (s, group) in groups.into_iter().enumerate() {
            let original = &server_originals[s];
            descriptions.push((group.description, group.template));
            let mut tools = group.tools;
            tools.sort_by(|a, b| a.1.name.cmp(&b.1.name));
            for (_, spec) in tools {
                let segment = name::tool_segment(&spec.name);
                wanted.push(name::mcp_name(&server_names[s], &segment));
                candidates.push(Candidate {
                    server: Some(s),
                    key: format!("{original}\u{0}{}", spec.name),
                    segment,
                    spec,
                });
            }
        }
        let exact = |i: usize| {
            let c = &candidates[i];
            match c.server {
                None => c.spec.name == wanted[i],
                Some(s) => {
                    server_originals[s] == wanted_servers[s]
                        && server_names[s] == wanted_servers[s]
                        && c.spec.name == c.segment
                }
            }
        };
        let reserved = |i: usize| {
            candidates[i].server.is_none() && name::META_TOOLS.contains(&wanted[i].as_str())
        };
        // A tool keeps its name only under its server's current name.
        let kept_tool = |i: usize| {
            if kept.tools.is_empty() {
                return None;
            }
            let c = &candidates[i];
            let original_server = c.server.map(|s| server_originals[s].clone());
            let name = kept.tools.get(&(original_server, c.spec.name.clone()))?;
            match c.server {
                None => Some(name.as_str()),
                Some(s) => name
                    .strip_prefix(name::MCP_PREFIX)
                    .and_then(|rest| rest.strip_prefix(server_names[s].as_str()))
                    .is_some_and(|rest| rest.starts_with("__"))
                    .then_some(name.as_str()),
            }
        };
        let tool_names = assign(
            &wanted,
            exact,
            |i| candidates[i].key.as_str(),
            reserved,
            kept_tool,
            name::META_TOOLS.iter().map(|m| (*m).to_owned()).collect(),
            (name::MAX_NAME_LEN, name::with_suffix),
            |i, w, fixed| {
                let c = &candidates[i];
                let of = c
                    .server
                    .map(|s| format!(" of server {:?}", server_originals[s]))
                    .unwrap_or_default();
                warnings.push(if reserved(i) {
                    format!(
                        "tool {:?}{of} has the name of toolshelf's own meta-tool; named {fixed:?} instead (calls reach the original)",
                        c.spec.name
                    )
                } else {
                    format!(
                        "tool {:?}{of} would be named {w:?} like another tool; named {fixed:?} instead",
                        c.spec.name
                    )
                });
            },
        );

        let mut tools = Vec::with_capacity(candidates.len());
        for ((c, canon), wanted) in candidates.into_iter().zip(tool_names).zip(wanted) {
            let server = c.server.map(|s| server_names[s].clone());
            let original_server = c.server.map(|s| server_originals[s].clone());
            let origin = if c.spec.model_authored {
                Origin::Model
            } else if server.is_some() {
                Origin::Mcp
            } else {
                Origin::Builtin
            };
            let bare = match &server {
                Some(s) => canon
                    .strip_prefix(&format!("{}{s}__", name::MCP_PREFIX))
                    .map(str::to_owned)
                    .unwrap_or_else(|| c.segment.clone()),
                None => canon.clone(),
            };
            let mut aliases = vec![wanted];
            match (&original_server, c.server) {
                (Some(os), Some(s)) => {
                    // Also the name before the server itself lost a contest for its segment,
                    // and the one with the segment in full when a long server name was cut.
                    aliases.push(name::mcp_name(&wanted_servers[s], &c.segment));
                    aliases.push(name::mcp_name(
                        &name::server_segment_in_full(os),
                        &c.segment,
                    ));
                    aliases.push(name::mcp_name(os, &c.spec.name));
                }
                _ => aliases.push(c.spec.name.clone()),
            }
            aliases.retain(|a| *a != canon);
            aliases.sort();
            aliases.dedup();
            tools.push(Tool {
                name: canon,
                original_name: c.spec.name,
                original_server,
                aliases,
                bare,
                server,
                description: c.spec.description,
                input_schema: c.spec.input_schema.unwrap_or_else(empty_object_schema),
                title: c.spec.title,
                output_schema: c.spec.output_schema,
                meta: c.spec.meta,
                strict: c.spec.strict,
                defer_loading: c.spec.defer_loading,
                tags: c.spec.tags,
                annotations: c.spec.annotations,
                origin,
                description_template: c.spec.description_template,
            });
        }
        tools.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));

        let mut servers: Vec<Server> = server_originals
            .into_iter()
            .zip(server_names)
            .zip(descriptions)
            .map(|((original, canon), (description, template))| Server {
                name: canon,
                original_name: original,
                description,
                description_template: template,
            })
            .collect();
        servers.sort_by(|a, b| a.name.cmp(&b.name));
        let mut catalog = Catalog::new(self.source_name, servers, tools, warnings);
        catalog.left_out = left_out;
        catalog.warning_kinds = kinds;
        catalog
    }
}
/// Gives each of `wanted` (indexed by candidate) a distinct final name; see
/// [`CatalogBuilder::build`] for the rule. `key(i)` is unique per candidate and seeds its hash
/// suffix; `kept(i)` is the name an earlier catalog gave it; `taken` holds names no candidate may
/// have; `renamed(i, wanted, final)` is told of every candidate that lost its wanted name.
/// A name longer than `limit` (and every name that loses a contest) becomes `suffixed(name, key)`.
#[allow(clippy::too_many_arguments)]
fn assign<'k, 'p>(
    wanted: &[String],
    exact: impl Fn(usize) -> bool,
    key: impl Fn(usize) -> &'k str,
    reserved: impl Fn(usize) -> bool,
    kept: impl Fn(usize) -> Option<&'p str>,
    mut taken: HashSet<String>,
    (limit, suffixed): (usize, fn(&str, &str) -> String),
    mut renamed: impl FnMut(usize, &str, &str),
) -> Vec<String> {
    let mut out = vec![String::new(); wanted.len()];
    // Incumbents first: their names come from one earlier catalog, so they are distinct.
    let mut held: HashSet<&str> = HashSet::new();
    for (i, slot) in out.iter_mut().enumerate() {
        if let Some(k) = kept(i).filter(|k| !taken.contains(*k) && !held.contains(*k)) {
            held.insert(k);
            *slot = k.to_owned();
        }
    }
    taken.extend(held.iter().map(|k| (*k).to_owned()));
    let mut by_wanted: HashMap<&str, Vec<usize>> = HashMap::with_capacity(wanted.len());
    for (i, w) in wanted.iter().enumerate() {
        if out[i].is_empty() {
            by_wanted.entry(w.as_str()).or_default().push(i);
        }
    }
    let owns = |i: usize| {
        if reserved(i) || held.contains(wanted[i].as_str()) {
            return false;
        }
        let contenders = &by_wanted[wanted[i].as_str()];
        contenders.len() == 1
            || (exact(i)
                && contenders
                    .iter()
                    .filter(|&&j| exact(j) && !reserved(j))
                    .count()
                    == 1)
    };
    let mut later = Vec::new();
    // Owners of names that fit go next: their names are distinct by construction.
    for (i, w) in wanted.iter().enumerate() {
        if !out[i].is_empty() {
            continue;
        }
        if owns(i) && w.len() <= limit && !taken.contains(w) {
            taken.insert(w.clone());
            out[i] = w.clone();
        } else {
            later.push(i);
        }
    }
    for i in later {
        let owner = owns(i);
        let mut fixed = if owner && wanted[i].len() <= limit {
            wanted[i].clone()
        } else {
            suffixed(&wanted[i], key(i))
        };
        let mut attempt = 0u32;
        while taken.contains(&fixed) {
            attempt += 1;
            fixed = suffixed(&wanted[i], &format!("{}\u{0}{attempt}", key(i)));
        }
        if !owner || attempt > 0 {
            renamed(i, &wanted[i], &fixed);
        }
        taken.insert(fixed.clone());
        out[i] = fixed;
    }
    out
}

fn sort_key(t: &Tool) -> (bool, &str, &str) {
    (
        t.server.is_some(),
        t.server.as_deref().unwrap_or(""),
        &t.name,
    )
}

/// The schema of a tool that declared none: an object with no properties.
pub fn empty_object_schema() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), Value::String("object".into()));
    m.insert("properties".into(), Value::Object(Map::new()));
    m
}

/// A loaded, named and sorted catalog.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    source_name: String,
    servers: Vec<Server>,
    tools: Vec<Tool>,
    warnings: Vec<String>,
    /// Tool indices sorted by canonical name, for binary search (no copy of any name).
    by_name: Vec<u32>,
    /// (hash of a bare, original or alias name, tool index), sorted: a lookup hashes the name
    /// and checks the few tools under that hash.
    by_short: Vec<(u64, u32)>,
    /// (hash of the [`name::fold`] of a canonical, bare, original or alias name, tool index),
    /// sorted: the same for names that match no tool as they are written.
    by_fold: Vec<(u64, u32)>,
    /// The named items loading left out, in file order.
    left_out: Vec<LeftOut>,
    /// Where each kind of `warnings` ends but the last: see [`Self::warnings_by_kind`].
    warning_kinds: [usize; 2],
}

impl Catalog {
    fn new(
        source_name: String,
        servers: Vec<Server>,
        tools: Vec<Tool>,
        warnings: Vec<String>,
    ) -> Self {
        let mut by_name: Vec<u32> = (0..tools.len() as u32).collect();
        by_name.sort_unstable_by(|&a, &b| tools[a as usize].name.cmp(&tools[b as usize].name));
        let mut by_short: Vec<(u64, u32)> = Vec::with_capacity(tools.len() * 3);
        for (i, t) in tools.iter().enumerate() {
            for n in t.short_names() {
                by_short.push((name::fnv1a64(n.as_bytes()), i as u32));
            }
        }
        by_short.sort_unstable();
        by_short.dedup();
        let mut by_fold: Vec<(u64, u32)> = Vec::with_capacity(tools.len() * 4);
        for (i, t) in tools.iter().enumerate() {
            for n in std::iter::once(t.name.as_str()).chain(t.short_names()) {
                let folded = name::fold(n);
                if !folded.is_empty() {
                    by_fold.push((name::fnv1a64(folded.as_bytes()), i as u32));
                }
            }
        }
        by_fold.sort_unstable();
        by_fold.dedup();
        Self {
            source_name,
            servers,
            tools,
            warnings,
            by_name,
            by_short,
            by_fold,
            left_out: Vec::new(),
            warning_kinds: [0; 2],
        }
    }

    /// Parses a catalog file's text (a leading byte-order mark skipped); `source_name` labels
    /// errors.
    pub fn from_json_str(text: &str, source_name: &str) -> Result<Self> {
        let text = crate::json::without_bom(text);
        let value = crate::json::parse(text).map_err(|e| Error::CatalogJson {
            source_name: source_name.to_owned(),
            message: crate::json::in_words(&e, text, false),
        })?;
        Self::from_owned(value, source_name)
    }

    /// Reads a catalog in any supported shape (see the module docs and README).
    pub fn from_value(value: &Value, source_name: &str) -> Result<Self> {
        Self::from_owned(value.clone(), source_name)
    }

    /// [`Self::from_value`] taking the value, whose tool schemas then move into the catalog
    /// instead of being copied.
    pub fn from_owned(value: Value, source_name: &str) -> Result<Self> {
        Self::from_owned_adding(value, source_name, &[], "")
    }

    /// [`Self::from_json_str`] with the built-ins `add` (catalog items, at `location` in errors)
    /// added to the file's tools before names are given, as a session adds its own tools
    /// (`tool_define`) to its servers'. One that shares a built-in's name is an error.
    pub fn from_json_str_adding(
        text: &str,
        source_name: &str,
        add: &[Value],
        location: &str,
    ) -> Result<Self> {
        let text = crate::json::without_bom(text);
        let value = crate::json::parse(text).map_err(|e| Error::CatalogJson {
            source_name: source_name.to_owned(),
            message: crate::json::in_words(&e, text, false),
        })?;
        Self::from_owned_adding(value, source_name, add, location)
    }

    fn from_owned_adding(
        value: Value,
        source_name: &str,
        add: &[Value],
        location: &str,
    ) -> Result<Self> {
        let mut b = CatalogBuilder::new(source_name);
        let shape_err = |message: String| Error::CatalogShape {
            source_name: source_name.to_owned(),
            message,
        };
        match value {
            Value::Array(items) => add_list(&mut b, items, None, source_name, "")?,
            Value::Object(mut obj)
                if obj.contains_key("builtin") || obj.contains_key("servers") =>
            {
                if let Some(unknown) = obj
                    .keys()
                    .find(|k| !matches!(k.as_str(), "builtin" | "servers"))
                {
                    return Err(shape_err(format!(
                        "unknown top-level key {unknown:?} in grouped catalog (expected \"builtin\" and \"servers\")"
                    )));
                }
                match obj.remove("builtin") {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(items)) => {
                        add_list(&mut b, items, None, source_name, "builtin")?
                    }
                    Some(other) => {
                        return Err(shape_err(format!(
                            "\"builtin\" must be an array of tools, found {}",
                            kind_of(&other)
                        )));
                    }
                }
                match obj.remove("servers") {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(servers)) => {
                        for (i, s) in servers.into_iter().enumerate() {
                            add_server_value(&mut b, s, i, source_name)?;
                        }
                    }
                    Some(other) => {
                        return Err(shape_err(format!(
                            "\"servers\" must be an array, found {}",
                            kind_of(&other)
                        )));
                    }
                }
            }
            Value::Object(mut obj) if obj.contains_key("tools") => {
                if obj.get("nextCursor").is_some_and(|c| !c.is_null()) {
                    return Err(shape_err(
                        "this is one page of a paged tools/list (it has a \"nextCursor\"); \
                         give every page's tools in one list, or capture them with `toolshelf catalog`"
                            .into(),
                    ));
                }
                let mut ignored: Vec<String> = obj
                    .keys()
                    .filter(|k| !matches!(k.as_str(), "tools" | "nextCursor" | "_meta"))
                    .cloned()
                    .collect();
                if !ignored.is_empty() {
                    ignored.sort();
                    b.unread.push(format!(
                        "{source_name}: {} (a tools/list result has \"tools\", \"nextCursor\" and \"_meta\")",
                        unread(&ignored)
                    ));
                }
                match obj.remove("tools").unwrap_or(Value::Null) {
                    Value::Array(items) => add_list(&mut b, items, None, source_name, "tools")?,
                    other => {
                        return Err(shape_err(format!(
                            "\"tools\" must be an array, found {}",
                            kind_of(&other)
                        )));
                    }
                }
            }
            Value::Object(obj) if obj.contains_key("mcpServers") => {
                return Err(shape_err(
                    "this is an MCP client configuration (\"mcpServers\"), not a tool catalog; \
                     run `toolshelf catalog --mcp-config FILE` to capture the servers' tools"
                        .into(),
                ));
            }
            other => {
                return Err(shape_err(format!(
                    "expected a JSON array of tools, an MCP tools/list result {{\"tools\": [...]}}, \
                     or a grouped catalog {{\"builtin\": [...], \"servers\": [...]}}; found {}",
                    kind_of(&other)
                )));
            }
        }
        for item in add {
            let spec = ToolSpec::from_value(item.clone(), source_name, location)?;
            b.add_tool(None, spec, location)?;
        }
        b.join_spellings()?;
        Ok(b.build())
    }

    /// Label of the source, as used in errors.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// Every tool, sorted: built-ins (and model tools) by name, then servers by name, tools by name.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Every server, sorted by canonical name.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Warnings from loading (items and keys left out) and naming (collisions).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// [`Self::warnings`] by kind, so that many of one kind cannot hide another: keys loading did
    /// not read, items it left out, and tools or servers named otherwise than written.
    pub fn warnings_by_kind(&self) -> [&[String]; 3] {
        let [unread, left_out] = self.warning_kinds;
        [
            &self.warnings[..unread],
            &self.warnings[unread..left_out],
            &self.warnings[left_out..],
        ]
    }

    /// The item loading left out under `name`: its name as written, the canonical name it would
    /// have had in its server's list, or either with case and separators folded away as
    /// [`Self::resolve`] folds them. For a name that resolves to no tool, so that it is not taken
    /// for a misspelling.
    pub fn left_out(&self, name: &str) -> Option<&LeftOut> {
        if let Some(l) = self.left_out.iter().find(|l| l.names().any(|n| n == name)) {
            return Some(l);
        }
        let wanted = name::fold(name);
        if wanted.is_empty() {
            return None;
        }
        self.left_out
            .iter()
            .find(|l| l.names().any(|n| name::fold(&n) == wanted))
    }

    /// The server with canonical name `name`.
    pub fn server(&self, name: &str) -> Option<&Server> {
        self.servers
            .binary_search_by(|s| s.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.servers[i])
    }

    /// Index of the tool with canonical name `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.by_name
            .binary_search_by(|&i| self.tools[i as usize].name.as_str().cmp(name))
            .ok()
            .map(|k| self.by_name[k] as usize)
    }

    /// The tool with canonical name `name`.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.position(name).map(|i| &self.tools[i])
    }

    /// Resolves a name: canonical first, else bare, original or alias (see [`Tool::aliases`]),
    /// which is ambiguous when several tools have it; else, when no tool has the name as written,
    /// the name with case and the separators `_ - .` and spaces folded away ([`Self::folded`]):
    /// `GIT-LOG` or `gitlog` is `mcp__git__git_log` when no other tool folds to `gitlog`, and
    /// ambiguous when several do. The result depends on the set of tools only, never on the order
    /// a catalog file lists them in.
    pub fn resolve(&self, name: &str) -> Resolution {
        match self.resolve_exact(name) {
            Resolution::NotFound => {}
            found => return found,
        }
        let hits = self.folded(name);
        match hits.len() {
            0 => Resolution::NotFound,
            1 => Resolution::Bare(hits[0]),
            _ => Resolution::Ambiguous(hits),
        }
    }

    /// [`Self::resolve`] without folding: the name exactly as some tool has it, canonical, bare,
    /// original or alias. For a caller that must let another exact name win over a folded one
    /// (a tool outside the catalog with exactly this name, say).
    pub fn resolve_exact(&self, name: &str) -> Resolution {
        if let Some(i) = self.position(name) {
            return Resolution::Exact(i);
        }
        let hash = name::fnv1a64(name.as_bytes());
        let from = self.by_short.partition_point(|&(h, _)| h < hash);
        let hits: Vec<usize> = self.by_short[from..]
            .iter()
            .take_while(|&&(h, _)| h == hash)
            .map(|&(_, i)| i as usize)
            .filter(|&i| self.tools[i].short_names().any(|n| n == name))
            .collect();
        match hits.len() {
            0 => Resolution::NotFound,
            1 => Resolution::Bare(hits[0]),
            _ => Resolution::Ambiguous(hits),
        }
    }

    /// Every tool with a name (canonical, bare, original or alias) whose [`name::fold`] is that
    /// of `name`, in catalog order; none for a name that folds to nothing (`_`, `--`).
    pub fn folded(&self, name: &str) -> Vec<usize> {
        let wanted = name::fold(name);
        if wanted.is_empty() {
            return Vec::new();
        }
        let hash = name::fnv1a64(wanted.as_bytes());
        let from = self.by_fold.partition_point(|&(h, _)| h < hash);
        // One hash's entries are sorted by tool index, so the hits are in catalog order.
        self.by_fold[from..]
            .iter()
            .take_while(|&&(h, _)| h == hash)
            .map(|&(_, i)| i as usize)
            .filter(|&i| {
                let t = &self.tools[i];
                std::iter::once(t.name.as_str())
                    .chain(t.short_names())
                    .any(|n| name::folded_chars(n).eq(wanted.chars()))
            })
            .collect()
    }
}

fn add_list(
    b: &mut CatalogBuilder,
    items: Vec<Value>,
    server: Option<&str>,
    source: &str,
    prefix: &str,
) -> Result<()> {
    for (i, item) in items.into_iter().enumerate() {
        let location = if prefix.is_empty() {
            format!("[{i}]")
        } else {
            format!("{prefix}[{i}]")
        };
        let template = match item.get("description_template") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(t.clone()),
            Some(other) => {
                return Err(Error::CatalogItem {
                    source_name: source.to_owned(),
                    location,
                    message: format!(
                        "\"description_template\" must be a string (Starlark source), found {}",
                        kind_of(other)
                    ),
                });
            }
        };
        if let Some(typed) = typed_tool(&item) {
            let location = match item.get("name").and_then(Value::as_str) {
                Some(name) => format!("{location} {name:?}"),
                None => location,
            };
            match typed {
                // A client's tool list as sent holds them beside its own tools.
                Typed::Provider(why) => {
                    b.left_out
                        .push(format!("{source}: {location}: left out: {why}"));
                    if let Some(name) = item.get("name").and_then(Value::as_str) {
                        b.left_out_tools.push(LeftOut {
                            name: name.to_owned(),
                            server: server
                                .or_else(|| item.get("server").and_then(Value::as_str))
                                .map(str::to_owned),
                            location: format!("{source}: {location}"),
                            why,
                        });
                    }
                    continue;
                }
                Typed::Wrong(message) => {
                    return Err(Error::CatalogItem {
                        source_name: source.to_owned(),
                        location,
                        message,
                    });
                }
            }
        }
        let mut spec = ToolSpec::from_value(item, source, &location)?;
        spec.description_template = template;
        if !spec.ignored_keys.is_empty() {
            let mut why = unread(&spec.ignored_keys);
            if spec.input_schema.is_none() {
                why.push_str(
                    "; the tool is loaded taking no parameters (an input schema goes in \
                     \"input_schema\", \"inputSchema\" or \"parameters\")",
                );
            }
            b.unread
                .push(format!("{source}: {location} {:?}: {why}", spec.name));
        }
        // The same server written another way (`GitHub` and `github`, `my.server` and
        // `my_server`) is no conflict: both name the one group.
        if let (Some(group), Some(own)) = (server, spec.server.as_deref())
            && !name::server_segment(group).eq_ignore_ascii_case(&name::server_segment(own))
        {
            return Err(Error::CatalogItem {
                source_name: source.to_owned(),
                location: format!("{location} {:?}", spec.name),
                message: format!(
                    "\"server\" is {own:?}, but the tool is listed under server {group:?}; list it under one server"
                ),
            });
        }
        b.add_tool(server, spec, &location)?;
    }
    Ok(())
}

/// The warning for `keys`, which no supported shape defines: what they hold is lost.
fn unread(keys: &[String]) -> String {
    let listed = keys
        .iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if keys.len() == 1 {
        format!("unknown key {listed} is not read, and what it holds is left out")
    } else {
        format!("unknown keys {listed} are not read, and what they hold is left out")
    }
}

/// What an item's `"type"` says, when it says it is no tool a catalog describes.
enum Typed {
    /// A provider's own tool (an Anthropic server tool such as `web_search_20250305`, a tool of
    /// the provider's schema such as `bash_20250124`, an OpenAI hosted tool), which the proxy
    /// passes along as sent and never defers: left out of the catalog, with why.
    Provider(String),
    /// A `"type"` no tool has (`"object"`, a schema's, written on the tool; not a string).
    Wrong(String),
}

/// What `item`'s `"type"` makes it, when that is no catalog tool. Function tools (`"function"`)
/// and Anthropic's `"custom"` (an ordinary client tool, which has an `input_schema`) are catalog
/// tools; OpenAI's `"custom"` (freeform text input, perhaps constrained by a `format`, and no
/// input schema) is not.
fn typed_tool(item: &Value) -> Option<Typed> {
    let ty = item.get("type")?;
    match ty.as_str() {
        Some("custom") if is_openai_custom(item) => Some(Typed::Provider(
            "\"type\": \"custom\" with a \"format\" or without an input schema makes this an OpenAI \
             custom tool (freeform text input, constrained by its \"format\" if it has one), not one \
             a catalog describes: \
             it has no parameters to show or check, its calls are of their own kind, and the proxy \
             passes it along as sent and never defers it"
                .to_owned(),
        )),
        Some("function" | "custom") => None,
        Some("object") => Some(Typed::Wrong(
            "\"type\": \"object\" belongs in the tool's input schema (\"input_schema\", \"inputSchema\" \
             or \"parameters\"), not on the tool"
                .to_owned(),
        )),
        Some(t) => Some(Typed::Provider(format!(
            "\"type\": {t:?} makes this a provider's tool (a server tool such as web_search, or one of \
             the provider's own schema such as bash or text_editor), not one a catalog describes: \
             its definition is the provider's, and the proxy passes it along as sent and never \
             defers it"
        ))),
        None => Some(Typed::Wrong(format!(
            "\"type\" must be a string (\"function\" or \"custom\"), found {}",
            kind_of(ty)
        ))),
    }
}

/// Whether a `"type": "custom"` item is OpenAI's freeform tool: it has a `"format"` (Responses)
/// or a `"custom"` object (Chat Completions), or no input schema at all, which Anthropic's
/// `custom` tools always have.
fn is_openai_custom(item: &Value) -> bool {
    let has = |k: &str| item.get(k).is_some_and(|v| !v.is_null());
    has("format")
        || has("custom")
        || !["input_schema", "inputSchema", "parameters"]
            .into_iter()
            .any(has)
}

fn add_server_value(b: &mut CatalogBuilder, value: Value, i: usize, source: &str) -> Result<()> {
    let location = format!("servers[{i}]");
    let err = |location: String, message: String| Error::CatalogItem {
        source_name: source.to_owned(),
        location,
        message,
    };
    let mut obj = match value {
        Value::Object(m) => m,
        other => {
            return Err(err(
                location,
                format!("expected a server object, found {}", kind_of(&other)),
            ));
        }
    };
    if let Some((key, meant)) = obj
        .keys()
        .find_map(|k| Some((k, near_miss(k, SERVER_KEYS, &[])?)))
    {
        return Err(err(
            location,
            format!(
                "unknown key {key:?}; did you mean {meant:?}? (a misspelt key would lose what it holds)"
            ),
        ));
    }
    let name = match obj.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(other) => {
            return Err(err(
                location,
                format!("\"name\" must be a non-empty string, found {other}"),
            ));
        }
        None => return Err(err(location, "missing \"name\"".into())),
    };
    let named = format!("{location} {name:?}");
    let mut ignored: Vec<String> = obj
        .keys()
        .filter(|k| !SERVER_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    if !ignored.is_empty() {
        ignored.sort();
        let mut why = format!(
            "{} (a server has \"name\", \"description\", \"description_template\" and \"tools\")",
            unread(&ignored)
        );
        if ignored.iter().any(|k| k == "defer_loading") {
            why.push_str(&format!(
                "; \"defer_loading\" goes on each tool, or a [defer] rule such as \"NoDefer(^mcp__{}__)\" keeps a server's tools resident",
                name::server_segment(&name)
            ));
        }
        b.unread.push(format!("{source}: {named}: {why}"));
    }
    let description = match obj.get("description") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(err(
                named,
                format!("\"description\" must be a string, found {}", kind_of(other)),
            ));
        }
    };
    b.add_server(&name, description, &location)?;
    match obj.get("description_template") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) => b.set_server_template(&name, t.clone()),
        Some(other) => {
            return Err(err(
                named,
                format!(
                    "\"description_template\" must be a string (Starlark source), found {}",
                    kind_of(other)
                ),
            ));
        }
    }
    match obj.remove("tools") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) => {
            add_list(b, items, Some(&name), source, &format!("{named} tools"))
        }
        Some(other) => Err(err(
            named,
            format!("\"tools\" must be an array, found {}", kind_of(&other)),
        )),
    }
}

/// `catalog` without the tools named in `remove` and with `add` (catalog items, built-ins unless
/// they name a server), named and sorted anew. Tools the model wrote keep their origin. A session
/// whose tools change (a transcript's `tools_changed`, a tool the model defines) builds its
/// catalog this way.
pub fn rebuilt(
    catalog: &Catalog,
    add: &[Value],
    remove: &[String],
    label: &str,
) -> Result<Catalog, String> {
    rebuild_from(catalog, add, remove, label, false, false)
}

/// [`rebuilt`] with `add` read as a client's tools ([`ToolSpec::as_client_tool`]): a client that
/// changes its tool list mid-conversation (a transcript's `tools_changed`) gets them named as
/// the proxy names them.
pub fn rebuilt_with_client_tools(
    catalog: &Catalog,
    add: &[Value],
    remove: &[String],
    label: &str,
) -> Result<Catalog, String> {
    rebuild_from(catalog, add, remove, label, false, true)
}

/// [`rebuilt`] in which every tool of `catalog` keeps its canonical name (see
/// [`CatalogBuilder::keep_names`]): an added tool that wants a name already given loses it.
pub fn rebuilt_keeping_names(
    catalog: &Catalog,
    add: &[Value],
    remove: &[String],
    label: &str,
) -> Result<Catalog, String> {
    rebuild_from(catalog, add, remove, label, true, false)
}

/// [`rebuilt`], keeping the names of `catalog`'s tools when `keep_names`, and with `add` read as a
/// client's tools when `client`.
fn rebuild_from(
    catalog: &Catalog,
    add: &[Value],
    remove: &[String],
    label: &str,
    keep_names: bool,
    client: bool,
) -> Result<Catalog, String> {
    let mut b = CatalogBuilder::new(label);
    if keep_names {
        b.keep_names(catalog);
    }
    for s in catalog.servers() {
        b.add_server(&s.original_name, &s.description, "server")
            .map_err(|e| e.to_string())?;
        if let Some(template) = &s.description_template {
            b.set_server_template(&s.original_name, template.clone());
        }
    }
    for t in catalog.tools() {
        if remove.contains(&t.name) {
            continue;
        }
        // Every field the tool was read with, as it was read: the tool is the same tool.
        let spec = ToolSpec {
            name: t.original_name.clone(),
            description: t.description.clone(),
            input_schema: Some(t.input_schema.clone()),
            title: t.title.clone(),
            output_schema: t.output_schema.clone(),
            meta: t.meta.clone(),
            strict: t.strict,
            defer_loading: t.defer_loading,
            tags: t.tags.clone(),
            annotations: t.annotations.clone(),
            model_authored: t.origin == Origin::Model,
            server: None,
            description_template: t.description_template.clone(),
            ignored_keys: Vec::new(),
        };
        b.add_tool(t.original_server.as_deref(), spec, "tool")
            .map_err(|e| e.to_string())?;
    }
    for (k, item) in add.iter().enumerate() {
        let at = format!("tools_changed.add[{k}]");
        let spec = ToolSpec::from_value(item.clone(), label, &at).map_err(|e| e.to_string())?;
        let spec = if client { spec.as_client_tool() } else { spec };
        b.add_tool(None, spec, &at).map_err(|e| e.to_string())?;
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load(v: Value) -> Result<Catalog> {
        Catalog::from_value(&v, "cat.json")
    }

    fn names(c: &Catalog) -> Vec<&str> {
        c.tools().iter().map(|t| t.name.as_str()).collect()
    }

    /// A misspelt key would silently lose a schema, a description or a server's tools: it is
    /// refused, naming the key meant. The keys real MCP servers add are no slips.
    #[test]
    fn misspelt_keys_are_refused_and_real_mcp_keys_are_not() {
        for (catalog, says) in [
            (
                json!([{"name": "t", "descripton": "Reads."}]),
                "[0]: unknown key \"descripton\"; did you mean \"description\"?",
            ),
            (
                json!([{"name": "t", "inputschema": {"type": "object"}}]),
                "did you mean \"inputSchema\"?",
            ),
            (
                json!([{"name": "t", "defer_loadnig": true}]),
                "did you mean \"defer_loading\"?",
            ),
            (
                json!({"servers": [{"name": "git", "Tools": [{"name": "t"}]}]}),
                "servers[0]: unknown key \"Tools\"; did you mean \"tools\"?",
            ),
            (
                json!({"servers": [{"name": "git", "tols": [{"name": "t"}]}]}),
                "did you mean \"tools\"?",
            ),
            (
                json!({"tools": [{"name": "t"}], "nextCursor": "page2"}),
                "one page of a paged tools/list",
            ),
        ] {
            let e = load(catalog).expect_err(says).to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        let c = load(
            json!({"tools": [{"name": "t", "title": "T", "annotations": {"readOnlyHint": true},
                    "outputSchema": {"type": "object"}, "_meta": {}, "icons": [], "execution": {}}],
                    "nextCursor": null}),
        )
        .expect("an MCP tools/list result");
        assert_eq!(names(&c), ["t"]);
        load(json!({"servers": [{"name": "s", "args": [], "command": "x", "tools": []}]}))
            .expect("far from every server key");
    }

    #[test]
    fn detects_every_tool_shape() {
        let c = load(json!([
            {"name": "a", "description": "anthropic", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}},
            {"type": "function", "function": {"name": "b", "description": "openai", "parameters": {"type": "object", "properties": {"y": {"type": "integer"}}}}},
            {"type": "function", "name": "c", "description": "responses", "parameters": {"type": "object"}},
            {"name": "d", "description": "mcp", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
            {"name": "e", "description": "bare", "parameters": {"type": "dict", "properties": {"z": {"type": "float"}}}},
            {"name": "f", "description": "no schema"}
        ]))
        .expect("catalog");
        assert_eq!(names(&c), ["a", "b", "c", "d", "e", "f"]);
        let t = |n| c.get(n).expect("tool");
        assert_eq!(t("a").input_schema["properties"]["x"]["type"], "string");
        assert_eq!(t("b").input_schema["properties"]["y"]["type"], "integer");
        assert_eq!(t("b").description, "openai");
        assert!(t("d").is_read_only());
        assert_eq!(t("e").input_schema["type"], "object");
        assert_eq!(t("e").input_schema["properties"]["z"]["type"], "number");
        assert_eq!(
            Value::Object(t("f").input_schema.clone()),
            json!({"type": "object", "properties": {}})
        );
        assert!(c.servers().is_empty());
    }

    #[test]
    fn a_category_is_one_more_tag() {
        let c = load(json!([
            {"name": "a", "category": " Logistics ", "tags": ["parcel"]},
            {"name": "b", "category": "travel", "tags": ["Travel"]},
            {"name": "c", "category": ""}
        ]))
        .expect("catalog");
        let tags = |n| c.get(n).expect("tool").tags.clone();
        assert_eq!(tags("a"), ["parcel", "Logistics"]);
        assert_eq!(tags("b"), ["Travel"]);
        assert!(tags("c").is_empty());
        let e = load(json!([{"name": "d", "category": ["x"]}])).expect_err("not a string");
        let msg = e.to_string();
        assert!(
            msg.contains("\"d\"") && msg.contains("\"category\" must be a string, found an array"),
            "{msg}"
        );
    }

    #[test]
    fn detects_tools_list_and_grouped_forms() {
        let c = load(json!({"tools": [{"name": "x", "inputSchema": {"type": "object"}}]}))
            .expect("tools/list");
        assert_eq!(names(&c), ["x"]);
        let c = load(json!({
            "builtin": [{"name": "Read"}, {"name": "late", "server": "docs"}],
            "servers": [
                {"name": "docs", "description": "Docs", "tools": [{"name": "read_doc"}]},
                {"name": "empty", "description": "nothing"}
            ]
        }))
        .expect("grouped");
        assert_eq!(
            names(&c),
            ["Read", "mcp__docs__late", "mcp__docs__read_doc"]
        );
        assert_eq!(c.servers().len(), 2);
        assert_eq!(c.server("docs").expect("docs").description, "Docs");
        let t = c.get("mcp__docs__late").expect("joined");
        assert_eq!(
            (t.server.as_deref(), t.bare.as_str(), t.origin),
            (Some("docs"), "late", Origin::Mcp)
        );
    }

    #[test]
    fn a_server_field_joins_that_group_in_any_shape() {
        let c = load(json!([
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}, "server": "Asset Price MCP"},
            {"name": "g", "server": "Asset Price MCP"}
        ]))
        .expect("catalog");
        assert_eq!(
            names(&c),
            ["mcp__Asset_Price_MCP__f", "mcp__Asset_Price_MCP__g"]
        );
        assert_eq!(c.servers()[0].original_name, "Asset Price MCP");
    }

    #[test]
    fn canonical_names_are_valid_and_keep_the_originals() {
        let long = "x".repeat(70);
        let c = load(json!({"servers": [
            {"name": "Asset Price MCP", "tools": [{"name": "triangle_properties.get"}, {"name": long.clone()}]}
        ]}))
        .expect("catalog");
        for t in c.tools() {
            assert!(name::is_valid(&t.name), "{}", t.name);
        }
        let t = c
            .get("mcp__Asset_Price_MCP__triangle_properties_get")
            .expect("sanitized");
        assert_eq!(t.original_name, "triangle_properties.get");
        let l = c
            .tools()
            .iter()
            .find(|t| t.original_name == long)
            .expect("long");
        assert_eq!(l.name.len(), 64);
        assert!(l.name.starts_with("mcp__Asset_Price_MCP__xxx"));
    }

    #[test]
    fn a_contested_name_goes_to_the_exact_original_whatever_the_order() {
        let a = json!({"servers": [{"name": "s", "tools": [{"name": "a.b"}, {"name": "a_b"}]}]});
        let b = json!({"servers": [{"name": "s", "tools": [{"name": "a_b"}, {"name": "a.b"}]}]});
        let (ca, cb) = (load(a).expect("a"), load(b).expect("b"));
        assert_eq!(names(&ca), names(&cb));
        assert_eq!(ca.warnings().len(), 1, "{:?}", ca.warnings());
        // "a_b" needed no rewriting, so it keeps the plain name although "a.b" sorts first.
        assert_eq!(ca.get("mcp__s__a_b").expect("plain").original_name, "a_b");
        let other = ca
            .tools()
            .iter()
            .find(|t| t.original_name == "a.b")
            .expect("renamed");
        assert!(other.name.starts_with("mcp__s__a_b_") && name::is_valid(&other.name));
        assert!(
            other.aliases.contains(&"mcp__s__a_b".to_owned()),
            "{:?}",
            other.aliases
        );
        assert!(
            other.aliases.contains(&"mcp__s__a.b".to_owned()),
            "{:?}",
            other.aliases
        );

        // Servers: `x_y` owns its name against `x.y`, in either order; `x.y` and `x:y`, neither
        // of them exact, both give it up.
        for servers in [
            json!([{"name": "x.y", "tools": [{"name": "t"}]}, {"name": "x_y", "tools": [{"name": "t"}]}]),
            json!([{"name": "x_y", "tools": [{"name": "t"}]}, {"name": "x.y", "tools": [{"name": "t"}]}]),
        ] {
            let c = load(json!({ "servers": servers })).expect("catalog");
            assert_eq!(
                c.get("mcp__x_y__t")
                    .expect("plain")
                    .original_server
                    .as_deref(),
                Some("x_y")
            );
            assert_eq!(c.warnings().len(), 1, "{:?}", c.warnings());
        }
        let c = load(json!({"servers": [{"name": "x.y", "tools": [{"name": "t"}]}, {"name": "x:y", "tools": [{"name": "t"}]}]}))
            .expect("catalog");
        assert!(c.get("mcp__x_y__t").is_none(), "{:?}", names(&c));
        assert_eq!(c.servers().len(), 2);
        assert!(
            c.servers()
                .iter()
                .all(|s| s.name.starts_with("x_y_") && !s.name.contains("__"))
        );
        assert_eq!(c.warnings().len(), 2, "{:?}", c.warnings());
        // Alone, a rewritten name is not contested and is kept as is.
        let c = load(json!({"servers": [{"name": "x.y", "tools": [{"name": "t.u"}]}]}))
            .expect("catalog");
        assert_eq!(names(&c), ["mcp__x_y__t_u"]);
        assert!(c.warnings().is_empty());
    }

    /// Builds `servers` (grouped form) keeping the names `previous` gave.
    fn load_keeping(previous: &Catalog, servers: Value) -> Catalog {
        let mut b = CatalogBuilder::new("cat.json");
        b.keep_names(previous);
        for s in servers.as_array().expect("servers") {
            let server = s["name"].as_str().expect("name");
            b.add_server(server, "", "servers").expect("server");
            for t in s["tools"].as_array().expect("tools") {
                let spec = ToolSpec::from_value(t.clone(), "cat.json", "tool").expect("spec");
                b.add_tool(Some(server), spec, "tool").expect("tool");
            }
        }
        b.build()
    }

    fn original_of<'a>(c: &'a Catalog, name: &str) -> Option<&'a str> {
        c.get(name).map(|t| t.original_name.as_str())
    }

    #[test]
    fn a_name_already_given_stays_with_its_tool_when_a_newcomer_contests_it() {
        let first = load(json!({"servers": [{"name": "s", "tools": [{"name": "get.item"}]}]}))
            .expect("first");
        assert_eq!(original_of(&first, "mcp__s__get_item"), Some("get.item"));
        let both = json!([{"name": "s", "tools": [{"name": "get_item"}, {"name": "get.item"}]}]);
        let next = load_keeping(&first, both.clone());
        // Without the earlier names, the exact original would take it.
        let fresh = load(json!({ "servers": both.clone() })).expect("fresh");
        assert_eq!(original_of(&fresh, "mcp__s__get_item"), Some("get_item"));
        assert_eq!(original_of(&next, "mcp__s__get_item"), Some("get.item"));
        let newcomer = next
            .tools()
            .iter()
            .find(|t| t.original_name == "get_item")
            .expect("newcomer");
        assert_eq!(
            newcomer.name,
            name::with_suffix("mcp__s__get_item", "s\u{0}get_item")
        );
        assert!(
            next.warnings()
                .iter()
                .any(|w| w.contains("\"get_item\"") && w.contains(&newcomer.name)),
            "{:?}",
            next.warnings()
        );
        // Deterministic for one input and one earlier catalog, whatever the input order.
        let reversed =
            json!([{"name": "s", "tools": [{"name": "get.item"}, {"name": "get_item"}]}]);
        assert_eq!(names(&load_keeping(&first, reversed)), names(&next));
        // And kept again on the next rebuild.
        assert_eq!(names(&load_keeping(&next, both)), names(&next));
    }

    #[test]
    fn a_kept_name_lasts_while_its_tool_does() {
        let both =
            load(json!({"servers": [{"name": "s", "tools": [{"name": "a.b"}, {"name": "a_b"}]}]}))
                .expect("both");
        let loser = both
            .tools()
            .iter()
            .find(|t| t.original_name == "a.b")
            .expect("a.b")
            .name
            .clone();
        // The winner leaves: the loser keeps the name it was given.
        let alone = load_keeping(&both, json!([{"name": "s", "tools": [{"name": "a.b"}]}]));
        assert_eq!(names(&alone), [loser.as_str()]);
        // A tool that is gone has no claim: a newcomer takes the plain name.
        let other = load_keeping(&alone, json!([{"name": "s", "tools": [{"name": "a_b"}]}]));
        assert_eq!(names(&other), ["mcp__s__a_b"]);
    }

    #[test]
    fn a_server_keeps_its_segment_against_a_newcomer() {
        let first =
            load(json!({"servers": [{"name": "x.y", "tools": [{"name": "t"}]}]})).expect("first");
        assert_eq!(names(&first), ["mcp__x_y__t"]);
        let next = load_keeping(
            &first,
            json!([{"name": "x_y", "tools": [{"name": "t"}]}, {"name": "x.y", "tools": [{"name": "t"}]}]),
        );
        let t = next.get("mcp__x_y__t").expect("kept");
        assert_eq!(t.original_server.as_deref(), Some("x.y"));
        assert_eq!(next.tools().len(), 2);
    }

    #[test]
    fn keeping_the_names_of_nothing_changes_nothing() {
        let servers = json!([
            {"name": "x.y", "tools": [{"name": "t"}, {"name": "a.b"}, {"name": "a_b"}]},
            {"name": "x_y", "tools": [{"name": "t"}]}
        ]);
        let fresh = load(json!({ "servers": servers.clone() })).expect("fresh");
        let kept = load_keeping(&Catalog::default(), servers);
        assert_eq!(names(&kept), names(&fresh));
        assert_eq!(kept.warnings(), fresh.warnings());
    }

    #[test]
    fn a_rebuilt_session_catalog_can_keep_the_names_it_was_built_on() {
        let first = load(json!({"servers": [{"name": "s", "tools": [{"name": "get.item"}]}]}))
            .expect("first");
        let hub = load_keeping(
            &first,
            json!([{"name": "s", "tools": [{"name": "get.item"}, {"name": "get_item"}]}]),
        );
        let added = [json!({"name": "mine"})];
        let kept = rebuilt_keeping_names(&hub, &added, &[], "session").expect("kept");
        assert_eq!(original_of(&kept, "mcp__s__get_item"), Some("get.item"));
        assert!(kept.get("mine").is_some());
        // Without keeping, the rule picks afresh.
        let fresh = rebuilt(&hub, &added, &[], "session").expect("fresh");
        assert_eq!(original_of(&fresh, "mcp__s__get_item"), Some("get_item"));
    }

    #[test]
    fn separators_in_server_names_cannot_forge_another_tools_name() {
        let c = load(json!({"servers": [
            {"name": "a", "tools": [{"name": "b__c"}]},
            {"name": "a__b", "tools": [{"name": "c"}]}
        ]}))
        .expect("catalog");
        assert_eq!(names(&c), ["mcp__a__b__c", "mcp__a_b__c"]);
        assert!(
            c.warnings().is_empty(),
            "distinct by construction: {:?}",
            c.warnings()
        );
        for t in c.tools() {
            let (server, tool) = name::split_mcp(&t.name).expect("splits");
            assert_eq!(Some(server), t.server.as_deref());
            assert_eq!(tool, t.bare);
            assert!(t.aliases.contains(&"mcp__a__b__c".to_owned()) || t.name == "mcp__a__b__c");
        }
    }

    #[test]
    fn a_tool_named_like_a_meta_tool_keeps_a_distinct_name() {
        let c = load(json!([
            {"name": "tool_search", "description": "search GitHub"},
            {"name": "defer_execute"},
            {"name": "other"}
        ]))
        .expect("loads, not refused");
        let renamed: Vec<&Tool> = c
            .tools()
            .iter()
            .filter(|t| t.original_name != t.name)
            .collect();
        assert_eq!(renamed.len(), 2);
        for t in renamed {
            assert!(!name::META_TOOLS.contains(&t.name.as_str()));
            assert!(
                t.name.starts_with(&format!("{}_", t.original_name)) && name::is_valid(&t.name)
            );
            assert_eq!(
                c.resolve(&t.name),
                Resolution::Exact(c.position(&t.name).expect("pos"))
            );
        }
        assert_eq!(c.warnings().len(), 2);
        assert!(c.warnings()[0].contains("meta-tool"), "{:?}", c.warnings());
        assert!(c.get("other").is_some());
        // MCP tools are prefixed, so a server's `tool_search` is no contest at all.
        let c = load(json!({"servers": [{"name": "gh", "tools": [{"name": "tool_search"}]}]}))
            .expect("catalog");
        assert_eq!(names(&c), ["mcp__gh__tool_search"]);
    }

    #[test]
    fn duplicate_json_keys_are_refused_naming_the_item() {
        let e = Catalog::from_json_str(
            r#"{"servers": [{"name": "s", "tools": [{"name": "t", "description": "a", "description": "b"}]}]}"#,
            "cat.json",
        )
        .expect_err("duplicate key")
        .to_string();
        assert!(
            e.starts_with("cat.json: ")
                && e.contains("duplicate key \"description\" in servers[0].tools[0]"),
            "{e}"
        );
    }

    #[test]
    fn long_names_are_cut_and_keep_their_originals() {
        let long_server = "s".repeat(50);
        let long_tool = "t".repeat(50);
        let c = load(json!({"servers": [{"name": long_server.clone(), "tools": [{"name": long_tool.clone()}, {"name": format!("{long_tool}x")}]}]}))
            .expect("catalog");
        let got: Vec<&Tool> = c.tools().iter().collect();
        assert_eq!(got.len(), 2);
        assert_ne!(got[0].name, got[1].name);
        for t in got {
            assert!(name::is_valid(&t.name), "{}", t.name);
            assert_eq!(t.original_server.as_deref(), Some(long_server.as_str()));
            assert!(t.original_name.starts_with(&long_tool));
        }
    }

    #[test]
    fn bad_items_are_named() {
        let cases = [
            (json!([{"description": "x"}]), "[0]: missing \"name\""),
            (json!([{"name": 3}]), "\"name\" must be a string"),
            (
                json!([{"name": "a"}, {"name": "a"}]),
                "[1] \"a\": duplicate tool name; [0] has the same name",
            ),
            (
                json!([{"name": "a", "input_schema": "nope"}]),
                "[0] \"a\": \"input_schema\" must be a JSON Schema object, found a string",
            ),
            (
                json!([{"name": "a", "parameters": {"type": "string"}}]),
                "must describe an object",
            ),
            (
                json!([{"name": "a", "parameters": {"type": "object", "properties": []}}]),
                "properties must be an object",
            ),
            (
                json!([{"name": "a", "defer_loading": "yes"}]),
                "\"defer_loading\" must be true or false",
            ),
            (
                json!([{"name": "a", "annotations": {"readOnlyHint": "true"}}]),
                "annotations.readOnlyHint",
            ),
            (
                json!({"servers": [{"name": "s", "tools": [{"name": "t"}, {"name": "t"}]}]}),
                "servers[0] \"s\" tools[1] \"t\": duplicate",
            ),
            (
                json!({"servers": [{"name": "s"}, {"name": "s"}]}),
                "servers[1] \"s\": server declared twice",
            ),
            (
                json!({"servers": [{"tools": []}]}),
                "servers[0]: missing \"name\"",
            ),
            (json!({"mcpServers": {}}), "MCP client configuration"),
            (
                json!({"builtin": [], "extra": 1}),
                "unknown top-level key \"extra\"",
            ),
            (json!("tools"), "expected a JSON array of tools"),
        ];
        for (input, expected) in cases {
            let e = load(input.clone())
                .expect_err(&input.to_string())
                .to_string();
            assert!(e.starts_with("cat.json: "), "{e}");
            assert!(e.contains(expected), "{e:?} lacks {expected:?}");
        }
        let e = Catalog::from_json_str("[{\"name\": }", "bad.json")
            .expect_err("json")
            .to_string();
        assert!(
            e.starts_with("bad.json: not valid JSON") && e.contains("line 1"),
            "{e}"
        );
    }

    #[test]
    fn same_name_in_two_groups_is_fine() {
        let c = load(json!({"builtin": [{"name": "read"}], "servers": [{"name": "a", "tools": [{"name": "read"}]}, {"name": "b", "tools": [{"name": "read"}]}]}))
            .expect("catalog");
        assert_eq!(names(&c), ["read", "mcp__a__read", "mcp__b__read"]);
        assert_eq!(c.resolve("read"), Resolution::Exact(0));
        assert_eq!(c.resolve("mcp__b__read"), Resolution::Exact(2));
        let c = load(json!({"servers": [{"name": "a", "tools": [{"name": "read"}]}, {"name": "b", "tools": [{"name": "read"}, {"name": "only.b"}]}]}))
            .expect("catalog");
        assert_eq!(c.resolve("read"), Resolution::Ambiguous(vec![0, 2]));
        assert_eq!(c.resolve("only.b"), Resolution::Bare(1));
        assert_eq!(c.resolve("only_b"), Resolution::Bare(1));
        assert_eq!(c.resolve("nothing"), Resolution::NotFound);
    }

    #[test]
    fn names_resolve_with_case_and_separators_folded_when_one_tool_fits() {
        let builtin = json!([{"name": "WebFetch"}, {"name": "Read"}, {"name": "-"}]);
        let servers = json!([
            {"name": "git", "tools": [{"name": "git_log"}, {"name": "git_status"}]},
            {"name": "notion", "tools": [{"name": "notion-search"}]},
            {"name": "slack", "tools": [{"name": "post_message"}]},
            {"name": "fs", "tools": [{"name": "write_file"}]},
            {"name": "docs", "tools": [{"name": "writeFile"}]}
        ]);
        let c = load(json!({"builtin": builtin, "servers": servers})).expect("catalog");
        let canonical = |r: Resolution| match r {
            Resolution::Exact(i) | Resolution::Bare(i) => c.tools()[i].name.clone(),
            other => format!("{other:?}"),
        };
        for (written, tool) in [
            ("GIT_LOG", "mcp__git__git_log"),
            ("git-log", "mcp__git__git_log"),
            ("gitlog", "mcp__git__git_log"),
            ("Git Log", "mcp__git__git_log"),
            ("MCP__GIT__GIT-LOG", "mcp__git__git_log"),
            ("git.git_log", "mcp__git__git_log"),
            ("notion_search", "mcp__notion__notion-search"),
            ("post-message", "mcp__slack__post_message"),
            ("web_fetch", "WebFetch"),
            ("READ", "Read"),
        ] {
            assert_eq!(canonical(c.resolve(written)), tool, "{written}");
            assert_eq!(c.resolve_exact(written), Resolution::NotFound, "{written}");
            assert_eq!(
                c.resolve(written),
                Resolution::Bare(c.position(tool).expect("tool"))
            );
        }
        // Several tools fold alike: every one is a candidate, in catalog order; a name some tool
        // has as written still resolves to it alone.
        let (fs, docs) = (
            c.position("mcp__fs__write_file").expect("fs"),
            c.position("mcp__docs__writeFile").expect("docs"),
        );
        assert!(docs < fs);
        assert_eq!(
            c.resolve("WRITE-FILE"),
            Resolution::Ambiguous(vec![docs, fs])
        );
        assert_eq!(c.folded("write file"), [docs, fs]);
        assert_eq!(c.resolve("write_file"), Resolution::Bare(fs));
        assert_eq!(c.resolve("writeFile"), Resolution::Bare(docs));
        // A name that folds to nothing names nothing, even beside a tool named `-` (canonical
        // `tool_<hash>`, which its original name `-` resolves to as written).
        assert!(canonical(c.resolve("-")).starts_with("tool_"));
        for nothing in ["_", "--", " . ", ""] {
            assert_eq!(c.resolve(nothing), Resolution::NotFound, "{nothing:?}");
        }
        assert_eq!(c.resolve("git_lag"), Resolution::NotFound);
        // The answer depends on the tools, not on the order the file lists them in.
        let mut b = builtin.as_array().expect("a").clone();
        b.reverse();
        let mut s = servers.as_array().expect("s").clone();
        s.reverse();
        let r = load(json!({"builtin": b, "servers": s})).expect("catalog");
        for written in [
            "GIT_LOG",
            "WRITE-FILE",
            "post-message",
            "web_fetch",
            "-",
            "_",
        ] {
            let names = |c: &Catalog, r: Resolution| match r {
                Resolution::Exact(i) | Resolution::Bare(i) => vec![c.tools()[i].name.clone()],
                Resolution::Ambiguous(v) => v.iter().map(|&i| c.tools()[i].name.clone()).collect(),
                Resolution::NotFound => Vec::new(),
            };
            assert_eq!(
                names(&c, c.resolve(written)),
                names(&r, r.resolve(written)),
                "{written}"
            );
        }
    }

    #[test]
    fn order_is_the_sorted_order_whatever_the_input_order() {
        let c = load(json!({
            "builtin": [{"name": "Zed"}, {"name": "Alpha"}, {"name": "mid"}],
            "servers": [
                {"name": "zeta", "tools": [{"name": "b"}, {"name": "a"}]},
                {"name": "alpha", "tools": [{"name": "y"}, {"name": "x"}]}
            ]
        }))
        .expect("catalog");
        let got = names(&c);
        let mut builtins: Vec<&str> = got
            .iter()
            .copied()
            .filter(|n| !n.starts_with("mcp__"))
            .collect();
        let mut mcp: Vec<&str> = got
            .iter()
            .copied()
            .filter(|n| n.starts_with("mcp__"))
            .collect();
        assert_eq!(
            got,
            [builtins.clone(), mcp.clone()].concat(),
            "built-ins first"
        );
        builtins.sort();
        mcp.sort();
        assert_eq!(got, [builtins, mcp].concat(), "each part sorted");
    }

    /// A server name too long to leave room for its tools is cut, with a hash, so every canonical
    /// name is `mcp__SERVER__` and (part of) the tool's own name, and the index's header (the
    /// server's segment) is the head of every name of its tools.
    #[test]
    fn a_long_server_name_is_cut_so_every_tool_keeps_its_name_under_it() {
        let server = "Google Cloud Platform BigQuery Data Warehouse Admin";
        let long_tool = "list_every_table_of_every_dataset_in_the_whole_project";
        let c = load(
            json!({"servers": [{"name": server, "description": "bq", "tools": [
                {"name": "run_query"}, {"name": "list_datasets"}, {"name": long_tool}
            ]}]}),
        )
        .expect("catalog");
        let s = &c.servers()[0];
        let under = format!("{}__", s.prefix());
        for t in c.tools() {
            assert!(name::is_valid(&t.name), "{}", t.name);
            assert_eq!(
                name::split_mcp(&t.name),
                Some((s.name.as_str(), t.bare.as_str())),
                "{} under {under}",
                t.name
            );
            assert_eq!(t.server.as_deref(), Some(s.name.as_str()));
        }
        assert!(
            c.get(&format!("{under}run_query")).is_some()
                && c.get(&format!("{under}list_datasets")).is_some(),
            "{:?}",
            names(&c)
        );
        let long = c
            .tools()
            .iter()
            .find(|t| t.original_name == long_tool)
            .expect("long tool");
        assert!(long.bare.starts_with("list_every_table"), "{}", long.name);
        assert!(
            s.name.starts_with("Google_Cloud_Platform") && s.name.len() <= 32,
            "{}",
            s.name
        );
        assert!(
            !s.name.contains("__") && !s.name.ends_with('_'),
            "{}",
            s.name
        );
        // Stable, and a rule written for the segment in full still names the tool for deny and ask.
        let again = load(json!({"servers": [{"name": server, "tools": [{"name": "run_query"}]}]}))
            .expect("catalog");
        assert_eq!(again.servers()[0].name, s.name);
        let run = c.get(&format!("{under}run_query")).expect("run_query");
        assert!(
            run.aliases.contains(
                &"mcp__Google_Cloud_Platform_BigQuery_Data_Warehouse_Admin__run_query".to_owned()
            ),
            "{:?}",
            run.aliases
        );
        // A server segment of up to 32 characters is kept whole, as before.
        let fits = "a".repeat(32);
        let c = load(json!({"servers": [{"name": fits.clone(), "tools": [{"name": "t"}]}]}))
            .expect("catalog");
        assert_eq!(names(&c), [format!("mcp__{fits}__t").as_str()]);
    }

    /// A short key one letter off (`tag`), and a key with two neighbours swapped (`titel`, one
    /// edit), are slips too; a key as near to two keys, or to a key the shape defines but the
    /// loader does not read, is not taken for either.
    #[test]
    fn one_letter_off_a_short_key_and_a_swap_are_slips() {
        for (catalog, says) in [
            (
                json!([{"name": "a", "tag": ["billing"]}]),
                "[0]: unknown key \"tag\"; did you mean \"tags\"?",
            ),
            (
                json!([{"name": "a", "titel": "Billing lookup"}]),
                "[0]: unknown key \"titel\"; did you mean \"title\"?",
            ),
            (
                json!([{"name": "a", "tpye": "function"}]),
                "did you mean \"type\"?",
            ),
            (json!([{"nmae": "a"}]), "did you mean \"name\"?"),
            (
                json!([{"name": "a", "sever": "s"}]),
                "did you mean \"server\"?",
            ),
            (
                json!({"servers": [{"nam": "git", "tools": []}]}),
                "servers[0]: unknown key \"nam\"; did you mean \"name\"?",
            ),
            (
                json!([{"name": "a", "annotations": {"tilte": "A"}}]),
                "unknown key \"tilte\" in \"annotations\"; did you mean \"title\"?",
            ),
        ] {
            let e = load(catalog.clone()).expect_err(says).to_string();
            assert!(e.contains(says), "{catalog}: {e}");
        }
        // As near to two known keys, or to a key left unread: no guess (the loader warns).
        assert_eq!(near_miss("tage", &["tags", "tape"], &[]), None);
        assert_eq!(near_miss("icon", TOOL_KEYS, UNREAD_KEYS), None);
        assert_eq!(near_miss("tag", &["tags"], &["tab"]), None);
        // Every key a supported shape (or a common extension of one) gives a tool, and keys far
        // from the known ones, are no slips.
        for key in TOOL_KEYS.iter().chain(UNREAD_KEYS).chain(&[
            "id",
            "icon",
            "url",
            "version",
            "enabled",
            "examples",
            "returns",
            "required",
            "properties",
            "format",
            "custom",
            "schema",
            "params",
            "args",
            "arguments",
            "input",
            "output",
            "response",
            "display_name",
            "kind",
            "mode",
            "tool",
            "tools",
            "extra",
            "metadata",
            "labels",
            "group",
            "scope",
            "auth",
        ]) {
            assert_eq!(near_miss(key, TOOL_KEYS, UNREAD_KEYS), None, "{key}");
        }
        for key in [
            "url",
            "command",
            "args",
            "env",
            "version",
            "id",
            "type",
            "transport",
        ] {
            assert_eq!(near_miss(key, SERVER_KEYS, &[]), None, "{key}");
        }
    }

    /// Every key the loader reads is known, so a key one or two letters off it is refused
    /// instead of losing what it holds; so is a slip of a hint inside `annotations`.
    #[test]
    fn slips_of_every_key_the_loader_reads_are_refused() {
        for (catalog, says) in [
            (
                json!([{"name": "a", "annotation": {"readOnlyHint": true}}]),
                "[0]: unknown key \"annotation\"; did you mean \"annotations\"?",
            ),
            (
                json!([{"name": "a", "Title": "A"}]),
                "did you mean \"title\"?",
            ),
            (
                json!([{"name": "a", "output_schema": {"type": "object"}}]),
                "did you mean \"outputSchema\"?",
            ),
            (
                json!([{"name": "a", "meta": {}}]),
                "did you mean \"_meta\"?",
            ),
            (
                json!([{"name": "a", "description_templates": "x"}]),
                "did you mean \"description_template\"?",
            ),
            (
                json!([{"name": "a", "Type": "function"}]),
                "did you mean \"type\"?",
            ),
            (
                json!([{"name": "a", "annotations": {"readOnlyhint": true}}]),
                "[0] \"a\": unknown key \"readOnlyhint\" in \"annotations\"; did you mean \"readOnlyHint\"?",
            ),
            (
                json!([{"name": "a", "title": 3}]),
                "[0] \"a\": \"title\" must be a string, found a number",
            ),
            (
                json!([{"name": "a", "outputSchema": "x"}]),
                "\"outputSchema\" must be a JSON Schema object, found a string",
            ),
        ] {
            let e = load(catalog.clone()).expect_err(says).to_string();
            assert!(e.contains(says), "{catalog}: {e}");
        }
        let c = load(
            json!([{"name": "a", "title": "A", "annotations": {"readOnlyHint": true,
            "idempotentHint": true, "openWorldHint": false, "title": "A"}, "_meta": {"k": 1},
            "outputSchema": {"type": "object"}, "description_template": "x",
            "icons": [], "execution": {}, "cache_control": {}, "strict": true}]),
        )
        .expect("known keys and keys far from them");
        let a = c.get("a").expect("a");
        assert!(a.is_read_only() && a.title.as_deref() == Some("A") && a.meta.is_some());
    }

    #[test]
    fn a_tool_listed_under_one_server_that_names_another_is_refused() {
        let e = load(json!({"builtin": [], "servers": [{"name": "s", "tools": [{"name": "a", "server": "other"}]}]}))
            .expect_err("two servers")
            .to_string();
        assert!(
            e.contains("servers[0] \"s\" tools[0] \"a\": \"server\" is \"other\", but the tool is listed under server \"s\""),
            "{e}"
        );
        // Naming the server it is listed under is no conflict, however it is written.
        for own in ["s.x", "S.X", "s_x", "S_x"] {
            let c = load(
                json!({"servers": [{"name": "s.x", "tools": [{"name": "a", "server": own}]}]}),
            )
            .expect(own);
            assert_eq!(names(&c), ["mcp__s_x__a"], "{own}");
        }
    }

    #[test]
    fn a_key_beside_function_is_read_and_one_that_differs_from_inside_is_refused() {
        let e = load(json!([{"type": "function", "function": {"name": "b"}, "name": "c"}]))
            .expect_err("two names")
            .to_string();
        assert!(
            e.contains("[0]: \"name\" is \"c\" beside \"function\" but \"b\" inside it"),
            "{e}"
        );
        let e = load(json!([{"type": "function", "function": {"name": "b", "defer_loading": false}, "defer_loading": true}]))
            .expect_err("two values")
            .to_string();
        assert!(e.contains("\"defer_loading\" is true beside"), "{e}");
        // The same value twice, or a key only beside it, is read.
        let c = load(json!([
            {"type": "function", "function": {"name": "b"}, "name": "b", "description": "outer"},
            {"function": {"name": "d", "parameters": {"type": "object"}}}
        ]))
        .expect("catalog");
        assert_eq!(names(&c), ["b", "d"]);
        assert_eq!(c.get("b").expect("b").description, "outer");
    }

    /// A provider's own tool (a server tool, or one of the provider's schema) is no tool a
    /// catalog describes: it is refused, naming it and what it is, rather than loaded as a tool
    /// with an empty schema that loses its type and settings.
    #[test]
    fn provider_tools_are_left_out_naming_what_they_are() {
        for (catalog, says, kept) in [
            (
                json!([{"type": "bash_20250124", "name": "bash"}]),
                "[0] \"bash\": left out: \"type\": \"bash_20250124\" makes this a provider's tool",
                0,
            ),
            (
                json!([{"name": "r"}, {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]),
                "[1] \"web_search\": left out: \"type\": \"web_search_20250305\" makes this a provider's tool",
                1,
            ),
            (
                json!({"tools": [{"type": "web_search_preview"}, {"name": "r"}]}),
                "tools[0]: left out: \"type\": \"web_search_preview\" makes this a provider's tool",
                1,
            ),
        ] {
            let c = load(catalog.clone()).expect(says);
            assert_eq!(c.tools().len(), kept, "{catalog}");
            assert!(
                c.warnings().iter().any(|w| w.contains(says)
                    && w.contains("passes it along as sent and never defers it")),
                "{catalog}: {:?}",
                c.warnings()
            );
        }
        let says = "[0] \"x\": \"type\": \"object\" belongs in the tool's input schema";
        let e = load(json!([{"name": "x", "type": "object", "properties": {}}]))
            .expect_err(says)
            .to_string();
        assert!(e.contains(says), "{e}");
        let c = load(json!([
            {"type": "custom", "name": "a", "input_schema": {"type": "object"}},
            {"type": "function", "name": "b", "parameters": {"type": "object"}}
        ]))
        .expect("custom and function tools");
        assert_eq!(names(&c), ["a", "b"]);
    }

    /// Python type names are read as JSON Schema's only where a schema says its type: in the
    /// tool's schema and every subschema, never in data (`default`, `const`, `enum`, `examples`,
    /// `example`), which reaches the model as given.
    #[test]
    fn python_type_names_are_rewritten_in_schemas_only_never_in_data() {
        let c = load(json!([{"name": "convert", "parameters": {"type": "dict", "properties": {
            "target": {"type": "dict", "description": "type descriptor",
                "properties": {"type": {"type": "string", "enum": ["int", "float", "dict"]}},
                "default": {"type": "float"},
                "examples": [{"type": "dict"}, {"type": "str"}],
                "example": {"type": "dict"},
                "const": {"type": "float"}},
            "list": {"type": "array", "items": {"type": "float"}, "default": [{"type": "dict"}]},
            "tuple": {"type": "array", "items": [{"type": "float"}], "prefixItems": [{"type": "dict"}]},
            "either": {"anyOf": [{"type": ["float", "null"]}, {"$ref": "#/$defs/d"}],
                "not": {"type": "dict"}, "if": {"type": "float"}, "then": {"type": "dict"},
                "else": {"type": "float"}, "enum": [{"type": "dict"}]},
            "map": {"type": "dict", "additionalProperties": {"type": "float"},
                "patternProperties": {"^x": {"type": "dict"}}, "propertyNames": {"type": "string"},
                "dependentSchemas": {"a": {"type": "dict"}}, "dependencies": {"b": ["a"], "c": {"type": "dict"}}}
        }, "$defs": {"d": {"type": "float", "default": {"type": "float"}}},
           "definitions": {"e": {"type": "dict"}}, "x-data": {"type": "dict"}}}]))
        .expect("catalog");
        let s = Value::Object(c.get("convert").expect("tool").input_schema.clone());
        let at = |p: &str| {
            s.pointer(p)
                .cloned()
                .unwrap_or_else(|| panic!("{p} in {s}"))
        };
        // Schemas.
        for (p, ty) in [
            ("/type", json!("object")),
            ("/properties/target/type", json!("object")),
            ("/properties/list/items/type", json!("number")),
            ("/properties/tuple/items/0/type", json!("number")),
            ("/properties/tuple/prefixItems/0/type", json!("object")),
            ("/properties/either/anyOf/0/type", json!(["number", "null"])),
            ("/properties/either/not/type", json!("object")),
            ("/properties/either/if/type", json!("number")),
            ("/properties/either/then/type", json!("object")),
            ("/properties/either/else/type", json!("number")),
            ("/properties/map/type", json!("object")),
            ("/properties/map/additionalProperties/type", json!("number")),
            ("/properties/map/patternProperties/^x/type", json!("object")),
            ("/properties/map/dependentSchemas/a/type", json!("object")),
            ("/properties/map/dependencies/c/type", json!("object")),
            ("/$defs/d/type", json!("number")),
            ("/definitions/e/type", json!("object")),
        ] {
            assert_eq!(at(p), ty, "{p}");
        }
        // Data, and keywords that are no schema's, as given.
        for (p, given) in [
            ("/properties/target/properties/type/type", json!("string")),
            (
                "/properties/target/properties/type/enum",
                json!(["int", "float", "dict"]),
            ),
            ("/properties/target/default", json!({"type": "float"})),
            (
                "/properties/target/examples",
                json!([{"type": "dict"}, {"type": "str"}]),
            ),
            ("/properties/target/example", json!({"type": "dict"})),
            ("/properties/target/const", json!({"type": "float"})),
            ("/properties/list/default", json!([{"type": "dict"}])),
            ("/properties/either/enum", json!([{"type": "dict"}])),
            ("/properties/map/dependencies/b", json!(["a"])),
            ("/$defs/d/default", json!({"type": "float"})),
            ("/x-data", json!({"type": "dict"})),
        ] {
            assert_eq!(at(p), given, "{p}");
        }
    }

    /// OpenAI's `custom` tool (freeform text, perhaps a grammar) has no parameters a catalog could
    /// show or check, and the proxy never defers it: a catalog file leaves it out with a warning,
    /// as it does a provider's tools, instead of loading a parameterless function that drops its
    /// `format`. Anthropic's `custom` (with an `input_schema`) is an ordinary tool.
    #[test]
    fn an_openai_custom_tool_is_left_out_with_a_warning_and_an_anthropic_one_is_loaded() {
        let c = load(json!([
            {"type": "custom", "name": "apply_patch_grammar", "description": "Apply a patch",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
            {"type": "custom", "name": "code_exec", "description": "Run code"},
            {"type": "custom", "name": "anthropic", "input_schema": {"type": "object"}},
            {"type": "function", "name": "f", "parameters": {"type": "object"}}
        ]))
        .expect("catalog");
        assert_eq!(names(&c), ["anthropic", "f"]);
        // Chat Completions' form nests it under "custom".
        let chat = load(json!([
            {"type": "custom", "custom": {"name": "chat_custom", "format": {"type": "text"}}}
        ]))
        .expect("chat");
        assert!(chat.tools().is_empty());
        let warnings = [c.warnings(), chat.warnings()].concat();
        for says in [
            "cat.json: [0] \"apply_patch_grammar\": left out: \"type\": \"custom\" with a \"format\" or without an input schema makes this an OpenAI custom tool",
            "cat.json: [1] \"code_exec\": left out: \"type\": \"custom\"",
            "cat.json: [0]: left out: \"type\": \"custom\"",
        ] {
            assert!(
                warnings.iter().any(|w| w.starts_with(says)
                    && w.ends_with("passes it along as sent and never defers it")),
                "{says}: {warnings:?}"
            );
        }
        assert_eq!(warnings.len(), 3, "{warnings:?}");
    }

    /// A key no supported shape has is not read: the catalog warns of it, naming the tool (or
    /// server) and the key, instead of losing what it holds in silence.
    #[test]
    fn unknown_keys_are_warned_of_naming_the_tool_or_server_and_the_key() {
        let c = load(json!({"servers": [{"name": "weather", "desc": "Forecasts", "defer_loading": false, "tools": [
            {"name": "forecast", "description": "Forecast", "schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"name": "alerts", "params": {"type": "object"}, "zzz": 1},
            {"name": "fine", "inputSchema": {"type": "object"}, "extra": true}
        ]}]}))
        .expect("loads");
        let w = c.warnings();
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(
            w[0].starts_with("cat.json: servers[0] \"weather\": unknown keys \"defer_loading\", \"desc\" are not read")
                && w[0].contains("a server has \"name\", \"description\"")
                && w[0].contains("\"defer_loading\" goes on each tool, or a [defer] rule such as \"NoDefer(^mcp__weather__)\""),
            "{w:?}"
        );
        assert!(
            w[1].starts_with("cat.json: servers[0] \"weather\" tools[0] \"forecast\": unknown key \"schema\" is not read, and what it holds is left out; the tool is loaded taking no parameters"),
            "{w:?}"
        );
        assert!(
            w[2].starts_with(
                "cat.json: servers[0] \"weather\" tools[1] \"alerts\": unknown keys \"params\", \"zzz\" are not read"
            ),
            "{w:?}"
        );
        assert_eq!(
            w[3],
            "cat.json: servers[0] \"weather\" tools[2] \"fine\": unknown key \"extra\" is not read, and what it holds is left out"
        );
        let c = load(json!({"tools": [{"name": "t"}], "_meta": {}, "nextCursor": null, "more": 1}))
            .expect("tools/list");
        assert_eq!(
            c.warnings(),
            [
                "cat.json: unknown key \"more\" is not read, and what it holds is left out (a tools/list result has \"tools\", \"nextCursor\" and \"_meta\")"
            ]
        );
    }

    /// The keys every supported shape may carry are no unknown keys: MCP's tools/list items,
    /// Anthropic's tools, OpenAI's function tools in both APIs, and toolshelf's own.
    #[test]
    fn the_keys_of_every_supported_shape_are_not_warned_of() {
        let c = load(json!({"tools": [
            {"name": "mcp", "title": "M", "description": "d", "inputSchema": {"type": "object"},
             "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true, "title": "M"},
             "_meta": {"k": 1}, "icons": [{"src": "https://x/i.png"}], "execution": {"taskSupport": "optional"}},
            {"type": "custom", "name": "anthropic", "description": "d", "input_schema": {"type": "object"},
             "cache_control": {"type": "ephemeral"}, "defer_loading": true, "strict": true,
             "input_examples": [{}], "allowed_callers": ["direct"], "eager_input_streaming": true},
            {"type": "function", "function": {"name": "chat", "description": "d",
             "parameters": {"type": "object"}, "strict": false}, "defer_loading": false},
            {"type": "function", "name": "responses", "description": "d", "parameters": {"type": "object"},
             "strict": true, "defer_loading": true},
            {"name": "ours", "tags": ["x"], "category": "y", "server": "s", "origin": "mcp",
             "description_template": "x"}
        ]}))
        .expect("catalog");
        assert_eq!(c.tools().len(), 5);
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let c = load(json!({"servers": [{"name": "s", "description": "d", "description_template": "x", "tools": []}]}))
            .expect("grouped");
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }

    /// `strict` is read and written into the definitions of the formats that have it (OpenAI's
    /// two and Anthropic's), not MCP's; it survives a rebuild. Not a boolean is refused.
    #[test]
    fn strict_is_carried_to_the_formats_that_have_it() {
        use crate::wire::{Format, definition};
        let c = load(json!([
            {"type": "function", "function": {"name": "w", "parameters": {"type": "object"}, "strict": true}},
            {"name": "plain"}
        ]))
        .expect("catalog");
        let w = c.get("w").expect("w");
        assert_eq!(definition(w, Format::OpenAi)["function"]["strict"], true);
        assert_eq!(definition(w, Format::OpenAiResponses)["strict"], true);
        assert_eq!(definition(w, Format::Anthropic)["strict"], true);
        assert!(definition(w, Format::Mcp).get("strict").is_none());
        let plain = c.get("plain").expect("plain");
        for (_, f) in Format::ALL {
            let d = definition(plain, f);
            assert!(
                d.get("strict").is_none() && d.pointer("/function/strict").is_none(),
                "{d}"
            );
        }
        let again = rebuilt(&c, &[], &[], "session").expect("rebuilt");
        let w = again.get("w").expect("w");
        assert_eq!(definition(w, Format::OpenAiResponses)["strict"], true);
        let e = load(json!([{"name": "a", "strict": "yes"}]))
            .expect_err("not a boolean")
            .to_string();
        assert!(
            e.contains("[0] \"a\": \"strict\" must be true or false"),
            "{e}"
        );
    }

    /// Tools whose own `"server"` field writes one server two ways (`GitHub` and `github`, `my.s`
    /// and `my_s`) are one group, as a tool listed under a server may name it either way: under
    /// the declared server if there is one, else under the spelling that needs no rewriting.
    #[test]
    fn one_server_written_two_ways_in_the_flat_form_is_one_group() {
        let flat = [
            json!({"name": "y", "server": "GitHub"}),
            json!({"name": "z", "server": "github"}),
            json!({"name": "w", "server": "my.s"}),
            json!({"name": "v", "server": "my_s"}),
        ];
        let c = load(Value::Array(flat.to_vec())).expect("flat");
        assert_eq!(
            names(&c),
            [
                "mcp__GitHub__y",
                "mcp__GitHub__z",
                "mcp__my_s__v",
                "mcp__my_s__w"
            ]
        );
        assert_eq!(c.servers().len(), 2);
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let mut reversed = flat.to_vec();
        reversed.reverse();
        assert_eq!(
            names(&load(Value::Array(reversed)).expect("reversed")),
            names(&c)
        );
        // Spellings that all need rewriting: one group still, named by the first.
        let c = load(json!([{"name": "a", "server": "my:s"}, {"name": "b", "server": "my.s"}]))
            .expect("rewritten");
        assert_eq!(names(&c), ["mcp__my_s__a", "mcp__my_s__b"]);
        assert_eq!(c.servers()[0].original_name, "my.s");
        // A declared server takes the tools that name it another way.
        let c = load(json!({
            "builtin": [{"name": "late", "server": "Docs"}],
            "servers": [{"name": "docs", "description": "Docs", "tools": [{"name": "read"}]}]
        }))
        .expect("grouped");
        assert_eq!(names(&c), ["mcp__docs__late", "mcp__docs__read"]);
        assert_eq!(c.servers().len(), 1);
        // One tool name twice in the joined group is the duplicate it is.
        let e = load(json!([{"name": "t", "server": "GitHub"}, {"name": "t", "server": "github"}]))
            .expect_err("duplicate")
            .to_string();
        assert!(e.contains("\"t\": duplicate tool name"), "{e}");
        // Declared servers stay apart however they are written; a field that writes two of
        // them is refused.
        let c = load(json!({"servers": [{"name": "x.y", "tools": [{"name": "t"}]}, {"name": "x_y", "tools": [{"name": "t"}]}]}))
            .expect("two declared");
        assert_eq!(c.servers().len(), 2);
        let e = load(json!({
            "builtin": [{"name": "u", "server": "X_Y"}],
            "servers": [{"name": "x.y"}, {"name": "x_y"}]
        }))
        .expect_err("ambiguous")
        .to_string();
        assert!(
            e.contains("builtin[0] \"u\": \"server\" is \"X_Y\", which writes each of the servers \"x.y\" and \"x_y\""),
            "{e}"
        );
    }

    /// A rebuild keeps every field of the tools it keeps: tags (and the category read as one),
    /// a description template, annotations, title, output schema, `_meta`, `strict`,
    /// `defer_loading`, the origin; and the servers' descriptions and header templates.
    #[test]
    fn a_rebuild_without_changes_keeps_every_field() {
        let c = load(json!({
            "builtin": [{"name": "b", "description": "bd", "input_schema": {"type": "object"},
                "tags": ["alpha", "beta"], "category": "Logistics", "defer_loading": true,
                "strict": true, "description_template": "'b ' + 'templated'"}],
            "servers": [{"name": "s", "description": "sd", "description_template": "'s head'",
                "tools": [{"name": "x.y", "description": "old", "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": true, "destructiveHint": false}, "title": "T",
                "outputSchema": {"type": "object"}, "_meta": {"k": 1}, "tags": ["gamma"],
                "description_template": "'xy'"}]},
                {"name": "empty", "description": "none here", "tools": []}]
        }))
        .expect("catalog");
        let model = rebuilt(
            &c,
            &[json!({"name": "m", "origin": "model", "tags": ["mine"]})],
            &[],
            "session",
        )
        .expect("with a model tool");
        for rebuild in [rebuilt, rebuilt_keeping_names] {
            for original in [&c, &model] {
                let again = rebuild(original, &[], &[], "again").expect("rebuilt");
                assert_eq!(again.tools(), original.tools());
                assert_eq!(again.servers(), original.servers());
            }
        }
    }

    /// A client's tool named `mcp__SERVER__TOOL` joins SERVER's group and is named as that
    /// server's tool, where a catalog's built-in of that name keeps it as a built-in name.
    #[test]
    fn a_client_tools_mcp_name_is_its_servers_tool() {
        let c = load(json!([{"name": "Read"}])).expect("catalog");
        let added = [json!({"name": "mcp__svc__住处"}), json!({"name": "Grep"})];
        let client = rebuilt_with_client_tools(&c, &added, &[], "client").expect("rebuilt");
        assert_eq!(names(&client), ["Grep", "Read", "mcp__svc__tool_1d75284e"]);
        let tool = client.get("mcp__svc__tool_1d75284e").expect("the tool");
        assert_eq!(
            (tool.original_server.as_deref(), tool.original_name.as_str()),
            (Some("svc"), "住处")
        );
        // The same as a catalog file's tool of server svc.
        let file = load(json!([{"name": "住处", "server": "svc"}])).expect("catalog");
        assert_eq!(names(&file), ["mcp__svc__tool_1d75284e"]);
        let built_in = rebuilt(&c, &added, &[], "file").expect("rebuilt");
        assert_eq!(names(&built_in), ["Grep", "Read", "mcp__svc____"]);
    }

    /// Every text entry point takes a file that starts with a UTF-8 byte-order mark, as the
    /// configuration's does.
    #[test]
    fn a_byte_order_mark_before_the_json_is_skipped() {
        let text = "\u{feff}[{\"name\": \"a\"}]";
        let c = Catalog::from_json_str(text, "c.json").expect("catalog");
        assert_eq!(names(&c), ["a"]);
        let c = Catalog::from_json_str_adding(text, "c.json", &[json!({"name": "b"})], "added")
            .expect("catalog");
        assert_eq!(names(&c), ["a", "b"]);
        let (servers, _) = crate::config::Config::servers_from_mcp_json(
            "\u{feff}{\"mcpServers\": {\"s\": {\"command\": \"x\"}}}",
            "mcp.json",
        )
        .expect("mcp.json");
        assert!(servers.contains_key("s"));
        let e = Catalog::from_json_str("\u{feff}[{\"name\": }]", "c.json")
            .expect_err("bad JSON")
            .to_string();
        assert!(e.contains("line 1"), "{e}");
    }
}
