//! One module per subcommand.

pub mod catalog;
pub mod check_template;
pub mod eval;
pub mod explain;
pub mod ledger;
pub mod prefix_check;
pub mod proxy;
pub mod render;
pub mod replay;
pub mod search;
pub mod serve;
pub mod status;

use toolshelf_core::Format;

/// `println!` for command output: a closed stdout (`toolshelf search ... | head`) returns an
/// error from the enclosing function instead of panicking; `main` then exits quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            return Err(e.into());
        }
    }};
}
pub(crate) use outln;

/// `eprintln!` that ignores a closed stderr (`2>&1 | head`) rather than panicking: a warning that
/// cannot be shown is no reason to stop the command.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use errln;

/// What a command found rather than failed at (an unknown tool, a failed server): exit status
/// 1, as against 2 for an error that kept the command from running (input it cannot read, a bad
/// configuration), so a script can tell the two apart.
#[derive(Debug)]
pub struct Finding(pub String);

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Finding {}

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

/// The LLM APIs whose request bodies `replay`, `prefix-check` and `ledger --transcript` handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ApiArg {
    /// Anthropic Messages: top-level system, tools, messages.
    #[default]
    Anthropic,
    /// OpenAI Chat Completions: messages opening with system (or developer) messages, tools.
    Openai,
    /// OpenAI Responses: instructions, tools, input.
    OpenaiResponses,
}

impl From<ApiArg> for toolshelf_core::request::Api {
    fn from(a: ApiArg) -> Self {
        use toolshelf_core::request::Api;
        match a {
            ApiArg::Anthropic => Api::Anthropic,
            ApiArg::Openai => Api::OpenAiChat,
            ApiArg::OpenaiResponses => Api::OpenAiResponses,
        }
    }
}

/// `n` with the noun in the number it needs: `1 pair`, `2 pairs`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Prints a JSON value, pretty, with a trailing newline.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `text` fit for one line, or one cell of a line, on a terminal: control characters (tabs and
/// newlines among them) and invisible format characters escaped as Rust writes them (`\n`,
/// `\u{1b}`), so that a name from a catalog or a generated configuration can neither forge a
/// line nor move the cursor.
pub fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else if toolshelf_core::index::is_ignorable(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}
