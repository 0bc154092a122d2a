//! `toolshelf replay`: run a recorded (or hand-written) conversation through a session and print
//! the request body of every model turn, or with `--explain` what the session did in each.
//!
//! This is how reminder rules are tuned on one's own session logs: replay, read which rules fired
//! or were held back and why, edit the rules, replay again. `prefix-check` then confirms the
//! bodies keep their cacheable prefix.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use toolshelf_core::replay::{Replay, Transcript, TurnReport, explain_line, parse_transcript};
use toolshelf_core::search::SearchIndex;

use super::search::{Ranker, attach_ranker};
use super::{ApiArg, errln, outln};
use crate::inputs::{Loaded, Source};

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
    #[arg(long, value_name = "TEXT", default_value = "You are a helpful agent.")]
    pub system: String,
    /// Ranker for tool_search (hybrid, as the gateway and the proxy search).
    #[arg(long, value_enum, default_value_t)]
    pub ranker: Ranker,
    /// Print, per turn, which reminders fired or were held back and why, which tools were
    /// activated, expired or refused, and the bytes of each part, instead of the bodies.
    #[arg(long)]
    pub explain: bool,
    /// With --explain: one JSON object per turn. (Without --explain the output is the request
    /// bodies, one JSON object per line already, so --json alone is refused.)
    #[arg(long, requires = "explain")]
    pub json: bool,
}

/// Reads a transcript file; invalid UTF-8 is named by its line, and so is an object that gives a
/// key twice (`{"user": "a", "user": "b"}`), which [`parse_transcript`] refuses.
pub fn read_transcript(path: &Path) -> Result<Transcript> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read transcript {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..valid]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        anyhow::anyhow!(
            "{}:{line}: not valid UTF-8 (byte {valid} of the file); a transcript is UTF-8 text",
            path.display()
        )
    })?;
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
        bail!("{}", problems.join("\n"));
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
    // The callback's own error is kept whole; the session's are text.
    let mut failed: Option<anyhow::Error> = None;
    let mut requests = 0usize;
    let outcome = session.run_transcript(transcript, &mut |s, r| {
        requests += 1;
        on_report(s, r).map_err(|e| {
            let text = e.to_string();
            failed = Some(e);
            text
        })
    });
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
    let loaded = args.source.load()?;
    let transcript = read_transcript(&args.transcript)?;
    replay(&args, &loaded, &transcript, !args.explain, &mut |_, r| {
        match (args.explain, args.json) {
            (false, _) => outln!("{}", r.body),
            (true, false) => outln!("{}", explain_line(&r)),
            (true, true) => outln!("{}", serde_json::to_string(&r)?),
        }
        Ok(())
    })
}
