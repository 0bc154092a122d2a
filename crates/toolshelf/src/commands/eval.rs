//! `toolshelf eval`: retrieval quality and speed of the search engine on a labelled query set.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use toolshelf_core::search::SearchIndex;
use toolshelf_core::search::render::plain_quote;
use toolshelf_core::{Resolution, State};

use super::{errln, outln, print_json};
use crate::inputs::{Source, value_shown};

/// Arguments of `eval`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: Source,
    /// JSON lines: {"query": "...", "gold": ["tool", ...]}. A gold name may be canonical, bare,
    /// original, or mcp__<original server>__<original tool>. `-` reads standard input.
    #[arg(long, value_name = "FILE.jsonl")]
    queries: PathBuf,
    /// Print one JSON object; a description template that reads a per-turn value, uses a stub
    /// or names a pkg or session value that is not there (exit status 1) prints {"error":
    /// "template", "owner", "line", "message"}.
    #[arg(long)]
    json: bool,
    /// Ranker: bm25, semantic, or both fused.
    #[arg(long, value_enum, default_value_t)]
    ranker: super::search::Ranker,
    /// Also print the N worst misses: the query, each gold tool's rank and the reason it got,
    /// and what ranked first instead.
    #[arg(long, value_name = "N", default_value_t = 0)]
    misses: usize,
    /// Search every query once before the timed pass, as `scripts/bench-bm25s.py` times bm25s:
    /// the latencies are then of a process that has seen these requests (its memos of analysed
    /// words and tokens filled), not of each request at first sight. Recall is the same.
    #[arg(long)]
    warm_up: bool,
}

/// Recall@k and the count of the queries in one bucket.
#[derive(Debug, Default, Clone)]
struct Bucket {
    queries: usize,
    recall: [f64; 4],
}

impl Bucket {
    fn add(&mut self, recall: &[f64; 4]) {
        self.queries += 1;
        for (a, b) in self.recall.iter_mut().zip(recall) {
            *a += b;
        }
    }

    fn json(&self) -> Value {
        let n = self.queries.max(1) as f64;
        json!({"queries": self.queries, "recall": {"1": round4(self.recall[0] / n), "3": round4(self.recall[1] / n), "5": round4(self.recall[2] / n), "10": round4(self.recall[3] / n)}})
    }
}

/// A bucket's place among its kind (smallest first) and its label.
type BucketKey = (u8, &'static str);

/// The length bucket of a query, in words (Chinese counted per two characters).
fn length_bucket(query: &str) -> BucketKey {
    let words = query.split_whitespace().count()
        + query
            .chars()
            .filter(|c| toolshelf_core::search::analyze::is_cjk(*c))
            .count()
            / 2;
    match words {
        0..=3 => (0, "1-3 words"),
        4..=8 => (1, "4-8 words"),
        9..=16 => (2, "9-16 words"),
        _ => (3, "17+ words"),
    }
}

/// The bucket of a query by its number of gold tools.
fn gold_bucket(gold: usize) -> BucketKey {
    match gold {
        0 | 1 => (0, "1 gold"),
        2 => (1, "2 gold"),
        _ => (2, "3+ gold"),
    }
}

struct Case {
    query: String,
    gold: Vec<usize>,
    /// Gold names given, including ones not in the catalog (which count as misses).
    gold_total: usize,
    /// Gold names no search can find, each with why: hidden, several tools', not in the catalog.
    unscorable: Vec<(String, &'static str)>,
}

/// Why a gold tool hidden by the active mode or a deny rule has no rank.
const HIDDEN: &str = "hidden by the active mode or a deny rule, so no search can find it";
/// Why a gold name several tools have has no rank.
const SEVERAL: &str = "names several tools; give the canonical name";
/// Why a gold name the catalog lacks has no rank.
const ABSENT: &str = "not in the catalog";

/// The shape of a queries line, as errors show it.
const LINE_SHAPE: &str = r#"{"query": "...", "gold": ["tool", ...]}"#;

/// Gold names not in the catalog that are named one by one; the rest are counted.
const UNKNOWN_GOLD_SHOWN: usize = 10;

/// Reads the queries file. A line that cannot be scored (no object, a query or gold list missing
/// or of the wrong type, a key that is a slip of either, a blank query, no gold, a gold entry that
/// is not a name or is blank) is refused with its line number and what is wrong: scoring it as a
/// miss would lower every figure without saying why. Other keys are ignored. A gold name the catalog lacks is a miss, named on stderr with
/// its line.
fn load_cases(
    path: &std::path::Path,
    loaded: &crate::inputs::Loaded,
) -> Result<(Vec<Case>, usize)> {
    let mut cases = Vec::new();
    let mut unknown_gold = 0;
    // Gold tools a search can find: what the active mode and the rules leave visible.
    let visible = |i: usize| loaded.exposure.decisions[i].state != State::Hidden;
    for line in crate::inputs::lines_of(path, "queries")? {
        let (n, line) = line?;
        let at = format!("{}:{n}", crate::inputs::shown(path));
        let v = crate::inputs::json_line(&line, &at, "not valid JSON")?;
        let obj = crate::inputs::line_object(&v, &at, LINE_SHAPE)?;
        // Other keys (an id, a category) are let be, but a slip of these two is refused.
        crate::inputs::refuse_slips(obj, &["query", "gold"], &at)?;
        let query = match obj.get("query") {
            Some(Value::String(q)) => q.as_str(),
            Some(other) => bail!(
                "{at}: \"query\" is {}, not a string of words to search for",
                value_shown(other)
            ),
            None => bail!("{at}: the line has no \"query\"; expected {LINE_SHAPE}"),
        };
        let gold = match obj.get("gold") {
            Some(Value::Array(gold)) => gold,
            Some(one @ Value::String(_)) => bail!(
                "{at}: \"gold\" is {}, not an array of tool names: write [{}]",
                value_shown(one),
                value_shown(one)
            ),
            Some(other) => bail!(
                "{at}: \"gold\" is {}, not an array of tool names",
                value_shown(other)
            ),
            None => bail!(
                "{at}: the line has no \"gold\", the tools the query should find; expected {LINE_SHAPE}"
            ),
        };
        if query.trim().is_empty() {
            bail!("{at}: \"query\" is blank; there is nothing to search for");
        }
        if gold.is_empty() {
            bail!("{at}: \"gold\" is empty; a query needs at least one gold tool to be scored");
        }
        let mut ids = Vec::new();
        // Gold names that count as misses, each once however often the line gives it, as a
        // tool named twice is one gold tool: a hidden tool by its index, any other by its name.
        let mut hidden_here: Vec<usize> = Vec::new();
        let mut missing_here: Vec<&str> = Vec::new();
        for (j, g) in gold.iter().enumerate() {
            let Some(g) = g.as_str() else {
                bail!("{at}: gold[{j}] is {g}, not a tool name");
            };
            if g.trim().is_empty() {
                bail!("{at}: gold[{j}] is blank; give a tool name");
            }
            let resolution = loaded.catalog.resolve(g);
            let first = match &resolution {
                Resolution::Exact(i) | Resolution::Bare(i) if visible(*i) => {
                    ids.push(*i);
                    continue;
                }
                Resolution::Exact(i) | Resolution::Bare(i) if hidden_here.contains(i) => false,
                Resolution::Exact(i) | Resolution::Bare(i) => {
                    hidden_here.push(*i);
                    true
                }
                _ if missing_here.contains(&g) => false,
                Resolution::Ambiguous(_) | Resolution::NotFound => {
                    missing_here.push(g);
                    true
                }
            };
            if !first {
                continue;
            }
            if unknown_gold < UNKNOWN_GOLD_SHOWN {
                match resolution {
                    // Hidden by the mode or a deny rule: no search can find it.
                    Resolution::Exact(i) | Resolution::Bare(i) => errln!(
                        "toolshelf: warning: {at}: gold {} ({}) is hidden by the active mode or a deny rule, so no search can find it (counted as a miss)",
                        plain_quote(g),
                        loaded.catalog.tools()[i].name
                    ),
                    // Which of them the set means cannot be told: scoring one would be a guess.
                    Resolution::Ambiguous(c) => {
                        let names: Vec<&str> = c
                            .iter()
                            .map(|&i| loaded.catalog.tools()[i].name.as_str())
                            .collect();
                        errln!(
                            "toolshelf: warning: {at}: gold {} names several tools ({}); give the canonical name (counted as a miss)",
                            plain_quote(g),
                            names.join(", ")
                        );
                    }
                    Resolution::NotFound => errln!(
                        "toolshelf: warning: {at}: gold {} is not in the catalog (counted as a miss)",
                        plain_quote(g)
                    ),
                }
            }
            unknown_gold += 1;
        }
        let unknown_here = hidden_here.len() + missing_here.len();
        ids.sort_unstable();
        ids.dedup();
        let mut unscorable: Vec<(String, &'static str)> = hidden_here
            .iter()
            .map(|&i| (loaded.catalog.tools()[i].name.clone(), HIDDEN))
            .collect();
        unscorable.extend(missing_here.iter().map(|&g| {
            let why = match loaded.catalog.resolve(g) {
                Resolution::Ambiguous(_) => SEVERAL,
                _ => ABSENT,
            };
            (g.to_owned(), why)
        }));
        cases.push(Case {
            query: query.to_owned(),
            gold_total: ids.len() + unknown_here,
            gold: ids,
            unscorable,
        });
    }
    Ok((cases, unknown_gold))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Peak resident memory of this process in KiB (Linux), if known.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

pub fn run(args: Args) -> Result<()> {
    let loaded = args.source.load_json(args.json, Default::default())?;
    let (cases, unknown_gold) = load_cases(&args.queries, &loaded)?;
    anyhow::ensure!(
        !cases.is_empty(),
        "{}: no queries",
        crate::inputs::shown(&args.queries)
    );
    if unknown_gold > UNKNOWN_GOLD_SHOWN {
        errln!(
            "toolshelf: warning: {unknown_gold} gold names in all are not in the catalog, name several tools or are hidden (counted as misses); the first {UNKNOWN_GOLD_SHOWN} are named above"
        );
    }
    toolshelf_core::search::analyze::warm_up();
    let start = Instant::now();
    let index: SearchIndex = super::search::build_index(&loaded, args.ranker)?;
    let build_ms = start.elapsed().as_secs_f64() * 1000.0;

    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(cases.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} queries, {per_sec}, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let ks = [1usize, 3, 5, 10];
    let mut recall = [0f64; 4];
    // Keyed by place, so both the text and the JSON list the buckets smallest first.
    let mut by_length: std::collections::BTreeMap<BucketKey, Bucket> = Default::default();
    let mut by_gold: std::collections::BTreeMap<BucketKey, Bucket> = Default::default();
    // (recall@10, first gold rank or 11, case index): the worst misses sort first.
    let mut worst: Vec<(f64, usize, usize)> = Vec::new();
    let (mut mrr, mut ndcg) = (0f64, 0f64);
    if args.warm_up {
        for case in &cases {
            index.rank(std::slice::from_ref(&case.query), 10);
        }
    }
    let mut latencies = Vec::with_capacity(cases.len());
    for (c, case) in cases.iter().enumerate() {
        let t = Instant::now();
        let hits = index.rank(std::slice::from_ref(&case.query), 10);
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
        if let Some(b) = &bar {
            b.inc(1);
        }
        let ranked: Vec<usize> = hits.iter().map(|h| h.index).collect();
        let g = case.gold_total as f64;
        let mut this = [0f64; 4];
        for (slot, &k) in ks.iter().enumerate() {
            let found = ranked
                .iter()
                .take(k)
                .filter(|i| case.gold.contains(i))
                .count();
            this[slot] = found as f64 / g;
            recall[slot] += this[slot];
        }
        by_length
            .entry(length_bucket(&case.query))
            .or_default()
            .add(&this);
        by_gold
            .entry(gold_bucket(case.gold_total))
            .or_default()
            .add(&this);
        if args.misses > 0 && this[3] < 1.0 {
            let first = ranked
                .iter()
                .position(|i| case.gold.contains(i))
                .unwrap_or(10);
            worst.push((this[3], first, c));
        }
        if let Some(pos) = ranked.iter().position(|i| case.gold.contains(i)) {
            mrr += 1.0 / (pos + 1) as f64;
        }
        let dcg: f64 = ranked
            .iter()
            .enumerate()
            .filter(|(_, i)| case.gold.contains(i))
            .map(|(r, _)| 1.0 / ((r + 2) as f64).log2())
            .sum();
        let ideal: f64 = (0..case.gold_total.min(10))
            .map(|r| 1.0 / ((r + 2) as f64).log2())
            .sum();
        ndcg += dcg / ideal;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let n = cases.len() as f64;
    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&latencies, 50.0), percentile(&latencies, 99.0));
    let buckets = |m: &std::collections::BTreeMap<BucketKey, Bucket>| -> Value {
        Value::Object(
            m.iter()
                .map(|((_, label), b)| ((*label).to_owned(), b.json()))
                .collect(),
        )
    };
    let result = json!({
        "by_length": buckets(&by_length),
        "by_gold": buckets(&by_gold),
        "queries": cases.len(),
        "tools": index.len(),
        "recall": {"1": round4(recall[0] / n), "3": round4(recall[1] / n), "5": round4(recall[2] / n), "10": round4(recall[3] / n)},
        "mrr": round4(mrr / n),
        "ndcg10": round4(ndcg / n),
        "build_ms": round4(build_ms),
        "latency_us": {"p50": round4(p50), "p99": round4(p99)},
        "warm_up": args.warm_up,
        "peak_rss_kib": peak_rss_kib(),
        "unknown_gold": unknown_gold,
        "ranker": format!("{:?}", args.ranker).to_lowercase(),
    });
    worst.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    worst.truncate(args.misses);
    let misses: Vec<Value> = worst
        .iter()
        .map(|&(r10, _, c)| miss(&index, &loaded, &cases[c], r10))
        .collect();
    if args.json {
        let mut result = result;
        if args.misses > 0 {
            result["misses"] = Value::Array(misses);
        }
        return print_json(&result);
    }
    outln!(
        "{} over {} ({})",
        super::count(cases.len(), "query", "queries"),
        super::count(index.len(), "tool", "tools"),
        crate::inputs::shown(&args.queries)
    );
    outln!(
        "recall@1 {:.3}  @3 {:.3}  @5 {:.3}  @10 {:.3}",
        recall[0] / n,
        recall[1] / n,
        recall[2] / n,
        recall[3] / n
    );
    outln!("MRR {:.3}  nDCG@10 {:.3}", mrr / n, ndcg / n);
    let pass = if args.warm_up { "warm" } else { "first sight" };
    outln!("index build {build_ms:.1} ms; query latency ({pass}) p50 {p50:.0} µs, p99 {p99:.0} µs");
    if let Some(kib) = peak_rss_kib() {
        outln!("peak memory {:.1} MiB", kib as f64 / 1024.0);
    }
    for (title, m) in [("by query length", &by_length), ("by gold tools", &by_gold)] {
        outln!("{title}:");
        for ((_, k), b) in m {
            let q = b.queries.max(1) as f64;
            outln!(
                "  {k:<11} {:>6} {:<7}  recall@1 {:.3}  @5 {:.3}  @10 {:.3}",
                b.queries,
                if b.queries == 1 { "query" } else { "queries" },
                b.recall[0] / q,
                b.recall[2] / q,
                b.recall[3] / q
            );
        }
    }
    for m in &misses {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        outln!(
            "miss: {} (recall@10 {})",
            plain_quote(&text(&m["query"])),
            m["recall10"]
        );
        for g in m["gold"].as_array().into_iter().flatten() {
            match g["rank"].as_u64() {
                Some(rank) => outln!(
                    "  gold {} at rank {rank}: {}",
                    text(&g["name"]),
                    text(&g["reason"])
                ),
                None => outln!(
                    "  gold {} not ranked: {}",
                    text(&g["name"]),
                    text(&g["reason"])
                ),
            }
        }
        match m["first"].as_object() {
            Some(first) => outln!(
                "  first instead: {} ({})",
                text(&first["name"]),
                text(&first["reason"])
            ),
            None => outln!("  first instead: nothing (no other tool shares a word with the query)"),
        }
    }
    Ok(())
}

/// Why a gold tool has no rank: [`miss`] looks no further than this.
const NOT_RANKED: &str = "not among the first 1,000 hits (or no shared word)";

/// One miss, explained: every gold tool's rank (within the first 1,000) and reason, gold names no
/// search can find with why, and the best hit that is no gold tool.
fn miss(index: &SearchIndex, loaded: &crate::inputs::Loaded, case: &Case, recall10: f64) -> Value {
    let hits = index.rank(std::slice::from_ref(&case.query), 1000);
    let tools = loaded.catalog.tools();
    let gold: Vec<Value> = case
        .gold
        .iter()
        .map(|&g| match hits.iter().position(|h| h.index == g) {
            Some(r) => json!({"name": tools[g].name, "rank": r + 1, "reason": hits[r].reason}),
            None => json!({"name": tools[g].name, "rank": null, "reason": NOT_RANKED}),
        })
        .chain(
            case.unscorable
                .iter()
                .map(|(name, why)| json!({"name": name, "rank": null, "reason": why})),
        )
        .collect();
    json!({
        "query": case.query,
        "recall10": round4(recall10),
        "gold": gold,
        "first": hits
            .iter()
            .find(|h| !case.gold.contains(&h.index))
            .map(|h| json!({"name": h.name, "reason": h.reason})),
    })
}
