//! Audit records: one JSON line per search, call, decision and error.
//!
//! The record type lives in the core so its shape is defined once and tested without a file;
//! the gateway stamps the time and appends. Fields that do not apply are left out, so `jq`
//! filters stay short (`select(.kind == "hidden")`). Whatever the caller sent is logged in
//! bounded form ([`capped_params`], [`crate::echo::echo`]): a megabyte of params must not become
//! a megabyte of log per call.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::invoke::Via;

/// Longest params object logged whole, in bytes of compact JSON.
pub const PARAMS_BYTES: usize = 4096;

/// `params` as logged: whole when small; else each string cut to 200 characters, and when
/// that is still too long, a note with the size and the top-level keys instead.
pub fn capped_params(params: &Map<String, Value>) -> Map<String, Value> {
    let size = |m: &Map<String, Value>| serde_json::to_string(m).map_or(usize::MAX, |s| s.len());
    let full = size(params);
    if full <= PARAMS_BYTES {
        return params.clone();
    }
    fn cut(v: &Value) -> Value {
        match v {
            Value::String(s) if s.chars().count() > 200 => Value::String(crate::echo::echo(s)),
            Value::Array(items) => Value::Array(items.iter().take(20).map(cut).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .take(50)
                    .map(|(k, v)| (crate::echo::echo(k), cut(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let mut shortened: Map<String, Value> = params
        .iter()
        .take(50)
        .map(|(k, v)| (crate::echo::echo(k), cut(v)))
        .collect();
    shortened.insert("_truncated_bytes".into(), full.into());
    if size(&shortened) <= PARAMS_BYTES {
        return shortened;
    }
    let mut note = Map::new();
    note.insert("_truncated_bytes".into(), full.into());
    note.insert(
        "_keys".into(),
        params
            .keys()
            .take(20)
            .map(|k| Value::String(crate::echo::echo(k)))
            .collect(),
    );
    note
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A session started or ended.
    Session,
    /// A `tool_search` call.
    Search,
    /// A call that ran (its outcome in `outcome`).
    Call,
    /// A call refused before it ran (permission, hook, validation, not loaded, unknown).
    Refused,
    /// A call of a tool that exists but is hidden from the session.
    Hidden,
    /// A hook that failed or timed out.
    HookError,
    /// A downstream server changed state.
    Server,
    /// The audit log itself (writes resumed after a failure).
    Audit,
}

/// A tool in a search record: canonical name and the names its server gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditHit {
    /// Canonical name.
    pub name: String,
    /// The tool's name as its server (or catalog) gave it.
    pub original: String,
    /// The server, as configured; absent for built-ins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl AuditHit {
    /// The hit for `tool`.
    pub fn of(tool: &crate::catalog::Tool) -> Self {
        Self {
            name: tool.name.clone(),
            original: tool.original_name.clone(),
            server: tool.original_server.clone(),
        }
    }
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u128,
    /// What happened.
    pub kind: AuditKind,
    /// The client session (absent for server events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The tool as the client named it (capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
    /// How the call came in: through `defer_execute` or directly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// The resolved target, canonical name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The server concerned, as configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Params, or search arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
    /// `ok`, `error`, `timeout`, `crashed`, `cancelled`, `denied`, `invalid`, `not_loaded`,
    /// `unknown`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The rule, hook or message behind the outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Call duration in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// When a rule asked the user: `approved`, `declined`, `unsupported` or `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ask: Option<String>,
    /// Searches: the tools whose full schemas the response carried, with their original names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded: Option<Vec<AuditHit>>,
}

impl AuditRecord {
    /// A record with only time and kind set.
    pub fn new(ts_ms: u128, kind: AuditKind) -> Self {
        Self {
            ts_ms,
            kind,
            session: None,
            requested: None,
            via: None,
            tool: None,
            server: None,
            params: None,
            outcome: None,
            detail: None,
            duration_ms: None,
            ask: None,
            loaded: None,
        }
    }

    /// The record as one line of JSON, without the newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|e| format!("{{\"serialize_error\":{:?}}}", e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_params_are_logged_in_bounded_form() {
        let small: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"a": 1, "b": "x"})).expect("o");
        assert_eq!(capped_params(&small), small);
        let long: Map<String, Value> = serde_json::from_value(
            serde_json::json!({"content": "y".repeat(1_000_000), "path": "/a"}),
        )
        .expect("o");
        let c = capped_params(&long);
        assert!(serde_json::to_string(&c).expect("json").len() < PARAMS_BYTES);
        assert_eq!(c["path"], "/a");
        assert_eq!(
            c["_truncated_bytes"],
            serde_json::to_string(&long).expect("json").len()
        );
        assert!(
            c["content"]
                .as_str()
                .expect("cut")
                .ends_with("(1000000 characters)")
        );
        let many: Map<String, Value> = (0..5000)
            .map(|i| (format!("k{i}"), Value::from(i)))
            .collect();
        let c = capped_params(&many);
        assert!(
            serde_json::to_string(&c).expect("json").len() < PARAMS_BYTES,
            "{c:?}"
        );
        assert!(c.contains_key("_truncated_bytes"));
    }

    #[test]
    fn lines_leave_out_absent_fields() {
        let mut r = AuditRecord::new(5, AuditKind::Hidden);
        r.requested = Some("git_commit".into());
        assert_eq!(
            r.to_line(),
            r#"{"ts_ms":5,"kind":"hidden","requested":"git_commit"}"#
        );
    }
}
