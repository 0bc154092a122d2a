//! `tool_search`: find the right deferred tool, fast, and say why.
//!
//! `tool_search` is the only way the model learns a deferred tool's schema, so its recall decides
//! whether deferral helps or hurts. The engine is shaped in three layers:
//!
//! - [`analyze`] turns text into terms (identifier splitting, stemming, jieba for Chinese);
//! - rankers score the candidates of one query: [`Lexical`] (BM25F over name, description,
//!   parameters, server and tags), over the tools it matches only, and any added [`Retriever`]
//!   (the embedding ranker) beside it, fused here without touching the response code;
//! - [`SearchIndex::rank`] applies what the model asked for on top (exact names first, `+term`
//!   requirements, `server:` filters, several queries as several intents merged into one ranking, abstention) and
//!   [`render`] turns hits into the text the model reads, within its budget.
//!
//! Everything is deterministic: ties break on the canonical name.

pub mod analyze;
pub mod bm25;
pub mod compound;
pub mod render;
pub mod schema_text;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::catalog::{Catalog, Tool};
use crate::config::SearchConfig;
use bm25::{Bm25Index, Bm25Params, DocFields, Field};

/// What the model sent to `tool_search`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchRequest {
    /// `{"tool_names": [...]}`: exact lookup.
    Names(Vec<String>),
    /// `{"queries": [...], "limit": N}`: fuzzy lookup.
    Queries {
        /// Keyword phrases.
        queries: Vec<String>,
        /// Requested number of hits.
        limit: Option<usize>,
    },
}

/// The example shown with every validation error.
pub const REQUEST_EXAMPLE: &str =
    "{\"queries\": [\"read file\", \"读取文件\"]} or {\"tool_names\": [\"mcp__SERVER__TOOL\"]}";

impl SearchRequest {
    /// Reads the call's arguments (see [`crate::meta::SearchArgs`], whose schema the model is
    /// sent). The error text is meant for the model: it states the rule and shows a correct call.
    /// Blank entries are dropped, and an empty list counts as not given.
    pub fn from_json(args: &Value) -> Result<Self, String> {
        let fail = |why: String| {
            Err(format!(
                "Invalid tool_search call: {why}. Give exactly one of tool_names or queries (plus an optional limit), e.g. {REQUEST_EXAMPLE}."
            ))
        };
        if !args.is_object() {
            return fail(format!(
                "the arguments must be an object, found {}",
                crate::echo::echo(&args.to_string())
            ));
        }
        let parsed: crate::meta::SearchArgs = match serde_json::from_value(args.clone()) {
            Ok(p) => p,
            Err(e) => return fail(crate::echo::echo(&e.to_string())),
        };
        let clean = |list: Option<Vec<String>>| -> Option<Vec<String>> {
            let list: Vec<String> = list?
                .into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            (!list.is_empty()).then_some(list)
        };
        let given = |v: &Option<Vec<String>>| v.is_some();
        let had = (given(&parsed.tool_names), given(&parsed.queries));
        // Positive: the parse refuses 0.
        let limit = parsed
            .limit
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        match (clean(parsed.tool_names), clean(parsed.queries)) {
            (Some(_), Some(_)) => fail("both tool_names and queries were given".into()),
            (Some(names), None) => Ok(Self::Names(names)),
            (None, Some(queries)) => Ok(Self::Queries { queries, limit }),
            (None, None) => fail(match had {
                (false, false) => "neither tool_names nor queries was given".into(),
                _ => "tool_names and queries hold no non-blank entry".into(),
            }),
        }
    }
}

/// One ranked tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// Catalog index of the tool.
    #[serde(skip)]
    pub index: usize,
    /// Canonical name.
    pub name: Arc<str>,
    /// Bare tool name (without the server prefix).
    pub tool: Arc<str>,
    /// Canonical server name; `None` for built-ins.
    pub server: Option<Arc<str>>,
    /// The tool's name as its server (or the catalog) gave it: canonical names are rewritten for
    /// invalid characters, collisions and the 64-character limit, this is the way back.
    pub original: Arc<str>,
    /// The server's name as configured; `None` for built-ins.
    pub original_server: Option<Arc<str>>,
    /// Combined score, rounded to 3 decimals (exact name hits score above every fuzzy hit).
    pub score: f64,
    /// Which terms matched in which fields.
    pub reason: String,
}

/// A retriever scores every candidate document for one query.
///
/// Scores need not be comparable across retrievers: [`SearchIndex`] normalises each query's scores
/// by their maximum before fusing.
pub trait Retriever: std::fmt::Debug + Send + Sync {
    /// Short name, for reasons and evaluation.
    fn name(&self) -> &'static str;
    /// Writes a score for each document into `scores` (sized to the number of documents; zero
    /// means no match). `allowed[d]` is false for documents filtered out.
    fn score(&self, query: &ParsedQuery, allowed: &[bool], scores: &mut [f32]);

    /// [`Self::score`] as a list: pushes `(document, score)` to `out` for each document with a
    /// score, in any order. `scores` is all zero on entry and must be left so. A retriever that
    /// scores few documents overrides it, so that fusing its scores visits only those.
    fn score_sparse(
        &self,
        query: &ParsedQuery,
        allowed: &[bool],
        scores: &mut [f32],
        out: &mut Vec<(u32, f32)>,
    ) {
        self.score(query, allowed, scores);
        for (d, s) in scores.iter_mut().enumerate() {
            if *s != 0.0 {
                out.push((d as u32, *s));
                *s = 0.0;
            }
        }
    }

    /// The least score with which this retriever alone (no shared meaningful word) may bring a
    /// tool into the results. Abstention: below it, a tool that shares no word with the query
    /// is noise, not a hit.
    fn alone_floor(&self) -> f32 {
        0.0
    }
}

/// One query after parsing the operators out of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedQuery {
    /// The query text without operators.
    pub text: String,
    /// Analyzed terms of `text`, with how often each occurs, in first-seen order.
    pub terms: Vec<(Arc<str>, f32)>,
    /// Surface form of each of `terms` (as first seen), for reasons, as [`analyze::shown`]
    /// reads it (see [`ParsedQuery::surface`]).
    surface: Vec<Arc<str>>,
    /// `+term`s: each must appear in the tool name (analyzed).
    pub required: Vec<String>,
    /// Canonical server names the query is restricted to (`server:NAME`, `mcp__S__`).
    pub servers: Vec<String>,
    /// Documents named exactly in the query.
    pub exact: Vec<u32>,
    /// Those of `exact` named only with case and separators ignored.
    folded: Vec<u32>,
    /// What the parser ignored and why, for the response text.
    pub notes: Vec<String>,
    /// Id of each of `terms` in the lexical index that parsed the query (`None`: no tool has
    /// it); empty when the query was not parsed by an index.
    ids: Vec<Option<u32>>,
    /// The same in the server groups' index.
    group_ids: Vec<Option<u32>>,
}

impl ParsedQuery {
    /// The surface form of the `i`-th of [`Self::terms`], as first written in the query.
    pub fn surface(&self, i: usize) -> &str {
        analyze::shown(&self.surface[i])
    }

    /// Whether the query filters the tools (`server:`, `+term`).
    fn filters(&self) -> bool {
        !(self.servers.is_empty() && self.required.is_empty())
    }

    /// Restricts the query to server `canon` (several filters search each).
    fn restrict_to(&mut self, canon: &str) {
        if !self.servers.iter().any(|s| s == canon) {
            self.servers.push(canon.to_owned());
        }
    }
}

/// The lexical retriever: BM25F over analyzed fields.
#[derive(Debug, Clone)]
pub struct Lexical {
    index: Bm25Index,
    /// Minimum matched terms for a document to count: one word, or two Chinese character
    /// bigrams. A hit must match something meaningful.
    min_weak: u16,
}

impl Lexical {
    /// The BM25F index.
    pub fn index(&self) -> &Bm25Index {
        &self.index
    }

    /// The id of each of `query`'s terms in this index: `ids` when the parse looked them up
    /// already, else looked up now.
    fn ids_of<'q>(
        &self,
        query: &ParsedQuery,
        ids: Option<&'q [Option<u32>]>,
    ) -> std::borrow::Cow<'q, [Option<u32>]> {
        match ids {
            Some(ids) => ids.into(),
            None => query
                .terms
                .iter()
                .map(|(t, _)| self.index.term_id(t))
                .collect(),
        }
    }

    /// The terms of `query` that this index has, as `(id, count)` in the query's order, into
    /// `out`. `ids` are the query's term ids in this index, when the parse looked them up already.
    fn weighted(
        &self,
        query: &ParsedQuery,
        ids: Option<&[Option<u32>]>,
        out: &mut Vec<(u32, f32)>,
    ) {
        out.clear();
        out.extend(
            self.ids_of(query, ids)
                .iter()
                .zip(&query.terms)
                .filter_map(|(id, (_, w))| id.map(|id| (id, *w))),
        );
    }

    /// Scores the query whose terms are `terms` (see [`Self::weighted`]) into `scores` (zero
    /// where it can match; filtered by `allowed`, `None` for no filter) and leaves in `matched`
    /// the documents that kept a score (in no particular order), so that callers visit the
    /// matches instead of the catalog. Only matched documents are written.
    fn score_matches(
        &self,
        terms: &[(u32, f32)],
        allowed: Option<&[bool]>,
        scores: &mut [f32],
        matched: &mut Vec<u32>,
    ) {
        let n = self.index.len();
        matched.clear();
        // Without a weak term every document touched has a strong match and a score, so only
        // the filter remains to apply, and no counts are kept (most queries, and every one in a
        // language without bigram terms).
        if !self.index.any_weak(terms) {
            self.index.accumulate_strong(terms, scores, matched);
            if let Some(allowed) = allowed {
                matched.retain(|&d| {
                    let keep = allowed[d as usize];
                    if !keep {
                        scores[d as usize] = 0.0;
                    }
                    keep
                });
            }
            return;
        }
        let allowed = |i: usize| allowed.is_none_or(|a| a[i]);
        LEXICAL_SCRATCH.with_borrow_mut(|hits| {
            // The counts are all zero between calls: only touched entries are reset below.
            if hits.len() < n {
                hits.resize(n, [0, 0]);
            }
            self.index.accumulate(terms, scores, hits, matched);
            matched.retain(|&d| {
                let i = d as usize;
                let [strong, weak] = std::mem::take(&mut hits[i]);
                let keep = allowed(i) && (strong > 0 || weak >= self.min_weak) && scores[i] > 0.0;
                if !keep {
                    scores[i] = 0.0;
                }
                keep
            });
        });
    }
}

thread_local! {
    /// Per-thread `[strong, weak]` match counts per document for [`Lexical`], sized to the
    /// largest index scored so far and all zero between queries: allocating and zeroing fresh
    /// pages on every query cost more than scoring a 10k-tool catalog, and resetting only the
    /// touched entries keeps a query's cost in proportion to its matches.
    static LEXICAL_SCRATCH: RefCell<Vec<[u16; 2]>> = const { RefCell::new(Vec::new()) };
    static RANK_SCRATCH: RefCell<RankScratch> = RefCell::new(RankScratch::default());
    static REASON_SCRATCH: RefCell<ReasonScratch> = RefCell::new(ReasonScratch::default());
}

/// Per-thread buffers of [`SearchIndex::matched_terms`].
#[derive(Debug, Default)]
struct ReasonScratch {
    /// Per lexical term id, its place in `order` plus one (0: not in the request); all zero
    /// between calls.
    place: Vec<u32>,
    /// The request's distinct terms, in order: `(term id, intent, place in the intent's terms)`.
    order: Vec<(u32, u32, u32)>,
    /// The terms the tool has, in the same order.
    found: Vec<Matched>,
}

/// A term of the request that a tool has: its place in the request, its id, where the intent's
/// parse has it, and the fields of the tool it is in.
#[derive(Debug, Clone, Copy)]
struct Matched {
    at: u32,
    id: u32,
    intent: u32,
    term: u32,
    mask: u8,
}

/// Per-thread buffers of one ranking, sized to the catalog and reused across queries.
#[derive(Debug, Default)]
struct RankScratch {
    /// Whether a rank is under way on this thread: still set when one begins, the last one
    /// panicked (see [`SearchIndex::rank`]).
    ranking: bool,
    query: Fused,
    /// The lexical scores of a pass, by document: all zero between passes.
    scores: Vec<f32>,
    allowed: Vec<bool>,
    lexical_hit: Vec<bool>,
    /// Documents the lexical retriever matched.
    matched: Vec<u32>,
    /// Normalised score of each server group.
    groups: Vec<f32>,
    /// The server groups with a score.
    group_hits: Vec<u32>,
    /// Scores of an added retriever, by document.
    sparse: Vec<(u32, f32)>,
    /// The lexical shares of the matched documents, in their order.
    shares: Vec<f32>,
    /// The lexical index's `(id, count)` of the terms being scored.
    terms: Vec<(u32, f32)>,
    /// The same in the server groups' index.
    group_terms: Vec<(u32, f32)>,
    /// A clause's counted terms (memo ids: term, surface, count).
    counts: Vec<(u32, u32, f32)>,
    /// The filter of a clause whose own operators narrow its request's.
    clause_allowed: Vec<bool>,
    /// Analysed runs of the queries ranked on this thread (successive queries share most words),
    /// bounded.
    memo: analyze::Memo,
    /// The words of the request being ranked, as its parse took them, for its clauses.
    words: Words,
}

/// The words of a parsed request, as its parse took them, so that its clauses (slices of it) are
/// parsed from these instead of again: a clause's operators and analysis are those of its words.
#[derive(Debug, Default)]
struct Words {
    /// Each whitespace-separated word of the request, in order.
    marks: Vec<WordMark>,
    /// The `(term, surface)` memo ids of the plain words' analyses, word after word.
    pairs: Vec<(u32, u32)>,
}

/// One word of a parsed request: its bytes in the request, whether it was kept for analysis as
/// written (no operator, no exact name), and then its analysis as a range of [`Words::pairs`].
#[derive(Debug, Clone, Copy)]
struct WordMark {
    at: usize,
    end: usize,
    plain: bool,
    pairs: (usize, usize),
}

/// How [`SearchIndex::take_word`] took one word of a query.
enum Taken<'a> {
    /// Kept for analysis as written: a plain word.
    Plain,
    /// An operator or an exact name, with the text it keeps for analysis, if any.
    Operator(Option<&'a str>),
}

/// Fused scores of one query, by document, and the documents given a share: every document
/// scoring above zero is among those few hundred, so the best are found without a pass over the
/// whole catalog.
#[derive(Debug, Default)]
struct Fused {
    scores: Vec<f32>,
    /// Each document given a share, once, in the order of its first.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
}

impl Fused {
    /// All `n` documents at zero, none touched. Only touched documents are ever given a score,
    /// so when they are few only they are reset, not the whole catalog again for each of a
    /// request's passes; when they are many (a server group brings its tools in), one sweep
    /// over the whole is cheaper than as many scattered stores.
    fn reset(&mut self, n: usize) {
        if self.scores.len() == n && self.touched.len() <= n / 16 {
            for &d in &self.touched {
                self.scores[d as usize] = 0.0;
                self.is_touched[d as usize] = false;
            }
        } else {
            self.scores.clear();
            self.scores.resize(n, 0.0);
            self.is_touched.clear();
            self.is_touched.resize(n, false);
        }
        self.touched.clear();
        debug_assert!(self.scores.iter().all(|&s| s == 0.0));
        debug_assert!(!self.is_touched.contains(&true));
    }

    /// Adds `shares[i]` to the score of `docs[i]`, for documents (distinct) given no share yet:
    /// [`Self::add`] for each, in one pass.
    fn add_first(&mut self, docs: &[u32], shares: &[f32]) {
        for (&d, &x) in docs.iter().zip(shares) {
            let d = d as usize;
            debug_assert!(!self.is_touched[d]);
            self.scores[d] += x;
            self.is_touched[d] = true;
        }
        self.touched.extend_from_slice(docs);
    }

    /// Adds `x` to document `d`'s score.
    fn add(&mut self, d: usize, x: f32) {
        self.scores[d] += x;
        if !self.is_touched[d] {
            self.is_touched[d] = true;
            self.touched.push(d as u32);
        }
    }
}

/// The server group of each tool at `docs` (catalog indices), as every ranker forms them: a
/// server's group is its place in `catalog.servers()`, the built-in tools are one more group
/// (`servers().len()`), and a tool whose server the catalog does not list has none (`u32::MAX`).
pub fn server_group_of(catalog: &Catalog, docs: &[usize]) -> Vec<u32> {
    let (servers, tools) = (catalog.servers(), catalog.tools());
    docs.iter()
        .map(|&i| match tools[i].server.as_deref() {
            Some(s) => servers
                .binary_search_by(|x| x.name.as_str().cmp(s))
                .map_or(u32::MAX, |g| g as u32),
            None => servers.len() as u32,
        })
        .collect()
}

/// Server groups as documents: the coarse stage of the ranking. A tool's own text often says
/// little (`get-tickets`, `latest`, `all`), while its server's description and its sibling tools
/// say what it is for ("12306 train tickets", "package tracking"), so each group is scored as a
/// document and that evidence is added to its tools' scores. Only the servers with a searchable
/// tool are groups: the search over the visible tools is the search of a catalog that has only
/// them, and a server whose tools are all hidden adds nothing, its description included.
#[derive(Debug, Clone)]
struct Groups {
    index: Lexical,
    /// Group of each tool document (`u32::MAX`: a tool whose server the catalog does not list,
    /// in no group).
    of_doc: Vec<u32>,
    /// Canonical server name of each group (empty for the built-in tools' group).
    names: Vec<String>,
    /// The place in `catalog.servers()` of each server group.
    servers: Vec<usize>,
    /// Tool documents of each group, by name.
    members: Vec<Vec<u32>>,
    /// The servers a request can name, by the lexical id of each term of the name: each name's
    /// term ids and its group (see [`Groups::find_nameable`]).
    nameable: rustc_hash::FxHashMap<u32, Vec<(Vec<u32>, u32)>>,
    /// The terms of each nameable server's names, by group (empty for the others).
    name_words: Vec<Vec<String>>,
}

impl Groups {
    /// Groups of the tools at `docs` (catalog indices); `by_name` is the documents in name order,
    /// `of_doc` each one's group as [`server_group_of`] gives it (numbered here anew, over the
    /// servers with a tool at `docs`), `pieces` the words of each one's glued names and
    /// `server_pieces` those of each server's name (see [`compound`]). `None` when fewer than two
    /// servers have a tool at `docs`.
    fn build(
        catalog: &Catalog,
        docs: &[usize],
        by_name: &[u32],
        params: &RankParams,
        mut of_doc: Vec<u32>,
        pieces: &[String],
        server_pieces: &[String],
    ) -> Option<Self> {
        let all_servers = catalog.servers();
        // The servers with a searchable tool, in catalog order, and each one's group.
        let builtin_of_catalog = all_servers.len() as u32;
        let mut group_of = vec![u32::MAX; all_servers.len()];
        for &g in &of_doc {
            if g < builtin_of_catalog {
                group_of[g as usize] = 0;
            }
        }
        let servers: Vec<usize> = (0..all_servers.len())
            .filter(|&s| group_of[s] == 0)
            .collect();
        if servers.len() < 2 || params.group_weight <= 0.0 {
            return None;
        }
        for (g, &s) in servers.iter().enumerate() {
            group_of[s] = g as u32;
        }
        let builtin = servers.len() as u32;
        for g in &mut of_doc {
            *g = match *g {
                u32::MAX => u32::MAX,
                g if g == builtin_of_catalog => builtin,
                g => group_of[g as usize],
            };
        }
        let tools = catalog.tools();
        let mut fields: Vec<DocFields> = servers
            .iter()
            .map(|&s| (&all_servers[s], &server_pieces[s]))
            .map(|(s, pieces)| {
                let mut f: DocFields = Default::default();
                analyze::analyze_into(&s.name, &mut f[Field::Name as usize]);
                analyze::analyze_into(&s.original_name, &mut f[Field::Name as usize]);
                analyze::analyze_into(pieces, &mut f[Field::Name as usize]);
                analyze::analyze_into(&s.description, &mut f[Field::Description as usize]);
                f
            })
            .collect();
        // Built-in tools form one more group, so that in a mixed catalog they are weighed on the
        // same footing as the servers' tools.
        let mut names: Vec<String> = servers
            .iter()
            .map(|&s| all_servers[s].name.clone())
            .collect();
        if of_doc.contains(&builtin) {
            fields.push(Default::default());
            names.push(String::new());
        }
        for ((&i, &g), pieces) in docs.iter().zip(&of_doc).zip(pieces) {
            if g == u32::MAX {
                continue;
            }
            let f = &mut fields[g as usize];
            analyze::analyze_into(&tools[i].bare, &mut f[Field::Params as usize]);
            analyze::analyze_into(pieces, &mut f[Field::Params as usize]);
            analyze::analyze_into(&tools[i].description, &mut f[Field::Params as usize]);
        }
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); names.len()];
        for &d in by_name {
            let g = of_doc[d as usize];
            if g != u32::MAX {
                members[g as usize].push(d);
            }
        }
        Some(Self {
            index: Lexical {
                index: Bm25Index::build(&fields, params.bm25.clone()),
                min_weak: 2,
            },
            of_doc,
            names,
            servers,
            nameable: Default::default(),
            name_words: vec![Vec::new(); members.len()],
            members,
        })
    }

    /// The servers a request can name, into [`Self::nameable`]: a server's name (as configured,
    /// and the words a glued one is cut into) whose terms point at that server more than at
    /// anything else: most of the tools that carry them all are the server's own. "slack" or
    /// "google calendar" names a server; "time" or "fetch", which many tools' texts use, does
    /// not, though a server may be called so.
    fn find_nameable(&mut self, catalog: &Catalog, lexical: &Bm25Index, server_pieces: &[String]) {
        for g in 0..self.servers.len() {
            let (s, pieces) = (
                &catalog.servers()[self.servers[g]],
                &server_pieces[self.servers[g]],
            );
            let g = g as u32;
            for form in [s.original_name.as_str(), pieces.as_str()] {
                // One or two Latin letters ("x", "go") are words of prose more often than names.
                if form.is_ascii() && form.chars().filter(char::is_ascii_alphanumeric).count() < 3 {
                    continue;
                }
                let mut terms = analyze::analyze(form);
                terms.sort();
                terms.dedup();
                // Chinese character bigrams are the weak form of words the name has whole.
                let Some(mut ids) = terms
                    .iter()
                    .map(|t| {
                        lexical
                            .term_id(t)
                            .map(|id| (!lexical.is_weak(id)).then_some(id))
                    })
                    .collect::<Option<Vec<Option<u32>>>>()
                    .map(|ids| ids.into_iter().flatten().collect::<Vec<u32>>())
                else {
                    continue;
                };
                ids.sort_unstable();
                ids.dedup();
                if ids.is_empty() {
                    continue;
                }
                // The tools that carry every term of the name, and how many are the server's.
                let mut with: Vec<u32> = lexical.docs_with(ids[0]).collect();
                for &id in &ids[1..] {
                    with.retain(|&d| lexical.fields(id, d) != 0);
                }
                let own = with
                    .iter()
                    .filter(|&&d| self.of_doc[d as usize] == g)
                    .count();
                if 2 * own <= with.len() {
                    continue;
                }
                let words = &mut self.name_words[g as usize];
                words.extend(
                    terms
                        .iter()
                        .filter(|t| lexical.term_id(t).is_some_and(|id| !lexical.is_weak(id)))
                        .cloned(),
                );
                words.sort();
                words.dedup();
                for &id in &ids {
                    let named = self.nameable.entry(id).or_default();
                    if !named.iter().any(|(i, h)| *h == g && *i == ids) {
                        named.push((ids.clone(), g));
                    }
                }
            }
        }
    }

    /// The groups of the servers query `q` names (see [`Self::nameable`]), in the order the
    /// query first gives a term of each name. `ids` are `q`'s terms' lexical ids; `text` is the
    /// query's text. A query that uses capitals must write one of a name's words as a name
    /// (not starting lower-case), which tells "on Linear" from "a linear regression"; one
    /// without capitals says nothing by its case.
    fn named_in(&self, ids: &[Option<u32>], text: &str) -> Vec<u32> {
        self.named_in_part(ids, text, 0..text.len())
    }

    /// [`Self::named_in`] for the part `part` of `text` (a byte range) whose terms are `ids`:
    /// whether a name is written as one is read in the whole text (which decides whether case
    /// says anything, and where sentences start), from the words of the part.
    fn named_in_part(&self, ids: &[Option<u32>], text: &str, part: Range<usize>) -> Vec<u32> {
        let mut out = Vec::new();
        // Read once, when a name is found: the terms written as names, or `None` for a query
        // without capitals.
        let mut written: Option<Option<Vec<String>>> = None;
        // The ids sorted, once a name is looked for among them: a long request's terms are read
        // by a search per word of each name rather than a scan.
        let mut sorted: Option<Vec<u32>> = None;
        for id in ids.iter().flatten() {
            let Some(named) = self.nameable.get(id) else {
                continue;
            };
            for (name, g) in named {
                if out.contains(g) {
                    continue;
                }
                let sorted = sorted.get_or_insert_with(|| {
                    let mut v: Vec<u32> = ids.iter().flatten().copied().collect();
                    v.sort_unstable();
                    v
                });
                if !name.iter().all(|n| sorted.binary_search(n).is_ok()) {
                    continue;
                }
                let written = written.get_or_insert_with(|| {
                    text.chars()
                        .any(char::is_uppercase)
                        .then(|| capitalised_terms(text, part.clone()))
                });
                if written.as_ref().is_none_or(|written| {
                    self.name_words[*g as usize]
                        .iter()
                        .any(|w| written.contains(w))
                }) {
                    out.push(*g);
                }
            }
        }
        out
    }

    /// Each group's score for the query whose terms in the groups' index are `terms` (see
    /// [`Lexical::weighted`]) into `out`, normalised by the best (all zero when nothing matched).
    fn scores_into(&self, terms: &[(u32, f32)], out: &mut Vec<f32>, matched: &mut Vec<u32>) {
        out.clear();
        out.resize(self.names.len(), 0.0);
        // Groups are never filtered themselves.
        self.index.score_matches(terms, None, out, matched);
        let max = matched.iter().map(|&g| out[g as usize]).fold_max();
        if max > 0.0 {
            // Over every group, in order, so the divisions run several to an instruction: the
            // others are zero, and stay so.
            for x in out.iter_mut() {
                *x /= max;
            }
        }
    }
}

/// Tunables of the ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct RankParams {
    /// BM25F parameters.
    pub bm25: Bm25Params,
    /// Hits scoring below this fraction of the best hit are dropped.
    pub min_relative_score: f32,
    /// Weight of a tool's server group's (normalised) score added to the tool's own; 0 turns the
    /// coarse stage off.
    pub group_weight: f32,
}

impl Default for RankParams {
    fn default() -> Self {
        Self {
            bm25: Bm25Params::default(),
            min_relative_score: 0.1,
            group_weight: 0.5,
        }
    }
}

/// The searchable view of a catalog's visible tools.
#[derive(Debug)]
pub struct SearchIndex {
    /// Catalog index of each document.
    docs: Vec<usize>,
    /// Name-field terms of each document and the terms of its canonical name, sorted, for
    /// `+term`.
    name_terms: Vec<Vec<String>>,
    /// The words each document's glued names are cut into (see [`compound`]), space-separated;
    /// mostly empty.
    name_pieces: Vec<String>,
    /// The names a hit on each document carries, shared: a search returns them without copying.
    labels: Vec<Labels>,
    /// Each document's place in canonical-name order, and the document at each place: ties
    /// between equal scores break on the name, compared as integers.
    name_rank: Vec<u32>,
    by_name: Vec<u32>,
    /// Exact names (canonical, bare, original) to documents.
    names: rustc_hash::FxHashMap<String, Vec<u32>>,
    /// The same names folded ([`crate::name::fold`]: case, `_ - .` and white space ignored) to
    /// documents, and the longest such name in bytes.
    folded: rustc_hash::FxHashMap<String, Vec<u32>>,
    longest_folded: usize,
    /// The names (canonical and as configured) of the servers with a searchable tool, by their
    /// lower-cased form: each name as written and its server's canonical name. A server none of
    /// whose tools can be searched (a mode or a rule hides them all, or it has none) is not here:
    /// to a query it is no server at all.
    server_names: BTreeMap<String, Vec<(String, String)>>,
    lexical: Lexical,
    /// Each document's weight when it is deprecated for another tool of its server (see
    /// [`deprecated_for_another`]), 1.0 otherwise; `None` when no document is.
    deprecated: Option<Box<[f32]>>,
    /// Server groups as documents of their own (description, tool names and descriptions), and
    /// each tool document's group; `None` when fewer than two servers have a searchable tool.
    groups: Option<Groups>,
    extra: Vec<(Box<dyn Retriever>, f32)>,
    lexical_weight: f32,
    params: RankParams,
    /// Names this index's vocabularies (lexical and groups) for the analysis memo's remembered
    /// lookups: distinct for each build, shared by copies of it.
    stamp: u64,
}

/// A document's names as a [`Hit`] gives them.
#[derive(Debug, Clone)]
struct Labels {
    name: Arc<str>,
    tool: Arc<str>,
    server: Option<Arc<str>>,
    original: Arc<str>,
    original_server: Option<Arc<str>>,
}

impl Labels {
    /// The labels of each of `docs`, a string shared wherever it repeats: a server's names by
    /// all its tools, a tool's original name by its bare name when they are the same.
    fn of_docs<'a>(tools: &'a [Tool], docs: &[usize]) -> Vec<Self> {
        let mut servers: rustc_hash::FxHashMap<&'a str, Arc<str>> = Default::default();
        let mut shared =
            |s: Option<&'a str>| s.map(|s| servers.entry(s).or_insert_with(|| s.into()).clone());
        docs.iter()
            .map(|&i| {
                let t = &tools[i];
                let tool: Arc<str> = t.bare.as_str().into();
                Self {
                    name: t.name.as_str().into(),
                    original: if t.original_name == t.bare {
                        tool.clone()
                    } else {
                        t.original_name.as_str().into()
                    },
                    tool,
                    server: shared(t.server.as_deref()),
                    original_server: shared(t.original_server.as_deref()),
                }
            })
            .collect()
    }
}

/// The next index's [`SearchIndex::stamp`].
static NEXT_STAMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The text fields of `tool`, as the analyzer sees them.
pub fn doc_fields(catalog: &Catalog, tool: &Tool, pieces: &str, server_pieces: &str) -> DocFields {
    let mut fields: DocFields = Default::default();
    let name = &mut fields[Field::Name as usize];
    analyze::analyze_into(&tool.bare, name);
    if tool.original_name != tool.bare {
        analyze::analyze_into(&tool.original_name, name);
    }
    analyze::analyze_into(pieces, name);
    if let Some(t) = &tool.title {
        analyze::analyze_into(t, &mut fields[Field::Description as usize]);
    }
    analyze::analyze_into(&tool.description, &mut fields[Field::Description as usize]);
    param_text(
        &Value::Object(tool.input_schema.clone()),
        &mut fields[Field::Params as usize],
        0,
    );
    if let Some(s) = &tool.server {
        analyze::analyze_into(s, &mut fields[Field::Server as usize]);
        analyze::analyze_into(server_pieces, &mut fields[Field::Server as usize]);
        if let Some(server) = catalog.server(s) {
            analyze::analyze_into(&server.description, &mut fields[Field::Server as usize]);
        }
    }
    for tag in &tool.tags {
        analyze::analyze_into(tag, &mut fields[Field::Tags as usize]);
    }
    fields
}

/// [`doc_fields`] of every tool at `docs`, in order. Analysis (segmentation and stemming) is most
/// of an index build, and each tool's is independent of the others', so large catalogs are split
/// across the machine's cores; the result is the same as analysing them one by one.
fn analyze_all(
    catalog: &Catalog,
    docs: &[usize],
    pieces: &[String],
    server_pieces: &[&str],
) -> Vec<DocFields> {
    let tools = catalog.tools();
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    if threads < 2 || docs.len() < 4096 {
        return docs
            .iter()
            .zip(pieces)
            .zip(server_pieces)
            .map(|((&i, p), s)| doc_fields(catalog, &tools[i], p, s))
            .collect();
    }
    let chunk = docs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = docs
            .chunks(chunk)
            .zip(pieces.chunks(chunk))
            .zip(server_pieces.chunks(chunk))
            .map(|((part, pieces), server_pieces)| {
                scope.spawn(move || {
                    part.iter()
                        .zip(pieces)
                        .zip(server_pieces)
                        .map(|((&i, p), s)| doc_fields(catalog, &tools[i], p, s))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// The text of `tool` for an embedding model: name words (and `pieces`, the words of its glued
/// names, see [`SearchIndex::name_pieces`]), title, description, parameter names and
/// descriptions, and the server's description, one per line.
pub fn doc_text(catalog: &Catalog, tool: &Tool, pieces: &str) -> String {
    let mut name = crate::name::split_words(&tool.bare).join(" ");
    if !pieces.is_empty() {
        name.push(' ');
        name.push_str(pieces);
    }
    let mut parts: Vec<String> = vec![name];
    if let Some(t) = &tool.title {
        parts.push(t.clone());
    }
    parts.push(tool.description.clone());
    let mut params = Vec::new();
    param_words(&Value::Object(tool.input_schema.clone()), &mut params, 0);
    if !params.is_empty() {
        parts.push(params.join(" "));
    }
    if let Some(server) = tool.server.as_deref().and_then(|s| catalog.server(s)) {
        parts.push(server.description.clone());
    }
    parts.retain(|p| !p.trim().is_empty());
    parts.join("\n")
}

fn param_words(schema: &Value, out: &mut Vec<String>, depth: usize) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    if depth > 3 {
        return;
    }
    // Required params first, each part by name: the embedding reads only a text's first
    // tokens, so the order a server happened to list its params in must not decide which count.
    let required = |name: &str| {
        schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|v| v.as_str() == Some(name)))
    };
    let mut props: Vec<(&String, &Value)> = props.iter().collect();
    props.sort_unstable_by_key(|&(name, _)| (!required(name), name));
    for (name, prop) in props {
        out.push(crate::name::split_words(name).join(" "));
        if let Some(d) = prop.get("description").and_then(Value::as_str) {
            out.push(d.to_owned());
        }
        param_words(prop, out, depth + 1);
    }
}

fn param_text(schema: &Value, out: &mut Vec<String>, depth: usize) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if depth > 6 {
        return;
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            analyze::analyze_into(name, out);
            if let Some(d) = prop.get("description").and_then(Value::as_str) {
                analyze::analyze_into(d, out);
            }
            if let Some(e) = prop.get("enum").and_then(Value::as_array) {
                for v in e.iter().filter_map(Value::as_str) {
                    analyze::analyze_into(v, out);
                }
            }
            param_text(prop, out, depth + 1);
        }
    }
    if let Some(items) = obj.get("items") {
        param_text(items, out, depth + 1);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(vs) = obj.get(key).and_then(Value::as_array) {
            for v in vs {
                param_text(v, out, depth + 1);
            }
        }
    }
}

/// Whether `word`, found among a longer query's words, is written as a tool's name rather than
/// used as a word: a canonical `mcp__SERVER__TOOL` name, or an identifier (with `_`, `-`, `.`, a
/// digit or an inner capital) that names exactly one tool. A plain word that happens to be a
/// name (`search`, `latest`), or an identifier many servers share, is evidence like any other
/// word and is scored, not put first.
fn names_a_tool(word: &str, tools_named: usize) -> bool {
    word.starts_with(crate::name::MCP_PREFIX) || (is_identifier(word) && tools_named == 1)
}

/// Whether a word inside a longer query could pass [`names_a_tool`] for some number of tools.
fn looks_like_a_name(word: &str) -> bool {
    word.starts_with(crate::name::MCP_PREFIX) || is_identifier(word)
}

/// Written as an identifier, not a word: `read_file`, `get-tickets`, `v2`, `getWeather`.
fn is_identifier(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes
        .iter()
        .any(|&b| matches!(b, b'_' | b'-' | b'.') || b.is_ascii_digit())
        || if word.is_ascii() {
            bytes.iter().skip(1).any(u8::is_ascii_uppercase)
        } else {
            word.chars().skip(1).any(char::is_uppercase)
        }
}

/// Characters trimmed from query words before they are compared with tool names (a `match`,
/// not a slice of chars: every word of every request is trimmed).
fn name_trim(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '`'
            | ','
            | ';'
            | ':'
            | '('
            | ')'
            | '['
            | ']'
            | '{'
            | '}'
            | '<'
            | '>'
            | '?'
            | '!'
            | '。'
            | '，'
            | '？'
    )
}

/// `word` without the [`name_trim`] characters at either end, as `trim_matches` gives it. A word
/// that begins and ends with an ASCII letter or digit, as most words of a request do, has none
/// there (none of them is one) and is returned as it is, without stepping through characters.
fn trim_name(word: &str) -> &str {
    let bytes = word.as_bytes();
    if bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
    {
        word
    } else {
        word.trim_matches(name_trim)
    }
}

/// Punctuation that separates an identifier inside a query's word from what is written around it
/// (`get_time(zone='UTC')`, `tool=read_file`, `read_file,write_file`, `name:read_file`).
const NAME_PUNCTUATION: &[char] = &['(', '=', ',', ';', ':'];

/// Whether `word` has a [`NAME_PUNCTUATION`] character, read byte by byte: they are all ASCII,
/// and no byte of a longer UTF-8 character is ASCII.
fn has_name_punctuation(word: &str) -> bool {
    word.bytes()
        .any(|b| b.is_ascii() && NAME_PUNCTUATION.contains(&char::from(b)))
}

/// Whether `folded` (a `server:` value, folded) begins server name `form` folded, or is one or
/// more of its whole words in a row: `brave` and `search` both point at `brave-search`.
fn begins_or_is_words_of(folded: &str, form: &str) -> bool {
    if crate::name::fold(form).starts_with(folded) {
        return true;
    }
    let words: Vec<String> = form
        .split(crate::name::folds_away)
        .filter(|w| !w.is_empty())
        .map(crate::name::fold)
        .collect();
    (0..words.len()).any(|i| {
        let mut run = String::new();
        words[i..].iter().any(|w| {
            run.push_str(w);
            run == folded
        })
    })
}

/// The servers a value matches when case (`separators`: and separators) are ignored, sorted:
/// one, several, or none.
fn several(mut out: Vec<&str>, separators: bool) -> ServersNamed<'_> {
    out.sort_unstable();
    out.dedup();
    match out.as_slice() {
        [] => ServersNamed::Unknown,
        [one] => ServersNamed::One(one),
        _ => ServersNamed::Several {
            servers: out,
            separators,
        },
    }
}

/// How a `server:` value named servers (see [`SearchIndex::servers_named`]).
#[derive(Debug, PartialEq, Eq)]
enum ServersNamed<'a> {
    /// Written as one server's name, or matching only it when case or separators are ignored,
    /// or beginning (or being words of) only its name.
    One(&'a str),
    /// Matching several servers' names when case is ignored (`separators`: and separators).
    Several {
        servers: Vec<&'a str>,
        separators: bool,
    },
    /// Beginning (or being words of) several servers' names: none is picked.
    Ambiguous(Vec<&'a str>),
    /// No server.
    Unknown,
}

impl SearchIndex {
    /// Indexes the tools of `catalog` at `visible` (catalog indices; hidden tools are simply not
    /// given, so they can never be found).
    pub fn build(catalog: &Catalog, visible: &[usize]) -> Self {
        Self::build_with(catalog, visible, RankParams::default())
    }

    /// [`Self::build`] with explicit ranking parameters.
    pub fn build_with(catalog: &Catalog, visible: &[usize], params: RankParams) -> Self {
        let tools = catalog.tools();
        let mut docs: Vec<usize> = visible.to_vec();
        docs.sort_unstable();
        docs.dedup();
        let lexicon = compound::Lexicon::from_catalog(catalog, &docs);
        let pieces: Vec<String> = docs
            .iter()
            .map(|&i| lexicon.name_pieces(&tools[i]))
            .collect();
        let server_pieces: Vec<String> = catalog
            .servers()
            .iter()
            .map(|s| lexicon.pieces_of(&s.name))
            .collect();
        let of_doc = server_group_of(catalog, &docs);
        let doc_server_pieces: Vec<&str> = of_doc
            .iter()
            .map(|&g| server_pieces.get(g as usize).map_or("", String::as_str))
            .collect();
        let fields = analyze_all(catalog, &docs, &pieces, &doc_server_pieces);
        // `+term` is matched against the name the model sees, server segment included
        // (`+github` for `mcp__github__search_code`): the name field's terms and the canonical
        // name's.
        let name_terms = fields
            .iter()
            .zip(&docs)
            .map(|(f, &i)| {
                let mut t = f[Field::Name as usize].clone();
                analyze::analyze_into(&tools[i].name, &mut t);
                t.sort();
                t.dedup();
                t
            })
            .collect();
        let mut names: rustc_hash::FxHashMap<String, Vec<u32>> = Default::default();
        let mut folded: rustc_hash::FxHashMap<String, Vec<u32>> = Default::default();
        for (d, &i) in docs.iter().enumerate() {
            let t = &tools[i];
            for n in [&t.name, &t.bare, &t.original_name] {
                let e = names.entry(n.clone()).or_default();
                if !e.contains(&(d as u32)) {
                    e.push(d as u32);
                }
                let e = folded.entry(crate::name::fold(n)).or_default();
                if !e.contains(&(d as u32)) {
                    e.push(d as u32);
                }
            }
        }
        folded.remove("");
        let longest_folded = folded.keys().map(String::len).max().unwrap_or(0);
        let searchable: std::collections::BTreeSet<(&str, &str)> = docs
            .iter()
            .filter_map(|&i| {
                let t = &tools[i];
                let server = t.server.as_deref()?;
                Some((server, t.original_server.as_deref().unwrap_or(server)))
            })
            .collect();
        let mut server_names: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (canon, original) in searchable {
            for form in [canon, original] {
                let named = server_names.entry(form.to_lowercase()).or_default();
                if !named.iter().any(|(f, c)| f == form && c == canon) {
                    named.push((form.to_owned(), canon.to_owned()));
                }
            }
        }
        let lexical = Lexical {
            index: Bm25Index::build(&fields, params.bm25.clone()),
            min_weak: 2,
        };
        let mut by_name: Vec<u32> = (0..docs.len() as u32).collect();
        by_name.sort_by(|&a, &b| {
            tools[docs[a as usize]]
                .name
                .cmp(&tools[docs[b as usize]].name)
        });
        let mut groups = Groups::build(
            catalog,
            &docs,
            &by_name,
            &params,
            of_doc,
            &pieces,
            &server_pieces,
        );
        if let Some(g) = &mut groups {
            g.find_nameable(catalog, &lexical.index, &server_pieces);
        }
        let deprecated = deprecated_weights(tools, &docs);
        let mut name_rank = vec![0u32; docs.len()];
        for (r, &d) in by_name.iter().enumerate() {
            name_rank[d as usize] = r as u32;
        }
        Self {
            name_rank,
            by_name,
            labels: Labels::of_docs(tools, &docs),
            docs,
            name_terms,
            name_pieces: pieces,
            names,
            folded,
            longest_folded,
            server_names,
            lexical,
            deprecated,
            groups,
            extra: Vec::new(),
            lexical_weight: 1.0,
            params,
            stamp: NEXT_STAMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// A copy of this index without its added retrievers: cheaper than building the lexical
    /// index again when another ranker is to be attached to the copy.
    pub fn clone_lexical(&self) -> Self {
        Self {
            docs: self.docs.clone(),
            name_terms: self.name_terms.clone(),
            name_pieces: self.name_pieces.clone(),
            labels: self.labels.clone(),
            name_rank: self.name_rank.clone(),
            by_name: self.by_name.clone(),
            names: self.names.clone(),
            folded: self.folded.clone(),
            longest_folded: self.longest_folded,
            server_names: self.server_names.clone(),
            lexical: self.lexical.clone(),
            deprecated: self.deprecated.clone(),
            groups: self.groups.clone(),
            extra: Vec::new(),
            lexical_weight: self.lexical_weight,
            params: self.params.clone(),
            stamp: self.stamp,
        }
    }

    /// Adds a retriever fused with the lexical one at `weight`.
    pub fn add_retriever(&mut self, retriever: Box<dyn Retriever>, weight: f32) {
        self.extra.push((retriever, weight));
    }

    /// Weight of the lexical retriever in the fusion (1 by default; 0 ranks by the added
    /// retrievers alone, for comparisons).
    pub fn set_lexical_weight(&mut self, weight: f32) {
        self.lexical_weight = weight;
    }

    /// Number of searchable tools.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether no tool is searchable.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The words the glued names of document `d` (in [`Self::catalog_indices`] order) are cut
    /// into, space-separated; empty when it has none.
    pub fn name_pieces(&self, d: usize) -> &str {
        &self.name_pieces[d]
    }

    /// Catalog indices of the searchable tools, sorted.
    pub fn catalog_indices(&self) -> &[usize] {
        &self.docs
    }

    /// Documents with exactly this canonical, bare or original name.
    pub fn exact(&self, name: &str) -> &[u32] {
        self.names.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Splits operators out of one query string and analyses the rest.
    pub fn parse(&self, query: &str) -> ParsedQuery {
        self.parse_memo(query, &mut analyze::Memo::default())
    }

    /// [`Self::parse`], reusing the analyses of runs in `memo`.
    fn parse_memo(&self, query: &str, memo: &mut analyze::Memo) -> ParsedQuery {
        let q = self.operators(query, &mut |_, _, _| {});
        // Each distinct term (memo ids) with its first surface and count, in first-seen order.
        let mut counts: Vec<(u32, u32, f32)> = Vec::new();
        analyze::analyze_counted(&q.text, memo, &mut counts);
        self.with_terms(q, &counts, memo)
    }

    /// [`Self::parse_memo`], leaving in `words` how each word of `query` was taken, for
    /// [`Self::clause_parse`]. Each kept word is analysed on its own: no run of the analysis
    /// crosses a space, so the terms are those of the whole text.
    fn parse_words(&self, query: &str, memo: &mut analyze::Memo, words: &mut Words) -> ParsedQuery {
        let mut kept: Vec<(usize, usize, Option<&str>, bool)> = Vec::new();
        let base = query.as_ptr() as usize;
        let q = self.operators(query, &mut |raw, text, plain| {
            let at = raw.as_ptr() as usize - base;
            kept.push((at, at + raw.len(), text, plain));
        });
        words.marks.clear();
        words.pairs.clear();
        let mut counts: Vec<(u32, u32, f32)> = Vec::new();
        analyze::count_terms(memo, &mut counts, |memo, emit| {
            for &(at, end, text, plain) in &kept {
                let from = words.pairs.len();
                if let Some(text) = text {
                    analyze::analyze_memo(text, memo, |term, surface| {
                        words.pairs.push((term, surface));
                        emit(term, surface);
                    });
                }
                let pairs = (from, words.pairs.len());
                words.marks.push(WordMark {
                    at,
                    end,
                    plain,
                    pairs,
                });
            }
        });
        self.with_terms(q, &counts, memo)
    }

    /// The parse of `clause`, a slice of `query`, from `words` (how [`Self::parse_words`] took
    /// `query`): the same as [`Self::parse_memo`] of the clause alone, or `None` when it cannot
    /// be had that way (see [`Self::clause_words`]).
    #[cfg(test)]
    fn clause_parse(
        &self,
        query: &str,
        clause: &str,
        words: &Words,
        memo: &mut analyze::Memo,
    ) -> Option<ParsedQuery> {
        let mut counts = Vec::new();
        let parts = self.clause_words(query, clause, words, memo, &mut counts)?;
        Some(self.clause_query(&parts, &counts, memo))
    }

    /// The parse of a clause from [`Self::clause_words`]: its words and counted terms.
    fn clause_query(
        &self,
        parts: &ClauseWords<'_>,
        counts: &[(u32, u32, f32)],
        memo: &mut analyze::Memo,
    ) -> ParsedQuery {
        let mut text = String::with_capacity(parts.iter().map(|p| p.0.len() + 1).sum());
        for (i, (word, _)) in parts.iter().enumerate() {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(word);
        }
        let q = ParsedQuery {
            text,
            ..ParsedQuery::default()
        };
        self.with_terms(q, counts, memo)
    }

    /// The words of `clause`, a slice of `query`, and its counted terms into `counts` (as
    /// [`analyze::count_terms`] gives them), from `words` (how [`Self::parse_words`] took
    /// `query`): all a clause's ranking needs, without the strings of its parse, which only a
    /// clause brought forward needs for its reason. `None` when the clause's parse cannot be had
    /// this way (a word of the clause is an operator or an exact name, or the clause is a single
    /// word, which can name a tool as a whole query does), and the clause is parsed alone. A word
    /// cut by the clause's bounds (`package.` ends a clause as `package`) is taken again.
    fn clause_words<'q>(
        &self,
        query: &'q str,
        clause: &str,
        words: &Words,
        memo: &mut analyze::Memo,
        counts: &mut Vec<(u32, u32, f32)>,
    ) -> Option<ClauseWords<'q>> {
        let at = (clause.as_ptr() as usize).checked_sub(query.as_ptr() as usize)?;
        let end = at + clause.len();
        if end > query.len() {
            return None;
        }
        let first = words.marks.partition_point(|m| m.end <= at);
        // Each word of the clause, and its analysis when the request's serves.
        let mut parts: ClauseWords<'q> = Vec::new();
        for m in words.marks[first..].iter().take_while(|m| m.at < end) {
            let (from, to) = (m.at.max(at), m.end.min(end));
            if (from, to) == (m.at, m.end) {
                if !m.plain {
                    return None;
                }
                parts.push((&query[from..to], Some(m.pairs)));
            } else {
                let word = &query[from..to];
                if !matches!(
                    self.take_word(word, false, &mut ParsedQuery::default()),
                    Taken::Plain
                ) {
                    return None;
                }
                parts.push((word, None));
            }
        }
        if parts.len() < 2 {
            return None;
        }
        analyze::count_terms(memo, counts, |memo, emit| {
            for &(word, pairs) in &parts {
                match pairs {
                    Some((from, to)) => {
                        for &(term, surface) in &words.pairs[from..to] {
                            emit(term, surface);
                        }
                    }
                    None => analyze::analyze_memo(word, memo, &mut *emit),
                }
            }
        });
        Some(parts)
    }

    /// The ids of the term with memo id `term` in the lexical and the server groups' vocabularies.
    fn term_ids(&self, term: u32, memo: &mut analyze::Memo) -> [Option<u32>; 2] {
        let groups = self.groups.as_ref().map(|g| g.index.index());
        memo.found(self.stamp, term, |t| {
            [
                self.lexical.index().term_id(t),
                groups.and_then(|g| g.term_id(t)),
            ]
        })
    }

    /// `q` with its counted terms (memo ids) and their ids in this index's vocabularies.
    fn with_terms(
        &self,
        mut q: ParsedQuery,
        counts: &[(u32, u32, f32)],
        memo: &mut analyze::Memo,
    ) -> ParsedQuery {
        q.terms = Vec::with_capacity(counts.len());
        q.surface = Vec::with_capacity(counts.len());
        q.ids = Vec::with_capacity(counts.len());
        q.group_ids = Vec::with_capacity(counts.len());
        for &(term, surface, n) in counts {
            let [id, group_id] = self.term_ids(term, memo);
            q.ids.push(id);
            q.group_ids.push(group_id);
            q.terms.push((memo.shared(term), n));
            q.surface.push(memo.shared(surface));
        }
        q
    }

    /// `q`'s terms by id with their counts (see [`Lexical::weighted`]): in the lexical index into
    /// `terms`, and in the server groups' index, when there is one, into `group_terms`.
    fn weighted_terms(
        &self,
        q: &ParsedQuery,
        terms: &mut Vec<(u32, f32)>,
        group_terms: &mut Vec<(u32, f32)>,
    ) {
        self.lexical.weighted(q, self.own_ids(q), terms);
        if let Some(g) = &self.groups {
            g.index.weighted(q, self.own_group_ids(q), group_terms);
        }
    }

    /// The lexical ids of `q`'s terms, when this index parsed it.
    fn own_ids<'q>(&self, q: &'q ParsedQuery) -> Option<&'q [Option<u32>]> {
        (q.ids.len() == q.terms.len()).then_some(q.ids.as_slice())
    }

    /// The server groups' ids of `q`'s terms, when this index parsed it.
    fn own_group_ids<'q>(&self, q: &'q ParsedQuery) -> Option<&'q [Option<u32>]> {
        (q.group_ids.len() == q.terms.len()).then_some(q.group_ids.as_slice())
    }

    /// The operators of one query string (`+term`, `server:`, `mcp__S__`, exact names) and the
    /// text left for analysis, which is not analysed here. `seen(raw, kept, plain)` is told how
    /// each whitespace-separated word was taken: the text it keeps for analysis, and whether it
    /// is a plain word, kept as written.
    fn operators<'q>(
        &self,
        query: &'q str,
        seen: &mut dyn FnMut(&'q str, Option<&'q str>, bool),
    ) -> ParsedQuery {
        let mut q = ParsedQuery::default();
        // The words left for analysis, space-separated.
        let (mut text, mut first) = (String::with_capacity(query.len()), true);
        // A name is only a name when the query is nothing else: "search" standing alone asks for
        // the tools called search, while "search flights to Tokyo" merely contains a word that 22
        // servers use as a tool name.
        let whole_query = {
            let mut words = query.split_whitespace();
            words.next().is_some() && words.next().is_none()
        };
        let mut all_plain = true;
        for raw in query.split_whitespace() {
            let (kept, plain) = match self.take_word(raw, whole_query, &mut q) {
                Taken::Plain => (Some(raw), true),
                Taken::Operator(kept) => (kept, false),
            };
            all_plain &= plain;
            if let Some(word) = kept {
                if !std::mem::take(&mut first) {
                    text.push(' ');
                }
                text.push_str(word);
            }
            seen(raw, kept, plain);
        }
        if whole_query && all_plain {
            self.take_folded_name(query, &mut q);
        }
        q.text = text;
        q.exact.sort_unstable();
        q.exact.dedup();
        q
    }

    /// Takes one whitespace-separated word of a query into `q`: an operator's effect (a filter,
    /// an exact name, a note), or nothing for a plain word. `whole_query`: the word is all the
    /// query holds.
    fn take_word<'w>(&self, raw: &'w str, whole_query: bool, q: &mut ParsedQuery) -> Taken<'w> {
        // `+` before a digit is a number (`+1234567890`, `+8`), not an operator.
        if let Some(req) = raw
            .strip_prefix('+')
            .filter(|r| r.chars().next().is_some_and(|c| !c.is_ascii_digit()))
        {
            // A term no tool's name has would empty the result: text pasted into a request
            // (`+aug 0.74`, a diff's `+line`) is more likely than a filter meant to find nothing.
            let terms = analyze::analyze(req);
            if terms
                .iter()
                .all(|t| self.name_terms.iter().any(|n| n.binary_search(t).is_ok()))
            {
                q.required.extend(terms);
            } else {
                q.notes.push(format!(
                    "no tool's name has {:?}, so {:?} was read as a plain word.",
                    crate::echo::echo(req),
                    crate::echo::echo(raw)
                ));
            }
            return Taken::Operator(Some(req));
        }
        if let Some(s) = raw.trim_start_matches(name_trim).strip_prefix("server:") {
            let written = self.server_value(s);
            let name = written.trim_start_matches("mcp__").trim_end_matches('_');
            // A value that names no server is read as a plain word, as a `+term` no name has is.
            let named = self.filter_servers(q, raw, name, written);
            return Taken::Operator((!named && !name.is_empty()).then_some(name));
        }
        let word = trim_name(raw);
        if self.take_names(word, whole_query, q) {
            return Taken::Operator(Some(word));
        }
        if let Some(rest) = word.strip_prefix("mcp__") {
            let (server, tail) = rest.split_once("__").unwrap_or((rest, ""));
            // An unknown server's name is read as a word, with the tool's.
            let kept = if self.filter_servers(q, word, server, server) {
                self.note_unnamed(q, word);
                tail
            } else {
                rest
            };
            return Taken::Operator((!kept.is_empty()).then_some(kept));
        }
        Taken::Plain
    }

    /// Adds to `q` the one tool a query of one word, no tool's name as written, names when case
    /// and the separators `_ - .` are ignored (`Tavily_Search`, `tavily-search` for
    /// `tavily_search`): the word is that name as a person writes it. Words apart (`read file`)
    /// are words, as in any other query. A fold that several tools' names share names none of
    /// them, as `tool_names` resolves such a name.
    fn take_folded_name(&self, query: &str, q: &mut ParsedQuery) {
        let query = trim_name(query.trim());
        if query.is_empty() || query.len() > self.longest_folded * 4 {
            return;
        }
        if let Some(d) = self.folded_one(query) {
            q.exact.push(d);
            q.folded.push(d);
        }
    }

    /// The one document whose name (canonical, bare or original) `name` is with case and the
    /// separators `_ - .` ignored, if exactly one has such a name.
    fn folded_one(&self, name: &str) -> Option<u32> {
        match self.folded.get(&crate::name::fold(name)).map(Vec::as_slice) {
            Some(&[d]) => Some(d),
            _ => None,
        }
    }

    /// Adds to `q` the tools `word` (a query's word, trimmed of [`name_trim`]) names exactly, and
    /// says whether it names any: the word itself, else the word without a sentence-final `.`
    /// (`use read_file.`), else each identifier of a call or list written in it
    /// (`get_time(zone='UTC')`, `tool=read_file`, `read_file,write_file`), which must name one
    /// tool (see [`names_a_tool`]). `whole_query`: the word is all the query holds.
    fn take_names(&self, word: &str, whole_query: bool, q: &mut ParsedQuery) -> bool {
        let mut take = |name: &str, whole: bool| {
            // Most words of a request are plain words that can name no tool here: skip the
            // lookup.
            let exact = if whole || looks_like_a_name(name) {
                self.exact(name)
            } else {
                &[]
            };
            let named = !exact.is_empty() && (whole || names_a_tool(name, exact.len()));
            if named {
                q.exact.extend_from_slice(exact);
                return true;
            }
            // A canonical name is a name wherever it stands: written with other case or
            // separators, it names the one tool it folds to, as `tool_names` resolves it.
            if exact.is_empty()
                && name.starts_with(crate::name::MCP_PREFIX)
                && let Some(d) = self.folded_one(name)
            {
                q.exact.push(d);
                q.folded.push(d);
                return true;
            }
            false
        };
        if take(word, whole_query) {
            return true;
        }
        // A word ends at whitespace, so a `.` that ends it ends a sentence.
        let stopped = trim_name(word.trim_end_matches('.'));
        if stopped.len() < word.len() && !stopped.is_empty() && take(stopped, whole_query) {
            return true;
        }
        if !has_name_punctuation(stopped) {
            return false;
        }
        let mut any = false;
        for piece in stopped.split(NAME_PUNCTUATION) {
            let piece = piece.trim_matches(name_trim);
            any |= !piece.is_empty() && take(piece, false);
        }
        any
    }

    /// Notes that `word`, written as a canonical name (`mcp__SERVER__TOOL`) of a known server,
    /// names no tool the model can see, when it does not: the query still ranks the server's tools
    /// by its words, but an answer of other tools, silent on the name, reads as if the tool were
    /// found or did not matter. The name is the word's leading run of name characters (a call's
    /// arguments and a sentence's full stop are not part of it); a name that finds a tool once
    /// case and the separators `_ - .` are ignored (as a `tool_names` lookup would) is not noted.
    fn note_unnamed(&self, q: &mut ParsedQuery, word: &str) {
        let end = word
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))
            .unwrap_or(word.len());
        let name = word[..end].trim_end_matches(['.', '_', '-']);
        let tool = name
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
            .map_or("", |(_, tool)| tool);
        if tool.is_empty() || !self.exact(name).is_empty() {
            return;
        }
        let folded = crate::name::fold(name);
        if self
            .labels
            .iter()
            .any(|l| crate::name::folded_chars(&l.name).eq(folded.chars()))
        {
            return;
        }
        let note = format!(
            "no tool is named {:?}; the tools below are what its words find.",
            crate::echo::echo(name)
        );
        if !q.notes.contains(&note) {
            q.notes.push(note);
        }
    }

    /// A `server:` value without the prose around it (`"git"`, `git,`, `git.`, `git)`): the
    /// value as written when a server is named so, else without the characters at either end
    /// that cannot begin or end a server's name. A `.` inside stays (`foo.bar`).
    fn server_value<'v>(&self, value: &'v str) -> &'v str {
        if self.server_names.contains_key(&value.to_lowercase()) {
            return value;
        }
        let prose = |c: char| !(c.is_alphanumeric() || c == '_' || c == '-');
        value.trim_start_matches(prose).trim_end_matches(prose)
    }

    /// Restricts `q` to the servers `name` names (see [`Self::servers_named`]) and says whether
    /// it names any, or notes that it names none; `token` is the query's word and `written` the
    /// server as it gives it, for the note. A value that names no server is left to the caller to
    /// read as a plain word, which the note says (an empty one is ignored).
    fn filter_servers(&self, q: &mut ParsedQuery, token: &str, name: &str, written: &str) -> bool {
        let (token, written) = (crate::echo::echo(token), crate::echo::echo(written));
        let read = if name.is_empty() {
            "it was ignored".to_owned()
        } else {
            format!("{:?} was read as a plain word", crate::echo::echo(name))
        };
        match self.servers_named(name) {
            ServersNamed::One(one) => {
                q.restrict_to(one);
                true
            }
            ServersNamed::Several {
                servers,
                separators,
            } => {
                for s in &servers {
                    q.restrict_to(s);
                }
                let all = if servers.len() == 2 {
                    "both".to_owned()
                } else {
                    format!("all {}", servers.len())
                };
                let ignored = if separators {
                    "case and the separators _ - . are"
                } else {
                    "case is"
                };
                q.notes.push(format!(
                    "{token:?} names no server exactly ({written:?} matches {} when {ignored} ignored), so {all} were searched; write the name as listed to search one.",
                    join_and(&servers.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                ));
                true
            }
            ServersNamed::Ambiguous(servers) => {
                let shown: Vec<String> = servers.iter().take(8).map(|s| (*s).to_owned()).collect();
                let could = if servers.len() > shown.len() {
                    format!(
                        "{}, and {} more",
                        shown.join(", "),
                        servers.len() - shown.len()
                    )
                } else {
                    join_last(&shown, "or")
                };
                q.notes.push(format!(
                    "{token:?} names no server ({written:?} could be {could}; write more of the name), so {read}."
                ));
                false
            }
            ServersNamed::Unknown => {
                q.notes.push(format!(
                    "{token:?} names no server ({written:?} is unknown; {}), so {read}.",
                    self.server_list()
                ));
                false
            }
        }
    }

    /// The searchable servers `name` names, by canonical name, sorted: the server whose canonical
    /// name it is exactly; else those whose configured name it is exactly; else, case ignored,
    /// every server it names (several only for names that differ in case alone); else the same
    /// with the separators `_ - . space` ignored too; else the one server whose name, so folded,
    /// it begins or whose whole words it is (`brave` for `brave-search`), several being
    /// [`ServersNamed::Ambiguous`].
    fn servers_named(&self, name: &str) -> ServersNamed<'_> {
        if let Some(named) = self.server_names.get(&name.to_lowercase()) {
            if let Some((_, canon)) = named.iter().find(|(f, c)| f == name && c == name) {
                return ServersNamed::One(canon.as_str());
            }
            let exact = named.iter().any(|(f, _)| f == name);
            let out: Vec<&str> = named
                .iter()
                .filter(|(f, _)| !exact || f == name)
                .map(|(_, c)| c.as_str())
                .collect();
            return several(out, false);
        }
        let folded = crate::name::fold(name);
        if folded.is_empty() {
            return ServersNamed::Unknown;
        }
        let forms = || self.server_names.values().flatten();
        let same: Vec<&str> = forms()
            .filter(|(f, _)| crate::name::fold(f) == folded)
            .map(|(_, c)| c.as_str())
            .collect();
        if !same.is_empty() {
            return several(same, true);
        }
        let mut begun: Vec<&str> = forms()
            .filter(|(f, _)| begins_or_is_words_of(&folded, f))
            .map(|(_, c)| c.as_str())
            .collect();
        begun.sort_unstable();
        begun.dedup();
        match begun.as_slice() {
            [] => ServersNamed::Unknown,
            [one] => ServersNamed::One(one),
            _ => ServersNamed::Ambiguous(begun),
        }
    }

    /// "servers: a, b, c" (the first eight, then how many more), or "there are no servers".
    fn server_list(&self) -> String {
        let mut known: Vec<&str> = self
            .server_names
            .values()
            .flatten()
            .map(|(_, canon)| canon.as_str())
            .collect();
        known.sort_unstable();
        known.dedup();
        if known.is_empty() {
            "there are no servers".to_owned()
        } else if known.len() <= 8 {
            format!("servers: {}", known.join(", "))
        } else {
            format!(
                "servers: {}, and {} more",
                known[..8].join(", "),
                known.len() - 8
            )
        }
    }

    /// What parsing `queries` ignored and why, once per distinct note (the operators only: no
    /// second analysis of the text).
    pub fn notes(&self, queries: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for q in queries {
            for n in self.operators(q, &mut |_, _, _| {}).notes {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }

    /// Whether each document passes `q`'s filters, into `out`.
    fn allowed_into(&self, q: &ParsedQuery, out: &mut Vec<bool>) {
        out.clear();
        if !q.filters() {
            out.resize(self.docs.len(), true);
            return;
        }
        out.extend((0..self.docs.len()).map(|d| {
            (q.servers.is_empty()
                || self.labels[d]
                    .server
                    .as_ref()
                    .is_some_and(|s| q.servers.iter().any(|x| **x == **s)))
                && q.required
                    .iter()
                    .all(|r| self.name_terms[d].binary_search(r).is_ok())
        }));
    }

    /// Ranks the searchable tools for `queries`: exact names first, then fuzzy hits. One query is
    /// one ranking of fused, normalised scores. Several queries are several intents: each is
    /// ranked on its own (so one strong query cannot drown the others) and the rankings are
    /// merged round-robin (each intent's best, then each one's second, ...; within a round, tools
    /// several intents found first), so every intent is represented in the top hits; each hit's
    /// reason names the intents it answers, each with its own matches. A query given twice (the
    /// same words, in any case and spacing) is one intent. Returns at most `limit` hits.
    pub fn rank(&self, queries: &[String], limit: usize) -> Vec<Hit> {
        let unique: Vec<String>;
        let queries = match distinct_queries(queries) {
            Some(distinct) => {
                unique = distinct;
                &unique[..]
            }
            None => queries,
        };
        RANK_SCRATCH.with_borrow_mut(|scratch| {
            // The passes leave the scores they used at zero rather than zeroing a whole catalog
            // first. A rank that panicked (in a retriever, say) may have left some behind, and
            // this thread goes on serving: the next rank starts from clean buffers.
            if std::mem::replace(&mut scratch.ranking, true) {
                scratch.scores.clear();
                scratch.query = Fused::default();
            }
            let hits = self.rank_with(queries, limit, scratch);
            scratch.ranking = false;
            hits
        })
    }

    /// Fused scores of one parsed query into `scratch.query`, filtered by its operators;
    /// `scratch.allowed` is left holding the query's filter. Every tool with a score is touched.
    fn score_query(&self, q: &ParsedQuery, scratch: &mut RankScratch) {
        let n = self.docs.len();
        let RankScratch {
            query,
            scores,
            allowed,
            lexical_hit,
            matched,
            groups: group,
            group_hits,
            sparse,
            terms,
            group_terms,
            shares,
            ..
        } = scratch;
        query.reset(n);
        // All zero between passes, as in `clause_best`: the matched documents are reset below.
        scores.resize(n, 0.0);
        debug_assert!(scores.iter().all(|&s| s == 0.0));
        self.allowed_into(q, allowed);
        // The lexical retriever runs first, on its matches only; remember which tools share a
        // word with the query.
        self.weighted_terms(q, terms, group_terms);
        let filter = q.filters().then_some(allowed.as_slice());
        self.lexical.score_matches(terms, filter, scores, matched);
        // Under one server's filter a match in the server's field (its name and description) is
        // every candidate's: it tells them apart no more than their group does, so a tool that
        // matches there alone has no evidence of its own.
        if q.servers.len() == 1 {
            let idx = self.lexical.index();
            matched.retain(|&d| {
                let own = terms
                    .iter()
                    .any(|&(t, _)| idx.fields(t, d) & !SERVER_FIELD != 0);
                if !own {
                    scores[d as usize] = 0.0;
                }
                own
            });
        }
        lexical_hit.clear();
        lexical_hit.resize(n, false);
        // The matched scores are read out once, leaving zeros; the maximum and the divisions run
        // on the contiguous copy, where they vectorise, and the lexical shares, the first a
        // document is given, are written in one pass.
        // (Slices, not the vectors: a store to one could not then be taken for a change to
        // another's length or buffer, and the loop keeps its pointers in registers.)
        shares.clear();
        {
            let (hit, lexical) = (lexical_hit.as_mut_slice(), scores.as_mut_slice());
            shares.extend(matched.iter().map(|&d| {
                let d = d as usize;
                hit[d] = true;
                std::mem::take(&mut lexical[d])
            }));
        }
        if self.lexical_weight > 0.0 {
            let max = shares.iter().copied().fold_max();
            let weight = self.lexical_weight;
            shares.iter_mut().for_each(|s| *s = weight * *s / max);
            query.add_first(matched, shares);
        }
        for (retriever, weight) in &self.extra {
            let weight = *weight;
            if weight == 0.0 {
                continue;
            }
            sparse.clear();
            retriever.score_sparse(q, allowed, scores, sparse);
            // A tool that shares no word with the query needs the retriever's floor.
            let floor = retriever.alone_floor();
            sparse.retain(|&(d, s)| lexical_hit[d as usize] || s >= floor);
            let max = sparse.iter().map(|x| x.1).fold_max();
            if max > 0.0 && weight > 0.0 {
                for &(d, s) in sparse.iter() {
                    query.add(d as usize, weight * s / max);
                }
            }
        }
        // A tool with evidence of its own gains its group's score, which may reorder such tools
        // but never makes a hit of a tool that has none: a server whose description or other
        // tools match the query says what its tools are for, not which of them is asked for.
        // Under one server's filter every candidate shares its group, whose score tells them
        // nothing, so it is not added there.
        if let Some(groups) = &self.groups
            && q.servers.len() != 1
        {
            groups.scores_into(group_terms, group, group_hits);
            let w = self.params.group_weight;
            // A group without a score has zero. Nearly all of the touched tools gain, so the
            // sum is taken for each and kept by a select, not a branch; a tool of no group reads
            // a zero it does not keep.
            let (fused, of_doc, group) = (query.scores.as_mut_slice(), &groups.of_doc, &**group);
            for &d in query.touched.iter() {
                let d = d as usize;
                let (g, s) = (of_doc[d], fused[d]);
                let gained = s + w * group.get(g as usize).copied().unwrap_or(0.0);
                fused[d] = if (g != u32::MAX) & allowed[d] & (s > 0.0) {
                    gained
                } else {
                    s
                };
            }
        }
        if let Some(weights) = &self.deprecated {
            for &d in query.touched.iter() {
                query.scores[d as usize] *= weights[d as usize];
            }
        }
    }

    /// The best `keep` of the `candidates` (distinct documents, in any order; every one scoring
    /// above zero must be among them) by `scores`, at or above the relative floor, best first
    /// (ties by name), and the best score. A query's candidates are the few hundred documents
    /// its retrievers touched, not the whole catalog.
    fn top(&self, scores: &[f32], candidates: &[u32], keep: usize) -> (Vec<(f32, u32)>, f32) {
        // One integer per candidate orders it: score descending (a positive float's bits order
        // as the float does), then name. The best `keep` are the `keep` smallest keys, kept in a
        // max-heap; once it is full, a score below its largest key's cannot enter, which rejects
        // most of a large catalog with one float comparison. The best score is found in the same
        // pass (a score that cannot enter is below one that did), and the relative floor is then
        // applied to the best `keep`: whatever ranks above a score at or above the floor is at or
        // above it too, so they are the best `keep` of those at or above it.
        let key = |s: f32, d: usize| {
            (u64::from(u32::MAX - s.to_bits()) << 32) | u64::from(self.name_rank[d])
        };
        let score_of = |k: u64| f32::from_bits(u32::MAX - (k >> 32) as u32);
        let mut heap = std::collections::BinaryHeap::with_capacity(keep + 1);
        let mut cut = 0f32;
        let mut best = 0u32;
        for &d in candidates {
            let (d, s) = (d as usize, scores[d as usize]);
            if !(s > 0.0 && s >= cut) {
                continue;
            }
            best = best.max(s.to_bits());
            let k = key(s, d);
            if heap.len() < keep {
                heap.push(k);
            } else if heap.peek().is_some_and(|&top| k < top) {
                heap.pop();
                heap.push(k);
            } else {
                continue;
            }
            if heap.len() == keep {
                cut = heap.peek().map_or(0.0, |&top| score_of(top));
            }
        }
        let best = f32::from_bits(best);
        let floor = best * self.params.min_relative_score;
        let ranked = heap.into_sorted_vec();
        let ranked = ranked
            .into_iter()
            .map(|k| {
                let d = self.by_name[(k & u64::from(u32::MAX)) as usize];
                (scores[d as usize], d)
            })
            .take_while(|&(s, _)| s >= floor)
            .collect();
        (ranked, best)
    }

    /// For each server `q` names (see [`Groups::nameable`]), its group and its best tool by the
    /// whole query's scores (ties by name), among the tools the query may show, does not name
    /// exactly, and scores at least `floor` (the relative floor every hit keeps).
    fn named_best(
        &self,
        q: &ParsedQuery,
        exact: &[u32],
        floor: f32,
        scratch: &RankScratch,
    ) -> Vec<(u32, u32)> {
        let Some(groups) = &self.groups else {
            return Vec::new();
        };
        if groups.nameable.is_empty() {
            return Vec::new();
        }
        let looked_up: Vec<Option<u32>>;
        let ids = match self.own_ids(q) {
            Some(ids) => ids,
            None => {
                looked_up = q
                    .terms
                    .iter()
                    .map(|(t, _)| self.lexical.index.term_id(t))
                    .collect();
                &looked_up
            }
        };
        let scores = &scratch.query.scores;
        groups
            .named_in(ids, &q.text)
            .into_iter()
            .filter_map(|g| {
                let mut best: Option<(f32, u32)> = None;
                for &d in &groups.members[g as usize] {
                    let s = scores[d as usize];
                    if scratch.allowed[d as usize]
                        && s > 0.0
                        && s >= floor
                        && exact.binary_search(&d).is_err()
                        && best.is_none_or(|b| s > b.0)
                    {
                        best = Some((s, d));
                    }
                }
                best.map(|(_, d)| (g, d))
            })
            .collect()
    }

    /// The best tool of group `g` for the phrase of `query` that names its server, when the query
    /// has several phrases (see [`split_phrases`]); of several such phrases, the one whose best
    /// tool of the server scores highest for it by BM25F. Among the tools the query may show,
    /// does not name exactly, and whose whole-query score keeps `floor`, the one with the most
    /// of the phrase's BM25F score and the whole query's fused score, each as a share of the
    /// server's best (ties by name); with the phrase, parsed. `None` for a query of one phrase,
    /// or when no phrase names the server on its own or matches one of its tools.
    fn named_in_clause(
        &self,
        g: u32,
        query: &str,
        exact: &[u32],
        floor: f32,
        scratch: &mut RankScratch,
    ) -> Option<(u32, ParsedQuery)> {
        let groups = self.groups.as_ref()?;
        let parts = split_phrases(query);
        if parts.len() < 2 {
            return None;
        }
        // The phrase whose best tool of the server it matches best: (its BM25F score for the
        // phrase, the tool, the phrase).
        let mut chosen: Option<(f32, u32, ParsedQuery)> = None;
        for text in parts {
            let q = self.parse_memo(text, &mut scratch.memo);
            let ids: Vec<Option<u32>> = match self.own_ids(&q) {
                Some(ids) => ids.to_vec(),
                None => q
                    .terms
                    .iter()
                    .map(|(t, _)| self.lexical.index.term_id(t))
                    .collect(),
            };
            // Phrases are slices of the query; whether the phrase writes the server's name as a
            // name is read in the whole query, as for the request.
            let at = text.as_ptr() as usize - query.as_ptr() as usize;
            if !groups
                .named_in_part(&ids, query, at..at + text.len())
                .contains(&g)
            {
                continue;
            }
            self.weighted_terms(&q, &mut scratch.terms, &mut scratch.group_terms);
            let RankScratch {
                scores,
                matched,
                terms,
                allowed,
                query: whole,
                ..
            } = scratch;
            // All zero between passes: the documents this pass matched are reset below.
            scores.resize(self.docs.len(), 0.0);
            self.lexical.score_matches(terms, None, scores, matched);
            let name_rank = |d: u32| self.name_rank[d as usize];
            let members = &groups.members[g as usize];
            let shown = |d: u32| {
                allowed[d as usize]
                    && whole.scores[d as usize] >= floor
                    && whole.scores[d as usize] > 0.0
                    && exact.binary_search(&d).is_err()
            };
            // The phrase's evidence and the whole request's (which holds the meaning), each as
            // a share of the server's best.
            let (mut top_phrase, mut top_whole) = (0.0f32, 0.0f32);
            for &d in members.iter().filter(|&&d| shown(d)) {
                top_phrase = top_phrase.max(scores[d as usize]);
                top_whole = top_whole.max(whole.scores[d as usize]);
            }
            let mut best: Option<(f32, u32)> = None;
            if top_phrase > 0.0 {
                for &d in members.iter().filter(|&&d| shown(d)) {
                    let s = scores[d as usize] / top_phrase + whole.scores[d as usize] / top_whole;
                    if best.is_none_or(|b| s > b.0 || (s == b.0 && name_rank(d) < name_rank(b.1))) {
                        best = Some((s, d));
                    }
                }
            }
            for &d in matched.iter() {
                scores[d as usize] = 0.0;
            }
            if let Some((_, d)) = best
                && chosen.as_ref().is_none_or(|c| top_phrase > c.0)
            {
                chosen = Some((top_phrase, d, q));
            }
        }
        chosen.map(|(_, d, q)| (d, q))
    }

    /// The clauses of one long query whose own best tool is missing from the whole query's
    /// first [`CLAUSE_SLOT`] hits: a request such as "track my package. Also convert the price to
    /// yen" names two tasks, and the words of one can outweigh the other's in the bag of words.
    /// A clause counts when it has at least [`MIN_CLAUSE_TERMS`] terms and its best tool leads
    /// every tool of another server by [`CLAUSE_LEAD`]; clauses are ranked by BM25F and server
    /// groups only (no second embedding), for their best tool only (see [`Self::clause_best`]).
    fn clause_hits(
        &self,
        query: &str,
        parsed: &ParsedQuery,
        exact: &[u32],
        whole: &[(f32, u32)],
        scratch: &mut RankScratch,
    ) -> ClauseHits {
        let mut out = ClauseHits::default();
        let clauses = split_clauses(query);
        if clauses.len() < 2 {
            return out;
        }
        for text in clauses {
            // A clause's terms, by id, into `scratch.terms` and `scratch.group_terms`: from the
            // request's words when they serve (its parse is then built only if it is brought
            // forward), else from its parse alone.
            let words = self.clause_words(
                query,
                text,
                &scratch.words,
                &mut scratch.memo,
                &mut scratch.counts,
            );
            let (clause, own_filter) = match words {
                Some(words) => {
                    if scratch.counts.len() < MIN_CLAUSE_TERMS {
                        continue;
                    }
                    scratch.terms.clear();
                    scratch.group_terms.clear();
                    for &(term, _, n) in &scratch.counts {
                        let [id, group_id] = self.term_ids(term, &mut scratch.memo);
                        scratch.terms.extend(id.map(|id| (id, n)));
                        scratch.group_terms.extend(group_id.map(|id| (id, n)));
                    }
                    // Plain words only: the request's filters, as the whole request was scored.
                    (Clause::Words(words), false)
                }
                None => {
                    let mut q = self.parse_memo(text, &mut scratch.memo);
                    if q.terms.len() < MIN_CLAUSE_TERMS || !q.exact.is_empty() {
                        continue;
                    }
                    restrict_like(&mut q, parsed);
                    self.weighted_terms(&q, &mut scratch.terms, &mut scratch.group_terms);
                    // Its own operators may narrow the request's filters.
                    let own_filter = !(q.servers.iter().all(|s| parsed.servers.contains(s))
                        && q.required.iter().all(|r| parsed.required.contains(r)));
                    if own_filter {
                        self.allowed_into(&q, &mut scratch.clause_allowed);
                    }
                    (Clause::Alone(Box::new(q)), own_filter)
                }
            };
            let Some(((s1, d1), s2)) = self.clause_best(own_filter, parsed, scratch) else {
                continue;
            };
            if s1 < CLAUSE_LEAD * s2 {
                continue;
            }
            let slot = CLAUSE_SLOT + out.hits.len();
            // Tools the query names exactly are placed first already.
            if whole.iter().take(slot).any(|x| x.1 == d1)
                || out.hits.iter().any(|x| x.1 == d1)
                || exact.binary_search(&d1).is_ok()
            {
                continue;
            }
            let q = match clause {
                Clause::Alone(q) => *q,
                Clause::Words(words) => {
                    let mut q = self.clause_query(&words, &scratch.counts, &mut scratch.memo);
                    restrict_like(&mut q, parsed);
                    q
                }
            };
            out.hits.push((s1, d1));
            out.parsed.push((text.to_owned(), q));
        }
        out
    }

    /// A clause's best tool and score and the best score of a tool outside that tool's server
    /// group (0 when none), by BM25F and server groups fused as in [`Self::score_query`]: a
    /// clause is ranked only for its best, so only the tools it matches are visited.
    /// The clause's terms are `scratch.terms` and `scratch.group_terms`; its filter is
    /// `scratch.clause_allowed` when `own_filter`, else that of its `request`, left in
    /// `scratch.allowed`.
    fn clause_best(
        &self,
        own_filter: bool,
        request: &ParsedQuery,
        scratch: &mut RankScratch,
    ) -> Option<((f32, u32), f32)> {
        let n = self.docs.len();
        let RankScratch {
            scores,
            allowed,
            clause_allowed,
            matched,
            groups: group,
            group_hits,
            terms,
            group_terms,
            ..
        } = scratch;
        let (allowed, filtered) = if own_filter {
            (clause_allowed, true)
        } else {
            (allowed, request.filters())
        };
        // All zero between passes: each pass resets the documents it matched.
        scores.resize(n, 0.0);
        debug_assert!(scores.iter().all(|&s| s == 0.0));
        if let Some(g) = &self.groups {
            g.scores_into(group_terms, group, group_hits);
        }
        let filter = filtered.then_some(allowed.as_slice());
        self.lexical.score_matches(terms, filter, scores, matched);
        let max = matched.iter().map(|&d| scores[d as usize]).fold_max();
        let lexical = max > 0.0 && self.lexical_weight > 0.0;
        let w = if lexical {
            self.lexical_weight / max
        } else {
            0.0
        };
        let gw = self.params.group_weight;
        let name_rank = |d: u32| self.name_rank[d as usize];
        let before = |a: (f32, u32), b: (f32, u32)| {
            a.0 > b.0 || (a.0 == b.0 && name_rank(a.1) < name_rank(b.1))
        };
        let mut best = Best::default();
        // Only the tools the clause matches are offered: a group's score lifts its matched
        // tools, but makes no candidate of a tool without a match (see [`Self::score_query`]).
        if lexical {
            let of_doc = self.groups.as_ref().map(|g| g.of_doc.as_slice());
            let scores = scores.as_mut_slice();
            for &d in matched.iter() {
                let mut c = w * std::mem::take(&mut scores[d as usize]);
                let gi = of_doc.map_or(u32::MAX, |o| o[d as usize]);
                // A tool of no group is a group of its own.
                let key = if gi == u32::MAX {
                    (1 << 32) | u64::from(d)
                } else {
                    // Adding zero leaves a positive score as it is: a select, not a branch.
                    let gs = group[gi as usize];
                    c += if gs > 0.0 { gw * gs } else { 0.0 };
                    u64::from(gi)
                };
                best.offer((c * self.weight_of(d), d), key, before);
            }
        } else {
            for &d in matched.iter() {
                scores[d as usize] = 0.0;
            }
        }
        best.first.map(|f| (f, best.second))
    }

    /// Document `d`'s weight: below 1.0 when it is deprecated for another tool of its server.
    fn weight_of(&self, d: u32) -> f32 {
        self.deprecated.as_ref().map_or(1.0, |w| w[d as usize])
    }

    fn rank_with(&self, queries: &[String], limit: usize, scratch: &mut RankScratch) -> Vec<Hit> {
        let mut exact: Vec<u32> = Vec::new();
        let mut parsed = Vec::with_capacity(queries.len());
        // Each intent's best `limit` (exact names are taken out below), and the best score.
        let mut lists: Vec<Vec<(f32, u32)>> = Vec::with_capacity(queries.len());
        let mut best = 0f32;
        // Each intent that names only servers: the tools it may show of each, by name.
        let mut listings: Vec<Option<Vec<Vec<u32>>>> = Vec::with_capacity(queries.len());
        scratch.memo.bound();
        for text in queries {
            // A single query's clauses are parsed from its words.
            let q = if queries.len() == 1 {
                self.parse_words(text, &mut scratch.memo, &mut scratch.words)
            } else {
                self.parse_memo(text, &mut scratch.memo)
            };
            self.score_query(&q, scratch);
            exact.extend(q.exact.iter().filter(|&&d| scratch.allowed[d as usize]));
            let (list, b) = self.top(&scratch.query.scores, &scratch.query.touched, limit);
            best = best.max(b);
            lists.push(list);
            listings.push(
                (q.terms.is_empty() && !q.servers.is_empty())
                    .then(|| self.server_tools(&q.servers, &scratch.allowed)),
            );
            parsed.push(q);
        }
        exact.sort_unstable();
        exact.dedup();
        let keep = limit.saturating_sub(exact.len());
        for (list, listing) in lists.iter_mut().zip(&listings) {
            // Only `server:NAME` (or `mcp__S__`): the model is browsing those servers, so the
            // intent gets their tools rather than nothing.
            if let Some(servers) = listing {
                *list = in_turn(servers, &exact, keep);
            }
            list.retain(|(_, d)| exact.binary_search(d).is_err());
            list.truncate(keep);
        }
        let name_of = |d: u32| &*self.labels[d as usize].name;
        let top = best.max(1.0);
        let mut exact_hits: Vec<(f32, u32)> = exact.iter().map(|&d| (top + 1.0, d)).collect();
        exact_hits.sort_by(|a, b| name_of(a.1).cmp(name_of(b.1)));
        // A tool only a query's fold names says so: the query is not its name as written.
        let written = |d: u32| {
            parsed
                .iter()
                .any(|q| q.exact.contains(&d) && !q.folded.contains(&d))
        };
        let mut hits: Vec<Hit> = exact_hits
            .into_iter()
            .take(limit)
            .map(|(score, d)| {
                let reason = if written(d) {
                    "exact name in the query"
                } else {
                    "the query is its name with case and separators ignored"
                };
                self.hit(d, score, reason.to_owned())
            })
            .collect();
        let listed = |d: u32| {
            let server = self.labels[d as usize]
                .server
                .as_deref()
                .unwrap_or_default();
            format!("a tool of server {server} (the query names only servers)")
        };
        if lists.len() == 1 && listings[0].is_some() {
            hits.extend(
                lists
                    .swap_remove(0)
                    .into_iter()
                    .map(|(score, d)| self.hit(d, score, listed(d))),
            );
        } else if lists.len() == 1 {
            let all: Vec<&ParsedQuery> = parsed.iter().collect();
            let whole = lists.swap_remove(0);
            // With too few hits for the whole query's best to keep their places, it is ranked as
            // a whole only.
            let clauses = if keep > CLAUSE_SLOT {
                self.clause_hits(&queries[0], &parsed[0], &exact, &whole, scratch)
            } else {
                ClauseHits::default()
            };
            let mut ranked: Vec<(f32, u32, Option<usize>)> =
                whole.into_iter().map(|(s, d)| (s, d, None)).collect();
            for (c, (s, d)) in clauses.iter().enumerate() {
                ranked.retain(|x| x.1 != *d);
                let at = (CLAUSE_SLOT + c).min(ranked.len());
                ranked.insert(at, (*s, *d, Some(c)));
            }
            // A server the request names, with no tool among the first hits, gets its best tool
            // after the clauses': "... and post it in #eng on Slack" asks for Slack as clearly as
            // a clause of its own would, though the rest of the request's words outweigh it.
            let mut named_at = CLAUSE_SLOT + clauses.hits.len();
            let mut named = Vec::new();
            let floor = best * self.params.min_relative_score;
            for (g, d) in self.named_best(&parsed[0], &exact, floor, scratch) {
                if named_at >= keep {
                    break;
                }
                let groups = self.groups.as_ref().map(|x| &x.of_doc);
                let of = |d: u32| groups.is_some_and(|o| o[d as usize] == g);
                let shown = exact.iter().any(|&d| of(d))
                    || ranked.iter().take(NAMED_WINDOW.min(keep)).any(|x| of(x.1));
                if shown {
                    continue;
                }
                // In a request of several clauses, the server's tool for the clause that names
                // it: the other clauses' words should not pick which of its tools comes.
                let (d, phrase) = match self.named_in_clause(g, &queries[0], &exact, floor, scratch)
                {
                    Some((d, q)) => (d, Some(q)),
                    None => (d, None),
                };
                ranked.retain(|x| x.1 != d);
                let at = named_at.min(ranked.len());
                ranked.insert(at, (scratch.query.scores[d as usize], d, None));
                named.push((d, phrase));
                named_at += 1;
            }
            ranked.truncate(keep);
            hits.extend(ranked.into_iter().map(|(score, d, clause)| {
                let reason = match clause {
                    None if let Some((_, phrase)) = named.iter().find(|n| n.0 == d) => format!(
                        "the request names server {}: {}",
                        self.labels[d as usize]
                            .original_server
                            .as_deref()
                            .unwrap_or_default(),
                        // The phrase that names it, when it chose the tool: the other steps'
                        // words say nothing of this hit.
                        match phrase {
                            Some(q) => self.reason(d, &[q]),
                            None => self.reason(d, &all),
                        }
                    ),
                    None => self.reason(d, &all),
                    Some(c) => {
                        let (text, q) = &clauses.parsed[c];
                        format!(
                            "for \"{}\": {}",
                            crate::index::cut(text, INTENT_LABEL_CHARS),
                            self.reason(d, &[q])
                        )
                    }
                };
                self.hit(d, score, reason)
            }));
        } else {
            for (score, d, intents) in merge_intents(&lists, name_of).into_iter().take(keep) {
                // Each intent that found the tool is credited with its own matches only (a
                // listing's tool matched no word of it: its reason is the listing's); intents
                // with the same reason share it, in the order of the intents.
                let mut parts: Vec<(Vec<String>, String)> = Vec::new();
                for &i in &intents {
                    let why = if listings[i].is_none() {
                        self.reason(d, &[&parsed[i]])
                    } else {
                        listed(d)
                    };
                    let label =
                        format!("\"{}\"", crate::index::cut(&queries[i], INTENT_LABEL_CHARS));
                    match parts.iter_mut().find(|p| p.1 == why) {
                        Some(p) => p.0.push(label),
                        None => parts.push((vec![label], why)),
                    }
                }
                let reason = parts
                    .iter()
                    .map(|(labels, why)| format!("for {}: {why}", join_and(labels)))
                    .collect::<Vec<_>>()
                    .join("; ");
                hits.push(self.hit(d, score, reason));
            }
        }
        hits.truncate(limit);
        hits
    }

    /// The documents `allowed` shows of each of `servers` (canonical names), each server's by
    /// name, in the order of `servers`.
    fn server_tools(&self, servers: &[String], allowed: &[bool]) -> Vec<Vec<u32>> {
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); servers.len()];
        for &d in &self.by_name {
            let Some(server) = self.labels[d as usize].server.as_deref() else {
                continue;
            };
            if !allowed[d as usize] {
                continue;
            }
            if let Some(i) = servers.iter().position(|s| s == server) {
                out[i].push(d);
            }
        }
        out
    }

    fn hit(&self, d: u32, score: f32, reason: String) -> Hit {
        let l = &self.labels[d as usize];
        Hit {
            index: self.docs[d as usize],
            name: l.name.clone(),
            tool: l.tool.clone(),
            server: l.server.clone(),
            original: l.original.clone(),
            original_server: l.original_server.clone(),
            score: (f64::from(score) * 1000.0).round() / 1000.0,
            reason,
        }
    }

    /// A hit for an exactly named document (exact lookups).
    pub fn named_hit(&self, d: u32) -> Hit {
        self.hit(d, 0.0, "exact name".into())
    }

    /// Hit for document `d`, whose name is close to a name asked for that no tool has.
    pub fn close_hit(&self, d: u32) -> Hit {
        self.hit(d, 0.0, "close to the name asked for".into())
    }

    /// "read" in name, description; "文件" in description ...
    ///
    /// A match in the server's name or description is shared by every tool of that server, so it
    /// is named only when nothing of the tool's own matched.
    fn reason(&self, d: u32, parsed: &[&ParsedQuery]) -> String {
        REASON_SCRATCH.with_borrow_mut(|scratch| {
            self.matched_terms(d, parsed, scratch);
            let own = self.reason_in(parsed, &scratch.found, false);
            if !own.is_empty() {
                return own;
            }
            let server = self.reason_in(parsed, &scratch.found, true);
            if !server.is_empty() {
                return server;
            }
            if let Some(group) = self.group_reason(d, parsed) {
                return group;
            }
            let names: Vec<&str> = self.extra.iter().map(|(r, _)| r.name()).collect();
            format!("related by meaning ({})", names.join(", "))
        })
    }

    /// The terms of `parsed` that document `d` has, into `scratch.found`, in the order of the
    /// intents and of each one's terms, each term once (at its first place): a term matches the
    /// same fields of the same tool whichever intent it came from. The request's terms are marked
    /// by id in a table, and the tool's own terms (a few dozen, sorted, beside their fields) are
    /// walked against it, where looking each of a long request's terms up in the tool's would
    /// search them fifty times over. The tool's weak terms are left out when a strong one matched
    /// its own fields: no reason would name them.
    fn matched_terms(&self, d: u32, parsed: &[&ParsedQuery], scratch: &mut ReasonScratch) {
        let idx = self.lexical.index();
        let ReasonScratch {
            place,
            order,
            found,
        } = scratch;
        if place.len() < idx.terms() {
            place.resize(idx.terms(), 0);
        }
        order.clear();
        for (i, q) in parsed.iter().enumerate() {
            let ids = self.lexical.ids_of(q, self.own_ids(q));
            for (t, id) in ids.iter().enumerate() {
                if let Some(id) = *id
                    && place[id as usize] == 0
                {
                    order.push((id, i as u32, t as u32));
                    place[id as usize] = order.len() as u32;
                }
            }
        }
        found.clear();
        let (terms, fields) = idx.doc_terms(d);
        // The tool's strong terms come first. When one of them matched in the tool's own
        // fields, its weak terms cannot change the reason (a reason names weak terms only when
        // no strong one matched), so they are not walked: a Chinese tool has many bigrams.
        let strong = terms.partition_point(|&t| t < idx.first_weak());
        let mut own_strong = false;
        for (i, (&term, &mask)) in terms.iter().zip(fields).enumerate() {
            if i == strong && own_strong {
                break;
            }
            let at = place[term as usize];
            if at != 0 {
                let (id, intent, term) = order[at as usize - 1];
                own_strong |= i < strong && mask & !SERVER_FIELD != 0;
                found.push(Matched {
                    at,
                    id,
                    intent,
                    term,
                    mask,
                });
            }
        }
        found.sort_unstable_by_key(|m| m.at);
        for &(id, ..) in order.iter() {
            place[id as usize] = 0;
        }
    }

    /// "its server mcp__S matches: ..." for a tool brought in by its group's evidence.
    fn group_reason(&self, d: u32, parsed: &[&ParsedQuery]) -> Option<String> {
        let groups = self.groups.as_ref()?;
        let g = *groups.of_doc.get(d as usize)?;
        if g == u32::MAX {
            return None;
        }
        let idx = groups.index.index();
        let mut words: Vec<String> = Vec::new();
        for q in parsed {
            let ids = groups.index.ids_of(q, self.own_group_ids(q));
            for (t, id) in ids.iter().enumerate() {
                let Some(id) = *id else {
                    continue;
                };
                if idx.is_weak(id) || idx.fields(id, g) == 0 {
                    continue;
                }
                let w = format!("\"{}\"", q.surface(t));
                if !words.contains(&w) {
                    words.push(w);
                }
            }
        }
        (!words.is_empty()).then(|| {
            words.truncate(4);
            match groups.names[g as usize].as_str() {
                "" => format!("other built-in tools match ({})", words.join(", ")),
                server => format!(
                    "its server mcp__{server} matches ({} in its description or other tools)",
                    words.join(", ")
                ),
            }
        })
    }

    /// The reason from the tool's own fields, or (`server`) from its server's field alone, given
    /// its matched terms ([`Self::matched_terms`]): at most [`REASON_PARTS`] matched terms, then
    /// how many more matched. Written into one string as it goes, since every hit of every query
    /// gets one.
    fn reason_in(&self, parsed: &[&ParsedQuery], found: &[Matched], server: bool) -> String {
        let idx = self.lexical.index();
        // Room for four parts and the count of the rest, so the string is not regrown as it is
        // written.
        let mut out = String::with_capacity(160);
        // Matched terms so far (strong ones; Chinese characters are counted by their fields).
        let mut total = 0usize;
        // Weak terms by the fields they matched in (a mask), reported in the order of the
        // fields' labels.
        let mut chars: Vec<(u8, String)> = Vec::new();
        let labels = |mask: u8, out: &mut String| {
            let mut first = true;
            for f in Field::ALL {
                if mask & (1 << f as u8) != 0 {
                    if !first {
                        out.push_str(", ");
                    }
                    out.push_str(f.label());
                    first = false;
                }
            }
        };
        for m in found {
            // Weak terms are reported only when no strong one matched: once one has, they are
            // not looked at.
            if total > 0 && idx.is_weak(m.id) {
                continue;
            }
            let mask = m.mask & if server { SERVER_FIELD } else { !SERVER_FIELD };
            if mask == 0 {
                continue;
            }
            let surface = parsed[m.intent as usize].surface(m.term as usize);
            if idx.is_weak(m.id) {
                match chars.iter_mut().find(|(m, _)| *m == mask) {
                    Some((_, e)) => {
                        if !e.is_empty() {
                            e.push_str("\", \"");
                        }
                        e.push_str(surface);
                    }
                    None => chars.push((mask, surface.to_string())),
                }
            } else if next_part(&mut total, &mut out) {
                out.push('"');
                out.push_str(surface);
                out.push_str("\" in ");
                labels(mask, &mut out);
            }
        }
        if total == 0 && !chars.is_empty() {
            let mut by_fields: Vec<(String, String)> = chars
                .into_iter()
                .map(|(mask, cs)| {
                    let mut fields = String::new();
                    labels(mask, &mut fields);
                    (fields, cs)
                })
                .collect();
            by_fields.sort_unstable();
            for (fields, cs) in &by_fields {
                if next_part(&mut total, &mut out) {
                    out.push_str("Chinese text \"");
                    out.push_str(cs);
                    out.push_str("\" in ");
                    out.push_str(fields);
                }
            }
        }
        if total > REASON_PARTS {
            out.push_str(&format!("; +{} more terms", total - REASON_PARTS));
        }
        out
    }
}

/// Matched terms a reason names; the rest are counted.
const REASON_PARTS: usize = 4;

/// The server field's bit in a term's field mask ([`Bm25Index::fields`]): a match there is
/// shared by every tool of the server.
const SERVER_FIELD: u8 = 1 << Field::Server as u8;

/// Counts one more part of a reason and says whether it is written (the first
/// [`REASON_PARTS`]), after the separator when it is not the first.
fn next_part(total: &mut usize, out: &mut String) -> bool {
    *total += 1;
    if *total > REASON_PARTS {
        return false;
    }
    if *total > 1 {
        out.push_str("; ");
    }
    true
}

/// Where the first clause's own best tool goes among one query's hits (0-based): after the whole
/// query's two best, which keep their places. Set before measuring; 1 and 3 measured the same.
const CLAUSE_SLOT: usize = 2;

/// The terms of the words `text` writes as names would be (their first letter not lower-case),
/// of its words that start in `part`. A sentence's first word is capitalised whatever it is, so
/// there only a capital inside the word (`GitHub`) says it is a name.
fn capitalised_terms(text: &str, part: Range<usize>) -> Vec<String> {
    let mut out = Vec::new();
    let mut opens = true;
    for word in text.split_whitespace() {
        // Words are slices of `text`: where this one starts.
        let at = word.as_ptr() as usize - text.as_ptr() as usize;
        let mut letters = word.chars().filter(|c| c.is_alphabetic());
        let capital = letters.next().is_some_and(|c| !c.is_lowercase());
        if part.contains(&at) && capital && (!opens || letters.any(char::is_uppercase)) {
            analyze::analyze_into(word, &mut out);
        }
        opens = word.ends_with(['.', '!', '?', ':']);
    }
    out
}

/// How many of a query's first hits a server it names must have a tool among, or its best tool
/// is brought forward: the default limit, what a model sees of a search unless it asks for more.
const NAMED_WINDOW: usize = 5;

/// The weight of a tool deprecated for another tool of its server: its score is halved, so a
/// replacement that matches about as well ranks above it, while a request only it answers still
/// finds it (and its name still finds it first).
const DEPRECATED_WEIGHT: f32 = 0.5;

/// How many words either side of "deprecated" may name the replacement.
const DEPRECATED_NEAR: usize = 8;

/// Each of `docs`' weight (see [`DEPRECATED_WEIGHT`]), `None` when no tool is deprecated.
///
/// A tool is deprecated for another when its description says "deprecated" and, within a few
/// words of it, names another tool of its server, as the filesystem server's `read_file` does ("DEPRECATED: Use
/// read_text_file instead."). Both are needed: a tool that only mentions the word may speak of
/// what it handles ("lists deprecated APIs"), and a server that calls itself deprecated as a
/// whole ("This MCP server is deprecated; migrate to ...") has no better tool of its own to
/// offer. A name that is also a plain word (`search`) counts only beside "instead".
fn deprecated_weights(tools: &[Tool], docs: &[usize]) -> Option<Box<[f32]>> {
    fn words(text: &str) -> Vec<&str> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
            .map(|w| w.trim_matches('-'))
            .filter(|w| !w.is_empty())
            .collect()
    }
    let saying: Vec<(usize, Vec<&str>)> = docs
        .iter()
        .enumerate()
        .filter_map(|(d, &i)| {
            let said = words(&tools[i].description);
            said.iter()
                .any(|w| w.eq_ignore_ascii_case("deprecated"))
                .then_some((d, said))
        })
        .collect();
    if saying.is_empty() {
        return None;
    }
    // Each server's tools by the names its description may give them.
    let mut named: BTreeMap<(Option<&str>, &str), Vec<usize>> = BTreeMap::new();
    for (d, &i) in docs.iter().enumerate() {
        let t = &tools[i];
        for n in [&t.original_name, &t.bare, &t.name] {
            let at = named.entry((t.server.as_deref(), n.as_str())).or_default();
            if !at.contains(&d) {
                at.push(d);
            }
        }
    }
    let mut weights = vec![1.0; docs.len()];
    let mut any = false;
    for (d, said) in saying {
        let server = tools[docs[d]].server.as_deref();
        // The words around each "deprecated": a replacement is named beside the word, not
        // anywhere in a long description that mentions it once.
        let near: Vec<&str> = said
            .iter()
            .enumerate()
            .filter(|(_, w)| w.eq_ignore_ascii_case("deprecated"))
            .flat_map(|(at, _)| {
                &said
                    [at.saturating_sub(DEPRECATED_NEAR)..(at + 1 + DEPRECATED_NEAR).min(said.len())]
            })
            .copied()
            .collect();
        let instead = near.iter().any(|w| w.eq_ignore_ascii_case("instead"));
        let names_another = near.iter().any(|w| {
            let written_as_name =
                w.contains(['_', '-']) || w.chars().skip(1).any(char::is_uppercase);
            (written_as_name || instead)
                && named
                    .get(&(server, *w))
                    .is_some_and(|at| at.iter().any(|&o| o != d))
        });
        if names_another {
            weights[d] = DEPRECATED_WEIGHT;
            any = true;
        }
    }
    any.then(|| weights.into_boxed_slice())
}

/// Terms a clause needs to be ranked on its own: fewer is a fragment ("thanks", "in Paris").
const MIN_CLAUSE_TERMS: usize = 3;

/// How far a clause's best tool must lead the best tool of another server (score ratio) to be
/// brought forward: a clause whose best is one of several near-equals is no clear request of
/// its own, unless they are tools of one server, which the clause then clearly asks for. Set
/// before measuring; 1.0 (no lead) and 2.0 moved R@5 on the five development sets by at most
/// .009.
const CLAUSE_LEAD: f32 = 1.3;

/// Words that open a new request inside one query.
const CLAUSE_WORDS: &[&str] = &[
    "also",
    "additionally",
    "then",
    "furthermore",
    "moreover",
    "besides",
    "afterwards",
    "lastly",
    "finally",
];

/// Trimmed from both ends of a clause.
const CLAUSE_TRIM: &[char] = &[' ', '\t', '\n', '\r', ',', '，', ':', '：', '、'];

/// Chinese words that open a new request.
const CLAUSE_WORDS_ZH: &[&str] = &["然后", "并且", "另外", "此外", "同时", "接着"];

/// The phrases of a query: its clauses (see [`split_clauses`]) split again after a comma, a
/// semicolon or a colon before a space (and their full-width forms), and before "and". Finer than
/// a clause, which these would cut into fragments, they only say which words go with a server
/// the request names: "check Datadog for incidents, and post the report on Slack".
fn split_phrases(query: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for clause in split_clauses(query) {
        // (end of a phrase, start of the next)
        let mut cuts: Vec<(usize, usize)> = Vec::new();
        let mut chars = clause.char_indices().peekable();
        while let Some((i, ch)) = chars.next() {
            let next = i + ch.len_utf8();
            let spaced = chars.peek().is_none_or(|&(_, c)| c.is_whitespace());
            match ch {
                ',' | ';' | ':' if spaced => cuts.push((next, next)),
                '，' | '；' | '：' => cuts.push((next, next)),
                c if c.is_whitespace() => {
                    let rest = &clause[next..];
                    let and = rest.get(..3).is_some_and(|w| w.eq_ignore_ascii_case("and"))
                        && rest[3..].chars().next().is_none_or(char::is_whitespace);
                    if and {
                        cuts.push((i, next));
                    }
                }
                _ => {}
            }
        }
        cuts.push((clause.len(), clause.len()));
        let mut start = 0;
        for (end, next) in cuts {
            let piece = clause[start..end].trim_matches(CLAUSE_TRIM);
            if !piece.is_empty() {
                out.push(piece);
            }
            start = next;
        }
    }
    out
}

/// The clauses of a query: split after sentence ends (`. ? ! ;` before a space or the end, and
/// `。？！；`) and before a word that opens a new request ("also", "then", "然后", "另外", ...).
/// "and" does not split: it joins objects ("flights and hotels") as often as requests.
fn split_clauses(query: &str) -> Vec<&str> {
    let mut cuts: Vec<(usize, usize)> = Vec::new(); // (end of a clause, start of the next)
    let mut word_start: Option<usize> = None;
    let bytes = query.len();
    for (i, ch) in query.char_indices() {
        let next = i + ch.len_utf8();
        let sentence_end = matches!(ch, '。' | '？' | '！' | '；')
            || (matches!(ch, '.' | '?' | '!' | ';')
                && query[next..].chars().next().is_none_or(char::is_whitespace));
        if sentence_end {
            cuts.push((i, next));
        }
        if ch.is_alphanumeric() {
            word_start.get_or_insert(i);
        } else if let Some(start) = word_start.take() {
            let word = &query[start..i];
            if CLAUSE_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word)) {
                cuts.push((start, i));
            }
        }
        if !ch.is_ascii() {
            for zh in CLAUSE_WORDS_ZH {
                if query[i..].starts_with(zh) {
                    cuts.push((i, i + zh.len()));
                }
            }
        }
    }
    if let Some(start) = word_start {
        let word = &query[start..bytes];
        if CLAUSE_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word)) {
            cuts.push((start, bytes));
        }
    }
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for (end, next) in cuts {
        if end >= from {
            let c = query[from..end].trim_matches(CLAUSE_TRIM);
            if !c.is_empty() {
                out.push(c);
            }
            from = next;
        }
    }
    let c = query[from.min(bytes)..].trim_matches(CLAUSE_TRIM);
    if !c.is_empty() {
        out.push(c);
    }
    out
}

/// The largest of a run of scores, or 0 (as `fold(0.0, f32::max)`): compared as the bits of the
/// positive ones, which order as the floats do, so the loop has no float dependency chain and
/// vectorises.
trait FoldMax {
    fn fold_max(self) -> f32;
}

impl<I: Iterator<Item = f32>> FoldMax for I {
    fn fold_max(self) -> f32 {
        f32::from_bits(
            self.map(|s| if s > 0.0 { s.to_bits() } else { 0 })
                .max()
                .unwrap_or(0),
        )
    }
}

/// The best candidate offered, and the best score among the others outside its server group.
///
/// Neither depends on the order of offering: the first is the largest by a total order, and
/// whenever it changes, the one it replaces is the largest offered so far, so it is the new
/// second unless it shares the new first's group (then the second stands as it was).
#[derive(Default)]
struct Best {
    first: Option<(f32, u32)>,
    /// The group of `first` (see [`Best::offer`]).
    group: u64,
    second: f32,
}

impl Best {
    /// Offers `x`, of group `group` (a key unique to the document when it has none). `second`
    /// is the best score outside the first's group: a tool of the first's own server does not
    /// count, as a clause that picks a server is as sure of it as one that picks a tool.
    fn offer(
        &mut self,
        x: (f32, u32),
        group: u64,
        before: impl Fn((f32, u32), (f32, u32)) -> bool,
    ) {
        // Below the second, `x` is no new first (the second never exceeds the first) and no new
        // second: most of a clause's matches end here, on one comparison.
        if self.first.is_some() && x.0 < self.second {
            return;
        }
        match self.first {
            Some(f) if !before(x, f) => {
                if group != self.group {
                    self.second = self.second.max(x.0);
                }
            }
            Some(f) => {
                // The old first is the best so far, so it is the second unless of `x`'s group.
                if group != self.group {
                    self.second = self.second.max(f.0);
                }
                self.first = Some(x);
                self.group = group;
            }
            None => {
                self.first = Some(x);
                self.group = group;
            }
        }
    }
}

/// The clauses of one query brought forward, in order, with their text and parse.
#[derive(Default)]
struct ClauseHits {
    hits: Vec<(f32, u32)>,
    parsed: Vec<(String, ParsedQuery)>,
}

impl ClauseHits {
    fn iter(&self) -> std::slice::Iter<'_, (f32, u32)> {
        self.hits.iter()
    }
}

/// Each word of a clause, with the range of its analysis in [`Words::pairs`] when its request's
/// serves (a word cut by the clause's bounds is analysed again).
type ClauseWords<'q> = Vec<(&'q str, Option<(usize, usize)>)>;

/// How a clause being ranked was parsed.
enum Clause<'q> {
    /// From its request's words (see [`SearchIndex::clause_words`]), which it keeps for its
    /// parse, built only if it is brought forward.
    Words(ClauseWords<'q>),
    /// Alone, in full.
    Alone(Box<ParsedQuery>),
}

/// `q` under the filters of `request` (`server:`, `+term`), which hold for each of its clauses.
fn restrict_like(q: &mut ParsedQuery, request: &ParsedQuery) {
    for s in &request.servers {
        q.restrict_to(s);
    }
    for r in &request.required {
        if !q.required.contains(r) {
            q.required.push(r.clone());
        }
    }
}

/// The first `keep` of the tools of several servers (each server's in order), none of `exact`
/// (sorted), taken from each server in turn: its first tool, the next server's first, ..., then
/// each one's second. Scored 0: a listing is not ranked.
fn in_turn(servers: &[Vec<u32>], exact: &[u32], keep: usize) -> Vec<(f32, u32)> {
    let mut out: Vec<(f32, u32)> = Vec::new();
    let mut left: Vec<_> = servers
        .iter()
        .map(|tools| {
            tools
                .iter()
                .copied()
                .filter(|d| exact.binary_search(d).is_err())
        })
        .collect();
    while out.len() < keep {
        let before = out.len();
        for tools in &mut left {
            if out.len() == keep {
                break;
            }
            if let Some(d) = tools.next() {
                out.push((0.0, d));
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// Longest query text quoted in a hit's reason to name the intent it answers, in characters.
const INTENT_LABEL_CHARS: usize = 40;

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    join_last(items, "and")
}

/// `a`, `a WORD b`, `a, b WORD c`.
fn join_last(items: &[String], word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} {word} {last}", init.join(", ")),
    }
}

/// `queries` without the repeats of an earlier one (the same words once case is ignored and runs
/// of whitespace are one space), first occurrences in order; `None` when none repeats.
pub(crate) fn distinct_queries(queries: &[String]) -> Option<Vec<String>> {
    if queries.len() < 2 {
        return None;
    }
    let key = |q: &str| {
        q.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    let keys: Vec<String> = queries.iter().map(|q| key(q)).collect();
    let first = |i: usize| keys.iter().position(|k| *k == keys[i]) == Some(i);
    if (0..keys.len()).all(first) {
        return None;
    }
    Some(
        (0..keys.len())
            .filter(|&i| first(i))
            .map(|i| queries[i].clone())
            .collect(),
    )
}

/// Merges per-intent rankings (each best first, scores normalised per intent) into one,
/// round-robin: round `r` takes every intent's `r`-th tool, and a tool in several rankings is
/// placed once, in the round of its best rank. Within a round, tools found by more intents come
/// first, then the intents in the order given. Returns (summed score, document, intents it
/// answers) in order; ties break on the name.
fn merge_intents<'a>(
    lists: &[Vec<(f32, u32)>],
    name_of: impl Fn(u32) -> &'a str,
) -> Vec<(f32, u32, Vec<usize>)> {
    // Document -> (best rank, summed score, intents in order).
    let mut found: BTreeMap<u32, (usize, f32, Vec<usize>)> = BTreeMap::new();
    for (i, list) in lists.iter().enumerate() {
        for (rank, &(s, d)) in list.iter().enumerate() {
            let e = found.entry(d).or_insert((rank, 0.0, Vec::new()));
            e.0 = e.0.min(rank);
            e.1 += s;
            e.2.push(i);
        }
    }
    // The first intent that has the document at its best rank.
    let first_at_best = |d: u32, rank: usize, intents: &[usize]| -> usize {
        intents
            .iter()
            .copied()
            .find(|&i| lists[i].get(rank).is_some_and(|x| x.1 == d))
            .unwrap_or(0)
    };
    let mut out: Vec<(usize, usize, usize, f32, u32, Vec<usize>)> = found
        .into_iter()
        .map(|(d, (rank, s, intents))| {
            let first = first_at_best(d, rank, &intents);
            (rank, intents.len(), first, s, d, intents)
        })
        .collect();
    out.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| b.1.cmp(&a.1))
            .then_with(|| a.2.cmp(&b.2))
            .then_with(|| name_of(a.4).cmp(name_of(b.4)))
    });
    out.into_iter()
        .map(|(_, _, _, s, d, intents)| (s, d, intents))
        .collect()
}

/// The configured limit for a fuzzy request.
pub fn effective_limit(requested: Option<usize>, config: &SearchConfig) -> usize {
    requested
        .unwrap_or(config.default_limit)
        .clamp(1, config.max_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-level shortcuts agree with the searches they stand for, on words with and
    /// without punctuation at either end or inside, non-ASCII ones among them.
    #[test]
    fn word_shortcuts_agree_with_their_searches() {
        assert!(
            (0..128u8)
                .map(char::from)
                .filter(char::is_ascii_alphanumeric)
                .all(|c| !name_trim(c))
        );
        let words = [
            "",
            "a",
            "read_file",
            "(read_file)",
            "\"read_file\",",
            "read_file.",
            "file?",
            "。文件",
            "文件，",
            "x(y=1)",
            "a,b",
            "name:read_file",
            "tool=read",
            "a;",
            "é",
            "中(",
            "？?",
            "getWeather",
            "v2",
            "'quoted'",
            "[x]",
            "<y>",
            "{z}",
            "!",
            "ab！",
            "a\u{ff08}b",
        ];
        for w in words {
            assert_eq!(trim_name(w), w.trim_matches(name_trim), "{w:?}");
            assert_eq!(
                has_name_punctuation(w),
                w.contains(NAME_PUNCTUATION),
                "{w:?}"
            );
        }
    }

    /// Three email tools with "text" in their names, a translator, and tools unrelated to both.
    fn catalog() -> Catalog {
        let tools = serde_json::json!([
            {"name": "email_text_send", "description": "Send an email message."},
            {"name": "email_text_draft", "description": "Save an email message draft."},
            {"name": "email_text_reply", "description": "Reply to an email message."},
            {"name": "translate_document", "description": "Translate a document into another language."},
            {"name": "weather_now", "description": "Current weather for a city."},
            {"name": "stock_price", "description": "Latest price of a stock."},
            {"name": "calendar_event", "description": "Create a calendar event."},
            {"name": "file_read", "description": "Read a file from disk."}
        ]);
        Catalog::from_json_str(&tools.to_string(), "test").expect("catalog")
    }

    fn ranked(queries: &[&str], limit: usize) -> Vec<Hit> {
        let c = catalog();
        let all: Vec<usize> = (0..c.tools().len()).collect();
        let index = SearchIndex::build(&c, &all);
        let q: Vec<String> = queries.iter().map(|s| (*s).to_owned()).collect();
        index.rank(&q, limit)
    }

    #[test]
    fn a_query_given_twice_is_one_intent() {
        let view = |hits: Vec<Hit>| -> Vec<String> {
            hits.iter()
                .map(|h| format!("{} {} {}", h.name, h.score, h.reason))
                .collect()
        };
        let once = view(ranked(&["read file"], 5));
        assert_eq!(view(ranked(&["read file", " read  file "], 5)), once);
        assert_eq!(view(ranked(&["read file", "READ File"], 5)), once);
        assert_eq!(
            view(ranked(&["read file", "weather", "read file"], 5)),
            view(ranked(&["read file", "weather"], 5))
        );
        assert_ne!(
            view(ranked(&["read file", "weather"], 5)),
            once,
            "another query is another intent"
        );
    }

    /// The catalog of `tools` (JSON) and an index of all its tools.
    fn indexed(tools: &serde_json::Value) -> (Catalog, SearchIndex) {
        let c = Catalog::from_json_str(&tools.to_string(), "test").expect("catalog");
        let all: Vec<usize> = (0..c.tools().len()).collect();
        let index = SearchIndex::build(&c, &all);
        (c, index)
    }

    /// A server of three email tools, whose words a request's first sentence can pile up.
    /// The names of `index`'s first five hits for `query`.
    fn top_names(index: &SearchIndex, query: &str) -> Vec<String> {
        index
            .rank(&[query.to_owned()], 5)
            .iter()
            .map(|h| h.name.to_string())
            .collect()
    }
    fn mail_server() -> serde_json::Value {
        serde_json::json!({"name": "mail", "description": "Email messages",
         "tools": [{"name": "send", "description": "Send an email message"},
                   {"name": "reply", "description": "Reply to an email message"},
                   {"name": "draft", "description": "Save an email message draft"}]})
    }

    /// Two catalogs of server groups whose vocabularies give the same words different ids.
    fn grouped(first: &str, second: &str) -> Catalog {
        let tools = serde_json::json!({"servers": [
            {"name": "mail", "description": format!("{first} and {second} by email"),
             "tools": [{"name": "send", "description": format!("Send {first} mail")},
                       {"name": "draft", "description": "Save a draft"}]},
            {"name": "weather", "description": format!("Forecasts of {second}"),
             "tools": [{"name": "now", "description": format!("{second} weather now")},
                       {"name": "week", "description": "天气预报 for the week"}]}
        ]});
        Catalog::from_json_str(&tools.to_string(), "test").expect("catalog")
    }

    /// A reset leaves the fused scores as a fresh buffer's, whether it resets the few touched
    /// documents or sweeps the whole, and whatever size the buffer had.
    #[test]
    fn fused_scores_reset_to_fresh_ones() {
        let mut fused = Fused::default();
        for (n, touch) in [(64, 3), (64, 40), (64, 0), (100, 6), (32, 32)] {
            fused.reset(n);
            assert_eq!(fused.scores, vec![0.0; n], "{n} after reset");
            assert_eq!(fused.is_touched, vec![false; n]);
            assert!(fused.touched.is_empty());
            for i in 0..touch {
                let d = (i * 7) % n;
                fused.add(d, 1.0 + i as f32);
                fused.add(d, 0.5);
            }
            let mut touched = fused.touched.clone();
            touched.sort_unstable();
            touched.dedup();
            assert_eq!(touched.len(), fused.touched.len(), "each document once");
        }
    }

    /// Scores a document, leaving the score in the shared buffer, then panics: a retriever with
    /// a bug, which must not spoil the rankings after it on the same thread.
    #[derive(Debug)]
    struct Panicky;

    impl Retriever for Panicky {
        fn name(&self) -> &'static str {
            "panicky"
        }

        fn score(&self, query: &ParsedQuery, _allowed: &[bool], scores: &mut [f32]) {
            if query.text.contains("boom") {
                scores.iter_mut().for_each(|s| *s = 1e6);
                panic!("a retriever's bug");
            }
        }
    }

    /// A rank that panics midway leaves nothing behind: the thread's next rankings are those of
    /// a thread that never saw it.
    #[test]
    fn a_panicked_rank_leaves_the_next_one_clean() {
        let c = catalog();
        let all: Vec<usize> = (0..c.tools().len()).collect();
        let mut index = SearchIndex::build(&c, &all);
        index.add_retriever(Box::new(Panicky), 0.5);
        let queries = ["weather in a city", "read a file", "send an email message"];
        let names = |hits: Vec<Hit>| -> Vec<(String, u64)> {
            hits.into_iter()
                .map(|h| (h.name.to_string(), h.score.to_bits()))
                .collect()
        };
        let clean: Vec<_> = queries
            .iter()
            .map(|q| names(index.rank(&[(*q).to_owned()], 5)))
            .collect();
        assert!(clean.iter().all(|hits| !hits.is_empty()));
        let boom = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            index.rank(&["boom: email the weather".to_owned()], 5)
        }));
        assert!(boom.is_err(), "the retriever panicked");
        for (q, expected) in queries.iter().zip(&clean) {
            assert_eq!(&names(index.rank(&[(*q).to_owned()], 5)), expected, "{q}");
        }
    }

    /// A glued name is found by the words it is glued from, in the name field, and the reason
    /// says so; the same request found it by no word of its name before.
    #[test]
    fn a_glued_name_is_found_by_its_words() {
        let tools = serde_json::json!({"servers": [
            {"name": "miku", "description": "Pictures",
             "tools": [{"name": "getrandomimage", "description": ""},
                       {"name": "getimage", "description": "By its file id"}]},
            {"name": "gallery", "description": "A random image gallery: get an image, get a random one",
             "tools": [{"name": "list_albums", "description": "Albums of the gallery"}]}
        ]});
        let (c, index) = indexed(&tools);
        let d = index
            .catalog_indices()
            .iter()
            .position(|&i| c.tools()[i].bare == "getrandomimage")
            .expect("the tool");
        assert_eq!(index.name_pieces(d), "get random image");
        let hits = index.rank(&["show me a random picture".to_owned()], 3);
        assert_eq!(&*hits[0].name, "mcp__miku__getrandomimage", "{hits:?}");
        assert!(
            hits[0].reason.contains("\"random\" in name"),
            "{}",
            hits[0].reason
        );
    }

    /// A tool deprecated for another tool of its server ranks below that tool where both match
    /// alike (the filesystem server's own descriptions); its name still finds it first.
    /// Mentioning the word, or a whole server calling itself deprecated, demotes nothing.
    #[test]
    fn a_tool_deprecated_for_another_of_its_server_ranks_below_it() {
        let tools = serde_json::json!({"servers": [
            {"name": "filesystem", "description": "Files",
             "tools": [
                {"name": "read_file",
                 "description": "Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.",
                 "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "read_text_file",
                 "description": "Read the complete contents of a file from the file system as text. Handles various text encodings and provides detailed error messages if the file cannot be read. Use this tool when you need to examine the contents of a single file. Operates on the file as text regardless of extension.",
                 "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "list_directory", "description": "List the entries of a directory"}]},
            {"name": "apis", "description": "API registry",
             "tools": [{"name": "list_apis", "description": "List deprecated APIs of a project"},
                       {"name": "list_versions", "description": "List the versions of an API"}]},
            {"name": "legacy", "description": "Legacy tickets",
             "tools": [{"name": "open_ticket",
                        "description": "Open a ticket. NOTE: this server is deprecated, migrate to the hosted one."}]}
        ]});
        let (_, index) = indexed(&tools);
        let names = |q: &str| top_names(&index, q);
        let read = names("read file");
        let at = |n: &str| read.iter().position(|x| x == n);
        assert!(
            at("mcp__filesystem__read_text_file") < at("mcp__filesystem__read_file")
                && at("mcp__filesystem__read_file").is_some(),
            "{read:?}"
        );
        assert_eq!(names("read_file")[0], "mcp__filesystem__read_file");
        // Only the filesystem tool that names its replacement is deprecated.
        let weights = index.deprecated.as_deref().expect("one tool is deprecated");
        let demoted: Vec<&str> = (0..index.len() as u32)
            .filter(|&d| weights[d as usize] < 1.0)
            .map(|d| &*index.labels[d as usize].name)
            .collect();
        assert_eq!(demoted, ["mcp__filesystem__read_file"]);
    }

    /// A server that stands out (here by one tool's description) lifts its tools that match,
    /// but brings in none without evidence of its own; under
    /// a filter to that server alone (whose tools all share its group and its description)
    /// nothing is added, and a match in the server's description alone is none.
    #[test]
    fn a_group_brings_in_no_tool_without_evidence_of_its_own() {
        let mut rail: Vec<serde_json::Value> = (0..12)
            .rev()
            .map(|i| {
                let name = format!("{}{i:02}", if i % 2 == 0 { "leg" } else { "step" });
                serde_json::json!({"name": name, "description": format!("Stage {i}")})
            })
            .collect();
        rail.push(serde_json::json!({"name": "book_seat", "description": "Book a train seat"}));
        rail.push(serde_json::json!({"name": "cancel_seat", "description": "Cancel a booking"}));
        // Enough other tools that the rail server's description is a rare word.
        let weather: Vec<serde_json::Value> = (0..40)
            .map(
                |i| serde_json::json!({"name": format!("now{i:02}"), "description": "Weather now"}),
            )
            .collect();
        let tools = serde_json::json!({"servers": [
            {"name": "rail", "description": "Timetables", "tools": rail},
            {"name": "weather", "description": "Forecasts", "tools": weather}
        ]});
        let (c, index) = indexed(&tools);
        let names = |q: &str| {
            index
                .rank(&[q.to_owned()], c.tools().len())
                .into_iter()
                .map(|h| h.tool.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("train seat"), ["book_seat", "cancel_seat"]);
        // With `+step` the step tools have a word of their own, the filter's.
        assert_eq!(
            names("train seat +step"),
            ["step01", "step03", "step05", "step07", "step09", "step11"]
        );
        assert_eq!(names("server:rail train"), ["book_seat"]);
        // The server's description is every one of its tools': under its filter, matching it
        // alone is no evidence.
        let found = names("server:rail booking timetables");
        assert!(
            !found.is_empty() && found.iter().all(|t| t.ends_with("_seat")),
            "{found:?}"
        );
        // Under one server's filter the scores are the tools' own: the group adds nothing.
        let filtered = index.rank(&["server:rail train seat".to_owned()], 5);
        let plain = SearchIndex::build_with(
            &c,
            &(0..c.tools().len()).collect::<Vec<_>>(),
            RankParams {
                group_weight: 0.0,
                ..RankParams::default()
            },
        )
        .rank(&["server:rail train seat".to_owned()], 5);
        assert_eq!(filtered, plain);
    }

    /// One memo serving several indexes in turn (as a thread's memo does) gives each the parse a
    /// fresh memo gives, lexical and group ids included, however the uses interleave.
    #[test]
    fn a_memo_shared_by_indexes_parses_as_a_fresh_one() {
        let (a, b) = (grouped("invoices", "storms"), grouped("storms", "invoices"));
        let all = |c: &Catalog| (0..c.tools().len()).collect::<Vec<usize>>();
        let indexes = [
            SearchIndex::build(&a, &all(&a)),
            SearchIndex::build(&b, &all(&b)),
        ];
        let copy = indexes[0].clone_lexical();
        let queries = [
            "send the invoices. Then check storms now",
            "storms and invoices 天气预报 week",
            "send mail",
        ];
        let mut memo = analyze::Memo::default();
        for round in 0..3 {
            for (i, index) in indexes.iter().chain([&copy]).enumerate() {
                for q in queries {
                    let fresh = index.parse(q);
                    assert!(fresh.ids.iter().any(Option::is_some), "{q}");
                    assert!(fresh.group_ids.iter().any(Option::is_some), "{q}");
                    assert_eq!(
                        index.parse_memo(q, &mut memo),
                        fresh,
                        "round {round}, index {i}: {q}"
                    );
                }
            }
            // Round 1 parses with everything round 0 left in the memo; round 2 starts over.
            if round == 1 {
                memo.clear();
            }
        }
        // The two catalogs give "invoices" different group ids, so a memo that kept the first
        // index's lookups would be caught above.
        let term = |index: &SearchIndex| index.parse("invoices").group_ids;
        assert_ne!(term(&indexes[0]), term(&indexes[1]));
    }

    /// A clause parsed from its request's words is the clause parsed alone, on generated
    /// requests mixing plain words, words cut by a clause's bounds, clause words, identifiers,
    /// exact names, operators and Chinese; both ways are taken thousands of times.
    #[test]
    fn a_clause_parsed_from_its_request_is_the_clause_parsed_alone() {
        let c = grouped("invoices", "storms");
        let index = SearchIndex::build(&c, &(0..c.tools().len()).collect::<Vec<_>>());
        let pool = [
            "send",
            "the",
            "invoices",
            "storms",
            "weather",
            "week",
            "mail",
            "now",
            "draft",
            "report",
            "and",
            "invoices.",
            "storms?",
            "now!",
            "week;",
            "mail,",
            "(draft)",
            "\"send\"",
            "now:",
            "Then",
            "also",
            "Also,",
            "finally",
            "mcp__mail__send",
            "mcp__mail__send.",
            "send_mail",
            "v2.",
            "x-ray",
            "getWeather",
            "mcp__weather__now,",
            "+storms",
            "+4915112345678",
            "server:mail",
            "server:nothing",
            "mcp__mail__",
            "mcp__nobody__x",
            "天气预报",
            "然后",
            "发送邮件。",
            "并且查看天气",
            "天气预报。然后发送",
            "week。",
            "so-called",
            "e-mail/post.",
            "naïve",
            "ＡＢＣ",
            "…",
            ".",
            "send.",
        ];
        let mut next = crate::testing::xorshift(0x0c1a_05e5);
        let mut memo = analyze::Memo::default();
        let mut words = Words::default();
        let (mut reused, mut alone) = (0, 0);
        for _ in 0..3_000 {
            let n = 1 + (next() % 16) as usize;
            let mut request = String::new();
            for i in 0..n {
                if i > 0 {
                    request.push_str(if next().is_multiple_of(8) { "\n " } else { " " });
                }
                request.push_str(pool[(next() % pool.len() as u64) as usize]);
            }
            let whole = index.parse_words(&request, &mut memo, &mut words);
            assert_eq!(whole, index.parse_memo(&request, &mut memo), "{request:?}");
            for clause in split_clauses(&request) {
                match index.clause_parse(&request, clause, &words, &mut memo) {
                    Some(q) => {
                        reused += 1;
                        assert_eq!(
                            q,
                            index.parse_memo(clause, &mut memo),
                            "{clause:?} of {request:?}"
                        );
                    }
                    None => alone += 1,
                }
            }
        }
        assert!(
            reused > 2_000 && alone > 2_000,
            "{reused} reused, {alone} parsed alone"
        );
        // A string that is not a slice of the request is parsed alone. Both are owned, so they
        // cannot share bytes as the compiler may lay out two literals.
        let (request, elsewhere) = (String::from("send the mail"), String::from("send the"));
        assert!(
            index
                .clause_parse(&request, &elsewhere, &words, &mut memo)
                .is_none()
        );
    }

    /// A clause's best and the best score outside its group are the same whatever the order
    /// in which candidates are offered, on offers with many ties and shared groups.
    #[test]
    fn best_does_not_depend_on_the_order_of_offering() {
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        let before = |a: (f32, u32), b: (f32, u32)| a.0 > b.0 || (a.0 == b.0 && a.1 < b.1);
        for round in 0..500 {
            // Few scores and few groups, so that ties and shared groups are common.
            let n = 1 + (next() % 12) as usize;
            let mut offers: Vec<((f32, u32), u64)> = (0..n as u32)
                .map(|d| (((next() % 5) as f32, d), next() % 4))
                .collect();
            let first = offers
                .iter()
                .copied()
                .reduce(|a, b| if before(b.0, a.0) { b } else { a })
                .expect("at least one offer");
            let second = offers
                .iter()
                .filter(|o| o.1 != first.1)
                .map(|o| o.0.0)
                .fold(0f32, f32::max);
            for _ in 0..4 {
                let mut best = Best::default();
                for &(x, group) in &offers {
                    best.offer(x, group, before);
                }
                assert_eq!(best.first, Some(first.0), "round {round}: {offers:?}");
                assert_eq!(best.second, second, "round {round}: {offers:?}");
                for i in (1..n).rev() {
                    offers.swap(i, (next() % (i as u64 + 1)) as usize);
                }
            }
        }
    }

    /// The best `keep` are those of a full sort by score (descending) then name, above the
    /// relative floor: on scores with many ties, zeros and negatives, for every `keep`, whatever
    /// the order of the candidates.
    #[test]
    fn top_is_the_sorted_order_cut_at_keep() {
        let tools: Vec<serde_json::Value> = (0..300)
            .map(|i| serde_json::json!({"name": format!("tool_{:03}", (i * 7919) % 300), "description": "x"}))
            .collect();
        let c = Catalog::from_json_str(&serde_json::Value::Array(tools).to_string(), "test")
            .expect("catalog");
        let all: Vec<usize> = (0..c.tools().len()).collect();
        let index = SearchIndex::build(&c, &all);
        let name = |d: u32| c.tools()[index.docs[d as usize]].name.clone();
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..200 {
            let levels = [3, 50, 100_000][round % 3];
            let scores: Vec<f32> = (0..index.len())
                .map(|_| (next() % levels) as f32 / 4.0 - 0.5)
                .collect();
            let best = scores.iter().copied().fold(0f32, f32::max);
            let floor = best * index.params.min_relative_score;
            let mut expected: Vec<(f32, u32)> = (0..index.len() as u32)
                .filter(|&d| scores[d as usize] > 0.0 && scores[d as usize] >= floor)
                .map(|d| (scores[d as usize], d))
                .collect();
            expected.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| name(a.1).cmp(&name(b.1))));
            // Candidates in any order, zeros and negatives among them, or only the positives.
            let n = index.len() as u32;
            let scrambled: Vec<u32> = (0..n).map(|i| (i * 131 + round as u32) % n).collect();
            let positive: Vec<u32> = scrambled
                .iter()
                .copied()
                .filter(|&d| scores[d as usize] > 0.0)
                .rev()
                .collect();
            let candidates = if round % 2 == 0 {
                &scrambled
            } else {
                &positive
            };
            for keep in [0, 1, 2, 10, 100, 299, 300, 400] {
                let (got, top) = index.top(&scores, candidates, keep);
                assert_eq!(top, best, "round {round}");
                let want: Vec<(f32, u32)> = expected.iter().copied().take(keep).collect();
                assert_eq!(got, want, "round {round}, keep {keep}");
            }
        }
    }

    #[test]
    fn a_strong_query_does_not_drown_another() {
        // The email tools match "send email message" and, through "text" in their names, the
        // second query as well: summed, they would fill the top three. Ranked per intent, the
        // second query's best (the translator) is second, after the tool both found.
        let hits = ranked(&["send email message", "translate text"], 3);
        let names: Vec<&str> = hits.iter().map(|h| &*h.name).collect();
        assert_eq!(
            names[..2],
            ["email_text_send", "translate_document"],
            "{names:?}"
        );
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn each_reason_names_the_intents_it_answers() {
        let hits = ranked(&["send email message", "translate text"], 5);
        let reason = |name: &str| {
            hits.iter()
                .find(|h| &*h.name == name)
                .map(|h| h.reason.clone())
                .expect(name)
        };
        assert!(
            reason("translate_document").starts_with("for \"translate text\": "),
            "{}",
            reason("translate_document")
        );
        // Found by both: each is named with its own terms.
        let both = reason("email_text_send");
        assert!(both.starts_with("for \"send email message\": "), "{both}");
        assert!(
            both.ends_with("; for \"translate text\": \"text\" in name"),
            "{both}"
        );
        // A single query's reasons carry no intent label.
        let single = ranked(&["translate text"], 3);
        assert!(
            !single[0].reason.starts_with("for "),
            "{}",
            single[0].reason
        );
    }

    /// A canonical name of a known server that names no visible tool is noted; one that names a
    /// tool (as written, or with case and separators ignored), or a server alone, is not.
    #[test]
    fn a_canonical_name_of_no_tool_is_noted() {
        let tools = serde_json::json!({"servers": [
            {"name": "git", "description": "Git repository",
             "tools": [{"name": "git_log", "description": "Show the commit log"},
                       {"name": "git_commit", "description": "Record a commit"},
                       {"name": "git_reset", "description": "Unstage all changes"}]},
            {"name": "time", "description": "Clocks",
             "tools": [{"name": "now", "description": "The current time"}]}
        ]});
        let c = Catalog::from_json_str(&tools.to_string(), "test").expect("catalog");
        // git_reset is hidden: it is not in the index.
        let visible: Vec<usize> = (0..c.tools().len())
            .filter(|&i| c.tools()[i].name != "mcp__git__git_reset")
            .collect();
        let index = SearchIndex::build(&c, &visible);
        let notes = |q: &str| index.notes(&[q.to_owned()]);
        let unnamed = |name: &str| {
            format!("no tool is named \"{name}\"; the tools below are what its words find.")
        };
        assert_eq!(
            notes("mcp__git__git_stash"),
            [unnamed("mcp__git__git_stash")]
        );
        assert_eq!(
            notes("use mcp__git__git_reset. to undo the last commit"),
            [unnamed("mcp__git__git_reset")]
        );
        assert_eq!(
            notes("mcp__git__git_stash(all) mcp__git__git_stash"),
            [unnamed("mcp__git__git_stash")]
        );
        for named in [
            "mcp__git__git_log",
            "show mcp__git__GIT-LOG please",
            "mcp__git__ log",
            "server:git stash",
        ] {
            assert!(notes(named).is_empty(), "{named}: {:?}", notes(named));
        }
        // The query still ranks the server's tools by its words.
        let hits = index.rank(
            &["use mcp__git__git_reset to undo the last commit".into()],
            5,
        );
        assert_eq!(&*hits[0].name, "mcp__git__git_commit");
    }

    /// Each intent is credited with its own matches: an intent that found a tool by other words
    /// (or by meaning) does not share the reason of one whose words the tool has.
    #[test]
    fn a_reason_credits_each_intent_with_its_own_matches() {
        let hits = ranked(&["send email", "email"], 5);
        let hit = hits
            .iter()
            .find(|h| &*h.name == "email_text_send")
            .expect("found");
        assert_eq!(
            hit.reason,
            "for \"send email\": \"send\" in name, description; \"email\" in name, description; \
             for \"email\": \"email\" in name, description",
        );
        let draft = hits
            .iter()
            .find(|h| &*h.name == "email_text_draft")
            .expect("found");
        assert_eq!(
            draft.reason,
            "for \"send email\" and \"email\": \"email\" in name, description"
        );
    }

    #[test]
    fn a_clause_with_a_request_of_its_own_gets_a_place() {
        // The first sentence's many email words bury the translator in the whole query's
        // ranking; the second sentence, ranked on its own, clearly asks for it.
        let hits = ranked(
            &[
                "Send an email message, reply to the email message and save an email draft. Then translate the document into Spanish",
            ],
            5,
        );
        let names: Vec<&str> = hits.iter().map(|h| &*h.name).collect();
        assert_eq!(names[CLAUSE_SLOT], "translate_document", "{names:?}");
        assert!(
            hits[CLAUSE_SLOT]
                .reason
                .starts_with("for \"translate the document into Spanish\": \"translate\" in name"),
            "{}",
            hits[CLAUSE_SLOT].reason
        );
        // A query of one clause is ranked as a whole.
        let one = ranked(&["send an email message and translate the document"], 5);
        assert!(one.iter().all(|h| !h.reason.starts_with("for ")), "{one:?}");
    }

    #[test]
    fn a_clause_that_picks_a_server_gets_a_place() {
        // The second sentence names a server, not one of its tools: its tools tie, and the
        // clause is as sure of where to go as one that names a tool.
        let tools = serde_json::json!({"servers": [
            mail_server(),
            {"name": "judge_extra", "description": "Judge Extra compiler sandbox",
             "tools": [{"name": "about", "description": "Get general information"},
                       {"name": "statuses", "description": "Get statuses"}]},
            {"name": "notes", "description": "Notebook",
             "tools": [{"name": "write", "description": "Write a note"}]}
        ]});
        let (_, index) = indexed(&tools);
        let query = "Send an email message, reply to the email message and save an email draft. \
                     Then I want the Judge Extra compiler sandbox.";
        let hits = index.rank(&[query.to_owned()], 5);
        let names: Vec<&str> = hits.iter().map(|h| &*h.name).collect();
        assert_eq!(names[CLAUSE_SLOT], "mcp__judge_extra__about", "{names:?}");
        assert!(
            hits[CLAUSE_SLOT]
                .reason
                .starts_with("for \"I want the Judge Extra"),
            "{}",
            hits[CLAUSE_SLOT].reason
        );
    }

    /// Servers of many calendar tools, a chat server, and a server called by a word many tools'
    /// texts use.
    fn named_servers() -> serde_json::Value {
        let calendar: Vec<serde_json::Value> = [
            ("list-events", "List the events of a calendar"),
            ("list-calendars", "List every calendar"),
            ("create-event", "Create a calendar event"),
            ("update-event", "Update a calendar event"),
            ("delete-event", "Delete a calendar event"),
            ("get-freebusy", "Free and busy times of calendar events"),
        ]
        .iter()
        .map(|(n, d)| serde_json::json!({"name": n, "description": d}))
        .collect();
        serde_json::json!({"servers": [
            {"name": "calendar", "description": "Calendar events", "tools": calendar},
            {"name": "slack", "description": "Workspace chat",
             "tools": [{"name": "post_message", "description": "Post a message to a channel"},
                       {"name": "add_reaction", "description": "Add an emoji reaction"}]},
            {"name": "time", "description": "Clocks",
             "tools": [{"name": "now", "description": "The current time in a zone"}]},
            {"name": "notes", "description": "Notebook",
             "tools": [{"name": "add", "description": "Add a note with the time"},
                       {"name": "find", "description": "Find notes by time"}]},
            {"name": "x", "description": "Posts on X",
             "tools": [{"name": "post", "description": "Post on x"}]},
            {"name": "飞书", "description": "飞书 消息",
             "tools": [{"name": "send", "description": "发送飞书消息"}]}
        ]})
    }

    #[test]
    fn a_server_is_nameable_when_its_name_points_at_it() {
        let (c, index) = indexed(&named_servers());
        let groups = index.groups.as_ref().expect("groups");
        let mut nameable: Vec<&str> = groups
            .nameable
            .values()
            .flatten()
            .map(|&(_, g)| {
                c.servers()[groups.servers[g as usize]]
                    .original_name
                    .as_str()
            })
            .collect();
        nameable.sort_unstable();
        nameable.dedup();
        // "time" is in more of the notes' tools than of its own server's; "x" is too short to
        // be told from a word; a Chinese name counts by its words.
        assert_eq!(nameable, ["calendar", "notes", "slack", "飞书"]);
    }

    #[test]
    fn a_server_the_request_names_is_among_the_first_hits() {
        let (_, index) = indexed(&named_servers());
        let query = "List the calendar events of tomorrow and the free and busy times, and put \
                     that calendar list for the standup channel on Slack";
        let hits = index.rank(&[query.to_owned()], 5);
        let names: Vec<&str> = hits.iter().map(|h| &*h.name).collect();
        let slot = names
            .iter()
            .position(|n| n.starts_with("mcp__slack__"))
            .unwrap_or_else(|| panic!("no Slack tool: {names:?}"));
        assert!(
            slot >= CLAUSE_SLOT,
            "the whole query's best keep their places: {names:?}"
        );
        assert_eq!(names[slot], "mcp__slack__post_message", "{names:?}");
        assert!(
            hits[slot]
                .reason
                .starts_with("the request names server slack: "),
            "{}",
            hits[slot].reason
        );
        // Case tells a name from a word only in a request that uses capitals.
        let slack = |query: &str| {
            index
                .rank(&[query.to_owned()], 5)
                .iter()
                .any(|h| h.name.starts_with("mcp__slack__"))
        };
        assert!(!slack(
            "List the calendar events of tomorrow and the free and busy times, and put that \
             calendar list for the standup with some slack in the times"
        ));
        assert!(slack(
            "list the calendar events of tomorrow and the free and busy times, and put that \
             calendar list for the standup channel on slack"
        ));
        // A sentence's first word is capitalised whatever it is.
        assert!(!slack(
            "List the calendar events of tomorrow and the free and busy times, and the calendar \
             list. Slack in the times is fine"
        ));
        // Named by a word many tools use, a server is not brought forward.
        let query = "List the calendar events of tomorrow and the free and busy times at the time \
                     of each, and the calendar list";
        let hits = index.rank(&[query.to_owned()], 5);
        assert!(
            hits.iter().all(|h| !h.name.starts_with("mcp__time__")),
            "{hits:?}"
        );
    }

    #[test]
    fn a_clause_keeps_the_filters_of_its_query() {
        // "+email" holds for the second sentence too: the translator has no "email" in its name.
        let hits = ranked(
            &[
                "+email send a message, reply to the message and save a draft. Then translate the document into Spanish",
            ],
            5,
        );
        assert!(
            hits.iter().all(|h| h.name.starts_with("email_")),
            "{hits:?}"
        );
    }

    #[test]
    fn a_query_of_servers_alone_lists_their_tools_by_name() {
        let tools = serde_json::json!({"servers": [
            mail_server(),
            {"name": "notes", "description": "Notebook",
             "tools": [{"name": "write", "description": "Write a note"},
                       {"name": "read", "description": "Read a note"}]}
        ]});
        let (_, index) = indexed(&tools);
        let names = |q: &str, k: usize| -> Vec<String> {
            index
                .rank(&[q.to_owned()], k)
                .iter()
                .map(|h| h.name.to_string())
                .collect()
        };
        assert_eq!(
            names("server:notes", 5),
            ["mcp__notes__read", "mcp__notes__write"]
        );
        assert_eq!(names("mcp__notes__", 1), ["mcp__notes__read"]);
        let hits = index.rank(&["server:notes".to_owned()], 5);
        assert!(hits[0].reason.contains("server notes"), "{hits:?}");
        // With words, the server filters a ranking as before.
        assert_eq!(names("server:notes write", 1), ["mcp__notes__write"]);
        assert!(names("server:nothing", 5).is_empty());
    }

    #[test]
    fn a_clause_with_a_filter_of_its_own_is_ranked_under_it() {
        // "server:notes；谢谢" names no server, so the request is not filtered; its clause ends
        // before the full-width semicolon, so `server:notes` filters the clause to the notes
        // server.
        let tools = serde_json::json!({"servers": [
            mail_server(),
            {"name": "translator", "description": "Translation",
             "tools": [{"name": "translate_document",
                        "description": "Translate a document into another language"}]},
            {"name": "notes", "description": "Notebook",
             "tools": [{"name": "write", "description": "Write a note in any language"}]}
        ]});
        let (_, index) = indexed(&tools);
        let ask = |request: &str| {
            let hits = index.rank(&[request.to_owned()], 5);
            assert!(hits[CLAUSE_SLOT].reason.starts_with("for \""), "{hits:?}");
            hits[CLAUSE_SLOT].name.to_string()
        };
        let request = "Send an email message, reply to the email message and save an email draft. \
                       Then translate the document into another language";
        assert_eq!(ask(request), "mcp__translator__translate_document");
        assert_eq!(
            ask(&format!("{request} server:notes；谢谢")),
            "mcp__notes__write"
        );
        // Punctuation that ends the value is prose: "server:notes." and "server:notes;" name the
        // notes server, and filter the whole request.
        for end in [".", ";"] {
            let hits = index.rank(&[format!("{request} server:notes{end}")], 5);
            assert_eq!(
                hits.iter().map(|h| &*h.name).collect::<Vec<_>>(),
                ["mcp__notes__write"],
                "{end}"
            );
        }
    }

    #[test]
    fn clauses_split_at_sentence_ends_and_request_words_only() {
        assert_eq!(
            split_clauses("Find flights to Tokyo. Also, convert 300 USD to yen; then book a hotel"),
            [
                "Find flights to Tokyo",
                "convert 300 USD to yen",
                "book a hotel"
            ]
        );
        assert_eq!(
            split_clauses("pay 2.5 dollars for apples and pears"),
            ["pay 2.5 dollars for apples and pears"]
        );
        assert_eq!(
            split_clauses("查询天气。然后预订酒店"),
            ["查询天气", "预订酒店"]
        );
        assert_eq!(split_clauses("I also"), ["I"]);
    }

    #[test]
    fn phrases_split_clauses_at_commas_colons_and_and() {
        assert_eq!(
            split_phrases(
                "Weekly: check Sentry for new issues, look at Datadog and post it to #eng on \
                 Slack. Also book a room at 9:30"
            ),
            [
                "Weekly",
                "check Sentry for new issues",
                "look at Datadog",
                "and post it to #eng on Slack",
                "book a room at 9:30"
            ]
        );
        assert_eq!(
            split_phrases("查询天气，然后预订酒店"),
            ["查询天气", "预订酒店"]
        );
        assert_eq!(split_phrases("brand,new candy"), ["brand,new candy"]);
    }

    /// The tool a named server gets is its best for the phrase that names it: the rest of the
    /// request's words ("list", "events", "busy times") favour Slack's channel listing, while
    /// the phrase that names Slack asks to post.
    #[test]
    fn a_named_servers_tool_is_its_best_for_the_phrase_that_names_it() {
        let mut catalog = named_servers();
        catalog["servers"][1]["tools"]
            .as_array_mut()
            .expect("tools")
            .push(serde_json::json!({"name": "list_channels",
                "description": "List the channels with their events and busy times"}));
        let (_, index) = indexed(&catalog);
        let query = "List the calendar events of tomorrow and the free and busy times, and \
                     post the summary to the standup channel on Slack";
        index.rank(&[query.to_owned()], 5);
        let name = |d: u32| &*index.labels[d as usize].name;
        RANK_SCRATCH.with_borrow_mut(|scratch| {
            let groups = index.groups.as_ref().expect("groups");
            let slack: Vec<u32> = (0..index.docs.len() as u32)
                .filter(|&d| name(d).starts_with("mcp__slack__"))
                .collect();
            let g = groups.of_doc[slack[0] as usize];
            let by_whole = slack
                .iter()
                .copied()
                .max_by(|&a, &b| {
                    scratch.query.scores[a as usize].total_cmp(&scratch.query.scores[b as usize])
                })
                .expect("a Slack tool");
            assert_eq!(name(by_whole), "mcp__slack__list_channels");
            let (d, phrase) = index
                .named_in_clause(g, query, &[], 0.0, scratch)
                .expect("a tool for the phrase");
            assert_eq!(
                phrase.text,
                "and post the summary to the standup channel on Slack"
            );
            assert_eq!(name(d), "mcp__slack__post_message");
            // A request of one phrase has no phrase of its own to go by.
            assert!(
                index
                    .named_in_clause(g, "post on Slack", &[], 0.0, scratch)
                    .is_none()
            );
        });
    }

    /// In a request that uses capitals, a phrase names a server only where it writes the name
    /// as one: "we had a notion to find it" does not name Notion, "and save it in Notion" does,
    /// wherever each stands.
    #[test]
    fn a_phrase_names_a_server_as_the_request_would() {
        let calendar: Vec<serde_json::Value> = (0..8)
            .map(|i| {
                serde_json::json!({"name": format!("view{i}"),
                    "description": format!("Calendar events, free and busy times, view {i}")})
            })
            .collect();
        let (_, index) = indexed(&serde_json::json!({"servers": [
            {"name": "calendar", "description": "Calendar", "tools": calendar},
            {"name": "notion", "description": "Workspace pages",
             "tools": [{"name": "search", "description": "Find pages"},
                       {"name": "create_page", "description": "Save text to a new page"},
                       {"name": "get_page", "description": "One page"}]}
        ]}));
        let name = |d: u32| &*index.labels[d as usize].name;
        for query in [
            "List the calendar events of tomorrow with the free and busy times, we had a notion \
             to find it, and save it in Notion",
            "List the calendar events of tomorrow with the free and busy times, and save it in \
             Notion, we had a notion to find it",
        ] {
            index.rank(&[query.to_owned()], 5);
            let g = index.groups.as_ref().expect("groups").of_doc[(0..index.docs.len() as u32)
                .find(|&d| name(d).starts_with("mcp__notion__"))
                .expect("a notion tool")
                as usize];
            let found = RANK_SCRATCH.with_borrow_mut(|scratch| {
                index
                    .named_in_clause(g, query, &[], 0.0, scratch)
                    .map(|(d, q)| (name(d).to_owned(), q.text))
            });
            assert_eq!(
                found,
                Some((
                    "mcp__notion__create_page".to_owned(),
                    "and save it in Notion".to_owned()
                )),
                "{query}"
            );
        }
    }

    #[test]
    fn merging_is_round_robin_with_shared_tools_leading_their_round() {
        let names = ["a", "b", "c", "d", "e"];
        let name_of = |d: u32| names[d as usize];
        // Intent 0: a, b, c. Intent 1: d, c, e. "c" is in both, best at rank 1.
        let lists = vec![
            vec![(1.0, 0), (0.9, 1), (0.8, 2)],
            vec![(1.0, 3), (0.7, 2), (0.5, 4)],
        ];
        let merged: Vec<(u32, Vec<usize>)> = merge_intents(&lists, name_of)
            .into_iter()
            .map(|(_, d, i)| (d, i))
            .collect();
        assert_eq!(
            merged,
            vec![
                (0, vec![0]),
                (3, vec![1]),
                (2, vec![0, 1]),
                (1, vec![0]),
                (4, vec![1]),
            ]
        );
        assert_eq!(
            join_and(&["x".into(), "y".into(), "z".into()]),
            "x, y and z"
        );
    }
    /// A reason names at most four matched terms with their fields, counts the rest, and names
    /// Chinese characters only when no word matched.
    #[test]
    fn reasons_name_four_terms_and_count_the_rest() {
        let tools = serde_json::json!([
            {"name": "alpha_beta", "description": "gamma delta epsilon zeta"},
            {"name": "other", "description": "unrelated words"},
            {"name": "weather_cn", "description": "天气预报空气质量 forecast"}
        ]);
        let (_, index) = indexed(&tools);
        let hits = index.rank(&["alpha beta gamma delta epsilon zeta".to_owned()], 1);
        assert_eq!(
            hits[0].reason,
            "\"alpha\" in name; \"beta\" in name; \"gamma\" in description; \"delta\" in description; +2 more terms"
        );
        // Two character pairs that are no word of either text.
        let hits = index.rank(&["报空 气预".to_owned()], 1);
        assert_eq!(&*hits[0].name, "weather_cn");
        assert_eq!(
            hits[0].reason,
            "Chinese text \"报空\", \"气预\" in description"
        );
        // With a word matched too, the characters are not named, whichever came first.
        for q in ["报空 forecast", "forecast 报空"] {
            let hits = index.rank(&[q.to_owned()], 1);
            assert_eq!(&*hits[0].name, "weather_cn", "{q}");
            assert_eq!(hits[0].reason, "\"forecast\" in description", "{q}");
        }
    }

    /// A tool's name quoted or followed by punctuation inside a request is still its name; a
    /// character that is not trimmed keeps the word from being one.
    #[test]
    fn a_name_in_quotes_or_punctuation_is_found_exactly() {
        let marks = [
            ("\"", "\""),
            ("'", "'"),
            ("`", "`"),
            ("(", ")"),
            ("[", "]"),
            ("{", "}"),
            ("<", ">"),
            ("", ","),
            ("", ";"),
            ("", ":"),
            ("", "?"),
            ("", "!"),
            ("", "。"),
            ("", "，"),
            ("", "？"),
        ];
        for (open, close) in marks {
            let q = format!("please use {open}email_text_send{close} for this");
            let hits = ranked(&[&q], 3);
            assert_eq!(
                (&*hits[0].name, hits[0].reason.as_str()),
                ("email_text_send", "exact name in the query"),
                "{q}"
            );
        }
        let hits = ranked(&["please use email_text_send* for this"], 3);
        assert!(
            hits.iter().all(|h| h.reason != "exact name in the query"),
            "{hits:?}"
        );
    }

    /// A query of one word that is one tool's name with case and separators ignored names it,
    /// saying so; the name as written stays an exact name; words apart, a longer query, or a fold
    /// several tools' names share, name none.
    #[test]
    fn a_query_that_is_a_name_written_as_words_names_the_tool() {
        const FOLDED: &str = "the query is its name with case and separators ignored";
        for q in [
            "Email_Text_Send",
            "email-text-send",
            "EMAIL_TEXT_SEND?",
            " \"email-text.Send\" ",
            "emailtextsend",
        ] {
            let hits = ranked(&[q], 3);
            assert_eq!(
                (&*hits[0].name, hits[0].reason.as_str()),
                ("email_text_send", FOLDED),
                "{q}"
            );
            assert!(hits[1..].iter().all(|h| h.reason != FOLDED), "{hits:?}");
        }
        let written = ranked(&["email_text_send"], 3);
        assert_eq!(written[0].reason, "exact name in the query");
        // One of several queries names it; the others are ranked as words.
        let both = ranked(&["Email-Text-Send", "weather"], 3);
        assert_eq!(
            (&*both[0].name, both[0].reason.as_str()),
            ("email_text_send", FOLDED)
        );
        for q in [
            "email text send",
            "email-text",
            "please email-text-send",
            "email_text_send*",
        ] {
            let hits = ranked(&[q], 3);
            assert!(hits.iter().all(|h| h.reason != FOLDED), "{q}: {hits:?}");
        }
        let tools = serde_json::json!({"servers": [
            {"name": "a", "tools": [{"name": "get_time", "description": "The time here."}]},
            {"name": "b", "tools": [{"name": "get_time", "description": "The time there."}]}
        ]});
        let c = Catalog::from_json_str(&tools.to_string(), "test").expect("catalog");
        let index = SearchIndex::build(&c, &[0, 1]);
        let hits = index.rank(&["Get-Time".to_owned()], 3);
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert!(hits.iter().all(|h| h.reason != FOLDED), "{hits:?}");
        // A canonical name is a name anywhere in a query, with case and separators ignored.
        for q in [
            "mcp__a__GET-TIME",
            "what does mcp__b__Get_Time say",
            "mcp__b__get.time",
        ] {
            let hits = index.rank(&[q.to_owned()], 3);
            let want = if q.contains("__a__") {
                "mcp__a__get_time"
            } else {
                "mcp__b__get_time"
            };
            assert_eq!(
                (&*hits[0].name, hits[0].reason.as_str()),
                (want, FOLDED),
                "{q}"
            );
        }
    }

    /// Skipping the name lookup for plain words inside a longer query never skips a word that
    /// could have named a tool.
    #[test]
    fn a_word_that_can_name_a_tool_looks_like_a_name() {
        for word in [
            "search",
            "latest",
            "read_file",
            "get-tickets",
            "v2",
            "getWeather",
            "mcp__fs__read",
            "Tokyo",
            "a.b",
            "读取文件",
        ] {
            for n in 1..4 {
                assert!(
                    !names_a_tool(word, n) || looks_like_a_name(word),
                    "{word} ({n} tools)"
                );
            }
        }
        assert!(!looks_like_a_name("search") && !looks_like_a_name("Tokyo"));
        assert!(looks_like_a_name("read_file") && looks_like_a_name("mcp__fs__read"));
        // Case inside a word counts in any script; a capital first letter does not.
        assert!(is_identifier("getWeather") && is_identifier("prüfÄnderung"));
        assert!(!is_identifier("Übersicht") && !is_identifier("读取文件"));
        assert!(is_identifier("文件2") && is_identifier("état-civil"));
    }

    /// A server none of whose tools can be searched (a mode or a deny rule hides them all, or it
    /// has none) is no server to the query: `server:` and `mcp__S__` treat it as unknown, and the
    /// note that lists the servers does not name it.
    #[test]
    fn a_server_with_no_searchable_tool_is_an_unknown_server() {
        let tools = serde_json::json!({"servers": [
            mail_server(),
            {"name": "Secret Vault", "description": "Hidden",
             "tools": [{"name": "open", "description": "Open the vault"}]},
            {"name": "empty", "description": "No tools yet", "tools": []}
        ]});
        let c = Catalog::from_json_str(&tools.to_string(), "test").expect("catalog");
        let visible: Vec<usize> = (0..c.tools().len())
            .filter(|&i| c.tools()[i].server.as_deref() == Some("mail"))
            .collect();
        let index = SearchIndex::build(&c, &visible);
        let unknown = index.notes(&["server:nosuch send".to_owned()]);
        assert_eq!(
            unknown,
            [
                "\"server:nosuch\" names no server (\"nosuch\" is unknown; servers: mail), so \"nosuch\" was read as a plain word."
            ]
        );
        for (q, token, server) in [
            (
                "server:Secret_Vault open",
                "server:Secret_Vault",
                "Secret_Vault",
            ),
            (
                "server:secret_vault open",
                "server:secret_vault",
                "secret_vault",
            ),
            ("server:Secret Vault", "server:Secret", "Secret"),
            (
                "mcp__Secret_Vault__open",
                "mcp__Secret_Vault__open",
                "Secret_Vault",
            ),
            ("server:empty send", "server:empty", "empty"),
            ("mcp__empty__ send", "mcp__empty__", "empty"),
        ] {
            assert_eq!(
                index.notes(&[q.to_owned()]),
                [format!(
                    "{token:?} names no server ({server:?} is unknown; servers: mail), so {server:?} was read as a plain word."
                )],
                "{q}"
            );
        }
        // Read as a word, as an unknown server is: every (visible) server is searched.
        let hits = index.rank(&["server:empty send".to_owned()], 3);
        assert_eq!(hits[0].name.as_ref(), "mcp__mail__send", "{hits:?}");
        // With no server searchable at all, the note says there are none.
        let none = SearchIndex::build(&c, &[]);
        assert!(
            none.notes(&["server:mail".to_owned()])[0].contains("there are no servers"),
            "{:?}",
            none.notes(&["server:mail".to_owned()])
        );
    }

    /// Servers whose names differ only in case are searched apart: a name written exactly as a
    /// server's wins; one that matches several servers only when case is ignored searches them
    /// all and says so.
    #[test]
    fn servers_differing_in_case_are_searched_apart() {
        let tools = serde_json::json!({"servers": [
            {"name": "Git", "description": "upper", "tools": [{"name": "log_upper"}]},
            {"name": "git", "description": "lower", "tools": [{"name": "log_lower"}]},
            mail_server()
        ]});
        let (_, index) = indexed(&tools);
        let names = |q: &str| top_names(&index, q);
        assert_eq!(names("server:Git"), ["mcp__Git__log_upper"]);
        assert_eq!(names("server:git"), ["mcp__git__log_lower"]);
        // A full stop after the value is prose, not a separator to fold: still exactly git.
        assert_eq!(names("server:git."), ["mcp__git__log_lower"]);
        assert_eq!(names("mcp__Git__ log"), ["mcp__Git__log_upper"]);
        assert_eq!(names("mcp__git__ log"), ["mcp__git__log_lower"]);
        assert_eq!(names("server:mcp__Git__"), ["mcp__Git__log_upper"]);
        assert!(index.notes(&["server:Git".to_owned()]).is_empty());
        // Case-blind, the one server that matches is taken without a note.
        let mail = names("server:MAIL send");
        assert_eq!(mail[0], "mcp__mail__send");
        assert!(
            mail.iter().all(|n| n.starts_with("mcp__mail__")),
            "{mail:?}"
        );
        assert!(index.notes(&["server:MAIL".to_owned()]).is_empty());
        // Case-blind and ambiguous: both, and a note that says how to pick one.
        assert_eq!(
            names("server:GIT"),
            ["mcp__Git__log_upper", "mcp__git__log_lower"]
        );
        assert_eq!(
            index.notes(&["server:GIT".to_owned()]),
            [
                "\"server:GIT\" names no server exactly (\"GIT\" matches Git and git when case is ignored), so both were searched; write the name as listed to search one."
            ]
        );
        assert_eq!(
            names("mcp__GIT__ log"),
            ["mcp__Git__log_upper", "mcp__git__log_lower"]
        );
    }

    /// The search over the visible tools is the search of a catalog that has only them: a
    /// server whose tools are all hidden, or that has none, moves no score and no reason, its
    /// description included.
    #[test]
    fn a_server_with_no_searchable_tool_moves_no_score() {
        let notes = serde_json::json!({"name": "notes", "description": "Notebook",
            "tools": [{"name": "write", "description": "Write a note"},
                      {"name": "read", "description": "Read a note"}]});
        let shown = serde_json::json!({"servers": [mail_server(), notes.clone()]});
        let all = serde_json::json!({"servers": [
            mail_server(),
            notes,
            {"name": "vault", "description": "Send email message drafts and notes, secret",
             "tools": [{"name": "open", "description": "Open the secret vault of email"}]},
            {"name": "starting", "description": "email notes email notes", "tools": []}
        ]});
        let (_, alone) = indexed(&shown);
        let c = Catalog::from_json_str(&all.to_string(), "test").expect("catalog");
        let visible: Vec<usize> = (0..c.tools().len())
            .filter(|&i| c.tools()[i].server.as_deref() != Some("vault"))
            .collect();
        let hidden = SearchIndex::build(&c, &visible);
        let seen = |hits: Vec<Hit>| -> Vec<(String, f64, String)> {
            hits.into_iter()
                .map(|h| (h.name.to_string(), h.score, h.reason))
                .collect()
        };
        for q in [
            "send an email",
            "write a note",
            "save a draft of the message",
            "secret vault",
            "email notes",
            "Send an email message, then write a note about it",
        ] {
            assert_eq!(
                seen(hidden.rank(&[q.to_owned()], 5)),
                seen(alone.rank(&[q.to_owned()], 5)),
                "{q}"
            );
        }
    }

    // Query handling: server listings among intents, folded server names, names next to
    // punctuation, `+term` on canonical names.

    /// Servers of several tools each, whose names need folding to be written as a model would.
    fn listed_servers() -> serde_json::Value {
        serde_json::json!({"servers": [
            {"name": "git", "description": "Version control",
             "tools": [{"name": "add", "description": "Stage files"},
                       {"name": "commit", "description": "Record staged changes"},
                       {"name": "log", "description": "Show the history"},
                       {"name": "status", "description": "Show the working tree state"}]},
            {"name": "time", "description": "Clocks",
             "tools": [{"name": "now", "description": "The current time in a zone"},
                       {"name": "convert", "description": "Convert a time between zones"}]},
            {"name": "brave-search", "description": "Web search",
             "tools": [{"name": "web_search", "description": "Search the web"},
                       {"name": "local_search", "description": "Search for places nearby"}]},
            {"name": "sequential-thinking", "description": "Reasoning",
             "tools": [{"name": "sequentialthinking", "description": "Think step by step"}]},
            {"name": "github", "description": "Hosting",
             "tools": [{"name": "search_code", "description": "Search code in repositories"},
                       {"name": "create_issue", "description": "Open an issue"}]},
            mail_server()
        ]})
    }

    fn names_of(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| &*h.name).collect()
    }

    /// A query of servers alone among several queries lists its servers' tools as it does alone,
    /// merged with the other intents round-robin: no intent vanishes.
    #[test]
    fn a_server_listing_among_several_queries_is_an_intent_of_its_own() {
        let (_, index) = indexed(&listed_servers());
        let qs = |q: &[&str]| -> Vec<String> { q.iter().map(|s| (*s).to_owned()).collect() };
        let hits = index.rank(&qs(&["server:git", "server:time"]), 4);
        assert_eq!(
            names_of(&hits),
            [
                "mcp__git__add",
                "mcp__time__convert",
                "mcp__git__commit",
                "mcp__time__now"
            ]
        );
        assert_eq!(
            hits[0].reason,
            "for \"server:git\": a tool of server git (the query names only servers)"
        );
        assert_eq!(
            hits[1].reason,
            "for \"server:time\": a tool of server time (the query names only servers)"
        );
        // With a query of words: each intent's first in the first round.
        let hits = index.rank(&qs(&["server:git", "current time"]), 4);
        let names = names_of(&hits);
        assert_eq!(names[..2], ["mcp__git__add", "mcp__time__now"], "{hits:?}");
        assert!(
            names.iter().filter(|n| n.starts_with("mcp__git__")).count() >= 2,
            "{hits:?}"
        );
        assert!(
            hits[1].reason.starts_with("for \"current time\": "),
            "{hits:?}"
        );
        // A listing intent and one that names a tool exactly keep both.
        let hits = index.rank(&qs(&["server:time", "mcp__git__log"]), 2);
        assert_eq!(names_of(&hits), ["mcp__git__log", "mcp__time__convert"]);
    }

    /// A listing of several servers takes their tools in turn, each server's by name, in the order
    /// the query names them: a limit no longer cuts it to the first server's.
    #[test]
    fn a_listing_of_several_servers_takes_each_in_turn() {
        let (_, index) = indexed(&listed_servers());
        let hits = index.rank(&["server:git server:time".to_owned()], 5);
        assert_eq!(
            names_of(&hits),
            [
                "mcp__git__add",
                "mcp__time__convert",
                "mcp__git__commit",
                "mcp__time__now",
                "mcp__git__log"
            ]
        );
        assert!(hits.iter().all(|h| h.score == 0.0), "{hits:?}");
        let hits = index.rank(&["server:time mcp__git__".to_owned()], 3);
        assert_eq!(
            names_of(&hits),
            ["mcp__time__convert", "mcp__git__add", "mcp__time__now"]
        );
        // One server runs out, the other goes on.
        let hits = index.rank(&["server:time server:git".to_owned()], 10);
        assert_eq!(
            names_of(&hits),
            [
                "mcp__time__convert",
                "mcp__git__add",
                "mcp__time__now",
                "mcp__git__commit",
                "mcp__git__log",
                "mcp__git__status"
            ]
        );
    }

    /// `server:` values are matched with case and the separators `_ - .` folded, and a value that
    /// begins (or is a word of) one server's name alone picks it.
    #[test]
    fn server_values_are_folded_and_may_be_a_prefix_or_a_word() {
        let (_, index) = indexed(&listed_servers());
        let servers = |q: &str| -> Vec<String> {
            let mut s: Vec<String> = index
                .rank(&[q.to_owned()], 10)
                .iter()
                .filter_map(|h| h.server.as_deref().map(str::to_owned))
                .collect();
            s.dedup();
            s
        };
        for (q, server) in [
            ("server:sequential_thinking", "sequential-thinking"),
            ("server:Sequential.Thinking", "sequential-thinking"),
            ("server:sequentialthinking", "sequential-thinking"),
            ("server:brave_search", "brave-search"),
            ("server:BRAVE-SEARCH", "brave-search"),
            ("server:brave", "brave-search"),
            ("server:thinking", "sequential-thinking"),
            ("server:brave. places", "brave-search"),
            ("mcp__brave_search__ places", "brave-search"),
            ("server:gith", "github"),
        ] {
            assert_eq!(servers(q), [server], "{q}");
            assert!(index.notes(&[q.to_owned()]).is_empty(), "{q}");
        }
        // Exact names still win: `git` is a server, though it begins `github`.
        assert_eq!(servers("server:git"), ["git"]);
        // A value that begins several servers' names picks none, and says which it could be.
        assert_eq!(
            index.notes(&["server:gi code".to_owned()]),
            [
                "\"server:gi\" names no server (\"gi\" could be git or github; write more of the name), so \"gi\" was read as a plain word."
            ]
        );
    }

    /// A `server:` value that names no server is read as a plain word, as a `+term` no name has
    /// is, and the note says so.
    #[test]
    fn a_server_value_that_names_no_server_is_a_plain_word() {
        let (_, index) = indexed(&listed_servers());
        let hits = index.rank(&["server:repositories".to_owned()], 3);
        assert_eq!(
            names_of(&hits)[..1],
            ["mcp__github__search_code"],
            "{hits:?}"
        );
        assert_eq!(
            index.notes(&["server:repositories".to_owned()]),
            [
                "\"server:repositories\" names no server (\"repositories\" is unknown; servers: brave-search, git, github, mail, sequential-thinking, time), so \"repositories\" was read as a plain word."
            ]
        );
        let hits = index.rank(&["mcp__repositories__search".to_owned()], 1);
        assert_eq!(names_of(&hits), ["mcp__github__search_code"], "{hits:?}");
    }

    /// A sentence-final `.` and `( = , ; :` next to a name leave it a name.
    #[test]
    fn a_name_next_to_a_full_stop_or_in_a_call_is_found_exactly() {
        for q in [
            "please use email_text_send.",
            "please use email_text_send. Then stop",
            "email_text_send.",
            "email_text_send...",
            "\"email_text_send\".",
            "email_text_send(to='a@b.c', body='hi')",
            "email_text_send(to='a@b.c')",
            "call tool=email_text_send now",
            "tools:email_text_send,file_read",
            "run email_text_send; done",
        ] {
            let hits = ranked(&[q], 3);
            assert_eq!(
                (&*hits[0].name, hits[0].reason.as_str()),
                ("email_text_send", "exact name in the query"),
                "{q}: {hits:?}"
            );
        }
        let hits = ranked(&["tools:email_text_send,file_read"], 3);
        assert_eq!(hits[1].reason, "exact name in the query", "{hits:?}");
        // A dot inside a word is no full stop.
        let hits = ranked(&["please use email_text_send.x for this"], 3);
        assert!(
            hits.iter().all(|h| h.reason != "exact name in the query"),
            "{hits:?}"
        );
    }

    /// `+term` is matched against the name the model sees, server segment included.
    #[test]
    fn a_plus_term_matches_the_server_part_of_a_canonical_name() {
        let (_, index) = indexed(&listed_servers());
        let q = "+search +github".to_owned();
        assert!(
            index.notes(std::slice::from_ref(&q)).is_empty(),
            "{:?}",
            index.notes(std::slice::from_ref(&q))
        );
        assert_eq!(names_of(&index.rank(&[q], 5)), ["mcp__github__search_code"]);
        let hits = index.rank(&["+brave search".to_owned()], 5);
        assert!(!hits.is_empty());
        assert!(
            hits.iter()
                .all(|h| h.name.starts_with("mcp__brave-search__")),
            "{hits:?}"
        );
    }
}
