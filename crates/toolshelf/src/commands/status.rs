//! `toolshelf status`: the state of each server of a configuration.
//!
//! Each running gateway keeps a status file of its own next to its cache (named with its process
//! id); the files of live processes are the answer, one block per gateway. Otherwise there is no
//! gateway to ask, so the command starts every server itself (with the start-up timeouts) and
//! reports what it saw, saying which of the two it did (with `[cache] enabled = false` no
//! gateway writes a status file, so it says that it found none, not that none runs). Tool counts
//! are the tools a session can see: tools the mode or a deny rule hides are not counted. A
//! running gateway's warnings (skipped tools, renames, invalid schemas, rules that match no tool)
//! follow its table, since the client that started it usually hides its log. A health check can
//! go by the exit status: 0 when a gateway runs and is healthy, 1 when a server of it has failed
//! or its required audit log cannot be written, 3 ([`NOT_RUNNING`]) when no running gateway was
//! found (whatever the probe of the servers found, which the table and the error still name),
//! and 2 when the command could not run.

use std::collections::BTreeSet;

use anyhow::Result;
use toolshelf_core::Config;
use toolshelf_gateway::audit::AuditStatus;
use toolshelf_gateway::downstream::ServerStatus;
use toolshelf_gateway::hub::{StatusFile, cache_dir, running_gateways};

use super::serve::{GatewaySource, init_logging, runtime};
use super::{cell, outln, print_json};

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: GatewaySource,
    /// Print JSON: {"source": "running" | "probe", "running": true | false, "pid"?, "servers":
    /// [...], "warnings": [...], "gateways": [{"pid", "mode", "servers", "audit", "warnings",
    /// "http"?: {"max_sessions", "sessions_refused"}, "config_changed"?}], "note"?}. The exit status is the same either way: 0 when a gateway
    /// runs and is healthy, 1 when a server of it has failed or its required audit log cannot be
    /// written, 2 when the status cannot be read, 3 when no running gateway was found
    /// ("running": false; with [cache] enabled = false none can be, as a gateway keeps its
    /// status file only with the cache enabled, and "note" says so).
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    init_logging(super::serve::ONE_SHOT_LOG);
    let mut settings = args.source.one_shot()?;
    // A mode the configuration does not define is refused as `serve` refuses it, whether or not
    // a gateway runs.
    if let Some(m) = &settings.mode
        && !settings.config.modes.contains_key(m)
    {
        return Err(toolshelf_core::Error::UnknownMode {
            name: m.clone(),
            available: settings.config.modes.keys().cloned().collect(),
        }
        .into());
    }
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
                    if let Some(http) = &g.http {
                        v["http"] = serde_json::json!(http);
                    }
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
                "running": true,
                "pid": running[0].pid,
                "servers": running[0].servers,
                "warnings": running[0].warnings,
                "gateways": gateways,
            }))?;
            return healthy(
                running.iter().flat_map(|g| &g.servers),
                running.iter().filter_map(|g| g.audit.as_ref()),
            );
        }
        for g in &running {
            match g.mode.as_deref().map(cell) {
                Some(mode) => outln!("gateway running (pid {}, mode {mode})", g.pid),
                None => outln!("gateway running (pid {})", g.pid),
            }
            if let Some(asked) = &settings.mode
                && g.mode.as_ref() != Some(asked)
            {
                outln!(
                    "note: it does not run mode {}; its tool counts are for {}",
                    cell(asked),
                    g.mode
                        .as_deref()
                        .map_or("no mode".to_owned(), |m| format!("mode {}", cell(m)))
                );
            }
            let d = drift(g);
            if !d.is_empty() {
                outln!(
                    "note: the configuration changed after this gateway started ({}); restart it to apply the change",
                    cell(&d.describe())
                );
            }
            print_table(&g.servers)?;
            if let Some(a) = &g.audit {
                outln!(
                    "audit: {} ({} records dropped{})",
                    cell(&a.path),
                    a.dropped,
                    a.error
                        .as_deref()
                        .map(|e| format!("; failing: {}", cell(e)))
                        .unwrap_or_default()
                );
            }
            if let Some(h) = &g.http {
                outln!(
                    "http: at most {} sessions at once ([http] max_sessions); {} refused at that limit",
                    h.max_sessions,
                    h.sessions_refused
                );
            }
            // A running gateway's log is usually hidden by the client that started it.
            print_warnings(&g.warnings)?;
        }
        return healthy(
            running.iter().flat_map(|g| &g.servers),
            running.iter().filter_map(|g| g.audit.as_ref()),
        );
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
        print_json(&serde_json::json!({
            "source": "probe",
            "running": false,
            "note": unseen,
            "servers": servers,
            "warnings": warnings,
            "gateways": [],
        }))?;
    } else {
        // The probe's own log has printed the warnings on stderr already.
        outln!("{unseen}; started each server to check it");
        print_table(&servers)?;
    }
    // No gateway to report on is no healthy gateway: the probe's findings are said too.
    let probed = match healthy(&servers, []) {
        Ok(()) => "no server failed".to_owned(),
        Err(found) => found.to_string(),
    };
    Err(NotRunning(format!(
        "{unseen} (the servers were started to check them: {probed})"
    ))
    .into())
}

/// The exit status of `status` when no running gateway was found.
pub const NOT_RUNNING: u8 = 3;

/// No running gateway of the configuration was found: exit status [`NOT_RUNNING`], so that a
/// health check tells it from a healthy gateway (0) and from a failed server (1).
#[derive(Debug)]
pub struct NotRunning(pub String);

impl std::fmt::Display for NotRunning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRunning {}

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

/// An error naming the failed servers and the required audit logs that cannot be written (every
/// call of that gateway is refused), if any, so that a health check can go by the exit status.
fn healthy<'a>(
    servers: impl IntoIterator<Item = &'a ServerStatus>,
    audit: impl IntoIterator<Item = &'a AuditStatus>,
) -> Result<()> {
    let failed: BTreeSet<&str> = servers
        .into_iter()
        .filter(|s| s.state == "failed")
        .map(|s| s.name.as_str())
        .collect();
    let mut problems = Vec::new();
    if !failed.is_empty() {
        let names: Vec<String> = failed.into_iter().map(cell).collect();
        problems.push(format!(
            "{} failed: {}",
            super::count(names.len(), "server", "servers"),
            names.join(", ")
        ));
    }
    let refusing: BTreeSet<&str> = audit
        .into_iter()
        .filter(|a| a.required && a.error.is_some())
        .map(|a| a.path.as_str())
        .collect();
    for path in refusing {
        problems.push(format!(
            "the audit log {} cannot be written, and calls are refused until it can ([audit] required = true)",
            cell(path)
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(super::Finding(problems.join("; ")).into())
}

fn print_warnings(warnings: &[String]) -> Result<()> {
    if warnings.is_empty() {
        return Ok(());
    }
    outln!("warnings ({}):", warnings.len());
    for w in warnings {
        outln!("  {}", cell(w));
    }
    Ok(())
}

fn print_table(servers: &[ServerStatus]) -> Result<()> {
    outln!("{}", table(servers));
    Ok(())
}

/// The servers as a table, a line each after the heading, without a final newline.
fn table(servers: &[ServerStatus]) -> String {
    let rows: Vec<[String; 5]> = servers
        .iter()
        .map(|s| {
            [
                cell(&s.name),
                cell(&s.state),
                s.tools.map_or_else(|| "-".into(), |n| n.to_string()),
                s.pid.map_or_else(|| "-".into(), |n| n.to_string()),
                cell(s.reason.as_deref().unwrap_or("")),
            ]
        })
        .collect();
    let width = rows
        .iter()
        .map(|r| r[0].chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:width$}  {:9}  {:>5}  {:>7}  reason",
        "server", "state", "tools", "pid"
    );
    for [name, state, tools, pid, reason] in &rows {
        out.push_str(&format!(
            "\n{name:width$}  {state:9}  {tools:>5}  {pid:>7}  {reason}"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, state: &str, reason: Option<&str>) -> ServerStatus {
        ServerStatus {
            name: name.into(),
            state: state.into(),
            reason: reason.map(Into::into),
            tools: None,
            pid: None,
            transport: "stdio".into(),
            failures: 0,
            failures_total: 0,
        }
    }

    #[test]
    fn control_characters_cannot_forge_rows_of_the_table() {
        let servers = [
            server(
                "evil\nforged     ready          9        1  ",
                "failed",
                Some("it said \"bye\"\r\u{1b}[2Kgone\u{202e}"),
            ),
            server("ok\tname", "ready\n", None),
        ];
        let table = table(&servers);
        assert_eq!(
            table.lines().collect::<Vec<_>>(),
            [
                "server                                        state      tools      pid  reason",
                "evil\\nforged     ready          9        1    failed         -        -  \
                 it said \"bye\"\\r\\u{1b}[2Kgone\\u{202e}",
                "ok\\tname                                      ready\\n        -        -  ",
            ],
            "{table}"
        );
        // Printable text is left alone: quotes, backslashes, other scripts.
        assert_eq!(cell(r#"a "b" \ c ü"#), r#"a "b" \ c ü"#);
    }
}
