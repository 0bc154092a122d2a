//! What the gateway records for Prometheus, served at `GET /metrics` by `serve --http` (the
//! recorder and the text format are `toolshelf_runtime::metrics`).
//!
//! Calls, refusals and searches are counted from the audit records, the one place every call's
//! outcome is written (`audited`, called for each record whether or not a log is kept), so
//! the metrics and the audit log cannot disagree. Search durations are timed at the search
//! seam; server states, the open HTTP sessions and the audit records dropped are read from the
//! hub and the listener when scraped ([`servers`], [`scraped`]). Sessions refused at
//! `[http] max_sessions` are counted as they are refused (`session_refused`), and the build's
//! version is a gauge of its own, `toolshelf_build_info`
//! ([`toolshelf_runtime::metrics::build_info`]), set at install.

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use toolshelf_core::audit::{AuditKind, AuditRecord};

use crate::downstream::ServerStatus;

/// Calls by `outcome`.
pub const CALLS: &str = "toolshelf_gateway_calls_total";
/// Refused calls by `reason`.
pub const REFUSED: &str = "toolshelf_gateway_refused_calls_total";
/// `tool_search` calls by `outcome`.
pub const SEARCHES: &str = "toolshelf_gateway_searches_total";
/// How long each search took.
pub const SEARCH_SECONDS: &str = "toolshelf_gateway_search_duration_seconds";
/// Hooks that failed or timed out.
pub const HOOK_FAILURES: &str = "toolshelf_gateway_hook_failures_total";
/// 1 for each server's current `state`, 0 for the others.
pub const SERVER_STATE: &str = "toolshelf_gateway_server_state";
/// Failed starts and crashes per server.
pub const SERVER_FAILURES: &str = "toolshelf_gateway_server_failures_total";

/// Open HTTP sessions, when scraped.
pub const HTTP_SESSIONS: &str = "toolshelf_gateway_http_sessions";
/// `initialize` requests refused at `[http] max_sessions`.
pub const SESSIONS_REFUSED: &str = "toolshelf_gateway_sessions_refused_total";
/// Audit records that could not be written.
pub const AUDIT_DROPPED: &str = "toolshelf_gateway_audit_dropped_total";

/// The states a server can be in, as `toolshelf status` names them.
pub const STATES: [&str; 5] = ["cached", "starting", "ready", "failed", "disabled"];

/// Installs the process's recorder and describes the gateway's metrics.
pub fn install() -> Result<(), String> {
    toolshelf_runtime::metrics::install()?;
    describe();
    toolshelf_runtime::metrics::build_info();
    Ok(())
}

/// The `# HELP` lines.
pub fn describe() {
    describe_counter!(
        CALLS,
        Unit::Count,
        "Calls by outcome: ok, tool_error, the failure (unavailable, timeout, crashed, error, cancelled), or refused."
    );
    describe_counter!(
        REFUSED,
        Unit::Count,
        "Calls refused before they ran, by reason (as the audit log's outcome)."
    );
    describe_counter!(
        SEARCHES,
        Unit::Count,
        "tool_search calls by outcome: ok, no_match, invalid, engine_failure, cancelled."
    );
    describe_counter!(
        HOOK_FAILURES,
        Unit::Count,
        "Hooks that failed or timed out (each a hook_error record of the audit log)."
    );
    describe_histogram!(
        SEARCH_SECONDS,
        Unit::Seconds,
        "Time to answer one tool_search call."
    );
    describe_gauge!(
        SERVER_STATE,
        "1 for the state each MCP server is in (cached, starting, ready, failed, disabled), 0 for the others."
    );
    describe_counter!(
        SERVER_FAILURES,
        Unit::Count,
        "Failed starts and crashes of each MCP server."
    );
    describe_gauge!(HTTP_SESSIONS, "Open HTTP client sessions.");
    describe_counter!(
        SESSIONS_REFUSED,
        Unit::Count,
        "HTTP initialize requests refused because [http] max_sessions sessions were open."
    );
    describe_counter!(
        AUDIT_DROPPED,
        Unit::Count,
        "Audit records that could not be written to the audit log, since start."
    );
}

/// Serving HTTP: the sessions' figures are written from the first scrape, at 0.
pub fn serving_http() {
    gauge!(HTTP_SESSIONS).set(0.0);
    counter!(SESSIONS_REFUSED).increment(0);
}

/// An HTTP session refused at the limit.
pub(crate) fn session_refused() {
    counter!(SESSIONS_REFUSED).increment(1);
}

/// Sets what a scrape reads of the listener and the hub: the open HTTP sessions and the audit
/// records dropped (when a log is kept).
pub fn scraped(http_sessions: usize, audit: Option<&crate::audit::AuditStatus>) {
    gauge!(HTTP_SESSIONS).set(http_sessions as f64);
    if let Some(a) = audit {
        counter!(AUDIT_DROPPED).absolute(a.dropped);
    }
}

/// Counts what an audit record says happened.
pub(crate) fn audited(r: &AuditRecord) {
    let outcome = r.outcome.clone().unwrap_or_else(|| "unknown".into());
    match r.kind {
        AuditKind::Call => counter!(CALLS, "outcome" => outcome).increment(1),
        AuditKind::Refused | AuditKind::Hidden => {
            counter!(CALLS, "outcome" => "refused").increment(1);
            counter!(REFUSED, "reason" => outcome).increment(1);
        }
        AuditKind::Search => counter!(SEARCHES, "outcome" => outcome).increment(1),
        AuditKind::HookError => counter!(HOOK_FAILURES).increment(1),
        _ => {}
    }
}

/// A search answered.
pub(crate) fn searched(took: Duration) {
    histogram!(SEARCH_SECONDS).record(took.as_secs_f64());
}

/// Sets the server gauges from their statuses.
pub fn servers(statuses: &[ServerStatus]) {
    for s in statuses {
        for state in STATES {
            let on = if s.state == state { 1.0 } else { 0.0 };
            gauge!(SERVER_STATE, "server" => s.name.clone(), "state" => state).set(on);
        }
        counter!(SERVER_FAILURES, "server" => s.name.clone()).absolute(s.failures_total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_dropped_records_become_metrics() {
        let r = toolshelf_runtime::metrics::recorder();
        let handle = r.handle();
        metrics::with_local_recorder(&r, || {
            describe();
            serving_http();
            let audit = crate::audit::AuditStatus {
                path: "/var/log/a.jsonl".into(),
                required: false,
                dropped: 3,
                error: Some("no space".into()),
            };
            scraped(2, Some(&audit));
            session_refused();
            scraped(1, Some(&audit));
        });
        let text = handle.render();
        for line in [
            "toolshelf_gateway_http_sessions 1",
            "toolshelf_gateway_sessions_refused_total 1",
            "toolshelf_gateway_audit_dropped_total 3",
            "# TYPE toolshelf_gateway_http_sessions gauge",
            "# HELP toolshelf_gateway_audit_dropped_total Audit records",
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
    }

    #[test]
    fn audit_records_and_statuses_become_metrics() {
        let r = toolshelf_runtime::metrics::recorder();
        let handle = r.handle();
        metrics::with_local_recorder(&r, || {
            let record = |kind, outcome: &str| {
                let mut r = AuditRecord::new(0, kind);
                r.outcome = Some(outcome.into());
                r
            };
            audited(&record(AuditKind::Call, "ok"));
            audited(&record(AuditKind::Call, "timeout"));
            audited(&record(AuditKind::Refused, "not_loaded"));
            audited(&record(AuditKind::Hidden, "hidden"));
            audited(&record(AuditKind::Search, "no_match"));
            audited(&record(AuditKind::Session, "start"));
            audited(&AuditRecord::new(0, AuditKind::HookError));
            searched(Duration::from_millis(3));
            servers(&[ServerStatus {
                name: "fs".into(),
                state: "failed".into(),
                reason: Some("exited".into()),
                tools: None,
                pid: None,
                transport: "stdio".into(),
                failures: 1,
                failures_total: 2,
            }]);
        });
        let text = handle.render();
        for line in [
            "toolshelf_gateway_calls_total{outcome=\"ok\"} 1",
            "toolshelf_gateway_calls_total{outcome=\"timeout\"} 1",
            "toolshelf_gateway_calls_total{outcome=\"refused\"} 2",
            "toolshelf_gateway_refused_calls_total{reason=\"not_loaded\"} 1",
            "toolshelf_gateway_refused_calls_total{reason=\"hidden\"} 1",
            "toolshelf_gateway_searches_total{outcome=\"no_match\"} 1",
            "toolshelf_gateway_hook_failures_total 1",
            "toolshelf_gateway_search_duration_seconds_bucket{le=\"0.005\"} 1",
            "toolshelf_gateway_server_state{server=\"fs\",state=\"failed\"} 1",
            "toolshelf_gateway_server_state{server=\"fs\",state=\"ready\"} 0",
            "toolshelf_gateway_server_failures_total{server=\"fs\"} 2",
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
        assert!(
            !text.contains("=\"start\""),
            "a session record counts nothing: {text}"
        );
    }
}
