//! Audit records: one JSON line per search, call, decision and error.
//!
//! The record type lives in the core so its shape is defined once and tested without a file;
//! the gateway stamps the time and appends. Fields that do not apply are left out, so `jq`
//! filters stay short (`select(.kind == "hidden")`).

use serde::Serialize;
use serde_json::{Map, Value};

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
    /// The tool as the client named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
    /// The resolved target, canonical name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The server concerned, as configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Params, or search arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
    /// `ok`, `error`, `timeout`, `crashed`, `denied`, `invalid`, `not_loaded`, `unknown`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The rule, hook or message behind the outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Call duration in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl AuditRecord {
    /// A record with only time and kind set.
    pub fn new(ts_ms: u128, kind: AuditKind) -> Self {
        Self {
            ts_ms,
            kind,
            session: None,
            requested: None,
            tool: None,
            server: None,
            params: None,
            outcome: None,
            detail: None,
            duration_ms: None,
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
    fn lines_leave_out_absent_fields() {
        let mut r = AuditRecord::new(5, AuditKind::Hidden);
        r.requested = Some("git_commit".into());
        assert_eq!(
            r.to_line(),
            r#"{"ts_ms":5,"kind":"hidden","requested":"git_commit"}"#
        );
    }
}
