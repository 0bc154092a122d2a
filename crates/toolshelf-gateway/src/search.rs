//! `tool_search` in the gateway: the one seam between a session and the search engine.
//!
//! A session only needs the text the model reads, which tools' full schemas that text carries
//! (they become loaded for the session) and whether the call was malformed. The engine itself
//! (`toolshelf_core::search`) parses the request, ranks and renders; its index is built with each
//! snapshot over the tools visible in this gateway's mode, so hidden tools are never found.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use toolshelf_core::config::SearchConfig;
use toolshelf_core::search::SearchRequest;
use toolshelf_core::search::render::{Outcome, SearchResponse, SessionView, search_for};

use crate::hub::Snapshot;

/// What one `tool_search` call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchOutcome {
    /// The text the model reads.
    pub text: String,
    /// Catalog indices (in the snapshot) whose full schema is in the text.
    pub loaded: Vec<usize>,
    /// Catalog indices of every tool the text names, however shown.
    pub shown: Vec<usize>,
    /// Whether the call failed: malformed, or the engine broke (a search that found nothing is
    /// an answer, not an error).
    pub is_error: bool,
    /// `ok`, `no_match`, `invalid` or `engine_failure`, for the audit log.
    pub outcome: &'static str,
}

/// What the session's tool list gives the model, by canonical name.
#[derive(Clone, Copy)]
pub struct Held<'a> {
    /// Whether the session holds the tool's schema from an earlier search (marked in the text).
    pub active: &'a dyn Fn(&str) -> bool,
    /// The name the session's frozen list gives the tool, when the list carries it (a pinned
    /// tool): its hit says to call it directly, under that name.
    pub pinned: &'a dyn Fn(&str) -> Option<String>,
    /// The session's rendered description templates, shown in place of the catalog's.
    pub described: &'a BTreeMap<String, String>,
}

impl std::fmt::Debug for Held<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").finish_non_exhaustive()
    }
}

/// Answers one `tool_search` call over the visible tools of `snapshot`, for a session whose list
/// and loaded schemas `held` describes. `before` runs inside the engine's fault boundary, first
/// (the failpoint of the tests).
pub fn tool_search(
    snapshot: &Snapshot,
    config: &SearchConfig,
    args: &Map<String, Value>,
    held: &Held,
    before: impl FnOnce(),
) -> SearchOutcome {
    let started = std::time::Instant::now();
    let outcome = answer(snapshot, config, args, held, before);
    crate::metrics::searched(started.elapsed());
    outcome
}

fn answer(
    snapshot: &Snapshot,
    config: &SearchConfig,
    args: &Map<String, Value>,
    held: &Held,
    before: impl FnOnce(),
) -> SearchOutcome {
    match SearchRequest::from_json(&Value::Object(args.clone())) {
        Err(text) => SearchOutcome {
            text,
            loaded: Vec::new(),
            shown: Vec::new(),
            is_error: true,
            outcome: "invalid",
        },
        Ok(request) => {
            // A fault in the engine must read as a fault, not as "no such tool": the model would
            // otherwise conclude the tool does not exist.
            let run = std::panic::AssertUnwindSafe(|| {
                before();
                let tools = snapshot.catalog.tools();
                let view = SessionView {
                    active: &|i| (held.active)(&tools[i].name),
                    pinned: &|i| (held.pinned)(&tools[i].name),
                    described: held.described,
                };
                search_for(
                    snapshot.search_index(),
                    &snapshot.catalog,
                    &request,
                    config,
                    &view,
                )
            });
            match std::panic::catch_unwind(run) {
                Ok(r) => SearchOutcome {
                    outcome: match r.outcome {
                        Outcome::Found => "ok",
                        Outcome::NoMatch => "no_match",
                    },
                    shown: r.hits[..r.named].iter().map(|h| h.index).collect(),
                    text: r.text,
                    loaded: r.loaded,
                    is_error: false,
                },
                Err(panic) => {
                    let why = toolshelf_core::echo::panic_text(panic.as_ref(), "unknown panic");
                    tracing::error!("tool_search panicked: {why}");
                    SearchOutcome {
                        text: SearchResponse::engine_failure(&format!("internal error ({why})"))
                            .text,
                        loaded: Vec::new(),
                        shown: Vec::new(),
                        is_error: true,
                        outcome: "engine_failure",
                    }
                }
            }
        }
    }
}
