//! Wire formats: how one tool definition is written for each API.
//!
//! A leaf module: everything that turns a tool into the JSON a provider or an MCP client reads
//! lives here, so the policy (which measures definitions for `auto:N`), the surface, the ledger
//! and the meta-tools all write the same bytes for the same tool.

use serde_json::{Map, Value, json};

use crate::catalog::Tool;

/// Wire formats of tool definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Anthropic Messages: `{name, description, input_schema, strict?}`.
    #[default]
    Anthropic,
    /// OpenAI Chat Completions:
    /// `{type: "function", function: {name, description, parameters, strict?}}`.
    OpenAi,
    /// OpenAI Responses: `{type: "function", name, description, parameters, strict?}`.
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
    definition_described(tool, &tool.description, format)
}

/// The full definition of a catalog tool in `format`, with `description` in place of its own (a
/// session's rendering of its description template).
pub fn definition_described(tool: &Tool, description: &str, format: Format) -> Value {
    if format != Format::Mcp {
        let mut def = definition_from_parts(&tool.name, description, &tool.input_schema, format);
        // A declared `strict` is the provider's to act on; MCP has none.
        if let Some(strict) = tool.strict {
            let at = match format {
                Format::OpenAi => def.get_mut("function"),
                _ => Some(&mut def),
            };
            if let Some(Value::Object(m)) = at {
                m.insert("strict".into(), strict.into());
            }
        }
        return def;
    }
    let mut m = Map::new();
    m.insert("name".into(), tool.name.clone().into());
    if let Some(t) = &tool.title {
        m.insert("title".into(), t.clone().into());
    }
    m.insert("description".into(), description.into());
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
    if let Some(meta) = &tool.meta {
        m.insert("_meta".into(), Value::Object(meta.clone()));
    }
    Value::Object(m)
}
