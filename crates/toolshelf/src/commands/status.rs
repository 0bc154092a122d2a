//! `toolshelf status`: the state of each server of a configuration.
//!
//! A running gateway keeps a status file next to its cache; when its process is alive, that file
//! is the answer. Otherwise there is no gateway to ask, so the command starts every server itself
//! (with the start-up timeouts) and reports what it saw, saying which of the two it did.

use anyhow::Result;
use toolshelf_gateway::downstream::ServerStatus;
use toolshelf_gateway::hub::{StatusFile, cache_dir, status_path};

use super::serve::{GatewaySource, init_logging, runtime};
use super::{outln, print_json};

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: GatewaySource,
    /// Print JSON: {"source": "running" | "probe", "pid"?, "servers": [...]}.
    #[arg(long)]
    json: bool,
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

pub fn run(args: Args) -> Result<()> {
    init_logging("warn");
    let mut settings = args.source.one_shot()?;
    let path = status_path(&cache_dir(&settings.config), &settings.label);
    let running = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<StatusFile>(&t).ok())
        .filter(|s| alive(s.pid));
    let (source, pid, servers) = match running {
        Some(s) => ("running", Some(s.pid), s.servers),
        None => {
            settings.config.cache.enabled = false;
            let servers = runtime()?.block_on(async move {
                let hub = toolshelf_gateway::Hub::start(settings)?;
                hub.settled().await;
                let s = hub.statuses();
                hub.shutdown();
                anyhow::Ok(s)
            })?;
            ("probe", None, servers)
        }
    };
    if args.json {
        let mut v = serde_json::json!({"source": source, "servers": servers});
        if let Some(pid) = pid {
            v["pid"] = pid.into();
        }
        return print_json(&v);
    }
    match pid {
        Some(pid) => outln!("gateway running (pid {pid})"),
        None => {
            outln!("no gateway running for this configuration; started each server to check it")
        }
    }
    print_table(&servers)
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
