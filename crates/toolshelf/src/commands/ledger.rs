//! `toolshelf ledger`: the per-turn cost of the surface and what deferral saves.

use anyhow::Result;
use toolshelf_core::Ledger;

use super::{FormatArg, outln, print_json};
use crate::inputs::Source;

/// Arguments of `ledger`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: Source,
    /// Context window in tokens (default: [defer] window, 200000).
    #[arg(long, value_name = "TOKENS")]
    window: Option<u64>,
    /// Wire format whose serialized definitions are measured.
    #[arg(long, value_enum, default_value_t)]
    format: FormatArg,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn thousands(n: i64) -> String {
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

pub fn run(args: Args) -> Result<()> {
    let l = args.source.load()?;
    l.warn_index();
    let window = args.window.unwrap_or(l.config().defer.window);
    anyhow::ensure!(window > 0, "--window must be a positive number of tokens");
    let ledger = Ledger::compute(&l.catalog, &l.surface, args.format.into(), window);
    if args.json {
        return print_json(&ledger);
    }
    let g = &ledger;
    outln!(
        "toolshelf ledger: {} ({} format, window {} tokens)",
        l.catalog.source_name(),
        g.format,
        thousands(window as i64)
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
        "{:<24}{:>10}{:>10}{:>10}",
        "per turn",
        "chars",
        "tokens",
        "window"
    );
    let row = |label: &str, chars: i64, tokens: i64, share: Option<f64>| -> Result<()> {
        outln!(
            "{label:<24}{:>10}{:>10}{:>10}",
            thousands(chars),
            thousands(tokens),
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
            thousands(big.chars as i64),
            pct(big.share_of_deferred)
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
