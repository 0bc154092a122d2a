//! `toolshelf`: the command line.
//!
//! A thin shell over `toolshelf-core`: parse arguments, read files, print. Results go to stdout
//! (JSON where asked, so scripts can rely on it); warnings and progress go to stderr.

mod commands;
mod inputs;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Deferred tool loading for LLM agents: keep tool names in context and schemas on the shelf.
#[derive(Debug, Parser)]
#[command(name = "toolshelf", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the tool definitions the model is sent (JSON array).
    Render(commands::render::Args),
    /// Print the decision chain for one tool: declared value, rules, default, mode, final state.
    Explain(commands::explain::Args),
    /// Account for the per-turn cost of the tool surface and what deferral saves.
    Ledger(commands::ledger::Args),
    /// Run tool_search: fuzzy queries, exact names, or a batch file.
    Search(commands::search::Args),
    /// Measure search quality (recall, MRR, nDCG) and speed on a labelled query set.
    Eval(commands::eval::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Render(a) => commands::render::run(a),
        Command::Explain(a) => commands::explain::run(a),
        Command::Ledger(a) => commands::ledger::run(a),
        Command::Search(a) => commands::search::run(a),
        Command::Eval(a) => commands::eval::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolshelf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
