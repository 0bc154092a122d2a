//! `toolshelf catalog`: start the configured servers and print their merged catalog.
//!
//! The output is toolshelf's grouped form, so `render`, `ledger` and `search` read it as is. It
//! holds what the gateway's sessions can reach: tools that `--mode` or a deny rule hides are left
//! out, as they are everywhere else, unless `--all` asks for every tool, for reading back with the
//! same configuration (whose rules then find the tools they hide, and `explain` can say why). A
//! server that fails to start is named on stderr and the
//! command fails after printing what the others gave: a partial catalog must not pass for a whole
//! one in a script.

use anyhow::Result;
use toolshelf_gateway::Hub;

use super::print_json;
use super::serve::{GatewaySource, init_logging, runtime};

/// Arguments of `catalog`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: GatewaySource,
    /// Every tool the servers list, also those the mode or a deny rule hides: for reading back
    /// with the same --config (`render`, `explain`, `ledger`), which hides them again.
    #[arg(long)]
    all: bool,
}

pub fn run(args: Args) -> Result<()> {
    init_logging(super::serve::ONE_SHOT_LOG);
    let settings = args.source.one_shot()?;
    let all = args.all;
    let (catalog, statuses) = runtime()?.block_on(async move {
        let hub = Hub::start(settings)?;
        hub.settled().await;
        let out = (hub.grouped_catalog(all), hub.statuses());
        hub.shutdown();
        anyhow::Ok(out)
    })?;
    print_json(&catalog)?;
    let failed: Vec<String> = statuses
        .iter()
        .filter(|s| s.state == "failed")
        .map(|s| format!("{}: {}", s.name, s.reason.as_deref().unwrap_or("failed")))
        .collect();
    if !failed.is_empty() {
        let servers = super::count(failed.len(), "server", "servers");
        let their = if failed.len() == 1 { "its" } else { "their" };
        return Err(super::Finding(format!(
            "{servers} did not start, the catalog above lacks {their} tools:\n  {}",
            failed.join("\n  ")
        ))
        .into());
    }
    Ok(())
}
