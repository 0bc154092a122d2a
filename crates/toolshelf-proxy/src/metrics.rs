//! What the proxy records for Prometheus, served at `GET /metrics` (the recorder and the text
//! format are `toolshelf_runtime::metrics`).
//!
//! Every figure of the status totals is mirrored by a counter, in one place: [`Proxy::count`]
//! passes each change here (`totals_moved`), so `/toolshelf/status` and `/metrics` cannot
//! disagree. What the totals do not hold is recorded where it happens: calls by outcome and
//! refusals by reason, the duration and outcome of each search, and the rounds the proxy
//! answered itself per request.
//!
//! Every counter is registered at 0 when the recorder is installed ([`register`]), the labelled
//! ones with each value of their label, so a scrape of a proxy that has served nothing yet
//! already lists them all. The gauges (sessions held, the store's health) are set from the
//! proxy's state at every scrape ([`scraped`]); the build's version is a gauge of its own,
//! `toolshelf_build_info` ([`toolshelf_runtime::metrics::build_info`]), set once.
//!
//! [`Proxy::count`]: crate::Proxy::count

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

use crate::Totals;

/// Client requests.
pub const REQUESTS: &str = "toolshelf_proxy_requests_total";
/// Requests rewritten.
pub const REWRITTEN: &str = "toolshelf_proxy_requests_rewritten_total";
/// Requests passed through as sent.
pub const PASSED: &str = "toolshelf_proxy_requests_passed_total";
/// Requests that ended in an error.
pub const ERRORS: &str = "toolshelf_proxy_request_errors_total";
/// Requests whose client went away before their answer was whole.
pub const ABANDONED: &str = "toolshelf_proxy_requests_abandoned_total";
/// Upstream rounds.
pub const ROUNDS: &str = "toolshelf_proxy_upstream_rounds_total";
/// Upstream tokens by `kind`.
pub const TOKENS: &str = "toolshelf_proxy_upstream_tokens_total";
/// Tool-list tokens saved.
pub const TOKENS_SAVED: &str = "toolshelf_proxy_tool_tokens_saved_total";
/// Prefix breaks.
pub const PREFIX_BREAKS: &str = "toolshelf_proxy_prefix_breaks_total";
/// Requests whose conversation had earlier turns but no session.
pub const SESSIONS_MISSING: &str = "toolshelf_proxy_sessions_missing_total";
/// Failed store operations.
pub const STORE_ERRORS: &str = "toolshelf_proxy_store_errors_total";
/// Session writes that met a concurrent write.
pub const STORE_CONFLICTS: &str = "toolshelf_proxy_store_conflicts_total";
/// Tool calls the proxy judged, by `outcome`.
pub const CALLS: &str = "toolshelf_proxy_calls_total";
/// Refused calls by `reason`.
pub const REFUSED: &str = "toolshelf_proxy_refused_calls_total";
/// `tool_search` calls by `outcome`.
pub const SEARCHES: &str = "toolshelf_proxy_searches_total";
/// How long each search took.
pub const SEARCH_SECONDS: &str = "toolshelf_proxy_search_duration_seconds";
/// Rounds the proxy answered itself, per finished request.
pub const SEARCH_ROUNDS: &str = "toolshelf_proxy_search_rounds";
/// Live sessions the embedded store evicted to stay within `[proxy] max_sessions`.
pub const SESSIONS_EVICTED: &str = "toolshelf_proxy_sessions_evicted_total";
/// Sessions the store holds, when scraped.
pub const SESSIONS: &str = "toolshelf_proxy_sessions";
/// 1 while the session store answers, 0 while its operations fail.
pub const STORE_UP: &str = "toolshelf_proxy_store_up";
/// Audit records that could not be written, since start.
pub const AUDIT_DROPPED: &str = "toolshelf_proxy_audit_dropped_total";

/// Installs the process's recorder, describes the proxy's metrics and registers its counters
/// at 0 ([`register`]).
pub fn install() -> Result<(), String> {
    toolshelf_runtime::metrics::install()?;
    describe();
    register();
    toolshelf_runtime::metrics::build_info();
    Ok(())
}

/// The labels each labelled counter is registered with at start: every value it can take.
const LABELS: &[(&str, &str, &[&str])] = &[
    (
        TOKENS,
        "kind",
        &["input", "output", "cache_read", "cache_creation"],
    ),
    (CALLS, "outcome", &["forwarded", "refused", "ran"]),
    (
        SEARCHES,
        "outcome",
        &["ok", "no_match", "invalid", "engine_failure"],
    ),
];

/// Every refusal reason, for [`REFUSED`]'s labels.
fn refusal_reasons() -> Vec<&'static str> {
    toolshelf_core::invoke::RefusalKind::ALL
        .into_iter()
        .map(|k| k.as_str())
        .collect()
}

/// Registers every counter at 0, so that each has a sample from the first scrape (a series that
/// appears only when it first moves has no start for `rate` and `increase` to measure from):
/// the unlabelled ones, and the labelled ones with each value their label takes.
pub fn register() {
    for name in [
        REQUESTS,
        REWRITTEN,
        PASSED,
        ERRORS,
        ABANDONED,
        ROUNDS,
        TOKENS_SAVED,
        PREFIX_BREAKS,
        SESSIONS_MISSING,
        STORE_ERRORS,
        STORE_CONFLICTS,
        SESSIONS_EVICTED,
    ] {
        counter!(name).increment(0);
    }
    for (name, label, values) in LABELS {
        for value in *values {
            counter!(*name, *label => *value).increment(0);
        }
    }
    for reason in refusal_reasons() {
        counter!(REFUSED, "reason" => reason).increment(0);
    }
}

/// The `# HELP` lines.
pub fn describe() {
    for (name, help) in [
        (REQUESTS, "Client requests received."),
        (REWRITTEN, "Requests rewritten (deferred loading applied)."),
        (PASSED, "Requests passed through as sent."),
        (
            ERRORS,
            "Requests that ended in an error: refused by the proxy, upstream errors, streams cut.",
        ),
        (
            ABANDONED,
            "Rewritten requests whose client went away before their answer was whole (a cancelled turn, a client timeout).",
        ),
        (ROUNDS, "Upstream rounds sent for rewritten requests."),
        (
            TOKENS,
            "Tokens the upstreams reported for rewritten requests, by kind: input, output, cache_read (OpenAI cached tokens included), cache_creation. Requests passed through as sent are not counted.",
        ),
        (
            TOKENS_SAVED,
            "o200k tokens of the client's tool list minus those of the list sent, times the rounds, of requests that saved (one whose list sent cost more adds nothing; the status's tokens_saved is the signed sum).",
        ),
        (
            PREFIX_BREAKS,
            "Requests whose upstream body did not continue the previous request's byte for byte.",
        ),
        (
            SESSIONS_MISSING,
            "Requests whose conversation had earlier turns but no session (expired, evicted, or lost by the store): its activations went with it.",
        ),
        (
            STORE_ERRORS,
            "Session store operations that failed (the request went on without its session).",
        ),
        (
            STORE_CONFLICTS,
            "Session writes that met a concurrent write and were merged.",
        ),
        (
            SESSIONS_EVICTED,
            "Live sessions the embedded store evicted, least recently used first, to stay within [proxy] max_sessions: each costs its conversation its session.",
        ),
        (
            CALLS,
            "Tool calls the proxy judged, by outcome: forwarded (to the client to run), ran (a script, model-authored tool or tool_define the proxy ran itself) or refused (answered to the model).",
        ),
        (REFUSED, "Refused calls by reason."),
        (
            SEARCHES,
            "tool_search calls answered, by outcome: ok, no_match, invalid, engine_failure.",
        ),
    ] {
        describe_counter!(name, Unit::Count, help);
    }
    describe_histogram!(
        SEARCH_SECONDS,
        Unit::Seconds,
        "Time to answer one tool_search call."
    );
    describe_histogram!(
        SEARCH_ROUNDS,
        Unit::Count,
        "Upstream rounds the proxy answered itself (searches, refusals) per finished request."
    );
    describe_gauge!(
        SESSIONS,
        "Sessions the store holds (for Redis, the keys under the prefix as last counted)."
    );
    describe_gauge!(
        STORE_UP,
        "1 while the session store answers, 0 while its reads or writes fail (see /toolshelf/status for since when and why)."
    );
    describe_counter!(
        AUDIT_DROPPED,
        "Audit records that could not be written, since start (set at every scrape while a log is kept)."
    );
}

/// Sets the gauges from the proxy's state, as a scrape finds it: the sessions `store` holds,
/// whether it answers (a store that keeps no account of its health counts as answering) and the
/// audit records dropped (when a log is kept).
pub fn scraped(
    store: &dyn crate::store::SessionStore,
    audit: Option<&toolshelf_runtime::audit::AuditStatus>,
) {
    gauge!(SESSIONS).set(store.len() as f64);
    let up = store.health().is_none_or(|h| h.up);
    gauge!(STORE_UP).set(if up { 1.0 } else { 0.0 });
    if let Some(a) = audit {
        counter!(AUDIT_DROPPED).absolute(a.dropped);
    }
}

/// Mirrors the growth of the status totals.
pub(crate) fn totals_moved(before: &Totals, after: &Totals) {
    let up = |name: &'static str, b: u64, a: u64| {
        if a > b {
            counter!(name).increment(a - b);
        }
    };
    up(REQUESTS, before.requests, after.requests);
    up(REWRITTEN, before.rewritten, after.rewritten);
    up(PASSED, before.passed, after.passed);
    up(ERRORS, before.errors, after.errors);
    up(ABANDONED, before.abandoned, after.abandoned);
    up(ROUNDS, before.rounds, after.rounds);
    up(TOKENS_SAVED, before.tokens_saved, after.tokens_saved);
    up(PREFIX_BREAKS, before.prefix_breaks, after.prefix_breaks);
    up(
        SESSIONS_MISSING,
        before.sessions_missing,
        after.sessions_missing,
    );
    up(STORE_ERRORS, before.store_errors, after.store_errors);
    up(
        STORE_CONFLICTS,
        before.store_conflicts,
        after.store_conflicts,
    );
    let (b, a) = (&before.tokens, &after.tokens);
    for (kind, b, a) in [
        ("input", b.input, a.input),
        ("output", b.output, a.output),
        ("cache_read", b.cache_read, a.cache_read),
        ("cache_creation", b.cache_creation, a.cache_creation),
    ] {
        if a > b {
            counter!(TOKENS, "kind" => kind).increment(a - b);
        }
    }
}

/// A call handed to the client to run.
pub(crate) fn forwarded() {
    counter!(CALLS, "outcome" => "forwarded").increment(1);
}

/// A call of one of the proxy's own tools, run by the proxy.
pub(crate) fn ran() {
    counter!(CALLS, "outcome" => "ran").increment(1);
}

/// A call answered to the model with a refusal.
pub(crate) fn refused(reason: &'static str) {
    counter!(CALLS, "outcome" => "refused").increment(1);
    counter!(REFUSED, "reason" => reason).increment(1);
}

/// A search answered.
pub(crate) fn searched(outcome: &'static str, took: Duration) {
    counter!(SEARCHES, "outcome" => outcome).increment(1);
    histogram!(SEARCH_SECONDS).record(took.as_secs_f64());
}

/// A request finished after `rounds` upstream rounds.
pub(crate) fn finished(rounds: u32) {
    histogram!(SEARCH_ROUNDS).record(f64::from(rounds.saturating_sub(1)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_totals_are_mirrored_by_their_growth() {
        let r = toolshelf_runtime::metrics::recorder();
        let handle = r.handle();
        metrics::with_local_recorder(&r, || {
            describe();
            let mut t = Totals::default();
            let before = t.clone();
            t.requests = 3;
            t.tokens.cache_read = 40;
            t.store_errors = 1;
            totals_moved(&before, &t);
            let again = t.clone();
            t.requests = 4;
            totals_moved(&again, &t);
            refused("not_loaded");
            forwarded();
            searched("ok", Duration::from_micros(700));
            finished(3);
        });
        let text = handle.render();
        for line in [
            "toolshelf_proxy_requests_total 4",
            "toolshelf_proxy_upstream_tokens_total{kind=\"cache_read\"} 40",
            "toolshelf_proxy_store_errors_total 1",
            "toolshelf_proxy_calls_total{outcome=\"refused\"} 1",
            "toolshelf_proxy_calls_total{outcome=\"forwarded\"} 1",
            "toolshelf_proxy_refused_calls_total{reason=\"not_loaded\"} 1",
            "toolshelf_proxy_searches_total{outcome=\"ok\"} 1",
            "toolshelf_proxy_search_duration_seconds_bucket{le=\"0.001\"} 1",
            "toolshelf_proxy_search_rounds_bucket{le=\"2\"} 1",
            "# HELP toolshelf_proxy_store_errors_total Session store operations that failed",
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
        assert!(
            !text.contains("toolshelf_proxy_request_errors_total "),
            "nothing moved or registered, nothing written: {text}"
        );
    }

    #[test]
    fn the_gauges_are_read_from_the_store_when_scraped() {
        let r = toolshelf_runtime::metrics::recorder();
        let handle = r.handle();
        metrics::with_local_recorder(&r, || {
            describe();
            register();
            toolshelf_runtime::metrics::build_info();
            let store = crate::store::Logged::new(std::sync::Arc::new(
                crate::store::MemoryStore::new(5, None),
            ));
            scraped(&store, None);
        });
        let text = handle.render();
        for line in [
            "toolshelf_proxy_sessions 0",
            "toolshelf_proxy_store_up 1",
            "toolshelf_proxy_sessions_evicted_total 0",
            &format!(
                "toolshelf_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            ),
            "# TYPE toolshelf_proxy_store_up gauge",
            "# HELP toolshelf_proxy_store_up 1 while the session store answers",
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
    }

    #[test]
    fn every_counter_is_registered_at_zero() {
        let r = toolshelf_runtime::metrics::recorder();
        let handle = r.handle();
        metrics::with_local_recorder(&r, || {
            describe();
            register();
            forwarded();
        });
        let text = handle.render();
        let mut lines = vec![
            "toolshelf_proxy_requests_total 0".to_owned(),
            "toolshelf_proxy_request_errors_total 0".to_owned(),
            "toolshelf_proxy_store_conflicts_total 0".to_owned(),
            "toolshelf_proxy_upstream_tokens_total{kind=\"cache_creation\"} 0".to_owned(),
            "toolshelf_proxy_calls_total{outcome=\"ran\"} 0".to_owned(),
            "toolshelf_proxy_calls_total{outcome=\"forwarded\"} 1".to_owned(),
            "toolshelf_proxy_searches_total{outcome=\"engine_failure\"} 0".to_owned(),
        ];
        lines.extend(
            refusal_reasons()
                .iter()
                .map(|r| format!("toolshelf_proxy_refused_calls_total{{reason=\"{r}\"}} 0")),
        );
        for line in lines {
            assert!(text.contains(&line), "{line} not in:\n{text}");
        }
        assert_eq!(refusal_reasons().len(), 16);
        assert!(refusal_reasons().contains(&"not_loaded"));
    }
}
