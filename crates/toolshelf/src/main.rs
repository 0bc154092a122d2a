//! `toolshelf`: the command line.
//!
//! A thin shell over `toolshelf-core`: parse arguments, read files, print. Results go to stdout
//! (JSON where asked, so scripts can rely on it); warnings and progress go to stderr.

mod commands;
mod inputs;

/// Loading a large catalog is allocation-bound (a parsed JSON tree per tool); mimalloc keeps it
/// linear where the system allocator spends most of the time consolidating free lists.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use commands::errln;

/// Deferred tool loading for LLM agents: keep tool names in context and schemas on the shelf.
#[derive(Debug, Parser)]
#[command(name = "toolshelf", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// More log output on stderr: -v everything at info (including the MCP library), -vv debug,
    /// -vvv trace. RUST_LOG or TOOLSHELF_LOG (a tracing filter) override it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
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
    /// Run the MCP gateway (stdio, or streamable HTTP with --http) in front of the configured servers.
    Serve(commands::serve::Args),
    /// Run the LLM-API proxy: point ANTHROPIC_BASE_URL or OPENAI_BASE_URL at it, and the model
    /// gets deferred tool loading with no client change.
    Proxy(commands::proxy::Args),
    /// Show each configured server's state (of the running gateway, or by starting them). Exit
    /// status 0: a gateway runs and is healthy; 1: a server of it failed, or its required audit
    /// log cannot be written; 2: the status could not be read (a bad configuration); 3: no
    /// gateway runs for this configuration (the servers were started to check them).
    Status(commands::status::Args),
    /// Start the configured servers and print their merged catalog (grouped form): the tools a
    /// session can reach, in the active mode.
    Catalog(commands::catalog::Args),
    /// Check a log of request bodies (JSON lines) for prompt-cache breaks: the same model,
    /// system and tools byte-identical, each request's messages a prefix of the next's. Exit
    /// status 1 on a break, 2 when the log cannot be read.
    PrefixCheck(commands::prefix_check::Args),
    /// Replay a conversation through a session: the request body of every model turn, or with
    /// --explain what the session did (reminders, activations, expiries, refusals, bytes).
    Replay(commands::replay::Args),
    /// Check a description template (Starlark): every per-turn value, unavailable builtin and
    /// unknown value it reads, with its line, then its rendering against sample values. Exit
    /// status 1 when anything is found or the render fails, 2 when an input cannot be read.
    CheckTemplate(commands::check_template::Args),
    /// Serve a configuration's script tools over stdio (the gateway starts this itself).
    #[command(name = toolshelf_gateway::scripts::SERVER_SUBCOMMAND, hide = true)]
    ScriptsServer(commands::serve::ScriptsServerArgs),
    /// Run one script call: a request on stdin, the answer on stdout (the scripts server starts
    /// this itself, under its limits).
    #[command(name = toolshelf_runtime::scripts::RUNNER_SUBCOMMAND, hide = true)]
    ScriptRun,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    commands::serve::set_verbosity(cli.verbose);
    let result = match cli.command {
        Command::Render(a) => commands::render::run(a),
        Command::Explain(a) => commands::explain::run(a),
        Command::Ledger(a) => commands::ledger::run(a),
        // An unknown --name is a finding (1); input that cannot be searched is trouble (2).
        Command::Search(a) => return finding(commands::search::run(a)),
        Command::Eval(a) => commands::eval::run(a),
        Command::Serve(a) => commands::serve::run(a),
        Command::Proxy(a) => commands::proxy::run(a),
        Command::Status(a) => commands::status::run(a),
        Command::Catalog(a) => commands::catalog::run(a),
        Command::Replay(a) => commands::replay::run(a),
        Command::ScriptsServer(a) => commands::serve::run_scripts_server(a),
        Command::ScriptRun => commands::serve::run_script(),
        // A broken prefix is a finding, not an error: reported on stdout, exit status 1. An
        // input the check cannot read is trouble, status 2, so a script can tell them apart.
        Command::PrefixCheck(a) => return finding(commands::prefix_check::run(a)),
        // A refused access is a finding, as a broken prefix is.
        Command::CheckTemplate(a) => return finding(commands::check_template::run(a)),
    };
    exit_status(result)
}

/// Status 1 for what a command found ([`commands::Finding`]), 2 for what kept it from running,
/// 3 for a `status` that found no gateway running ([`commands::status::NotRunning`]).
fn exit_status(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Err(e) if e.downcast_ref::<commands::status::NotRunning>().is_some() => {
            errln!("toolshelf: error: {e:#}");
            ExitCode::from(commands::status::NOT_RUNNING)
        }
        Err(e) if e.downcast_ref::<commands::Finding>().is_some() => {
            errln!("toolshelf: error: {e:#}");
            ExitCode::FAILURE
        }
        other => exit(other, ExitCode::from(2)),
    }
}

/// The exit status of a check: 0 when it passed, 1 when it found something, 2 when it could not
/// run.
fn finding(result: anyhow::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => exit_status(Err(e)),
    }
}

/// The exit status of a command's outcome, printing its error; `failure` for an error.
fn exit(result: anyhow::Result<()>, failure: ExitCode) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): nothing left to say to anyone.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("toolshelf: error: {e:#}");
            failure
        }
    }
}

/// Whether `e` is a write to a closed stdout, however it was wrapped: an I/O error, or a JSON
/// serializer's that wrote to the pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(BrokenPipe))
    })
}
