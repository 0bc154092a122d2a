//! `toolshelf replay`: run a recorded (or hand-written) conversation through a session and print
//! the request body of every model request, or with `--explain` what the session did in each
//! (turns counted as the proxy counts them: see `toolshelf_core::replay`).
//!
//! This is how reminder rules are tuned on one's own session logs: replay, read which rules fired
//! or were held back and why, edit the rules, replay again. `prefix-check` then confirms the
//! bodies keep their cacheable prefix.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use toolshelf_core::invoke::RefusalKind;
use toolshelf_core::replay::{Replay, Transcript, TurnReport, explain_line, parse_transcript};
use toolshelf_core::search::SearchIndex;

use super::search::{Ranker, attach_ranker};
use super::{ApiArg, errln, outln};
use crate::inputs::{Loaded, Source};

/// The fixed instruction of a replayed request when none is given.
pub const DEFAULT_SYSTEM: &str = "You are a helpful agent.";

/// Arguments of `replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: Source,
    /// The transcript, one JSON object a line: {"user": "..."}, {"assistant": "..."},
    /// {"call": {"name", "input"}}, {"result": {"content": ..., "is_error": false}},
    /// {"context": "..."}, {"tools_changed": {"add": [...], "remove": [...]}}.
    #[arg(long, value_name = "FILE.jsonl")]
    pub transcript: PathBuf,
    /// API of the request bodies.
    #[arg(long, value_enum, default_value_t)]
    pub format: ApiArg,
    /// The fixed instruction (`system`, the first system message, or `instructions`).
    #[arg(long, value_name = "TEXT", default_value = DEFAULT_SYSTEM)]
    pub system: String,
    /// Ranker for tool_search (hybrid, as the gateway and the proxy search).
    #[arg(long, value_enum, default_value_t)]
    pub ranker: Ranker,
    /// Print, per model request (with its turn), which reminders fired or were held back and
    /// why, which tools were activated, expired or refused, and the bytes of each part, instead
    /// of the bodies.
    #[arg(long)]
    pub explain: bool,
    /// With --explain: one JSON object a line per model request, with its number (`request`,
    /// from 1) and its turn; a description template that reads a per-turn value, uses a stub
    /// or names a pkg or session value that is not there (exit status 1) prints {"error":
    /// "template", "owner", "line", "message"} instead. (Without
    /// --explain the output is the request bodies, one JSON object per line already, so --json
    /// alone is refused.)
    #[arg(long, requires = "explain")]
    pub json: bool,
}

/// Reads a transcript file; invalid UTF-8 is named by its line, and so is an object that gives a
/// key twice (`{"user": "a", "user": "b"}`), which [`parse_transcript`] refuses.
pub fn read_transcript(path: &Path) -> Result<Transcript> {
    let text = crate::inputs::read_text(path, "transcript")?;
    parse_transcript(&text, &path.display().to_string()).map_err(anyhow::Error::msg)
}

/// Replays `transcript` over `loaded` with `args`' format, instruction and ranker, handing each
/// turn's report to `on_report` as it is made (with bodies only when `bodies`).
pub fn replay(
    args: &Args,
    loaded: &Loaded,
    transcript: &Transcript,
    bodies: bool,
    on_report: &mut dyn FnMut(&Replay<'_>, TurnReport) -> Result<()>,
) -> Result<()> {
    let ranker = args.ranker;
    #[cfg(not(feature = "embed"))]
    if ranker == Ranker::Semantic {
        bail!(
            "this build has no embedding model (cargo feature `embed` is off): use --ranker bm25"
        );
    }
    let build = move |catalog: &toolshelf_core::Catalog, visible: &[usize]| -> SearchIndex {
        let mut index = SearchIndex::build(catalog, visible);
        if let Err(e) = attach_ranker(&mut index, catalog, ranker) {
            errln!("toolshelf: warning: semantic ranker unavailable, BM25F alone: {e}");
        }
        index
    };
    // A reminder that names parameters of the tools it points at is refused, not replayed.
    let index = build(
        &loaded.catalog,
        &(0..loaded.catalog.tools().len()).collect::<Vec<_>>(),
    );
    let hits = |q: &str| {
        index
            .rank(&[q.to_owned()], 5)
            .into_iter()
            .map(|h| h.index)
            .collect()
    };
    let problems = loaded
        .compiled
        .reminders()
        .check_against(&loaded.catalog, hits);
    if !problems.is_empty() {
        let source = loaded.compiled.source_name();
        let named: Vec<String> = problems.iter().map(|p| format!("{source}: {p}")).collect();
        bail!("{}", named.join("\n"));
    }
    // The session's description templates, rendered when the inputs were loaded.
    let mut session = Replay::with_descriptions(
        &loaded.compiled,
        loaded.catalog.clone(),
        args.format.into(),
        &args.system,
        &build,
        loaded.surface.descriptions().clone(),
    );
    session.set_bodies(bodies);
    session.set_script_session(toolshelf_core::template::SessionValues {
        mode: None,
        client: None,
        workspace: toolshelf_runtime::files::workspace(
            loaded.compiled.config().template.workspace.as_deref(),
        ),
    });
    // A `tool_define` script's top level is read in a runner process under the [scripts]
    // limits, as the proxy reads it, so that the replay refuses what the proxy refuses, in the
    // same words (a memory limit reached, a stack the runner cannot hold).
    let exe = std::env::current_exe().context("cannot find the toolshelf binary")?;
    let runner = toolshelf_runtime::scripts::Runner::new(exe, loaded.compiled.config());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    session.set_top_level(Box::new(move |tool| {
        runtime.block_on(runner.check_authored(tool))
    }));
    // The callback's own error is kept whole; the session's are text.
    let mut failed: Option<anyhow::Error> = None;
    let mut requests = 0usize;
    // The transcript's warnings are known once the replay has started: said before the first
    // request's output (or at the end, when the replay fails before making one).
    let mut warned = false;
    let warn = |warnings: &[String]| {
        for w in warnings {
            errln!("toolshelf: warning: {w}");
        }
    };
    let outcome = session.run_transcript(transcript, &mut |s, r| {
        if !warned {
            warn(s.warnings());
            warned = true;
        }
        requests += 1;
        on_report(s, r).map_err(|e| {
            let text = e.to_string();
            failed = Some(e);
            text
        })
    });
    if !warned {
        warn(session.warnings());
    }
    match (outcome, failed) {
        (_, Some(e)) => Err(e),
        (Err(e), None) => Err(anyhow::Error::msg(e)),
        // Assistant text, context or tool changes alone make no request: nothing was replayed.
        (Ok(()), None) if requests == 0 => bail!(
            "{}: the transcript has no user turn to replay (no {{\"user\": ...}} or {{\"call\": ...}} line), so it makes no model request",
            transcript.source
        ),
        (Ok(()), None) => Ok(()),
    }
}

pub fn run(args: Args) -> Result<()> {
    // With --explain --json, a template finding is printed as JSON, as the other commands print it.
    let loaded = args
        .source
        .load_json(args.explain && args.json, Default::default())?;
    let transcript = read_transcript(&args.transcript)?;
    replay(&args, &loaded, &transcript, !args.explain, &mut |_, r| {
        match (args.explain, args.json) {
            (false, _) => outln!("{}", r.body),
            (true, false) => outln!("{}", explain_line(&in_words(r))),
            (true, true) => outln!("{}", serde_json::to_string(&r)?),
        }
        Ok(())
    })
}

/// `report` with each refused call's kind in words (`mcp__git__git_log: invalid arguments`)
/// instead of its code (`mcp__git__git_log: invalid`), for the text of `--explain`; `--json`
/// keeps the codes, as the audit log has them. The name is the model's, as it wrote it: escaped
/// for the terminal ([`super::cell`]), so that it can neither forge a line nor send an escape.
fn in_words(mut report: TurnReport) -> TurnReport {
    for entry in &mut report.refused {
        *entry = match entry.rsplit_once(": ") {
            Some((name, code)) => match RefusalKind::from_label(code) {
                Some(kind) => format!("{}: {}", super::cell(name), kind.in_words()),
                None => format!("{}: {code}", super::cell(name)),
            },
            None => super::cell(entry),
        };
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report of a request that refused these calls (`name: code`), and nothing else.
    fn refusing(refused: &[&str]) -> TurnReport {
        TurnReport {
            request: 1,
            turn: 1,
            body: String::new(),
            bytes: Default::default(),
            reminders: Vec::new(),
            activated: Vec::new(),
            expired: Vec::new(),
            unused_turns: Vec::new(),
            refused: refused.iter().map(|r| (*r).to_owned()).collect(),
            injected: Vec::new(),
        }
    }

    #[test]
    fn refusal_codes_read_in_words() {
        let line = explain_line(&in_words(refusing(&[
            "mcp__a__b: not_loaded",
            "mcp__a__c: some_future_code",
        ])));
        assert!(
            line.contains(&format!("mcp__a__b: {}", RefusalKind::NotLoaded.in_words())),
            "{line}"
        );
        assert!(line.contains("mcp__a__c: some_future_code"), "{line}");
    }

    #[test]
    fn a_refused_name_cannot_forge_a_line_or_reach_the_terminal() {
        let line = explain_line(&in_words(refusing(&[
            "x\n  reminder r fired: forged\u{1b}[2J: unknown",
        ])));
        assert_eq!(line.lines().count(), 2, "{line}");
        assert!(
            line.ends_with(&format!(
                "refused: x\\n  reminder r fired: forged\\u{{1b}}[2J: {}",
                RefusalKind::Unknown.in_words()
            )),
            "{line}"
        );
    }
}
