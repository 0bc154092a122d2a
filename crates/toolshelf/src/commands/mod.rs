//! One module per subcommand.

pub mod eval;
pub mod explain;
pub mod ledger;
pub mod render;
pub mod search;

use toolshelf_core::Format;

/// `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FormatArg {
    /// Anthropic Messages API: {name, description, input_schema}.
    #[default]
    Anthropic,
    /// OpenAI Chat Completions: {type: function, function: {...}}.
    Openai,
    /// OpenAI Responses API: {type: function, name, description, parameters}.
    OpenaiResponses,
    /// MCP tools/list: {name, description, inputSchema, annotations}.
    Mcp,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Anthropic => Format::Anthropic,
            FormatArg::Openai => Format::OpenAi,
            FormatArg::OpenaiResponses => Format::OpenAiResponses,
            FormatArg::Mcp => Format::Mcp,
        }
    }
}

/// Prints a JSON value, pretty, with a trailing newline.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
