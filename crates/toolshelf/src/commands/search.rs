//! `toolshelf search`: run `tool_search` from the command line, one request or a batch.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use toolshelf_core::search::render::{SessionView, quote_list, search_for};
use toolshelf_core::search::{SearchIndex, SearchRequest, effective_limit};

use super::{errln, outln, print_json};
use crate::inputs::{Loaded, Source};

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
    /// JSON lines file of requests, {"query": "..."} or {"queries": [...]} (other keys, such as
    /// an eval set's "gold", are ignored); one JSON line each, {"line", "hits": [...]}, `line`
    /// being the input line it answers, with or without --json. Every line is checked before
    /// any is answered. `-` reads standard input.
    #[arg(long, value_name = "FILE.jsonl")]
    batch: Option<PathBuf>,
    /// Maximum number of fuzzy hits, at least 1 (capped at [search] max_limit, except in
    /// --batch).
    #[arg(long, short = 'k', value_parser = positive, allow_negative_numbers = true)]
    limit: Option<usize>,
    /// Print {"hits": [...], "also_matching": [...], "unresolved": [...], "text": "..."} instead
    /// of the text the model reads: `hits` are the tools the text lists, `also_matching` the ones
    /// it only names, `unresolved` the --name values no visible tool has. A description template
    /// that reads a per-turn value or uses a stub (exit status 1) prints {"error": "template",
    /// "owner", "line", "message"} instead (outside --batch).
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
    // A batch's output is JSON lines whatever --json says: a finding there stays on stderr.
    let loaded = args
        .source
        .load_json(args.json && args.batch.is_none(), Default::default())?;
    let index = build_index(&loaded, args.ranker)?;
    if let Some(path) = &args.batch {
        return batch(&loaded, &index, path, args.limit).map(|()| true);
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
    // Hits show the descriptions this session's templates render, as tool_search's do, and
    // resident tools as already in the list `render` shows.
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
    let response = search_for(
        &index,
        &loaded.catalog,
        &request,
        &loaded.config().search,
        &view,
    );
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

fn batch(
    loaded: &Loaded,
    index: &SearchIndex,
    path: &std::path::Path,
    limit: Option<usize>,
) -> Result<()> {
    let limit = limit.unwrap_or_else(|| effective_limit(None, &loaded.config().search));
    // Every line is read and checked before any is answered: a bad line yields an error and no
    // partial output.
    let mut requests: Vec<(usize, Vec<String>)> = Vec::new();
    for line in crate::inputs::lines_of(path, "batch file")? {
        let (n, line) = line?;
        let at = || format!("{}:{n}", crate::inputs::shown(path));
        let v = crate::inputs::json_line(&line, &at(), "not valid JSON")?;
        let queries: Vec<String> = match (v.get("query"), v.get("queries")) {
            (Some(Value::String(q)), None) => vec![q.clone()],
            (None, Some(Value::Array(qs))) => qs
                .iter()
                .enumerate()
                .map(|(i, q)| match q {
                    Value::String(q) => Ok(q.clone()),
                    other => bail!(
                        "{}: queries[{i}] is {other}, not a string of words to search for",
                        at()
                    ),
                })
                .collect::<Result<_>>()?,
            _ => bail!(
                "{}: expected {{\"query\": \"...\"}} or {{\"queries\": [...]}}",
                at()
            ),
        };
        anyhow::ensure!(
            !queries.is_empty(),
            "{}: queries is empty: give at least one string of words to search for",
            at()
        );
        if let Some(i) = queries.iter().position(|q| q.trim().is_empty()) {
            match queries.len() {
                1 => bail!("{}: the query is blank", at()),
                _ => bail!("{}: queries[{i}] is blank", at()),
            }
        }
        requests.push((n, queries));
    }
    anyhow::ensure!(
        !requests.is_empty(),
        "{} holds no requests (one JSON object a line: {{\"query\": ...}} or {{\"queries\": [...]}})",
        crate::inputs::shown(path)
    );
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let max_limit = loaded.config().search.max_limit;
    for (line, queries) in requests {
        // One hit per query at least, as `tool_search` gives.
        let hits = index.rank(&queries, limit.max(queries.len().min(max_limit)));
        serde_json::to_writer(&mut out, &json!({"line": line, "hits": hits}))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
