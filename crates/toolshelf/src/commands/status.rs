//! `toolshelf status`: the state of each server of a configuration.
//!
//! Each running gateway keeps a status file of its own next to its cache (named with its process
//! id); the files of live processes are the answer, one block per gateway. Otherwise there is no
//! gateway to ask, so the command starts every server itself (with the start-up timeouts) and
//! reports what it saw, saying which of the two it did (with `[cache] enabled = false` no
//! gateway writes a status file, so it says that it found none, not that none runs). Tool counts
//! are the tools a session can see: tools the mode or a deny rule hides are not counted. A
//! running gateway's warnings (skipped tools, renames, invalid schemas, rules that match no tool)
//! follow its table, since the client that started it usually hides its log. The exit status is
//! 1 when any server has failed, so a health check can go by it.

use std::collections::BTreeSet;

use anyhow::Result;
use toolshelf_core::Config;
use toolshelf_gateway::downstream::ServerStatus;
use toolshelf_gateway::hub::{StatusFile, cache_dir, running_gateways};

use super::serve::{GatewaySource, init_logging, runtime};
use super::{outln, print_json};

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: GatewaySource,
    /// Print JSON: {"source": "running" | "probe", "pid"?, "servers": [...], "warnings": [...],
    /// "gateways"?: [{"pid", "mode", "servers", "audit", "warnings", "config_changed"?}]}.
    /// Either way the exit status is 1 when a server has failed.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    init_logging(super::serve::ONE_SHOT_LOG);
    let mut settings = args.source.one_shot()?;
    let running = if settings.config.cache.enabled {
        running_gateways(&cache_dir(&settings.config)?, &settings.label)
    } else {
        Vec::new()
    };
    if !running.is_empty() {
        let drift = |g: &StatusFile| Drift::between(&settings.config, g);
        if args.json {
            let gateways: Vec<_> = running
                .iter()
                .map(|g| {
                    let mut v = serde_json::json!({
                        "pid": g.pid,
                        "mode": g.mode,
                        "servers": g.servers,
                        "audit": g.audit,
                        "warnings": g.warnings,
                    });
                    let d = drift(g);
                    if !d.is_empty() {
                        v["config_changed"] = serde_json::json!(d);
                    }
                    v
                })
                .collect();
            // `pid`, `servers` and `warnings` are the first gateway's, for scripts that expect one.
            print_json(&serde_json::json!({
                "source": "running",
                "pid": running[0].pid,
                "servers": running[0].servers,
                "warnings": running[0].warnings,
                "gateways": gateways,
            }))?;
            return healthy(running.iter().flat_map(|g| &g.servers));
        }
        for g in &running {
            match &g.mode {
                Some(mode) => outln!("gateway running (pid {}, mode {mode})", g.pid),
                None => outln!("gateway running (pid {})", g.pid),
            }
            if let Some(asked) = &settings.mode
                && g.mode.as_ref() != Some(asked)
            {
                outln!(
                    "note: it does not run mode {asked}; its tool counts are for {}",
                    g.mode
                        .as_deref()
                        .map_or("no mode".to_owned(), |m| format!("mode {m}"))
                );
            }
            let d = drift(g);
            if !d.is_empty() {
                outln!(
                    "note: the configuration changed after this gateway started ({}); restart it to apply the change",
                    d.describe()
                );
            }
            print_table(&g.servers)?;
            if let Some(a) = &g.audit {
                outln!(
                    "audit: {} ({} records dropped{})",
                    a.path,
                    a.dropped,
                    a.error
                        .as_deref()
                        .map(|e| format!("; failing: {e}"))
                        .unwrap_or_default()
                );
            }
            // A running gateway's log is usually hidden by the client that started it.
            print_warnings(&g.warnings)?;
        }
        return healthy(running.iter().flat_map(|g| &g.servers));
    }
    // Without the cache no gateway writes a status file: one may run all the same.
    let unseen = if settings.config.cache.enabled {
        "no gateway running for this configuration"
    } else {
        "no status file to read: with [cache] enabled = false a running gateway writes none"
    };
    settings.config.cache.enabled = false;
    let (servers, warnings) = runtime()?.block_on(async move {
        let hub = toolshelf_gateway::Hub::start(settings)?;
        hub.settled().await;
        let found = (hub.statuses(), hub.warnings());
        hub.shutdown();
        anyhow::Ok(found)
    })?;
    if args.json {
        print_json(
            &serde_json::json!({"source": "probe", "servers": servers, "warnings": warnings}),
        )?;
    } else {
        // The probe's own log has printed the warnings on stderr already.
        outln!("{unseen}; started each server to check it");
        print_table(&servers)?;
    }
    healthy(&servers)
}

/// How a running gateway's servers differ from the configuration's servers now: the status
/// file outlives edits to the file, and the table would show the old set without a word.
#[derive(serde::Serialize)]
struct Drift {
    not_running: Vec<String>,
    not_configured: Vec<String>,
}

impl Drift {
    fn between(config: &Config, gateway: &StatusFile) -> Self {
        let configured: BTreeSet<&str> = config.servers.keys().map(String::as_str).collect();
        let running: BTreeSet<&str> = gateway.servers.iter().map(|s| s.name.as_str()).collect();
        Self {
            not_running: configured
                .difference(&running)
                .map(|s| (*s).to_owned())
                .collect(),
            not_configured: running
                .difference(&configured)
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }

    fn is_empty(&self) -> bool {
        self.not_running.is_empty() && self.not_configured.is_empty()
    }

    /// `configured but not run: a; run but no longer configured: b`, the empty halves left out.
    fn describe(&self) -> String {
        [
            ("configured but not run", &self.not_running),
            ("run but no longer configured", &self.not_configured),
        ]
        .iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what}: {}", names.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// An error naming the failed servers, if any, so that a health check can go by the exit status.
fn healthy<'a>(servers: impl IntoIterator<Item = &'a ServerStatus>) -> Result<()> {
    let failed: BTreeSet<&str> = servers
        .into_iter()
        .filter(|s| s.state == "failed")
        .map(|s| s.name.as_str())
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = failed.into_iter().collect();
    Err(super::Finding(format!(
        "{} failed: {}",
        super::count(names.len(), "server", "servers"),
        names.join(", ")
    ))
    .into())
}

fn print_warnings(warnings: &[String]) -> Result<()> {
    if warnings.is_empty() {
        return Ok(());
    }
    outln!("warnings ({}):", warnings.len());
    for w in warnings {
        outln!("  {w}");
    }
    Ok(())
}

fn print_table(servers: &[ServerStatus]) -> Result<()> {
    let width = servers
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    outln!(
        "{:width$}  {:9}  {:>5}  {:>7}  reason",
        "server",
        "state",
        "tools",
        "pid"
    );
    for s in servers {
        outln!(
            "{:width$}  {:9}  {:>5}  {:>7}  {}",
            s.name,
            s.state,
            s.tools.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
            s.pid.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
            s.reason.as_deref().unwrap_or("")
        );
    }
    Ok(())
}
