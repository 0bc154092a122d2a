//! The text the model reads back from `tool_search`.
//!
//! Plain text, deterministic, and never over the configured budget. The top hits carry their full
//! parameter list and the exact `defer_execute` call; the rest of the hits within the limit get one
//! line; hits past the limit are names only. When the budget runs short the response degrades in
//! steps, cutting descriptions before anything else and never cutting a name: a truncated schema
//! the model can re-request is better than a truncated name it cannot use.

use std::collections::BTreeMap;

use serde::Serialize;

use super::schema_text::{Detail, call_form, render_params};
use super::{Hit, SearchIndex, SearchRequest, effective_limit};
use crate::catalog::{Catalog, Resolution};
use crate::config::SearchConfig;
use crate::index::{chars, cut};

/// How the search went, for callers that log or act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Tools were found.
    Found,
    /// Nothing matched.
    NoMatch,
}

/// What `tool_search` returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResponse {
    /// Hits in rank order (all of them, including names-only ones).
    pub hits: Vec<Hit>,
    /// The text for the model.
    pub text: String,
    /// Catalog indices of tools whose full schema is in `text` (they count as loaded).
    #[serde(skip)]
    pub loaded: Vec<usize>,
    /// Found or not.
    pub outcome: Outcome,
    /// How many of the first `hits` get a line or a schema in `text`: those within the response's
    /// limit that fit its budget. The rest are named after "Also matching", or, past the budget,
    /// only counted.
    #[serde(skip)]
    pub listed: usize,
    /// How many of the first `hits` `text` names at all: with a schema, on a line, or after
    /// "Also matching". The rest are only counted.
    #[serde(skip)]
    pub named: usize,
    /// Names asked for by `tool_names` that name no visible tool, in the order given.
    #[serde(skip)]
    pub unresolved: Vec<String>,
}

impl SearchResponse {
    /// The response when the engine itself failed: the model must be able to tell "no such tool"
    /// from "search broke".
    pub fn engine_failure(reason: &str) -> Self {
        Self {
            hits: Vec::new(),
            text: format!(
                "tool_search failed: {reason}. This is a fault in the search engine, not a sign that no tool matches. \
Try again, or look a tool up by its exact name from <available_deferred_tools> with tool_names."
            ),
            loaded: Vec::new(),
            outcome: Outcome::NoMatch,
            listed: 0,
            named: 0,
            unresolved: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Full,
    Line,
    NameOnly,
}

#[derive(Debug, Clone, Copy)]
struct Level {
    /// Characters of the description of full hits (`usize::MAX`: whole).
    full_desc: usize,
    param: Detail,
    /// Characters of one-line descriptions (0: none).
    line_desc: usize,
    reasons: bool,
    schemas: bool,
}

const LEVELS: [Level; 6] = [
    Level {
        full_desc: usize::MAX,
        param: Detail::Cut(300),
        line_desc: 200,
        reasons: true,
        schemas: true,
    },
    Level {
        full_desc: 800,
        param: Detail::Cut(150),
        line_desc: 120,
        reasons: true,
        schemas: true,
    },
    Level {
        full_desc: 300,
        param: Detail::Cut(80),
        line_desc: 80,
        reasons: true,
        schemas: true,
    },
    Level {
        full_desc: 120,
        param: Detail::Cut(40),
        line_desc: 0,
        reasons: false,
        schemas: true,
    },
    Level {
        full_desc: 0,
        param: Detail::TypesOnly,
        line_desc: 0,
        reasons: false,
        schemas: true,
    },
    Level {
        full_desc: 0,
        param: Detail::TypesOnly,
        line_desc: 0,
        reasons: false,
        schemas: false,
    },
];

/// Runs a `tool_search` request against the index and renders the response.
pub fn search(
    index: &SearchIndex,
    catalog: &Catalog,
    request: &SearchRequest,
    config: &SearchConfig,
) -> SearchResponse {
    search_in_session(
        index,
        catalog,
        request,
        config,
        &|_| false,
        &BTreeMap::new(),
    )
}

/// [`search`] in a session: a tool whose schema the session already holds (`active(i)`) still
/// gets its full schema (the client may have compacted its history away), marked
/// `(already active)` so the model knows it may call it at once. `described` holds the session's
/// rendered description templates by canonical name: a hit shows its session's description, as
/// the tool list does, not the catalog's.
pub fn search_in_session(
    index: &SearchIndex,
    catalog: &Catalog,
    request: &SearchRequest,
    config: &SearchConfig,
    active: &dyn Fn(usize) -> bool,
    described: &BTreeMap<String, String>,
) -> SearchResponse {
    // The marks lengthen the text after layout: when that crosses the budget, lay out again
    // within a budget smaller by the overflow.
    let mut budget = config.response_budget_chars;
    loop {
        let within = SearchConfig {
            response_budget_chars: budget,
            ..config.clone()
        };
        let mut response = search_within(index, catalog, request, &within, described);
        mark_active(&mut response, catalog, active);
        let over = chars(&response.text).saturating_sub(config.response_budget_chars);
        if over == 0 || budget <= over {
            return response;
        }
        budget -= over;
    }
}

fn search_within(
    index: &SearchIndex,
    catalog: &Catalog,
    request: &SearchRequest,
    config: &SearchConfig,
    described: &BTreeMap<String, String>,
) -> SearchResponse {
    match request {
        SearchRequest::Names(names) => exact(index, catalog, names, config, described),
        SearchRequest::Queries { queries, limit } => {
            // Each query is a step of a task and gets a hit of its own: a limit below their
            // number would leave the last steps only named after "Also matching".
            let limit = effective_limit(*limit, config).max(queries.len().min(config.max_limit));
            let hits = index.rank(queries, limit + config.max_limit);
            let quoted = quote_list(queries);
            let notes = index.notes(queries);
            if hits.is_empty() {
                return no_match(&quoted, &notes, config);
            }
            let mut header = String::new();
            for n in &notes {
                header.push_str("Note: ");
                header.push_str(n);
                header.push('\n');
            }
            // A query of server filters alone lists the servers' tools by name, unranked.
            let order = if hits.iter().any(|h| h.score > 0.0) {
                "best first"
            } else {
                "by name"
            };
            header.push_str(&format!("Tools matching {quoted} ({order}):"));
            layout(
                catalog,
                described,
                header,
                hits,
                limit,
                config.full_schemas,
                config.response_budget_chars,
            )
        }
    }
}

/// Marks the full hits of active tools in the text: their header line `N. NAME` gains
/// ` (already active)`.
fn mark_active(response: &mut SearchResponse, catalog: &Catalog, active: &dyn Fn(usize) -> bool) {
    let tools = catalog.tools();
    let marked: Vec<&str> = response
        .loaded
        .iter()
        .filter(|&&i| active(i))
        .map(|&i| tools[i].name.as_str())
        .collect();
    if marked.is_empty() {
        return;
    }
    let mut out = String::with_capacity(response.text.len() + marked.len() * 20);
    for line in response.text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let is_marked = body.split_once(". ").is_some_and(|(n, name)| {
            n.chars().all(|c| c.is_ascii_digit()) && marked.contains(&name)
        });
        out.push_str(body);
        if is_marked {
            out.push_str(" (already active)");
        }
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    response.text = out;
}

fn no_match(what: &str, notes: &[String], config: &SearchConfig) -> SearchResponse {
    let mut text = String::new();
    for n in notes {
        text.push_str("Note: ");
        text.push_str(n);
        text.push('\n');
    }
    text.push_str(&format!(
        "No deferred tool matches {what}. Try other or fewer words, give keywords in both English and Chinese \
(e.g. [\"send email\", \"发送邮件\"]), or look a tool up by its exact name from <available_deferred_tools> with tool_names."
    ));
    SearchResponse {
        hits: Vec::new(),
        text: fit_plain(text, config.response_budget_chars),
        loaded: Vec::new(),
        outcome: Outcome::NoMatch,
        listed: 0,
        named: 0,
        unresolved: Vec::new(),
    }
}

fn exact(
    index: &SearchIndex,
    catalog: &Catalog,
    names: &[String],
    config: &SearchConfig,
    described: &BTreeMap<String, String>,
) -> SearchResponse {
    let mut hits: Vec<Hit> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut missing: Vec<&String> = Vec::new();
    for name in names {
        let docs = index.exact(name);
        if docs.is_empty() {
            // A name that differs only in case or separators still resolves when unambiguous.
            match catalog.resolve(name) {
                Resolution::Exact(i) | Resolution::Bare(i)
                    if index.catalog_indices().binary_search(&i).is_ok() =>
                {
                    let d = index
                        .catalog_indices()
                        .binary_search(&i)
                        .unwrap_or_default() as u32;
                    push_unique(&mut hits, index.named_hit(d));
                }
                _ => missing.push(name),
            }
            continue;
        }
        if docs.len() > 1 {
            notes.push(format!(
                "{} names {} tools; all are shown.",
                quote(name),
                docs.len()
            ));
        }
        for &d in docs {
            push_unique(&mut hits, index.named_hit(d));
        }
    }
    let mut fallback: Vec<Hit> = Vec::new();
    // Each unknown name costs a fuzzy search; a call naming hundreds gets the first few.
    if missing.len() > 5 {
        notes.push(format!(
            "{} more names match no tool and were not searched for.",
            missing.len() - 5
        ));
    }
    for name in missing.iter().take(5) {
        let found = index.rank(std::slice::from_ref(*name), config.default_limit);
        if found.is_empty() {
            notes.push(format!(
                "No tool is named {}, and a search for it found nothing.",
                quote(name)
            ));
        } else {
            notes.push(format!(
                "No tool is named {}; a search for it found: {}.",
                quote(name),
                found
                    .iter()
                    .map(|h| &*h.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for h in found {
            if !hits.iter().any(|x| x.index == h.index)
                && !fallback.iter().any(|x| x.index == h.index)
            {
                fallback.push(h);
            }
        }
    }
    let unresolved: Vec<String> = missing.iter().map(|n| (*n).clone()).collect();
    if hits.is_empty() && fallback.is_empty() {
        return SearchResponse {
            unresolved,
            ..no_match(&format!("the names {}", quote_list(names)), &[], config)
        };
    }
    let header = if notes.is_empty() {
        String::new()
    } else {
        notes.join("\n")
    };
    // Named tools all get full schemas; fallback hits follow the fuzzy layout after them.
    let full = hits.len() + config.full_schemas.min(fallback.len());
    let limit = hits.len() + config.default_limit.min(fallback.len());
    hits.extend(fallback);
    SearchResponse {
        unresolved,
        ..layout(
            catalog,
            described,
            header,
            hits,
            limit,
            full,
            config.response_budget_chars,
        )
    }
}

/// `"text"`, cut: the model's own words are echoed back, but never at length.
fn quote(text: &str) -> String {
    format!("{:?}", cut(text, 80))
}

/// The first few items, quoted and cut, and how many more there were.
pub fn quote_list(items: &[String]) -> String {
    let mut out: Vec<String> = items.iter().take(5).map(|i| quote(i)).collect();
    if items.len() > 5 {
        out.push(format!("and {} more", items.len() - 5));
    }
    out.join(", ")
}

fn push_unique(hits: &mut Vec<Hit>, hit: Hit) {
    if !hits.iter().any(|h| h.index == hit.index) {
        hits.push(hit);
    }
}

fn kinds(n: usize, limit: usize, full: usize) -> Vec<Kind> {
    (0..n)
        .map(|i| {
            if i < full.min(limit) {
                Kind::Full
            } else if i < limit {
                Kind::Line
            } else {
                Kind::NameOnly
            }
        })
        .collect()
}

fn layout(
    catalog: &Catalog,
    described: &BTreeMap<String, String>,
    header: String,
    hits: Vec<Hit>,
    limit: usize,
    full: usize,
    budget: usize,
) -> SearchResponse {
    let kinds = kinds(hits.len(), limit, full);
    // The most detailed level at which the first `kept` hits fit, if any.
    let attempt = |kept: usize| {
        LEVELS.iter().find_map(|&level| {
            let (text, loaded) = render(
                catalog,
                described,
                &header,
                &hits[..kept],
                &kinds,
                level,
                hits.len() - kept,
            );
            (chars(&text) <= budget).then_some((text, loaded))
        })
    };
    // Keeping fewer names never makes the text longer, so the largest number of names that fits
    // is found by bisection (the model may name thousands of tools in one call).
    let fitted = match attempt(hits.len()) {
        Some(r) => Some((hits.len(), r)),
        None => {
            let (mut lo, mut hi, mut best) = (1, hits.len() - 1, None);
            while lo <= hi {
                let mid = lo + (hi - lo) / 2;
                match attempt(mid) {
                    Some(r) => {
                        best = Some((mid, r));
                        lo = mid + 1;
                    }
                    None => hi = mid - 1,
                }
            }
            best
        }
    };
    let (kept, (text, loaded)) = fitted.unwrap_or_else(|| {
        // Not even one name and the header fit: the budget is smaller than any useful answer.
        let text = format!("{} (response budget too small for more)", hits[0].name);
        (1, (fit_plain(text, budget), Vec::new()))
    });
    SearchResponse {
        listed: limit.min(kept),
        named: kept,
        hits,
        text,
        loaded,
        outcome: Outcome::Found,
        unresolved: Vec::new(),
    }
}

/// Cuts plain text to the budget (used only for fixed messages).
fn fit_plain(text: String, budget: usize) -> String {
    if chars(&text) <= budget {
        text
    } else {
        cut(&text, budget)
    }
}

fn render(
    catalog: &Catalog,
    described: &BTreeMap<String, String>,
    header: &str,
    hits: &[Hit],
    kinds: &[Kind],
    level: Level,
    omitted: usize,
) -> (String, Vec<usize>) {
    let tools = catalog.tools();
    let mut out = String::new();
    let mut loaded = Vec::new();
    if !header.is_empty() {
        out.push_str(header);
        out.push_str("\n\n");
    }
    let mut names_only: Vec<&str> = Vec::new();
    let mut schemas_dropped = false;
    for (i, hit) in hits.iter().enumerate() {
        let t = &tools[hit.index];
        let description = described.get(&t.name).unwrap_or(&t.description);
        let kind = match kinds[i] {
            Kind::Full if !level.schemas => {
                schemas_dropped = true;
                Kind::Line
            }
            k => k,
        };
        match kind {
            Kind::Full => {
                out.push_str(&format!("{}. {}\n", i + 1, t.name));
                let desc = cut(description, level.full_desc);
                if !desc.is_empty() && level.full_desc > 0 {
                    out.push_str(&format!("   {desc}\n"));
                }
                if level.reasons {
                    out.push_str(&format!("   why: {}\n", hit.reason));
                }
                let params = render_params(&t.input_schema, level.param, 5);
                if params.is_empty() {
                    out.push_str("   parameters: none\n");
                } else {
                    out.push_str("   parameters:\n");
                    out.push_str(&params);
                }
                out.push_str(&format!(
                    "   call: {}\n\n",
                    call_form(&t.name, &t.input_schema)
                ));
                loaded.push(hit.index);
            }
            Kind::Line => {
                out.push_str(&format!("{}. {}", i + 1, t.name));
                let desc = cut(description, level.line_desc);
                if level.line_desc > 0 && !desc.is_empty() {
                    out.push_str(&format!(": {desc}"));
                }
                if level.reasons {
                    out.push_str(&format!(" (why: {})", hit.reason));
                }
                out.push('\n');
            }
            Kind::NameOnly => names_only.push(&t.name),
        }
    }
    if !names_only.is_empty() {
        if !out.ends_with("\n\n") && !out.is_empty() {
            out.push('\n');
        }
        out.push_str("Also matching (pass names as tool_names to get their schemas): ");
        out.push_str(&names_only.join(", "));
        out.push('\n');
    }
    if schemas_dropped {
        out.push_str(
            "(schemas left out to fit the response; pass fewer names as tool_names to get them)\n",
        );
    }
    if omitted > 0 {
        out.push_str(&format!(
            "(+{omitted} more matches left out to fit the response)\n"
        ));
    }
    while out.ends_with('\n') {
        out.pop();
    }
    (out, loaded)
}
