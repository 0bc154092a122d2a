//! `toolshelf replay`: run a recorded (or hand-written) conversation through a session and print
//! the request body of every model turn, or with `--explain` what the session did in each.
//!
//! This is how reminder rules are tuned on one's own session logs: replay, read which rules fired
//! or were held back and why, edit the rules, replay again. `prefix-check` then confirms the
//! bodies keep their cacheable prefix.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use toolshelf_core::replay::{Replay, explain_line, parse_transcript};
use toolshelf_core::search::SearchIndex;

use super::search::Ranker;
use super::{ApiArg, errln, outln};
use crate::inputs::Source;

/// Arguments of `replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: Source,
    /// The transcript, one JSON object a line: {"user": "..."}, {"assistant": "..."},
    /// {"call": {"name", "input"}}, {"result": {"content": ...}}, {"context": "..."},
    /// {"tools_changed": {"add": [...], "remove": [...]}}.
    #[arg(long, value_name = "FILE.jsonl")]
    pub transcript: PathBuf,
    /// API of the request bodies.
    #[arg(long, value_enum, default_value_t)]
    pub format: ApiArg,
    /// The fixed instruction (`system`, the first system message, or `instructions`).
    #[arg(long, value_name = "TEXT", default_value = "You are a helpful agent.")]
    pub system: String,
    /// Ranker for tool_search.
    #[arg(long, value_enum, default_value_t = Ranker::Bm25)]
    pub ranker: Ranker,
    /// Print, per turn, which reminders fired or were held back and why, which tools were
    /// activated or expired, and the bytes of each part, instead of the bodies.
    #[arg(long)]
    pub explain: bool,
    /// With --explain: one JSON object per turn. (Without --explain the output is the request
    /// bodies, one JSON object per line already.)
    #[arg(long)]
    pub json: bool,
}

/// Replays `args`; returns each turn's report.
pub fn replay(args: &Args) -> Result<Vec<toolshelf_core::replay::TurnReport>> {
    let loaded = args.source.load()?;
    let text = std::fs::read_to_string(&args.transcript)
        .with_context(|| format!("cannot read transcript {}", args.transcript.display()))?;
    let events = parse_transcript(&text, &args.transcript.display().to_string())
        .map_err(anyhow::Error::msg)?;
    let ranker = args.ranker;
    let build = move |catalog: &toolshelf_core::Catalog, visible: &[usize]| -> SearchIndex {
        #[cfg(feature = "embed")]
        {
            let mut index = SearchIndex::build(catalog, visible);
            if ranker != Ranker::Bm25
                && let Err(e) = toolshelf_embed::attach_bundled(&mut index, catalog)
            {
                errln!("toolshelf: warning: semantic ranker unavailable, BM25F alone: {e}");
            }
            index
        }
        #[cfg(not(feature = "embed"))]
        {
            let _ = ranker;
            SearchIndex::build(catalog, visible)
        }
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
    session.run(&events).map_err(anyhow::Error::msg)
}

pub fn run(args: Args) -> Result<()> {
    let reports = replay(&args)?;
    for r in &reports {
        match (args.explain, args.json) {
            (false, _) => outln!("{}", r.body),
            (true, false) => outln!("{}", explain_line(r)),
            (true, true) => outln!("{}", serde_json::to_string(r)?),
        }
    }
    Ok(())
}
