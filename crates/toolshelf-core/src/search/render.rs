//! The text the model reads back from `tool_search`.
//!
//! Plain text, deterministic, and never over the configured budget. The top hits carry their full
//! parameter list and the exact `defer_execute` call; the rest of the hits within the limit get one
//! line; hits past the limit are names only. When the budget runs short the response degrades in
//! steps, cutting descriptions before anything else and never cutting a name: a truncated schema
//! the model can re-request is better than a truncated name it cannot use.
//!
//! Three kinds of hit keep their rank but show no call form. A tool the session's list already
//! carries with its schema (pinned) is one line under the name the list gives it: call it
//! directly. A tool whose input schema is not valid JSON Schema says it cannot be called and why,
//! since `defer_execute` refuses every call to it (see [`crate::invoke::schema_problem`]). A
//! script tool whose script could not be defined says it is unavailable and why (see
//! [`crate::catalog::Tool::unavailable_script`]), since every call of it fails with that reason;
//! pinned, it is not offered for a direct call either.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use serde::Serialize;

use super::schema_text::{Detail, call_form, render_params};
use super::{Hit, SearchIndex, SearchRequest, effective_limit};
use crate::catalog::{Catalog, Resolution};
use crate::config::SearchConfig;
use crate::index::{chars, cut};
use crate::name::DEFER_EXECUTE;

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
    /// Catalog indices of tools whose full schema is in `text`, or whose hit in its place says
    /// they cannot be called (see `broken`): they count as loaded, so a call of one gets its own
    /// answer at once. Pinned tools are never in it: the session's list carries their schema.
    #[serde(skip)]
    pub loaded: Vec<usize>,
    /// Catalog indices, among `loaded`, of tools no call of which can work (an input schema that
    /// is not valid JSON Schema, a script tool whose script could not be defined): their hit
    /// says they cannot be called and why, in place of a parameter list and call form.
    #[serde(skip)]
    pub broken: Vec<usize>,
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
            broken: Vec::new(),
            outcome: Outcome::NoMatch,
            listed: 0,
            named: 0,
            unresolved: Vec::new(),
        }
    }
}

/// What a session's tool list already gives the model, for [`search_for`].
#[derive(Clone, Copy)]
pub struct SessionView<'a> {
    /// Whether the session holds tool `i`'s schema from an earlier search: its hit still gets the
    /// full schema (the client may have compacted its history away), marked `(already active)`.
    pub active: &'a dyn Fn(usize) -> bool,
    /// The name tool `i` has in the session's tool list when the list carries it with its schema
    /// (a pinned tool): its hit says so under that name, with no schema and no call form.
    pub pinned: &'a dyn Fn(usize) -> Option<String>,
    /// The session's rendered description templates by canonical name: a hit shows its session's
    /// description, as the tool list does, not the catalog's.
    pub described: &'a BTreeMap<String, String>,
}

static NO_DESCRIPTIONS: BTreeMap<String, String> = BTreeMap::new();

impl SessionView<'_> {
    /// No session: nothing active, nothing pinned, the catalog's descriptions.
    pub fn none() -> SessionView<'static> {
        SessionView {
            active: &|_| false,
            pinned: &|_| None,
            described: &NO_DESCRIPTIONS,
        }
    }
}

impl std::fmt::Debug for SessionView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionView")
            .field("described", &self.described.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Full,
    Line,
    /// In the session's tool list already: one line, under the list's name.
    Pinned,
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

/// The layouts tried, fullest first, until one fits the budget. Between a whole description and
/// 800 characters, two steps keep more of a long one (a tool described in tens of thousands of
/// characters) when the budget has room for it.
const LEVELS: [Level; 8] = [
    Level {
        full_desc: usize::MAX,
        param: Detail::Cut(300),
        line_desc: 200,
        reasons: true,
        schemas: true,
    },
    Level {
        full_desc: 6_000,
        param: Detail::Cut(300),
        line_desc: 200,
        reasons: true,
        schemas: true,
    },
    Level {
        full_desc: 2_500,
        param: Detail::Cut(200),
        line_desc: 150,
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
    search_for(index, catalog, request, config, &SessionView::none())
}

/// [`search_for`] with `active` and `described` and no pinned tools: every hit is shown as a
/// deferred tool. [`search_for`] also names the tools the session's list carries.
pub fn search_in_session(
    index: &SearchIndex,
    catalog: &Catalog,
    request: &SearchRequest,
    config: &SearchConfig,
    active: &dyn Fn(usize) -> bool,
    described: &BTreeMap<String, String>,
) -> SearchResponse {
    let view = SessionView {
        active,
        pinned: &|_| None,
        described,
    };
    search_for(index, catalog, request, config, &view)
}

/// [`search`] in a session whose tool list and loaded schemas `view` describes.
pub fn search_for(
    index: &SearchIndex,
    catalog: &Catalog,
    request: &SearchRequest,
    config: &SearchConfig,
    view: &SessionView,
) -> SearchResponse {
    // The marks lengthen the text after layout: when that crosses the budget, lay out again
    // within a budget smaller by the overflow.
    let mut budget = config.response_budget_chars;
    loop {
        let within = SearchConfig {
            response_budget_chars: budget,
            ..config.clone()
        };
        let mut response = search_within(index, catalog, request, &within, view);
        mark_active(&mut response, catalog, view.active);
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
    view: &SessionView,
) -> SearchResponse {
    match request {
        SearchRequest::Names(names) => exact(index, catalog, names, config, view),
        SearchRequest::Queries { queries, limit } => {
            // A query given twice is one intent, and is said once.
            let distinct = super::distinct_queries(queries);
            let queries = distinct.as_deref().unwrap_or(queries);
            let requested = *limit;
            // Each query is a step of a task and gets a hit of its own: a limit below their
            // number would leave the last steps only named after "Also matching".
            let limit = effective_limit(requested, config).max(queries.len().min(config.max_limit));
            let hits = index.rank(queries, limit + config.max_limit);
            let quoted = quote_list(queries);
            let mut notes = index.notes(queries);
            if hits.is_empty() {
                return no_match(&quoted, &notes, WORDS_ADVICE, config);
            }
            // A limit the model asked for and did not get is said, not cut silently.
            if let Some(asked) = requested.filter(|&n| n > config.max_limit) {
                notes.push(format!(
                    "the limit {asked} was capped at {}, the most one search returns.",
                    config.max_limit
                ));
            }
            let mut header = String::new();
            for n in &notes {
                header.push_str("Note: ");
                header.push_str(n);
                header.push('\n');
            }
            // A query of server filters alone lists the servers' tools by name, unranked, and
            // several servers' in turn.
            let order = if hits.iter().any(|h| h.score > 0.0) {
                "best first"
            } else if hits.iter().any(|h| h.server != hits[0].server) {
                "each server's by name, in turn"
            } else {
                "by name"
            };
            header.push_str(&format!("Tools matching {quoted} ({order}):"));
            layout(
                catalog,
                view,
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
/// ` (already active)`. A tool that cannot be called is not marked.
fn mark_active(response: &mut SearchResponse, catalog: &Catalog, active: &dyn Fn(usize) -> bool) {
    let tools = catalog.tools();
    let marked: Vec<&str> = response
        .loaded
        .iter()
        .filter(|&&i| active(i) && !response.broken.contains(&i))
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

/// What a search by words that found nothing advises.
const WORDS_ADVICE: &str = "Try other or fewer words, give keywords in both English and Chinese \
(e.g. [\"send email\", \"发送邮件\"]), or look a tool up by its exact name from <available_deferred_tools> with tool_names.";

/// What a lookup by names that found nothing advises: the lookup was already by name.
const NAMES_ADVICE: &str = "Give names exactly as <available_deferred_tools> lists them \
(mcp__SERVER__TOOL, or a tool's own name), or find a tool by what it does with query.";

fn no_match(what: &str, notes: &[String], advice: &str, config: &SearchConfig) -> SearchResponse {
    let mut text = String::new();
    for n in notes {
        text.push_str("Note: ");
        text.push_str(n);
        text.push('\n');
    }
    // The index holds every tool the session can see, pinned ones too.
    text.push_str(&format!("No tool matches {what}. {advice}"));
    SearchResponse {
        hits: Vec::new(),
        text: fit_plain(text, config.response_budget_chars),
        loaded: Vec::new(),
        broken: Vec::new(),
        outcome: Outcome::NoMatch,
        listed: 0,
        named: 0,
        unresolved: Vec::new(),
    }
}

/// The reason of a hit whose name is the one asked for once case and the separators are ignored.
const FOLDED_NAME: &str = "name with case and separators ignored";

fn exact(
    index: &SearchIndex,
    catalog: &Catalog,
    names: &[String],
    config: &SearchConfig,
    view: &SessionView,
) -> SearchResponse {
    let shown = |h: &Hit| (view.pinned)(h.index).unwrap_or_else(|| h.name.to_string());
    let mut hits: Vec<Hit> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut missing: Vec<&String> = Vec::new();
    let mut own: Vec<String> = Vec::new();
    for name in names {
        let docs = index.exact(name);
        if docs.is_empty() {
            // An alias, or a name that differs only in case or separators (`GIT-LOG`), among the
            // visible tools: a hidden tool with the name as written changes nothing.
            let doc = |i: usize| {
                index
                    .catalog_indices()
                    .binary_search(&i)
                    .ok()
                    .map(|d| d as u32)
            };
            let mut found: Vec<u32> = match catalog.resolve(name) {
                Resolution::Exact(i) | Resolution::Bare(i) => vec![i],
                Resolution::Ambiguous(v) => v,
                Resolution::NotFound => Vec::new(),
            }
            .into_iter()
            .filter_map(doc)
            .collect();
            if found.is_empty() {
                found = catalog.folded(name).into_iter().filter_map(doc).collect();
            }
            if found.is_empty() {
                // toolshelf's own tools are not in the catalog, and a search for one finds
                // only tools that mention searching.
                match crate::name::meta_tool_as_called(name) {
                    Some(meta) => own.push(format!(
                        "{} is toolshelf's own {meta}, not a deferred tool: call {meta} directly.",
                        quote(name)
                    )),
                    None => missing.push(name),
                }
            } else if found.len() > 1 {
                notes.push(format!(
                    "{} names {} tools once case and the separators _ - . are ignored; all are shown.",
                    quote(name),
                    found.len()
                ));
            }
            for d in found {
                let mut hit = index.named_hit(d);
                let t = &catalog.tools()[hit.index];
                if t.name != *name && !t.short_names().any(|n| n == name.as_str()) {
                    hit.reason = FOLDED_NAME.into();
                }
                push_unique(&mut hits, hit);
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
        // Likely typos first (`git_stauts`), closest first, then what a search for the name finds.
        let mut found: Vec<Hit> = if name.len() <= 4 * crate::name::MAX_NAME_LEN {
            let visible = index
                .catalog_indices()
                .iter()
                .map(|&i| catalog.tools()[i].name.as_str());
            crate::name::closest(name, visible, config.default_limit)
                .iter()
                .filter_map(|n| catalog.position(n))
                .filter_map(|i| index.catalog_indices().binary_search(&i).ok())
                .map(|d| index.close_hit(d as u32))
                .collect()
        } else {
            Vec::new()
        };
        for h in index.rank(std::slice::from_ref(*name), config.default_limit) {
            push_unique(&mut found, h);
        }
        found.truncate(config.default_limit);
        if found.is_empty() {
            notes.push(format!(
                "No tool is named {}, and a search for it found nothing.",
                quote(name)
            ));
        } else {
            notes.push(format!(
                "No tool is named {}; a search for it found: {}.",
                quote(name),
                found.iter().map(shown).collect::<Vec<_>>().join(", ")
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
            ..no_match(
                &format!("the names {}", quote_list(names)),
                &own,
                NAMES_ADVICE,
                config,
            )
        };
    }
    notes.extend(own);
    let header = if notes.is_empty() {
        String::new()
    } else {
        notes.join("\n")
    };
    // Named tools all get full schemas (pinned ones need none); fallback hits follow the fuzzy
    // layout after them.
    let named = hits
        .iter()
        .filter(|h| (view.pinned)(h.index).is_none())
        .count();
    let full = named + config.full_schemas.min(fallback.len());
    let limit = hits.len() + config.default_limit.min(fallback.len());
    hits.extend(fallback);
    SearchResponse {
        unresolved,
        ..layout(
            catalog,
            view,
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
    plain_quote(&cut(text, 80))
}

/// `text` between plain double quotes, as it is: no escapes, so `read "x"` reads `"read "x""`
/// and `C:\Users` keeps one backslash. A line break or tab becomes a space and any other control
/// character (or a bidirectional override, which would reorder the line around it) becomes
/// U+FFFD, so the quote stays on its line and shows what it holds.
pub fn plain_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        out.push(match c {
            '\n' | '\r' | '\t' | '\u{0b}' | '\u{0c}' | '\u{85}' | '\u{2028}' | '\u{2029}' => ' ',
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => '\u{fffd}',
            c if c.is_control() => '\u{fffd}',
            c => c,
        });
    }
    out.push('"');
    out
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

/// How each hit is shown: the first `full` hits within `limit` that are not pinned carry their
/// schema (a pinned hit takes no schema's place), the other hits within it a line, the rest a
/// name.
fn kinds(pinned: &[Option<String>], limit: usize, full: usize) -> Vec<Kind> {
    let mut schemas = 0;
    pinned
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if i >= limit {
                Kind::NameOnly
            } else if p.is_some() {
                Kind::Pinned
            } else if schemas < full {
                schemas += 1;
                Kind::Full
            } else {
                Kind::Line
            }
        })
        .collect()
}

fn layout(
    catalog: &Catalog,
    view: &SessionView,
    header: String,
    hits: Vec<Hit>,
    limit: usize,
    full: usize,
    budget: usize,
) -> SearchResponse {
    let pinned: Vec<Option<String>> = hits.iter().map(|h| (view.pinned)(h.index)).collect();
    let page = Page {
        catalog,
        described: view.described,
        header,
        kinds: kinds(&pinned, limit, full),
        pinned,
        problems: hits.iter().map(|_| OnceCell::new()).collect(),
        hits: &hits,
    };
    // The most detailed level at which the first `kept` hits fit, if any.
    let attempt = |kept: usize| {
        LEVELS.iter().find_map(|&level| {
            let rendered = page.render(kept, level);
            (chars(&rendered.0) <= budget).then_some(rendered)
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
    let (kept, (text, loaded, broken)) = fitted.unwrap_or_else(|| {
        // Not even one name and the header fit: the budget is smaller than any useful answer.
        let text = format!("{} (response budget too small for more)", page.name(0));
        (1, (fit_plain(text, budget), Vec::new(), Vec::new()))
    });
    SearchResponse {
        listed: limit.min(kept),
        named: kept,
        hits,
        text,
        loaded,
        broken,
        outcome: Outcome::Found,
        unresolved: Vec::new(),
    }
}

/// The least of an unavailable script tool's reason its hit keeps, however tight the budget: a
/// level that drops descriptions still says why no call can work.
const UNAVAILABLE_REASON_CHARS: usize = 160;

/// Cuts plain text to the budget (used only for fixed messages).
fn fit_plain(text: String, budget: usize) -> String {
    if chars(&text) <= budget {
        text
    } else {
        cut(&text, budget)
    }
}

/// One response's hits and how each is shown, rendered at any level.
struct Page<'a> {
    catalog: &'a Catalog,
    described: &'a BTreeMap<String, String>,
    header: String,
    hits: &'a [Hit],
    kinds: Vec<Kind>,
    /// The session list's name of each pinned hit.
    pinned: Vec<Option<String>>,
    /// Why each hit's input schema is not valid JSON Schema, found when first shown in full.
    problems: Vec<OnceCell<Option<String>>>,
}

impl Page<'_> {
    /// Hit `i`'s name as the session calls it.
    fn name(&self, i: usize) -> &str {
        self.pinned[i]
            .as_deref()
            .unwrap_or(&self.catalog.tools()[self.hits[i].index].name)
    }

    fn problem(&self, i: usize) -> Option<&str> {
        self.problems[i]
            .get_or_init(|| {
                crate::invoke::schema_problem(
                    &self.catalog.tools()[self.hits[i].index].input_schema,
                )
            })
            .as_deref()
    }

    /// The text with the first `kept` hits at `level`, the tools it loads and those of them
    /// that cannot be called.
    fn render(&self, kept: usize, level: Level) -> (String, Vec<usize>, Vec<usize>) {
        let tools = self.catalog.tools();
        let mut out = String::new();
        let mut loaded = Vec::new();
        let mut broken = Vec::new();
        if !self.header.is_empty() {
            out.push_str(&self.header);
            out.push_str("\n\n");
        }
        let mut names_only: Vec<&str> = Vec::new();
        let mut pinned_only: Vec<&str> = Vec::new();
        let mut schemas_dropped = false;
        for (i, hit) in self.hits[..kept].iter().enumerate() {
            let t = &tools[hit.index];
            let description = self.described.get(&t.name).unwrap_or(&t.description);
            let kind = match self.kinds[i] {
                Kind::Full if !level.schemas => {
                    schemas_dropped = true;
                    Kind::Line
                }
                k => k,
            };
            match kind {
                Kind::Full => {
                    // A schema block stands apart from the lines before it.
                    if !out.is_empty() && !out.ends_with("\n\n") {
                        out.push('\n');
                    }
                    out.push_str(&format!("{}. {}\n", i + 1, t.name));
                    let unavailable = t.unavailable_script();
                    // An unavailable script tool's description is the reason, said below.
                    let desc = cut(description, level.full_desc);
                    if !desc.is_empty() && level.full_desc > 0 && unavailable.is_none() {
                        out.push_str(&format!("   {desc}\n"));
                    }
                    if level.reasons {
                        out.push_str(&format!("   why: {}\n", hit.reason));
                    }
                    match (unavailable, self.problem(i)) {
                        (Some(why), _) => {
                            out.push_str(&format!(
                                "   cannot be called: this script tool is unavailable: its script \
could not be defined ({}), so every call to it fails until the script is fixed. Use another tool, \
or tell the user.\n\n",
                                cut(why, level.full_desc.max(UNAVAILABLE_REASON_CHARS))
                            ));
                            broken.push(hit.index);
                        }
                        (None, Some(problem)) => {
                            out.push_str(&format!(
                                "   cannot be called: its input schema is not valid JSON Schema ({}), so \
{DEFER_EXECUTE} refuses every call to it until its server fixes the schema. Use another tool, or \
tell the user.\n\n",
                                cut(problem, 160)
                            ));
                            broken.push(hit.index);
                        }
                        (None, None) => {
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
                        }
                    }
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
                Kind::Pinned if t.unavailable_script().is_some() => {
                    out.push_str(&format!(
                        "{}. {} (in your tool list, but unavailable: its script could not be \
defined, as its description there says)\n",
                        i + 1,
                        self.name(i)
                    ));
                }
                Kind::Pinned => {
                    out.push_str(&format!(
                        "{}. {} (already in your tool list with its schema: call it directly)\n",
                        i + 1,
                        self.name(i)
                    ));
                }
                // One that cannot be called is not listed with those to call directly.
                Kind::NameOnly if t.unavailable_script().is_some() => {
                    names_only.push(self.name(i));
                }
                Kind::NameOnly if self.pinned[i].is_some() => pinned_only.push(self.name(i)),
                Kind::NameOnly => names_only.push(&t.name),
            }
        }
        if (!names_only.is_empty() || !pinned_only.is_empty())
            && !out.ends_with("\n\n")
            && !out.is_empty()
        {
            out.push('\n');
        }
        if !names_only.is_empty() {
            out.push_str("Also matching (pass names as tool_names to get their schemas): ");
            out.push_str(&names_only.join(", "));
            out.push('\n');
        }
        if !pinned_only.is_empty() {
            out.push_str("Also matching, already in your tool list (call them directly): ");
            out.push_str(&pinned_only.join(", "));
            out.push('\n');
        }
        if schemas_dropped {
            out.push_str(
                "(schemas left out to fit the response; pass fewer names as tool_names to get them)\n",
            );
        }
        let omitted = self.hits.len() - kept;
        if omitted > 0 {
            out.push_str(&format!(
                "(+{omitted} more matches left out to fit the response)\n"
            ));
        }
        while out.ends_with('\n') {
            out.pop();
        }
        (out, loaded, broken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twelve tools that all match "file", over the default maximum of ten.
    fn files() -> (Catalog, SearchIndex) {
        let tools: Vec<serde_json::Value> = (0..12)
            .map(|i| serde_json::json!({"name": format!("file_tool_{i:02}"), "description": "Work on a file"}))
            .collect();
        let catalog = Catalog::from_json_str(&serde_json::Value::from(tools).to_string(), "test")
            .expect("catalog");
        let all: Vec<usize> = (0..catalog.tools().len()).collect();
        let index = SearchIndex::build(&catalog, &all);
        (catalog, index)
    }

    fn text(index: &SearchIndex, catalog: &Catalog, args: serde_json::Value) -> String {
        let request = SearchRequest::from_json(&args).expect("request");
        search(index, catalog, &request, &SearchConfig::default()).text
    }

    /// A description far over the budget keeps as much as the budget has room for, not a
    /// fixed 800 characters.
    #[test]
    fn a_long_description_keeps_what_the_budget_has_room_for() {
        let long = "word ".repeat(8_000);
        let tools = serde_json::json!([{"name": "huge", "description": long}]);
        let catalog = Catalog::from_json_str(&tools.to_string(), "test").expect("catalog");
        let index = SearchIndex::build(&catalog, &[0]);
        let answer = text(
            &index,
            &catalog,
            serde_json::json!({"tool_names": ["huge"]}),
        );
        let budget = SearchConfig::default().response_budget_chars;
        let shown = answer.matches("word").count();
        assert!(
            chars(&answer) <= budget && shown * 5 > 5_000,
            "{shown} words shown in {} characters",
            chars(&answer)
        );
    }

    /// toolshelf's own tools, under a client's prefix too, are not looked up as deferred tools:
    /// the answer says to call them directly, with no search for look-alikes; a lookup that
    /// finds nothing advises names, not other words.
    #[test]
    fn own_tools_and_unknown_names_get_advice_for_names() {
        let (catalog, index) = files();
        for written in [
            "tool_search",
            "mcp__toolshelf__tool_search",
            "DEFER-EXECUTE",
        ] {
            let answer = text(
                &index,
                &catalog,
                serde_json::json!({"tool_names": [written]}),
            );
            assert!(
                answer.starts_with(&format!("Note: \"{written}\" is toolshelf's own ")),
                "{written}: {answer}"
            );
            assert!(!answer.contains("file_tool"), "{written}: {answer}");
        }
        let answer = text(
            &index,
            &catalog,
            serde_json::json!({"tool_names": ["grow", "shrink"]}),
        );
        assert!(
            answer.contains("Give names exactly as <available_deferred_tools> lists them")
                && !answer.contains("other or fewer words"),
            "{answer}"
        );
        // Beside a tool found, the note on an own tool stays.
        let answer = text(
            &index,
            &catalog,
            serde_json::json!({"tool_names": ["file_tool_01", "mcp__gw__defer_execute"]}),
        );
        assert!(
            answer.contains("\"mcp__gw__defer_execute\" is toolshelf's own defer_execute, not a deferred tool: call defer_execute directly.")
                && answer.contains("1. file_tool_01"),
            "{answer}"
        );
    }

    /// A limit above the maximum is capped, and the text says so on one note line; a limit
    /// within it adds no note.
    #[test]
    fn a_limit_above_the_maximum_is_capped_with_a_note() {
        let (catalog, index) = files();
        let max = SearchConfig::default().max_limit;
        let capped = text(
            &index,
            &catalog,
            serde_json::json!({"queries": ["file"], "limit": 100}),
        );
        let notes: Vec<&str> = capped.lines().filter(|l| l.starts_with("Note: ")).collect();
        assert_eq!(
            notes,
            [format!(
                "Note: the limit 100 was capped at {max}, the most one search returns."
            )],
            "{capped}"
        );
        let numbered = capped
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .count();
        assert_eq!(numbered, max, "{capped}");
        for args in [
            serde_json::json!({"queries": ["file"], "limit": max}),
            serde_json::json!({"queries": ["file"]}),
        ] {
            let t = text(&index, &catalog, args.clone());
            assert!(!t.contains("Note: "), "{args}: {t}");
        }
        // The same request, the same text.
        assert_eq!(
            capped,
            text(
                &index,
                &catalog,
                serde_json::json!({"queries": ["file"], "limit": 100})
            )
        );
    }
}
