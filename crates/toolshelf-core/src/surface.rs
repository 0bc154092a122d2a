//! The model-visible tool surface: exactly the tool definitions sent to the model.
//!
//! Resident tools with their full schemas come first, in catalog order (built-ins, then servers,
//! each sorted), then the two resident meta-tools `tool_search` and `defer_execute`, added as soon
//! as any tool is deferred. Deferred tools contribute only their names, inside `tool_search`'s
//! description. Every byte here is a pure function of (catalog, policy, config), so the prompt
//! prefix is identical from turn to turn and provider caches keep hitting.

use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, Tool};
use crate::config::Config;
use crate::index::{DeferredIndex, IndexGroup, IndexInput};
use crate::policy::{Exposure, State};

/// Name of the search meta-tool.
pub const TOOL_SEARCH: &str = "tool_search";
/// Name of the execution meta-tool.
pub const DEFER_EXECUTE: &str = "defer_execute";
/// Both meta-tool names; catalogs may not define tools with these names.
pub const META_TOOLS: [&str; 2] = [TOOL_SEARCH, DEFER_EXECUTE];

/// Wire formats of tool definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Anthropic Messages: `{name, description, input_schema}`.
    #[default]
    Anthropic,
    /// OpenAI Chat Completions: `{type: "function", function: {name, description, parameters}}`.
    OpenAi,
    /// OpenAI Responses: `{type: "function", name, description, parameters}`.
    OpenAiResponses,
    /// MCP `tools/list`: `{name, title?, description, inputSchema, outputSchema?, annotations?}`.
    Mcp,
}

impl Format {
    /// Every format, with the name used on the command line.
    pub const ALL: [(&'static str, Format); 4] = [
        ("anthropic", Format::Anthropic),
        ("openai", Format::OpenAi),
        ("openai-responses", Format::OpenAiResponses),
        ("mcp", Format::Mcp),
    ];
}

/// A definition in `format` from its parts.
pub fn definition_from_parts(
    name: &str,
    description: &str,
    schema: &Map<String, Value>,
    format: Format,
) -> Value {
    match format {
        Format::Anthropic => {
            json!({"name": name, "description": description, "input_schema": schema})
        }
        Format::OpenAi => {
            json!({"type": "function", "function": {"name": name, "description": description, "parameters": schema}})
        }
        Format::OpenAiResponses => {
            json!({"type": "function", "name": name, "description": description, "parameters": schema})
        }
        Format::Mcp => json!({"name": name, "description": description, "inputSchema": schema}),
    }
}

/// The full definition of a catalog tool in `format`.
pub fn definition(tool: &Tool, format: Format) -> Value {
    if format != Format::Mcp {
        return definition_from_parts(&tool.name, &tool.description, &tool.input_schema, format);
    }
    let mut m = Map::new();
    m.insert("name".into(), tool.name.clone().into());
    if let Some(t) = &tool.title {
        m.insert("title".into(), t.clone().into());
    }
    m.insert("description".into(), tool.description.clone().into());
    m.insert(
        "inputSchema".into(),
        Value::Object(tool.input_schema.clone()),
    );
    if let Some(o) = &tool.output_schema {
        m.insert("outputSchema".into(), Value::Object(o.clone()));
    }
    if let Some(a) = &tool.annotations.raw {
        m.insert("annotations".into(), Value::Object(a.clone()));
    }
    Value::Object(m)
}

/// Fixed part of `tool_search`'s description; the index follows it.
pub fn tool_search_preamble(default_limit: usize) -> String {
    format!(
        "Load tools that are not loaded yet. Their names are listed in <available_deferred_tools> below; \
their schemas are not, so look a tool up here before running it with defer_execute.\n\
Give exactly one of tool_names or queries:\n\
- tool_names: exact names from the list, e.g. [\"mcp__git__git_log\"], returns their full schemas;\n\
- queries: short keyword phrases for the task, in both English and Chinese, e.g. [\"read file\", \"读取文件\"]; \
returns the best matching tools, the top ones with full schemas. Prefix a word with + to require it in the \
tool name (\"+commit\"); use server:NAME to search one server.\n\
limit caps fuzzy results (default {default_limit}). Each schema comes with the exact defer_execute call to use."
    )
}

/// `defer_execute`'s description.
pub const DEFER_EXECUTE_DESCRIPTION: &str = "Run a deferred tool by name. Look it up with tool_search first \
to get its schema; params are validated against that schema and every violation is reported. \
Permissions and hooks apply to the target tool exactly as if it were called directly.";

fn tool_search_schema(default_limit: usize, max_limit: usize) -> Map<String, Value> {
    let v = json!({
        "type": "object",
        "properties": {
            "tool_names": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Exact tool names from <available_deferred_tools>. Give this or queries, not both."
            },
            "queries": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Keyword phrases describing the task, in English and Chinese. Give this or tool_names, not both."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": max_limit,
                "description": format!("Maximum number of fuzzy results (default {default_limit}).")
            }
        }
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("literal object"),
    }
}

fn defer_execute_schema() -> Map<String, Value> {
    let v = json!({
        "type": "object",
        "properties": {
            "tool_name": {"type": "string", "description": "Name of the tool to run, as listed in <available_deferred_tools>."},
            "params": {"type": "object", "description": "Arguments for the tool, matching its schema."}
        },
        "required": ["tool_name", "params"]
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("literal object"),
    }
}

/// What the model sees, computed once from catalog, exposure and config.
#[derive(Debug, Clone)]
pub struct Surface {
    /// Catalog indices of resident tools, in catalog order.
    pub resident: Vec<usize>,
    /// Catalog indices of deferred tools, in catalog order.
    pub deferred: Vec<usize>,
    /// Catalog indices of hidden tools.
    pub hidden: Vec<usize>,
    /// The deferred index; `None` when nothing is deferred (and so no meta-tools).
    pub index: Option<DeferredIndex>,
    default_limit: usize,
    max_limit: usize,
}

impl Surface {
    /// Computes the surface.
    pub fn new(catalog: &Catalog, exposure: &Exposure, config: &Config) -> Self {
        let resident: Vec<usize> = exposure.indices(State::Resident).collect();
        let deferred: Vec<usize> = exposure.indices(State::Deferred).collect();
        let hidden: Vec<usize> = exposure.indices(State::Hidden).collect();
        let index = (!deferred.is_empty()).then(|| {
            let tools = catalog.tools();
            let builtin = deferred
                .iter()
                .filter(|&&i| tools[i].server.is_none())
                .map(|&i| tools[i].name.clone())
                .collect();
            // A server gets a group when it has deferred tools, or has no tools at all (its tools
            // may still be loading); servers whose tools are all resident or hidden get none.
            let groups = catalog
                .servers()
                .iter()
                .filter_map(|s| {
                    let of_server = |i: &&usize| tools[**i].server.as_deref() == Some(&s.name);
                    let names: Vec<String> = deferred
                        .iter()
                        .filter(of_server)
                        .map(|&i| tools[i].bare.clone())
                        .collect();
                    let has_any = tools.iter().any(|t| t.server.as_deref() == Some(&s.name));
                    (!names.is_empty() || !has_any).then(|| IndexGroup {
                        prefix: s.prefix(),
                        description: s.description.clone(),
                        tools: names,
                    })
                })
                .collect();
            DeferredIndex::render(
                &IndexInput { builtin, groups },
                config.defer.index_budget_chars,
                config.defer.server_description_chars,
            )
        });
        Self {
            resident,
            deferred,
            hidden,
            index,
            default_limit: config.search.default_limit,
            max_limit: config.search.max_limit,
        }
    }

    /// `tool_search`'s full description, index included; `None` when nothing is deferred.
    pub fn tool_search_description(&self) -> Option<String> {
        self.index.as_ref().map(|idx| {
            format!(
                "{}\n\n{}",
                tool_search_preamble(self.default_limit),
                idx.text
            )
        })
    }

    /// The meta-tools' definitions in `format` (empty when nothing is deferred).
    pub fn meta_tools(&self, format: Format) -> Vec<Value> {
        let Some(description) = self.tool_search_description() else {
            return Vec::new();
        };
        vec![
            definition_from_parts(
                TOOL_SEARCH,
                &description,
                &tool_search_schema(self.default_limit, self.max_limit),
                format,
            ),
            definition_from_parts(
                DEFER_EXECUTE,
                DEFER_EXECUTE_DESCRIPTION,
                &defer_execute_schema(),
                format,
            ),
        ]
    }

    /// The tool list sent to the model, in `format`.
    pub fn tools(&self, catalog: &Catalog, format: Format) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .resident
            .iter()
            .map(|&i| definition(&catalog.tools()[i], format))
            .collect();
        out.extend(self.meta_tools(format));
        out
    }
}
