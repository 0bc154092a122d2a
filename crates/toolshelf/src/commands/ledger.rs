//! `toolshelf ledger`: the per-turn cost of the surface and what deferral saves.

use anyhow::Result;
use toolshelf_core::Ledger;

use super::{FormatArg, errln, outln, print_json};
use crate::inputs::Source;

/// Arguments of `ledger`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: Source,
    /// Context window in tokens, in place of [defer] window (default 200000): the shares are of
    /// it, and "auto:N" deferral is decided against it. The one-turn account only: --transcript
    /// counts what each request sends.
    #[arg(
        long,
        value_name = "TOKENS",
        conflicts_with = "transcript",
        allow_hyphen_values = true,
        value_parser = positive_tokens
    )]
    window: Option<u64>,
    /// Wire format whose serialized definitions are measured.
    #[arg(long, value_enum, default_value_t)]
    format: FormatArg,
    /// Print one JSON object instead of the table; a description template that reads a
    /// per-turn value, uses a stub or names a pkg or session value that is not there (exit
    /// status 1) prints {"error": "template", "owner", "line", "message"}.
    #[arg(long)]
    json: bool,
    /// Account a whole session instead of one turn: replay this transcript (see `replay`) and
    /// report, per model request, the tokens sent, those a prefix cache would serve, and what
    /// the all-resident surface would have cost.
    #[arg(long, value_name = "FILE.jsonl")]
    transcript: Option<std::path::PathBuf>,
    /// With --transcript only: the fixed instruction of every request (default: "You are a
    /// helpful agent.").
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// With --transcript only: the ranker of the replayed tool_search (default: hybrid, as the
    /// gateway and the proxy search).
    #[arg(long, value_enum)]
    ranker: Option<super::search::Ranker>,
}

fn thousands(n: i128) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

/// `--window`'s value: a whole number of tokens, at least 1. A negative one is taken as the
/// value it is (not as an unknown option) and refused as such.
fn positive_tokens(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("the window must be at least 1 token".to_owned()),
        Ok(n) => Ok(n),
        Err(_) if text.trim().parse::<i128>().is_ok() => {
            Err("the window must be a positive number of tokens".to_owned())
        }
        Err(_) => {
            Err("the window is a whole number of tokens (200000, not 200k or 2e5)".to_owned())
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    if let Some(transcript) = &args.transcript {
        return session(&args, transcript);
    }
    // The one-turn account replays nothing: an option of the replay would be silently ignored.
    for (given, option, sets) in [
        (
            args.system.is_some(),
            "--system",
            "the instruction of each replayed request",
        ),
        (
            args.ranker.is_some(),
            "--ranker",
            "the ranker of the replayed tool_search",
        ),
    ] {
        if given {
            anyhow::bail!(
                "{option} needs --transcript: it sets {sets}, and without a transcript ledger accounts one turn and replays nothing; give --transcript FILE.jsonl, or leave {option} out"
            );
        }
    }
    // The window `auto:N` deferral is decided against, as well as the one the shares are of.
    let l = args
        .source
        .load_json_with_window(args.json, Default::default(), args.window)?;
    l.warn_index();
    let window = l.config().defer.window;
    let ledger = Ledger::compute(&l.catalog, &l.surface, args.format.into(), window);
    for w in toolshelf_core::ledger::oversized_residents(
        &l.catalog,
        &l.surface,
        args.format.into(),
        window,
    ) {
        errln!("toolshelf: warning: {w}");
    }
    if args.json {
        return print_json(&ledger);
    }
    let g = &ledger;
    outln!(
        "toolshelf ledger: {} ({} format, window {} tokens)",
        l.catalog.source_name(),
        g.format,
        thousands(window as i128)
    );
    outln!(
        "tools: {} total, {} deferred, {} resident, {} hidden",
        g.tools_total,
        g.deferred,
        g.resident,
        g.hidden
    );
    outln!();
    outln!(
        "{:<24} {:>9} {:>9} {:>9}",
        "per turn",
        "chars",
        "tokens",
        "window"
    );
    let row = |label: &str, chars: i64, tokens: i64, share: Option<f64>| -> Result<()> {
        // Each column keeps a space before it, however wide a value (a tiny --window makes the
        // share run past its width).
        outln!(
            "{label:<24} {:>9} {:>9} {:>9}",
            thousands(chars.into()),
            thousands(tokens.into()),
            share.map(pct).unwrap_or_default()
        );
        Ok(())
    };
    row(
        "all resident",
        g.all_resident.chars as i64,
        g.all_resident.tokens as i64,
        Some(g.all_resident.window_share),
    )?;
    row(
        "with toolshelf",
        g.after.chars as i64,
        g.after.tokens as i64,
        Some(g.after.window_share),
    )?;
    row("  of which index", g.index.chars, g.index.tokens, None)?;
    row(
        "saved per turn",
        g.saved_per_turn.chars,
        g.saved_per_turn.tokens,
        None,
    )?;
    outln!();
    if let Some(big) = &g.largest {
        outln!(
            "largest deferred: {} ({} chars, {} of deferred)",
            big.name,
            thousands(big.chars as i128),
            pct(big.share_of_deferred)
        );
    }
    if let Some(big) = &g.largest_resident {
        outln!(
            "largest resident: {} ({} chars, {} tokens, {} of the window)",
            big.name,
            thousands(big.chars as i128),
            thousands(big.tokens as i128),
            pct(big.window_share)
        );
    }
    let r = |x: &Option<String>| x.clone().unwrap_or_else(|| "n/a".into());
    outln!(
        "schema chars per name char: all {}, deferred {}, largest {}",
        r(&g.ratios.all),
        r(&g.ratios.deferred),
        r(&g.ratios.largest)
    );
    if !g.index_dropped_servers.is_empty() {
        outln!(
            "not in the index (searchable only): {}",
            g.index_dropped_servers.join(", ")
        );
    }
    Ok(())
}

/// One request of a replayed session, in o200k_base tokens.
#[derive(Debug, Clone, serde::Serialize)]
struct TurnCost {
    /// The model request's number, from 1.
    request: usize,
    /// Its turn: the client request it belongs to (see `replay`).
    turn: u64,
    system: usize,
    tools: usize,
    messages: usize,
    total: usize,
    /// Tokens of the prefix shared byte for byte with the previous request.
    cached: usize,
    /// The same request with every visible tool resident and no meta-tools.
    all_resident: usize,
}

/// `ledger --transcript`: the whole session's cost.
fn session(args: &Args, transcript: &std::path::Path) -> Result<()> {
    use std::collections::HashMap;
    use toolshelf_core::request::{Api, Sections, canonical_json};
    use toolshelf_core::tokens::count;
    let api = match args.format {
        FormatArg::Anthropic => Api::Anthropic,
        FormatArg::Openai => Api::OpenAiChat,
        FormatArg::OpenaiResponses => Api::OpenAiResponses,
        FormatArg::Mcp => anyhow::bail!(
            "--transcript accounts LLM API requests: use --format anthropic, openai or openai-responses"
        ),
    };
    let replay_args = super::replay::Args {
        source: args.source.clone(),
        transcript: transcript.to_owned(),
        format: match api {
            Api::Anthropic => super::ApiArg::Anthropic,
            Api::OpenAiChat => super::ApiArg::Openai,
            Api::OpenAiResponses => super::ApiArg::OpenaiResponses,
        },
        system: args
            .system
            .clone()
            .unwrap_or_else(|| super::replay::DEFAULT_SYSTEM.to_owned()),
        ranker: args.ranker.unwrap_or_default(),
        explain: false,
        json: false,
    };
    let l = args.source.load_json(args.json, Default::default())?;
    let parsed = super::replay::read_transcript(transcript)?;
    // Successive requests repeat every earlier message: each distinct one is counted once.
    let mut tokens: HashMap<String, usize> = HashMap::new();
    let mut counted = |text: &str| -> usize {
        if let Some(&n) = tokens.get(text) {
            return n;
        }
        let n = count(text);
        tokens.insert(text.to_owned(), n);
        n
    };
    let mut turns: Vec<TurnCost> = Vec::new();
    // The previous request's system, tools and messages, as canonical JSON.
    let mut previous: Option<(String, String, Vec<String>)> = None;
    // The counterfactual tool list (every visible tool with its schema), per tool set.
    let mut all_tools: Option<(u64, usize)> = None;
    super::replay::replay(&replay_args, &l, &parsed, true, &mut |session, r| {
        let body: serde_json::Value = serde_json::from_str(&r.body)?;
        // Tokens are of the parts as sent; the cached prefix is the one a prompt cache keeps,
        // whose forms are read alike (see `Sections::of`).
        let s = Sections::of(api, &body).map_err(anyhow::Error::msg)?;
        let sent = Sections::as_sent(api, &body).map_err(anyhow::Error::msg)?;
        let (system_text, tools_text) = (canonical_json(&s.system), canonical_json(&s.tools));
        let messages: Vec<String> = s.conversation.iter().map(canonical_json).collect();
        let system = counted(&canonical_json(&sent.system));
        let tools = counted(&canonical_json(&sent.tools));
        let message_tokens: Vec<usize> = sent
            .conversation
            .iter()
            .map(|m| counted(&canonical_json(m)))
            .collect();
        let generation = session.tools_generation();
        let all = match all_tools {
            Some((g, n)) if g == generation => n,
            _ => {
                let n = count(&canonical_json(&serde_json::Value::Array(
                    session.all_resident_tools(),
                )));
                all_tools = Some((generation, n));
                n
            }
        };
        let cached = match &previous {
            Some((ps, pt, pm)) if *ps == system_text && *pt == tools_text => {
                let shared = pm.iter().zip(&messages).take_while(|(a, b)| a == b).count();
                system + tools + message_tokens[..shared].iter().sum::<usize>()
            }
            _ => 0,
        };
        let messages_total: usize = message_tokens.iter().sum();
        turns.push(TurnCost {
            request: turns.len() + 1,
            turn: r.turn,
            system,
            tools,
            messages: messages_total,
            total: system + tools + messages_total,
            cached,
            all_resident: system + all + messages_total,
        });
        previous = Some((system_text, tools_text, messages));
        Ok(())
    })?;
    let sum = |f: fn(&TurnCost) -> usize| turns.iter().map(f).sum::<usize>();
    let (total, cached, all_resident) =
        (sum(|t| t.total), sum(|t| t.cached), sum(|t| t.all_resident));
    if args.json {
        return print_json(&serde_json::json!({
            "requests": turns.len(),
            "format": api.name(),
            "turns": turns,
            "totals": {"input_tokens": total, "cached_tokens": cached, "all_resident_tokens": all_resident},
        }));
    }
    outln!(
        "toolshelf ledger: {} replayed over {} ({} format), {}",
        transcript.display(),
        l.catalog.source_name(),
        api.name(),
        super::count(turns.len(), "request", "requests")
    );
    outln!();
    outln!(
        "{:>7} {:>4} {:>9} {:>9} {:>9} {:>9} {:>13}",
        "request",
        "turn",
        "tools",
        "messages",
        "input",
        "cached",
        "all resident"
    );
    for t in &turns {
        outln!(
            "{:>7} {:>4} {:>9} {:>9} {:>9} {:>9} {:>13}",
            t.request,
            t.turn,
            thousands(t.tools as i128),
            thousands(t.messages as i128),
            thousands(t.total as i128),
            thousands(t.cached as i128),
            thousands(t.all_resident as i128)
        );
    }
    outln!();
    let share = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let difference = all_resident as i64 - total as i64;
    outln!(
        "session: {} input tokens, {} of them ({}) served by a prefix cache; all resident: {} ({} {})",
        thousands(total as i128),
        thousands(cached as i128),
        pct(share(cached, total)),
        thousands(all_resident as i128),
        thousands(difference.abs().into()),
        if difference < 0 { "fewer" } else { "more" }
    );
    Ok(())
}
