//! `toolshelf search`: run `tool_search` from the command line, one request or a batch.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use toolshelf_core::search::render::{SearchResponse, SessionView, quote_list, search_for};
use toolshelf_core::search::{SearchIndex, SearchRequest, effective_limit};

use super::{errln, outln, print_json};
use crate::inputs::{Loaded, Source, value_shown};

/// Arguments of `search`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["query", "name", "batch"]))]
pub struct Args {
    #[command(flatten)]
    source: Source,
    /// Fuzzy query (repeat for several intents; each is ranked on its own and they are merged).
    #[arg(long, short = 'q', value_name = "TEXT")]
    query: Vec<String>,
    /// Exact tool name (repeat for several). A name that no visible tool has gets the
    /// suggestions the model would get, and the command then exits with status 1.
    #[arg(long, short = 'n', value_name = "NAME")]
    name: Vec<String>,
    /// JSON lines file of requests, as tool_search takes them: {"query": "..."} or
    /// {"queries": [...]}, with an optional "limit" (--limit when none is given), or
    /// {"tool_names": [...]} (other keys, such as an eval set's "gold", are ignored, but a slip
    /// of one of these is refused); one JSON line each, {"line", "hits": [...]} (for names also
    /// "also_matching" and "unresolved"), `line` being the input line it answers, with or
    /// without --json. Every line is checked before any is answered. `-` reads standard input.
    /// A name no visible tool has exits with status 1 once every line is written.
    #[arg(long, value_name = "FILE.jsonl")]
    batch: Option<PathBuf>,
    /// Maximum number of fuzzy hits, at least 1 (capped at [search] max_limit, except in
    /// --batch, where it is the default of lines that give no "limit").
    #[arg(long, short = 'k', value_parser = positive, allow_negative_numbers = true)]
    limit: Option<usize>,
    /// Print {"hits": [...], "also_matching": [...], "unresolved": [...], "text": "..."} instead
    /// of the text the model reads: `hits` are the tools the text lists, `also_matching` the ones
    /// it only names, `unresolved` the --name values no visible tool has. A description template
    /// that reads a per-turn value, uses a stub or names a pkg or session value that is not
    /// there (exit status 1) prints {"error": "template", "owner", "line", "message"} instead
    /// (with --batch too).
    #[arg(long)]
    json: bool,
    /// Ranker: bm25, semantic, or both fused.
    #[arg(long, value_enum, default_value_t)]
    ranker: Ranker,
}

/// A count of at least one.
fn positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

/// Which rankers `tool_search` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Ranker {
    /// BM25F over names, descriptions, parameters, server and tags.
    Bm25,
    /// The bundled embedding model alone.
    Semantic,
    /// Both, fused (the default when the binary has the model).
    #[default]
    Hybrid,
}

/// The index over every tool the active mode lets the model see, with `ranker`.
pub fn build_index(loaded: &Loaded, ranker: Ranker) -> Result<SearchIndex> {
    let visible: Vec<usize> = loaded
        .surface
        .resident
        .iter()
        .chain(&loaded.surface.deferred)
        .copied()
        .collect();
    let mut index = SearchIndex::build(&loaded.catalog, &visible);
    attach_ranker(&mut index, &loaded.catalog, ranker)?;
    Ok(index)
}

/// Gives `index` (over `catalog`) the rankers `ranker` asks for beyond BM25F: the bundled
/// embedding model, alone for `semantic`.
pub fn attach_ranker(
    index: &mut SearchIndex,
    catalog: &toolshelf_core::Catalog,
    ranker: Ranker,
) -> Result<()> {
    if ranker == Ranker::Bm25 {
        return Ok(());
    }
    #[cfg(feature = "embed")]
    {
        toolshelf_embed::attach_bundled(index, catalog)?;
        if ranker == Ranker::Semantic {
            index.set_lexical_weight(0.0);
        }
        Ok(())
    }
    #[cfg(not(feature = "embed"))]
    {
        let _ = (index, catalog);
        if ranker == Ranker::Semantic {
            bail!(
                "this build has no embedding model (cargo feature `embed` is off): use --ranker bm25"
            );
        }
        Ok(())
    }
}

/// Runs the search; `Ok(false)` when a `--name` matched no visible tool (a finding, exit
/// status 1, as against 2 for input that cannot be searched).
pub fn run(args: Args) -> Result<bool> {
    // With --json a template finding is printed as JSON, in a batch too (its output is JSON
    // lines whatever --json says, and without --json the finding stays on stderr).
    let loaded = args.source.load_json(args.json, Default::default())?;
    let index = build_index(&loaded, args.ranker)?;
    if let Some(path) = &args.batch {
        return batch(&loaded, &index, path, args.limit);
    }
    let mut request = json!({});
    match (args.query.is_empty(), args.name.is_empty()) {
        (false, true) => {
            if let Some(i) = args.query.iter().position(|q| q.trim().is_empty()) {
                bail!(
                    "--query number {} is blank: give the words to search for",
                    i + 1
                );
            }
            request["queries"] = json!(args.query);
            if let Some(l) = args.limit {
                request["limit"] = json!(l);
            }
        }
        (true, false) => {
            if let Some(i) = args.name.iter().position(|n| n.trim().is_empty()) {
                bail!("--name number {} is blank: give a tool name", i + 1);
            }
            if args.limit.is_some() {
                bail!("--limit applies to --query: an exact --name lookup returns each named tool");
            }
            request["tool_names"] = json!(args.name);
        }
        _ => bail!("give --query or --name, not both"),
    }
    let request = SearchRequest::from_json(&request).map_err(anyhow::Error::msg)?;
    let response = session_search(&loaded, &index, &request);
    if args.json {
        let (listed, also) = response.hits.split_at(response.listed);
        print_json(&json!({
            "hits": listed,
            "also_matching": also,
            "unresolved": response.unresolved,
            "text": response.text,
        }))?;
    } else {
        outln!("{}", response.text);
    }
    if !response.unresolved.is_empty() {
        // A name whose item the loader left out is no typo: say why it is not there.
        let (left_out, unknown): (Vec<&String>, Vec<&String>) = response
            .unresolved
            .iter()
            .partition(|n| loaded.catalog.left_out(n).is_some());
        for name in left_out {
            if let Some(l) = loaded.catalog.left_out(name) {
                errln!(
                    "toolshelf: {name:?} was left out when the catalog loaded ({}): {}",
                    l.location,
                    l.why
                );
            }
        }
        if !unknown.is_empty() {
            let unknown: Vec<String> = unknown.into_iter().cloned().collect();
            errln!(
                "toolshelf: no visible tool is named {} (see above)",
                quote_list(&unknown)
            );
        }
        return Ok(false);
    }
    Ok(true)
}

/// What `tool_search` answers `request` in a session on `loaded`: hits show the descriptions
/// this session's templates render, as tool_search's do, and resident tools as already in the
/// list `render` shows.
fn session_search(loaded: &Loaded, index: &SearchIndex, request: &SearchRequest) -> SearchResponse {
    let described = loaded.surface.descriptions().tools_by_name(&loaded.catalog);
    let tools = loaded.catalog.tools();
    let resident = &loaded.surface.resident;
    let view = SessionView {
        active: &|_| false,
        pinned: &|i| {
            resident
                .binary_search(&i)
                .is_ok()
                .then(|| tools[i].name.clone())
        },
        described: &described,
    };
    search_for(
        index,
        &loaded.catalog,
        request,
        &loaded.config().search,
        &view,
    )
}

/// The keys a batch line reads: `tool_search`'s, and `query` for a single query.
const LINE_KEYS: &[&str] = &["query", "queries", "limit", "tool_names"];

/// The shape of a batch line, as errors show it.
const LINE_SHAPE: &str =
    r#"{"query": "..."}, {"queries": [...], "limit": N} or {"tool_names": [...]}"#;

/// One batch line's request.
enum LineRequest {
    /// Fuzzy queries, with the line's own limit when it gives one.
    Queries(Vec<String>, Option<usize>),
    /// Exact names, trimmed as `tool_search` trims them.
    Names(Vec<String>),
}

/// The non-empty array of non-blank strings `v` (the line's `key`) holds, or an error at `at`
/// naming the entry that is not `what` or is blank.
fn strings(v: &Value, key: &str, what: &str, at: &str) -> Result<Vec<String>> {
    let Value::Array(items) = v else {
        bail!(
            "{at}: \"{key}\" is {}, not an array of strings",
            value_shown(v)
        );
    };
    anyhow::ensure!(
        !items.is_empty(),
        "{at}: {key} is empty: give at least one entry, {what}"
    );
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) if s.trim().is_empty() => bail!("{at}: {key}[{i}] is blank"),
            Value::String(s) => Ok(s.clone()),
            other => bail!("{at}: {key}[{i}] is {}, not {what}", value_shown(other)),
        })
        .collect()
}

/// Reads one batch line (`at` its place) as `tool_search` reads its arguments, with `query` for
/// one query. What cannot be answered is an error saying what is wrong: a key missing, or of the
/// wrong type (and what it is), two keys that exclude each other, or a key that is a slip of one
/// of [`LINE_KEYS`]; other keys are ignored.
fn parse_line(v: &Value, at: &str) -> Result<LineRequest> {
    let obj = crate::inputs::line_object(v, at, LINE_SHAPE)?;
    crate::inputs::refuse_slips(obj, LINE_KEYS, at)?;
    let limit = match obj.get("limit") {
        None => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => {
            n.as_u64().map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        }
        Some(other) => bail!(
            "{at}: \"limit\" is {}, not a whole number of at least 1",
            value_shown(other)
        ),
    };
    const WORDS: &str = "a string of words to search for";
    let queries = match (obj.get("query"), obj.get("queries")) {
        (Some(_), Some(_)) => bail!("{at}: give \"query\" or \"queries\", not both"),
        (Some(Value::String(q)), None) if q.trim().is_empty() => {
            bail!("{at}: the query is blank")
        }
        (Some(Value::String(q)), None) => Some(vec![q.clone()]),
        (Some(other @ Value::Array(_)), None) => bail!(
            "{at}: \"query\" is {}, not {WORDS} (several go in \"queries\")",
            value_shown(other)
        ),
        (Some(other), None) => bail!("{at}: \"query\" is {}, not {WORDS}", value_shown(other)),
        (None, Some(qs)) => Some(strings(qs, "queries", WORDS, at)?),
        (None, None) => None,
    };
    match (queries, obj.get("tool_names")) {
        (Some(_), Some(_)) => bail!("{at}: give \"tool_names\" or the queries, not both"),
        (Some(queries), None) => Ok(LineRequest::Queries(queries, limit)),
        (None, Some(names)) => Ok(LineRequest::Names(
            strings(names, "tool_names", "a tool name", at)?
                .iter()
                .map(|n| n.trim().to_owned())
                .collect(),
        )),
        (None, None) => bail!(
            "{at}: the line has no \"query\", \"queries\" or \"tool_names\"; expected {LINE_SHAPE}"
        ),
    }
}

/// Answers every line of the batch file `path`; `Ok(false)` when a `tool_names` line named a
/// tool no visible tool is (a finding, as for `--name`), said on stderr after every line is
/// answered.
fn batch(
    loaded: &Loaded,
    index: &SearchIndex,
    path: &std::path::Path,
    limit: Option<usize>,
) -> Result<bool> {
    let config = &loaded.config().search;
    let limit = limit.unwrap_or_else(|| effective_limit(None, config));
    // Every line is read and checked before any is answered: a bad line yields an error and no
    // partial output.
    let mut requests: Vec<(usize, LineRequest)> = Vec::new();
    for line in crate::inputs::lines_of(path, "batch file")? {
        let (n, line) = line?;
        let at = format!("{}:{n}", crate::inputs::shown(path));
        let v = crate::inputs::json_line(&line, &at, "not valid JSON")?;
        requests.push((n, parse_line(&v, &at)?));
    }
    anyhow::ensure!(
        !requests.is_empty(),
        "{} holds no requests (one JSON object a line: {{\"query\": ...}}, {{\"queries\": [...]}} or {{\"tool_names\": [...]}})",
        crate::inputs::shown(path)
    );
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut unresolved: Vec<String> = Vec::new();
    for (line, request) in requests {
        let answer = match request {
            LineRequest::Queries(queries, own) => {
                // A line's own limit is capped as tool_search caps it; --limit is not. One hit
                // per query at least, as `tool_search` gives.
                let limit = own.map_or(limit, |l| l.min(config.max_limit));
                let hits = index.rank(&queries, limit.max(queries.len().min(config.max_limit)));
                json!({"line": line, "hits": hits})
            }
            LineRequest::Names(names) => {
                let response = session_search(loaded, index, &SearchRequest::Names(names));
                let (listed, also) = response.hits.split_at(response.listed);
                unresolved.extend(
                    response
                        .unresolved
                        .iter()
                        .map(|n| format!("{n:?} (line {line})")),
                );
                json!({"line": line, "hits": listed, "also_matching": also,
                    "unresolved": response.unresolved})
            }
        };
        serde_json::to_writer(&mut out, &answer)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    if !unresolved.is_empty() {
        errln!(
            "toolshelf: no visible tool is named {}",
            unresolved.join(", ")
        );
        return Ok(false);
    }
    Ok(true)
}
