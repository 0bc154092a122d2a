//! Hook events and answers: the contract between the gateway and a hook command.
//!
//! A hook is any program. It gets one [`HookEvent`] as JSON on stdin and answers through its exit
//! status and stdout, so a two-line shell script is a valid hook:
//! - exit 0 with empty stdout: allow, change nothing;
//! - exit 0 with a JSON [`HookAnswer`] on stdout: allow or deny, rewrite params (`pre_call`) or
//!   the result (`post_call`, `post_search`), add guidance the model reads. A leading UTF-8 BOM
//!   is skipped, and `decision` is read without regard to case, `block` (Claude Code's word)
//!   meaning `deny` and `approve` meaning `allow`. Claude Code's own answer shape is read too,
//!   so its hook scripts serve unchanged: `hookSpecificOutput.permissionDecision` (`ask`
//!   refuses, since a hook's answer cannot put a question to the user), its reason,
//!   `updatedInput` and `additionalContext`, and `continue: false` (refuses, with `stopReason`);
//! - exit 2: deny, with stderr as the reason the model sees;
//! - anything else (another status, a timeout, unreadable stdout): the hook failed, and its
//!   `on_error` decides: `allow` goes on (fail open), `deny` refuses (fail closed). Either way the
//!   failure is reported in the log and the audit trail.
//!
//! An answer that is not valid but says deny (its JSON object, or one of its lines, has a
//! `decision` that reads as deny) denies whatever `on_error` is, with its `reason`: a hook that
//! means to refuse is never taken to allow because of how it wrote its answer. What is wrong
//! with the answer is still reported, as for a failure.
//!
//! A refusal by a failed hook is not a decision, and the model is told so ([`HookDenial`]): that
//! a policy hook failed, never the failure itself, whose command, exit status and stderr are the
//! operator's (stderr may hold secrets).
//!
//! Running the process is the gateway's job; deciding what its output means is pure, and here.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::Tool;
use crate::config::{HookCommand, HooksConfig, OnError};
use crate::pattern::Pattern;

/// One hook command, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    /// The command as configured.
    pub command: HookCommand,
    /// Its `tools` pattern, compiled.
    pub tools: Option<Pattern>,
    /// `pre_call[0] "cmd"`, for messages.
    pub label: String,
}

impl Hook {
    /// Whether the hook runs for a call of `tool` (`None`: an event without a target tool).
    /// Like a deny rule, a `tools` pattern sees every name of the tool (canonical and aliases),
    /// so a renamed tool never slips past a hook written for its original name.
    pub fn applies_to(&self, tool: Option<&Tool>) -> bool {
        match (&self.tools, tool) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(p), Some(t)) => p.matches(&t.name) || t.aliases.iter().any(|a| p.matches(a)),
        }
    }
}

/// Every event's hooks, in configuration order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    events: Vec<(HookEventKind, Vec<Hook>)>,
}

impl Hooks {
    /// Compiles `[hooks]`; the error names the event, the index and the problem.
    pub fn new(config: &HooksConfig) -> Result<Self, String> {
        let mut events = Vec::new();
        for (kind, commands) in [
            (HookEventKind::PreCall, &config.pre_call),
            (HookEventKind::PostCall, &config.post_call),
            (HookEventKind::CallFailed, &config.call_failed),
            (HookEventKind::PostSearch, &config.post_search),
            (HookEventKind::SessionStart, &config.session_start),
            (HookEventKind::SessionEnd, &config.session_end),
        ] {
            let event = kind.as_str();
            let mut hooks = Vec::new();
            for (i, h) in commands.iter().enumerate() {
                let at = format!("[hooks] {event}[{i}]");
                if h.command.trim().is_empty() {
                    return Err(format!("{at}: command is empty"));
                }
                if h.timeout_secs == 0 {
                    return Err(format!("{at}: timeout_secs must be at least 1"));
                }
                if h.timeout_secs > crate::config::MAX_SECS {
                    return Err(format!(
                        "{at}: timeout_secs must be at most {} (got {})",
                        crate::config::MAX_SECS,
                        h.timeout_secs
                    ));
                }
                let tools = match &h.tools {
                    None => None,
                    // Session and search events have no target tool: a pattern there would
                    // silently keep the hook from ever running.
                    Some(_) if !kind.has_target() => {
                        return Err(format!(
                            "{at}: tools only applies to call events (pre_call, post_call, call_failed); a {event} hook has no target tool"
                        ));
                    }
                    // A pattern that can match no tool would keep the hook from ever running.
                    Some(p) => match crate::pattern::regex_syntax(p) {
                        Some(e) => {
                            return Err(format!("{at} tools: {e}, in a hook of its own each"));
                        }
                        None => Some(Pattern::new(p).map_err(|e| format!("{at} tools: {e}"))?),
                    },
                };
                hooks.push(Hook {
                    command: h.clone(),
                    tools,
                    label: format!("{event}[{i}] {:?}", h.command),
                });
            }
            events.push((kind, hooks));
        }
        Ok(Self { events })
    }

    /// The hooks of `event`, in configuration order.
    pub fn of(&self, event: HookEventKind) -> &[Hook] {
        self.events
            .iter()
            .find(|(k, _)| *k == event)
            .map_or(&[], |(_, h)| h.as_slice())
    }

    /// Every hook of every event.
    pub fn all(&self) -> impl Iterator<Item = &Hook> {
        self.events.iter().flat_map(|(_, h)| h)
    }
}

/// The events hooks can subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEventKind {
    /// Before a call runs.
    PreCall,
    /// After a call succeeded.
    PostCall,
    /// After a call failed.
    CallFailed,
    /// After `tool_search` answered.
    PostSearch,
    /// A client session started.
    SessionStart,
    /// A client session ended.
    SessionEnd,
}

impl HookEventKind {
    /// Whether the event concerns one target tool (the call events).
    pub fn has_target(self) -> bool {
        matches!(self, Self::PreCall | Self::PostCall | Self::CallFailed)
    }

    /// The config key (`pre_call`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreCall => "pre_call",
            Self::PostCall => "post_call",
            Self::CallFailed => "call_failed",
            Self::PostSearch => "post_search",
            Self::SessionStart => "session_start",
            Self::SessionEnd => "session_end",
        }
    }
}

/// What a hook reads on stdin. Fields that do not apply to the event are absent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookEvent {
    /// The event.
    pub event: HookEventKind,
    /// The client session's id.
    pub session: String,
    /// Target tool, canonical name (call events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The target's server, as configured (call events on MCP tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The name the server knows the tool by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_tool: Option<String>,
    /// Whether the call came through `defer_execute` (else the client called a pinned tool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via_defer_execute: Option<bool>,
    /// The call's params (call events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
    /// The result as MCP `CallToolResult` JSON (`post_call`; `post_search`: the search's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What went wrong (`call_failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `tool_search`'s arguments (`post_search`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<Value>,
    /// Canonical names whose schemas the search returned (`post_search`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded: Option<Vec<String>>,
}

impl HookEvent {
    /// An event with only its kind and session set.
    pub fn new(event: HookEventKind, session: impl Into<String>) -> Self {
        Self {
            event,
            session: session.into(),
            tool: None,
            server: None,
            original_tool: None,
            via_defer_execute: None,
            params: None,
            result: None,
            error: None,
            search: None,
            loaded: None,
        }
    }
}

/// `allow` or `deny`, read without regard to case; `block` and `approve` (what Claude Code's
/// hooks answer) are `deny` and `allow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HookDecision {
    /// Go on.
    Allow,
    /// Refuse.
    Deny,
}

impl HookDecision {
    /// The decision `word` names, if any: `allow`, `approve`, `deny` or `block`, in any case,
    /// white space around it ignored.
    pub fn parse(word: &str) -> Option<Self> {
        let word = word.trim();
        if word.eq_ignore_ascii_case("allow") || word.eq_ignore_ascii_case("approve") {
            Some(Self::Allow)
        } else if word.eq_ignore_ascii_case("deny") || word.eq_ignore_ascii_case("block") {
            Some(Self::Deny)
        } else {
            None
        }
    }
}

impl<'de> Deserialize<'de> for HookDecision {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        Self::parse(&word).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "decision {:?} is not \"allow\", \"deny\", \"block\" or \"approve\"",
                crate::echo::echo(&word)
            ))
        })
    }
}

/// What a hook's answer means, once read from either shape it may take on stdout (exit 0):
/// toolshelf's own or Claude Code's (`AnswerWire`). Every field is optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookAnswer {
    /// `"allow"` (default) or `"deny"` (`"block"` too), in any case.
    pub decision: Option<HookDecision>,
    /// Why; the model reads it when the call is denied.
    pub reason: Option<String>,
    /// Replacement params (`pre_call` only).
    pub params: Option<Map<String, Value>>,
    /// Replacement result, an MCP `CallToolResult` (`post_call` and `post_search` only).
    pub result: Option<Value>,
    /// Text appended to what the model reads.
    pub guidance: Option<String>,
}

/// A hook's stdout as written: toolshelf's keys beside Claude Code's, so one of its hook
/// scripts serves unchanged. Unknown keys are refused, so a misspelt key is not silently
/// ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerWire {
    decision: Option<HookDecision>,
    reason: Option<String>,
    params: Option<Map<String, Value>>,
    result: Option<Value>,
    guidance: Option<String>,
    #[serde(rename = "hookSpecificOutput")]
    specific: Option<ClaudeSpecific>,
    /// `false` stops Claude Code's agent; here it refuses what the hook checks.
    #[serde(rename = "continue")]
    go_on: Option<bool>,
    #[serde(rename = "stopReason")]
    stop_reason: Option<String>,
    /// Claude Code's display switches, accepted and unused: they speak to its own user interface.
    #[serde(rename = "suppressOutput")]
    _suppress_output: Option<bool>,
    #[serde(rename = "systemMessage")]
    _system_message: Option<String>,
}

/// Claude Code's `hookSpecificOutput`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClaudeSpecific {
    #[serde(rename = "hookEventName")]
    _hook_event_name: Option<String>,
    permission_decision: Option<PermissionDecision>,
    permission_decision_reason: Option<String>,
    updated_input: Option<Map<String, Value>>,
    additional_context: Option<String>,
}

/// Claude Code's `permissionDecision`, read without regard to case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PermissionDecision {
    Allow,
    Deny,
    /// Ask the user: a hook's answer has no way to, so it refuses.
    Ask,
}

impl PermissionDecision {
    fn parse(word: &str) -> Option<Self> {
        let word = word.trim();
        [
            ("allow", Self::Allow),
            ("deny", Self::Deny),
            ("ask", Self::Ask),
        ]
        .into_iter()
        .find_map(|(w, d)| word.eq_ignore_ascii_case(w).then_some(d))
    }
}

impl<'de> Deserialize<'de> for PermissionDecision {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        Self::parse(&word).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "permissionDecision {:?} is not \"allow\", \"deny\" or \"ask\"",
                crate::echo::echo(&word)
            ))
        })
    }
}

/// Whether an answer refuses: a `decision` of deny, a `permissionDecision` of deny or ask
/// (a hook cannot put the question), or `continue: false`. A refusal in any key refuses.
fn refuses(
    decision: Option<HookDecision>,
    permission: Option<PermissionDecision>,
    go_on: Option<bool>,
) -> bool {
    decision == Some(HookDecision::Deny)
        || matches!(
            permission,
            Some(PermissionDecision::Deny | PermissionDecision::Ask)
        )
        || go_on == Some(false)
}

impl AnswerWire {
    /// The answer this means. A refusal in any of the keys that can say one refuses; its reason
    /// is the first given of `permissionDecisionReason`, `reason` and `stopReason`.
    fn into_answer(self, label: &str) -> Result<HookAnswer, String> {
        let specific = self.specific.unwrap_or_default();
        let refuses = refuses(self.decision, specific.permission_decision, self.go_on);
        let asks = specific.permission_decision == Some(PermissionDecision::Ask);
        let reason = specific
            .permission_decision_reason
            .or(self.reason)
            .or(self.stop_reason)
            .or_else(|| {
                asks.then(|| {
                    format!(
                        "hook {label} asks for the user's confirmation, which a hook cannot get"
                    )
                })
            });
        let decision = if refuses {
            Some(HookDecision::Deny)
        } else {
            self.decision
                .or(specific.permission_decision.map(|_| HookDecision::Allow))
        };
        let params = match (self.params, specific.updated_input) {
            (Some(_), Some(_)) => {
                return Err(
                    "it gives both \"params\" and \"hookSpecificOutput.updatedInput\"; give one"
                        .to_owned(),
                );
            }
            (p, u) => p.or(u),
        };
        let guidance = match (self.guidance, specific.additional_context) {
            (Some(g), Some(c)) => Some(format!("{g}\n\n{c}")),
            (g, c) => g.or(c),
        };
        Ok(HookAnswer {
            decision,
            reason,
            params,
            result: self.result,
            guidance,
        })
    }
}

/// What one hook run means.
#[derive(Debug, Clone, PartialEq)]
pub enum HookOutcome {
    /// Go on, maybe with changes.
    Allow(HookAnswer),
    /// Refuse.
    Deny(HookDenial),
}

/// Why hooks refused an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookDenial {
    /// A hook denied it; the reason is the hook's, for the model.
    Decided(String),
    /// A hook failed and its `on_error = "deny"` refused the event; the failure report (hook,
    /// exit status, stderr) is for the log and the audit trail only.
    Failed(String),
}

/// What the model reads of a refusal by a hook that failed (see [`HookDenial::reason`]).
pub const FAILED_CLOSED: &str = "the hook failed, and a failing hook blocks what it checks. This is a malfunction, not a decision; tell the user.";

impl HookDenial {
    /// What the model reads: a decision's reason, or [`FAILED_CLOSED`].
    pub fn reason(&self) -> &str {
        match self {
            Self::Decided(reason) => reason,
            Self::Failed(_) => FAILED_CLOSED,
        }
    }

    /// The whole story, for the log and the audit trail.
    pub fn detail(&self) -> &str {
        match self {
            Self::Decided(reason) | Self::Failed(reason) => reason,
        }
    }
}

impl From<String> for HookDenial {
    /// A reason as given: a decision's.
    fn from(reason: String) -> Self {
        Self::Decided(reason)
    }
}

/// How a hook process ended, as the gateway observed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookRun {
    /// It exited.
    Exited {
        /// Exit status (`None` when killed by a signal).
        code: Option<i32>,
        /// Its stdout.
        stdout: String,
        /// Its stderr.
        stderr: String,
    },
    /// It could not be started or did not finish in time.
    Failed(String),
}

/// Interprets a run of the hook `label` for `event`. Returns the outcome and, when the hook
/// itself failed, the failure to report.
pub fn interpret(
    label: &str,
    event: HookEventKind,
    run: HookRun,
    on_error: OnError,
) -> (HookOutcome, Option<String>) {
    let failed = |why: String| {
        let report = format!("hook {label} failed: {why}");
        let outcome = match on_error {
            OnError::Allow => HookOutcome::Allow(HookAnswer::default()),
            OnError::Deny => HookOutcome::Deny(HookDenial::Failed(format!(
                "{report} (on_error = \"deny\")"
            ))),
        };
        (outcome, Some(report))
    };
    let (code, stdout, stderr) = match run {
        HookRun::Failed(why) => return failed(why),
        HookRun::Exited {
            code,
            stdout,
            stderr,
        } => (code, stdout, stderr),
    };
    match code {
        Some(0) => {}
        Some(2) => {
            let reason = stderr.trim();
            let reason = if reason.is_empty() {
                format!("denied by hook {label}")
            } else {
                bounded(reason)
            };
            return (HookOutcome::Deny(HookDenial::Decided(reason)), None);
        }
        Some(c) => {
            return failed(format!(
                "exit status {c}{}",
                tail(&stderr).map(|s| format!(": {s}")).unwrap_or_default()
            ));
        }
        None => return failed("killed by a signal".into()),
    }
    let text = stdout.trim().trim_start_matches('\u{feff}').trim_start();
    if text.is_empty() {
        return (HookOutcome::Allow(HookAnswer::default()), None);
    }
    let denied = |reason: Option<&str>| {
        let reason = reason.map_or_else(|| format!("denied by hook {label}"), bounded);
        HookOutcome::Deny(HookDenial::Decided(reason))
    };
    // What is wrong with the answer; one that says deny still denies, reported.
    let invalid = |why: String| match deny_in(text) {
        Some(reason) => (
            denied(reason.as_deref()),
            Some(format!(
                "hook {label} gave an answer that is not valid: {why}; it says deny, so it denies"
            )),
        ),
        None => failed(why),
    };
    let answer = match serde_json::from_str::<AnswerWire>(text) {
        Ok(a) => match a.into_answer(label) {
            Ok(a) => a,
            Err(why) => return invalid(format!("stdout is not a valid answer: {why}")),
        },
        Err(e) => return invalid(format!("stdout is not a valid answer: {e}")),
    };
    if answer.params.is_some() && event != HookEventKind::PreCall {
        return invalid(format!(
            "\"params\" can only be rewritten by pre_call hooks, not {}",
            event.as_str()
        ));
    }
    if answer.result.is_some()
        && !matches!(event, HookEventKind::PostCall | HookEventKind::PostSearch)
    {
        return invalid(format!(
            "\"result\" can only be rewritten by post_call and post_search hooks, not {}",
            event.as_str()
        ));
    }
    match answer.decision {
        Some(HookDecision::Deny) => (denied(answer.reason.as_deref()), None),
        _ => (HookOutcome::Allow(answer), None),
    }
}

/// Whether an answer that is not valid says deny: its first JSON value, or a line of it that is
/// a JSON object, has a `decision` that reads as deny ([`HookDecision::parse`]), a
/// `hookSpecificOutput.permissionDecision` that reads as deny or ask, or `continue: false`.
/// Returns the reason it gives, if a string (as [`AnswerWire::into_answer`] picks it).
fn deny_in(text: &str) -> Option<Option<String>> {
    fn word(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str)
    }
    let says_deny = |v: &Value| {
        let o = v.as_object()?;
        let specific = o.get("hookSpecificOutput").and_then(Value::as_object);
        refuses(
            word(o.get("decision")).and_then(HookDecision::parse),
            word(specific.and_then(|s| s.get("permissionDecision")))
                .and_then(PermissionDecision::parse),
            o.get("continue").and_then(Value::as_bool),
        )
        .then(|| {
            word(specific.and_then(|s| s.get("permissionDecisionReason")))
                .or_else(|| word(o.get("reason")))
                .or_else(|| word(o.get("stopReason")))
                .map(str::to_owned)
        })
    };
    let first = serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok);
    first.as_ref().and_then(says_deny).or_else(|| {
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .find_map(|v| says_deny(&v))
    })
}

/// The most characters of a deny reason the model reads.
pub const MAX_REASON_CHARS: usize = 2_000;

/// `reason`, cut to [`MAX_REASON_CHARS`] with a note that it was.
fn bounded(reason: &str) -> String {
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        None => reason.to_owned(),
        Some((at, _)) => format!("{}… (the rest of the hook's reason is cut)", &reason[..at]),
    }
}

fn tail(stderr: &str) -> Option<&str> {
    let t = stderr.trim();
    (!t.is_empty()).then(|| {
        let start = t.char_indices().rev().nth(299).map_or(0, |(i, _)| i);
        &t[start..]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exited(code: i32, stdout: &str, stderr: &str) -> HookRun {
        HookRun::Exited {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn a_tools_pattern_written_as_a_regular_expression_is_refused() {
        let config = |tools: &str| -> HooksConfig {
            toml::from_str(&format!(
                "[[pre_call]]\ncommand = \"h\"\ntools = {tools:?}\n"
            ))
            .expect("hooks")
        };
        let e = Hooks::new(&config("^mcp__everything__(echo|get-sum)")).expect_err("regex");
        assert_eq!(
            e,
            "[hooks] pre_call[0] tools: \"^mcp__everything__(echo|get-sum)\" has '(', which no tool \
name holds: patterns are globs, not regular expressions (* any run of characters, ? one character, \
^ the start, $ the end); write one per alternative (\"^mcp__everything__echo\", \
\"^mcp__everything__get-sum\"), in a hook of its own each"
        );
        for regex in ["^mcp__git__[a-z]*", "^mcp__git__git\\_log$", "echo|sum"] {
            let e = Hooks::new(&config(regex)).expect_err(regex);
            assert!(e.contains("not regular expressions"), "{e}");
        }
        for glob in ["^mcp__git__*", "^mcp__my.time__get_?ime$", "echo"] {
            Hooks::new(&config(glob)).expect(glob);
        }
    }

    #[test]
    fn exit_status_and_answer_decide() {
        let pre = HookEventKind::PreCall;
        let (o, r) = interpret("h", pre, exited(0, "", ""), OnError::Deny);
        assert_eq!((o, r), (HookOutcome::Allow(HookAnswer::default()), None));
        let (o, _) = interpret(
            "h",
            pre,
            exited(2, "", "no pushing on Fridays\n"),
            OnError::Allow,
        );
        assert_eq!(
            o,
            HookOutcome::Deny(HookDenial::Decided("no pushing on Fridays".into()))
        );
        let (o, _) = interpret(
            "h",
            pre,
            exited(0, r#"{"decision": "deny", "reason": "r"}"#, ""),
            OnError::Allow,
        );
        assert_eq!(o, HookOutcome::Deny(HookDenial::Decided("r".into())));
        let (o, _) = interpret(
            "h",
            pre,
            exited(0, r#"{"params": {"a": 1}, "guidance": "g"}"#, ""),
            OnError::Allow,
        );
        let HookOutcome::Allow(a) = o else {
            panic!("allow")
        };
        assert_eq!(
            (
                a.params.expect("params")["a"].clone(),
                a.guidance.as_deref()
            ),
            (json!(1), Some("g"))
        );
    }

    #[test]
    fn a_long_deny_reason_is_cut_and_says_so() {
        let long = "é".repeat(MAX_REASON_CHARS * 3);
        for run in [
            exited(2, "", &long),
            exited(
                0,
                &json!({"decision": "deny", "reason": long}).to_string(),
                "",
            ),
        ] {
            let (o, _) = interpret("h", HookEventKind::PreCall, run, OnError::Allow);
            let HookOutcome::Deny(HookDenial::Decided(reason)) = o else {
                panic!("deny")
            };
            assert!(
                reason.starts_with(&long[..2 * MAX_REASON_CHARS]),
                "{reason}"
            );
            assert!(
                reason.ends_with("… (the rest of the hook's reason is cut)"),
                "{reason}"
            );
            assert_eq!(reason.chars().count(), MAX_REASON_CHARS + 40);
        }
        let just = "x".repeat(MAX_REASON_CHARS);
        let (o, _) = interpret(
            "h",
            HookEventKind::PreCall,
            exited(2, "", &just),
            OnError::Allow,
        );
        assert_eq!(o, HookOutcome::Deny(HookDenial::Decided(just)));
    }

    #[test]
    fn failures_follow_on_error() {
        for run in [
            exited(1, "", "boom"),
            exited(0, "not json", ""),
            exited(0, r#"{"verdict": "deny"}"#, ""),
            HookRun::Failed("timed out after 1s".into()),
        ] {
            let (open, report) =
                interpret("h", HookEventKind::PreCall, run.clone(), OnError::Allow);
            assert_eq!(open, HookOutcome::Allow(HookAnswer::default()));
            assert!(report.expect("reported").starts_with("hook h failed: "));
            let (closed, _) = interpret("h", HookEventKind::PreCall, run, OnError::Deny);
            assert!(
                matches!(closed, HookOutcome::Deny(HookDenial::Failed(ref r)) if r.contains("on_error = \"deny\""))
            );
        }
        let (_, report) = interpret(
            "h",
            HookEventKind::PostSearch,
            exited(0, r#"{"params": {}}"#, ""),
            OnError::Allow,
        );
        assert!(
            report
                .expect("wrong event")
                .contains("only be rewritten by pre_call")
        );
        let result = r#"{"result": {"content": []}}"#;
        let (_, report) = interpret(
            "h",
            HookEventKind::CallFailed,
            exited(0, result, ""),
            OnError::Allow,
        );
        assert!(
            report
                .expect("wrong event")
                .contains("post_call and post_search")
        );
        let (o, report) = interpret(
            "h",
            HookEventKind::PostSearch,
            exited(0, result, ""),
            OnError::Deny,
        );
        assert!(report.is_none() && matches!(o, HookOutcome::Allow(a) if a.result.is_some()));
    }

    #[test]
    fn an_answer_that_says_deny_denies_however_it_is_written() {
        let deny = r#"{"decision": "deny", "reason": "no writes"}"#;
        // Valid answers: a BOM, the decision in another case, Claude Code's "block".
        for stdout in [
            format!("\u{feff}{deny}"),
            r#"{"decision": "Deny", "reason": "no writes"}"#.to_owned(),
            r#"{"decision": "DENY", "reason": "no writes"}"#.to_owned(),
            r#"{"decision": "block", "reason": "no writes"}"#.to_owned(),
        ] {
            let (o, report) = interpret(
                "pre_call[0] \"h\"",
                HookEventKind::PreCall,
                exited(0, &stdout, ""),
                OnError::Allow,
            );
            assert_eq!(
                (o, report),
                (
                    HookOutcome::Deny(HookDenial::Decided("no writes".into())),
                    None
                ),
                "{stdout}"
            );
        }
        // Answers that are not valid but say deny: they deny, and what is wrong is reported.
        for (event, stdout, wrong) in [
            (
                HookEventKind::PreCall,
                r#"{"decision": "deny", "reason": "no writes", "message": "policy 7"}"#.to_owned(),
                "unknown field `message`",
            ),
            (
                HookEventKind::PreCall,
                format!("{deny}\n{{\"note\": 1}}"),
                "trailing characters",
            ),
            (
                HookEventKind::PreCall,
                format!("checking the call...\n{deny}\n"),
                "expected value",
            ),
            (
                HookEventKind::PreCall,
                r#"{"decision": "Block", "reason": "no writes", "stop": true}"#.to_owned(),
                "unknown field `stop`",
            ),
            (
                HookEventKind::PostSearch,
                r#"{"decision": "deny", "reason": "no writes", "params": {}}"#.to_owned(),
                "only be rewritten by pre_call",
            ),
        ] {
            let (o, report) = interpret(
                "pre_call[0] \"h\"",
                event,
                exited(0, &stdout, ""),
                OnError::Allow,
            );
            assert_eq!(
                o,
                HookOutcome::Deny(HookDenial::Decided("no writes".into())),
                "{stdout}"
            );
            let report = report.expect("reported");
            assert!(
                report.starts_with("hook pre_call[0] \"h\" gave an answer that is not valid: ")
                    && report.contains(wrong)
                    && report.ends_with("it says deny, so it denies"),
                "{report}"
            );
        }
        // Without a reason, the hook is named.
        let (o, _) = interpret(
            "h",
            HookEventKind::PreCall,
            exited(0, r#"{"decision": "deny", "why": "x"}"#, ""),
            OnError::Allow,
        );
        assert_eq!(
            o,
            HookOutcome::Deny(HookDenial::Decided("denied by hook h".into()))
        );
        // An answer that is not valid and does not say deny is a failure, as before.
        for stdout in [
            r#"{"decision": "allow", "message": "x"}"#,
            r#"{"decision": "denied", "reason": "no"}"#,
            r#"{"verdict": "deny"}"#,
            "deny",
        ] {
            let run = exited(0, stdout, "");
            let (open, report) =
                interpret("h", HookEventKind::PreCall, run.clone(), OnError::Allow);
            assert_eq!(open, HookOutcome::Allow(HookAnswer::default()), "{stdout}");
            assert!(report.expect("reported").starts_with("hook h failed: "));
            let (closed, _) = interpret("h", HookEventKind::PreCall, run, OnError::Deny);
            assert!(
                matches!(closed, HookOutcome::Deny(HookDenial::Failed(_))),
                "{stdout}"
            );
        }
        // An unknown decision is named.
        let (_, report) = interpret(
            "h",
            HookEventKind::PreCall,
            exited(0, r#"{"decision": "maybe"}"#, ""),
            OnError::Allow,
        );
        assert!(
            report
                .expect("reported")
                .contains(r#"decision "maybe" is not "allow", "deny", "block" or "approve""#)
        );
        // A BOM alone is an empty answer.
        let (o, report) = interpret(
            "h",
            HookEventKind::PreCall,
            exited(0, "\u{feff}\n", ""),
            OnError::Deny,
        );
        assert_eq!(
            (o, report),
            (HookOutcome::Allow(HookAnswer::default()), None)
        );
    }

    #[test]
    fn claude_code_answers_are_read_as_it_means_them() {
        let pre = |stdout: &str| {
            interpret(
                "pre_call[0] \"h\"",
                HookEventKind::PreCall,
                exited(0, stdout, ""),
                OnError::Allow,
            )
        };
        let decided = |reason: &str| HookOutcome::Deny(HookDenial::Decided(reason.into()));
        // Refusals: permissionDecision deny or ask (in any case), continue false.
        for (stdout, reason) in [
            (
                r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no writes"}}"#,
                "no writes",
            ),
            (
                r#"{"hookSpecificOutput": {"permissionDecision": "Deny"}, "reason": "no writes"}"#,
                "no writes",
            ),
            (
                r#"{"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "confirm the push"}}"#,
                "confirm the push",
            ),
            (
                r#"{"hookSpecificOutput": {"permissionDecision": "ask"}}"#,
                "hook pre_call[0] \"h\" asks for the user's confirmation, which a hook cannot get",
            ),
            (
                r#"{"continue": false, "stopReason": "out of budget", "suppressOutput": true}"#,
                "out of budget",
            ),
            // A refusal in any key refuses, whatever another says.
            (
                r#"{"decision": "approve", "hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no"}}"#,
                "no",
            ),
            (
                r#"{"decision": "allow", "continue": false, "systemMessage": "stopped"}"#,
                "denied by hook pre_call[0] \"h\"",
            ),
        ] {
            assert_eq!(pre(stdout), (decided(reason), None), "{stdout}");
        }
        // Allowing answers, with Claude Code's rewrite and context.
        let (o, report) = pre(
            r#"{"decision": "approve", "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"path": "/tmp/x"}, "additionalContext": "checked"}, "guidance": "be brief"}"#,
        );
        assert_eq!(report, None);
        let HookOutcome::Allow(answer) = o else {
            panic!("allowed: {o:?}")
        };
        assert_eq!(answer.decision, Some(HookDecision::Allow));
        assert_eq!(
            answer.params.map(Value::Object),
            Some(json!({"path": "/tmp/x"}))
        );
        assert_eq!(answer.guidance.as_deref(), Some("be brief\n\nchecked"));
        // Invalid answers: an unknown decision or key inside hookSpecificOutput, two rewrites.
        // Each is a failure unless it says deny.
        for (stdout, wrong) in [
            (
                r#"{"hookSpecificOutput": {"permissionDecision": "defer"}}"#,
                r#"permissionDecision "defer" is not "allow", "deny" or "ask""#,
            ),
            (
                r#"{"hookSpecificOutput": {"permissionDecision": "allow", "updatedinput": {}}}"#,
                "unknown field `updatedinput`",
            ),
            (
                r#"{"params": {}, "hookSpecificOutput": {"updatedInput": {}}}"#,
                r#"gives both "params" and "hookSpecificOutput.updatedInput""#,
            ),
        ] {
            let (o, report) = pre(stdout);
            assert_eq!(o, HookOutcome::Allow(HookAnswer::default()), "{stdout}");
            let report = report.expect("reported");
            assert!(report.contains(wrong), "{report}");
        }
        let (o, report) = pre(
            r#"{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no writes", "extra": 1}}"#,
        );
        assert_eq!(o, decided("no writes"));
        assert!(
            report
                .expect("reported")
                .ends_with("it says deny, so it denies")
        );
        let (o, _) = pre(r#"{"continue": false, "stopReason": "halt", "note": 1}"#);
        assert_eq!(o, decided("halt"));
    }

    #[test]
    fn a_hook_that_fails_closed_tells_the_model_so_and_nothing_of_the_failure() {
        let (o, report) = interpret(
            "pre_call[0] \"/tmp/hook_fail.sh\"",
            HookEventKind::PreCall,
            exited(1, "", "hook crashed: DB_PASSWORD=hunter2"),
            OnError::Deny,
        );
        let HookOutcome::Deny(denial) = o else {
            panic!("closed")
        };
        assert_eq!(denial.reason(), FAILED_CLOSED);
        for secret in ["hook_fail.sh", "hunter2", "exit status"] {
            assert!(!denial.reason().contains(secret), "{}", denial.reason());
            assert!(denial.detail().contains(secret), "{}", denial.detail());
            assert!(report.as_deref().is_some_and(|r| r.contains(secret)));
        }
        // A hook's own deny keeps its reason.
        let (o, _) = interpret(
            "h",
            HookEventKind::PreCall,
            exited(2, "", "no"),
            OnError::Deny,
        );
        assert!(matches!(o, HookOutcome::Deny(d) if d.reason() == "no"));
    }

    #[test]
    fn events_serialize_without_absent_fields() {
        let mut e = HookEvent::new(HookEventKind::PreCall, "s1");
        e.tool = Some("mcp__git__git_log".into());
        assert_eq!(
            serde_json::to_value(&e).expect("json"),
            json!({"event": "pre_call", "session": "s1", "tool": "mcp__git__git_log"})
        );
    }
}
