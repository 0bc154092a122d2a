//! One client session: the MCP server a client talks to.
//!
//! `tools/list` and `tools/call` are written by hand because the list is computed, not declared.
//! The list is frozen on first use (after start-up has settled, so the first list is complete)
//! and served byte-identical for the session's life. Every call, through `defer_execute` or
//! direct to a pinned tool, takes one path: resolve, require-search, validate, permissions,
//! pre-call hooks, the downstream call with its timeout, post-call hooks, audit. Refusals are tool
//! results with `isError: true` and a text that says how to recover; protocol errors are kept for
//! requests that cannot be routed at all.

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, Implementation, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{ElicitationMode, NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use toolshelf_core::State;
use toolshelf_core::audit::{AuditKind, AuditRecord};
use toolshelf_core::config::Action;
use toolshelf_core::hook::{HookEvent, HookEventKind};
use toolshelf_core::invoke::{
    Checked, invalid_params_text, not_loaded_text, parse_defer_execute, resolve,
};
use toolshelf_core::session::SessionState;
use toolshelf_core::surface::{DEFER_EXECUTE, TOOL_SEARCH};

use crate::audit::Audit;
use crate::downstream::CallError;
use crate::hooks::{self, HookVerdict};
use crate::hub::{Hub, Snapshot};
use crate::search::tool_search;

/// URI of the server-status resource.
pub const STATUS_URI: &str = "toolshelf://status";

#[derive(Debug, Default)]
struct Local {
    state: SessionState,
    list: Option<Arc<Vec<Tool>>>,
}

/// One client session.
#[derive(Debug)]
pub struct GatewaySession {
    hub: Arc<Hub>,
    id: String,
    local: tokio::sync::Mutex<Local>,
    end: Arc<SessionEnd>,
}

/// The end of a session: its audit record and `session_end` hooks, run once.
///
/// Dropping the session starts it on the runtime, which suffices for HTTP sessions (the server
/// keeps running). The stdio server must await it instead: the session is dropped as the
/// connection closes, and a task spawned then dies with the runtime when the process exits.
#[derive(Debug)]
pub struct SessionEnd {
    hub: Arc<Hub>,
    id: String,
    done: tokio::sync::Mutex<bool>,
}

impl SessionEnd {
    /// Records the end and runs the `session_end` hooks, unless that already happened.
    pub async fn run(&self) {
        let mut done = self.done.lock().await;
        if std::mem::replace(&mut *done, true) {
            return;
        }
        self.record_end();
        if !self.hub.config.hooks.session_end.is_empty() {
            let event = HookEvent::new(HookEventKind::SessionEnd, &self.id);
            let v = hooks::run(&self.hub.config.hooks.session_end, event).await;
            report_hook_failures(&self.hub, &self.id, &v, None);
        }
    }

    fn record_end(&self) {
        let mut r = record(&self.id, AuditKind::Session);
        r.outcome = Some("end".into());
        self.hub.audit.append(&r);
    }
}

fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

/// An audit record of session `id`.
fn record(id: &str, kind: AuditKind) -> AuditRecord {
    let mut r = Audit::record(kind);
    r.session = Some(id.to_owned());
    r
}

fn report_hook_failures(hub: &Hub, id: &str, verdict: &HookVerdict, tool: Option<&str>) {
    for f in &verdict.failures {
        let mut r = record(id, AuditKind::HookError);
        r.tool = tool.map(str::to_owned);
        r.detail = Some(f.clone());
        hub.audit.append(&r);
    }
}

impl GatewaySession {
    /// A new session on `hub`.
    pub fn new(hub: Arc<Hub>) -> Self {
        let id = hub.new_session_id();
        let end = Arc::new(SessionEnd {
            hub: hub.clone(),
            id: id.clone(),
            done: tokio::sync::Mutex::new(false),
        });
        Self {
            hub,
            id,
            local: tokio::sync::Mutex::new(Local::default()),
            end,
        }
    }

    /// The session id (as in hook events and the audit log).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session's end, for a server that must await it (see [`SessionEnd`]).
    pub fn end(&self) -> Arc<SessionEnd> {
        self.end.clone()
    }

    /// The frozen tool list, freezing it on first use.
    async fn list(&self) -> Arc<Vec<Tool>> {
        let mut local = self.local.lock().await;
        if let Some(list) = &local.list {
            return list.clone();
        }
        self.hub.settled().await;
        let snap = self.hub.snapshot();
        let list = Arc::new(snap.tools_list.clone());
        local.state.freeze(snap.visible.clone());
        local.list = Some(list.clone());
        list
    }

    fn record(&self, kind: AuditKind) -> AuditRecord {
        record(&self.id, kind)
    }

    fn report_hook_failures(&self, verdict: &HookVerdict, tool: Option<&str>) {
        report_hook_failures(&self.hub, &self.id, verdict, tool);
    }

    /// A hook's replacement result, or `None` (reported) when it is not a `CallToolResult`.
    fn hook_result(
        &self,
        event: HookEventKind,
        tool: Option<&str>,
        r: Value,
    ) -> Option<CallToolResult> {
        match serde_json::from_value::<CallToolResult>(r) {
            Ok(r) => Some(r),
            Err(e) => {
                let f = format!(
                    "a {} hook's result is not an MCP CallToolResult ({e}); the original result is kept",
                    event.as_str()
                );
                tracing::warn!("{f}");
                let mut h = self.record(AuditKind::HookError);
                h.tool = tool.map(str::to_owned);
                h.detail = Some(f);
                self.hub.audit.append(&h);
                None
            }
        }
    }

    async fn search(&self, args: Map<String, Value>) -> CallToolResult {
        let snap = self.hub.snapshot();
        let outcome = tool_search(&snap, &self.hub.config.search, &args);
        let names: Vec<String> = outcome
            .loaded
            .iter()
            .map(|&i| snap.catalog.tools()[i].name.clone())
            .collect();
        let mut r = self.record(AuditKind::Search);
        r.params = Some(args.clone());
        r.outcome = Some(if outcome.is_error { "error" } else { "ok" }.into());
        r.detail = Some(names.join(","));
        self.hub.audit.append(&r);
        let mut result = if outcome.is_error {
            error_result(outcome.text)
        } else {
            CallToolResult::success(vec![ContentBlock::text(outcome.text)])
        };
        if !self.hub.config.hooks.post_search.is_empty() {
            let mut event = HookEvent::new(HookEventKind::PostSearch, &self.id);
            event.search = Some(Value::Object(args));
            event.loaded = Some(names.clone());
            event.result = serde_json::to_value(&result).ok();
            let verdict = hooks::run(&self.hub.config.hooks.post_search, event).await;
            self.report_hook_failures(&verdict, None);
            if let Some(reason) = verdict.denied {
                // The model never saw the schemas, so nothing is loaded.
                return error_result(format!(
                    "The search result was withheld by a hook: {reason}"
                ));
            }
            if let Some(r) = verdict.result
                && let Some(r) = self.hook_result(HookEventKind::PostSearch, None, r)
            {
                result = r;
            }
            for g in verdict.guidance {
                result.content.push(ContentBlock::text(g));
            }
        }
        self.local
            .lock()
            .await
            .state
            .activate(names.iter().map(String::as_str));
        result
    }

    /// Asks the user through MCP elicitation; `Err` is the refusal text.
    async fn ask(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &str,
        params: &Map<String, Value>,
        because: &str,
    ) -> Result<(), String> {
        if !context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return Err(format!(
                "{tool} was not run: it needs the user's approval ({because}), and this client cannot \
ask the user (it does not support MCP elicitation). Ask the user to allow it in the toolshelf \
configuration ([permissions] allow), or do without it."
            ));
        }
        let schema = serde_json::from_value(json!({"type": "object", "properties": {}}))
            .map_err(|e| format!("{tool} was not run: cannot build the approval request: {e}"))?;
        let message = format!(
            "Allow the agent to run {tool} with these arguments?\n{}",
            Value::Object(params.clone())
        );
        let request = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        match context.peer.create_elicitation(request).await {
            Ok(answer) if answer.action == ElicitationAction::Accept => Ok(()),
            Ok(answer) => Err(format!(
                "{tool} was not run: the user did not approve it ({:?}).",
                answer.action
            )),
            Err(e) => Err(format!(
                "{tool} was not run: asking the user for approval failed: {e}"
            )),
        }
    }

    /// The one path every call takes.
    async fn execute(
        &self,
        requested: &str,
        mut params: Map<String, Value>,
        via_defer_execute: bool,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let snap = self.hub.snapshot();
        let refuse =
            |outcome: &str, tool: Option<&str>, detail: &str, params: &Map<String, Value>| {
                let mut r = self.record(AuditKind::Refused);
                r.requested = Some(requested.to_owned());
                r.tool = tool.map(str::to_owned);
                r.params = Some(params.clone());
                r.outcome = Some(outcome.to_owned());
                r.detail = Some(detail.to_owned());
                self.hub.audit.append(&r);
                error_result(detail)
            };
        let i = match resolve(&snap.catalog, |i| snap.is_visible(i), requested) {
            Ok(i) => i,
            Err(u) => {
                if let Some(hidden) = &u.hidden {
                    let mut r = self.record(AuditKind::Hidden);
                    r.requested = Some(requested.to_owned());
                    r.tool = Some(hidden.clone());
                    r.params = Some(params.clone());
                    r.detail = Some(snap_reason(&snap, hidden));
                    self.hub.audit.append(&r);
                    return error_result(u.text);
                }
                return refuse("unknown", None, &u.text, &params);
            }
        };
        let tool = &snap.catalog.tools()[i];
        let name = tool.name.as_str();
        let Some(server) = self.hub.server_of(&snap.catalog, tool) else {
            let text = format!(
                "{name} is not a tool of a server this gateway fronts; toolshelf cannot run it."
            );
            return refuse("unknown", Some(name), &text, &params);
        };
        if snap.state(i) == State::Deferred && self.hub.config.execute.require_search {
            let mut local = self.local.lock().await;
            if !local.state.is_activated(name) {
                local.state.activate([name]);
                return refuse("not_loaded", Some(name), &not_loaded_text(tool), &params);
            }
        }
        let validator = snap.validator(i);
        match validator.check(&Value::Object(params.clone())) {
            Checked::Valid => {}
            Checked::Invalid(v) => {
                return refuse(
                    "invalid",
                    Some(name),
                    &invalid_params_text(tool, &v),
                    &params,
                );
            }
            Checked::Unchecked(why) => {
                tracing::warn!(
                    "{name}: its input schema cannot be compiled, params go out unchecked: {why}"
                );
            }
        }
        let verdict = self.hub.permissions.check(name, &params);
        match verdict.action {
            Action::Allow => {}
            Action::Deny => {
                let text = format!(
                    "{name} was not run: {} forbids this call.",
                    verdict.because()
                );
                return refuse("denied", Some(name), &text, &params);
            }
            Action::Ask => {
                if let Err(text) = self.ask(context, name, &params, &verdict.because()).await {
                    return refuse("not_approved", Some(name), &text, &params);
                }
            }
        }
        let mut event = HookEvent::new(HookEventKind::PreCall, &self.id);
        event.tool = Some(name.to_owned());
        event.server = Some(server.name().to_owned());
        event.original_tool = Some(tool.original_name.clone());
        event.via_defer_execute = Some(via_defer_execute);
        let mut guidance = Vec::new();
        if !self.hub.config.hooks.pre_call.is_empty() {
            event.params = Some(params.clone());
            let pre = hooks::run(&self.hub.config.hooks.pre_call, event.clone()).await;
            self.report_hook_failures(&pre, Some(name));
            if let Some(reason) = pre.denied {
                let text = format!("{name} was not run: a pre_call hook denied it: {reason}");
                return refuse("denied_by_hook", Some(name), &text, &params);
            }
            if let Some(p) = pre.params {
                if let Checked::Invalid(v) = validator.check(&Value::Object(p.clone())) {
                    let text = format!(
                        "{name} was not run: a pre_call hook rewrote its params into ones that do not match the schema.\n{}",
                        invalid_params_text(tool, &v)
                    );
                    return refuse("invalid_after_hook", Some(name), &text, &p);
                }
                params = p;
            }
            guidance = pre.guidance;
        }
        let timeout = server
            .config()
            .call_timeout_secs
            .unwrap_or(self.hub.config.execute.call_timeout_secs);
        let started = Instant::now();
        let outcome = server
            .call(&tool.original_name, params.clone(), timeout)
            .await;
        let mut record = self.record(AuditKind::Call);
        record.requested = Some(requested.to_owned());
        record.tool = Some(name.to_owned());
        record.server = Some(server.name().to_owned());
        record.params = Some(params.clone());
        record.duration_ms = Some(started.elapsed().as_millis() as u64);
        event.params = Some(params);
        let mut result = match outcome {
            Ok(mut result) => {
                if !self.hub.config.hooks.post_call.is_empty() {
                    event.event = HookEventKind::PostCall;
                    event.result = serde_json::to_value(&result).ok();
                    let post = hooks::run(&self.hub.config.hooks.post_call, event).await;
                    self.report_hook_failures(&post, Some(name));
                    if let Some(reason) = post.denied {
                        result = error_result(format!(
                            "{name} ran, but a post_call hook withheld its result: {reason}"
                        ));
                    } else if let Some(r) = post.result
                        && let Some(r) = self.hook_result(HookEventKind::PostCall, Some(name), r)
                    {
                        result = r;
                    }
                    guidance.extend(post.guidance);
                }
                record.outcome = Some(
                    if result.is_error == Some(true) {
                        "tool_error"
                    } else {
                        "ok"
                    }
                    .into(),
                );
                result
            }
            Err(e) => {
                let text = match &e {
                    CallError::Unavailable(s) => format!("{name} was not run: {s}"),
                    CallError::Timeout(n) => format!(
                        "{name} did not answer within {n}s (the call timeout) and was abandoned. \
The server is still running and other calls go on; if this tool is slow by nature, raise its \
call_timeout_secs."
                    ),
                    CallError::Crashed(s) => format!("{name} failed: {s}"),
                    CallError::Protocol(s) => format!("{name} failed: {s}"),
                };
                record.outcome = Some(e.outcome().into());
                record.detail = Some(text.clone());
                if !self.hub.config.hooks.call_failed.is_empty() {
                    event.event = HookEventKind::CallFailed;
                    event.error = Some(text.clone());
                    let failed = hooks::run(&self.hub.config.hooks.call_failed, event).await;
                    self.report_hook_failures(&failed, Some(name));
                    guidance.extend(failed.guidance);
                }
                error_result(text)
            }
        };
        self.hub.audit.append(&record);
        for g in guidance {
            result.content.push(ContentBlock::text(g));
        }
        result
    }
}

/// Why a hidden tool is hidden, for the audit log.
fn snap_reason(snap: &Snapshot, name: &str) -> String {
    snap.catalog
        .position(name)
        .map(|i| snap.exposure.decisions[i].reason.clone())
        .unwrap_or_default()
}

impl ServerHandler for GatewaySession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("toolshelf", env!("CARGO_PKG_VERSION")))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .with_instructions(
            "toolshelf fronts many MCP servers. Tools not in the list are deferred: find them with \
tool_search, run them with defer_execute.",
        )
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        // Sessions (per-client state, a frozen list) need the initialize handshake, which the
        // newest protocol version no longer has.
        ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .filter(|v| v.has_initialize())
            .cloned()
            .collect::<Vec<_>>()
            .into()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.list().await.as_ref().clone(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.list().await;
        let args = request.arguments.unwrap_or_default();
        let mut result = match request.name.as_ref() {
            TOOL_SEARCH => self.search(args).await,
            DEFER_EXECUTE => match parse_defer_execute(&args) {
                Ok((target, params)) => self.execute(&target, params, true, &context).await,
                Err(text) => error_result(text),
            },
            other => self.execute(other, args, false, &context).await,
        };
        let visible = self.hub.snapshot().visible.clone();
        if let Some(notice) = self.local.lock().await.state.change_notice(&visible) {
            result.content.push(ContentBlock::text(notice));
        }
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let status = Resource::new(STATUS_URI, "status")
            .with_description(
                "State of every downstream server (starting, ready, failed with the reason), as JSON.",
            )
            .with_mime_type("application/json");
        Ok(ListResourcesResult::with_all_items(vec![status]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != STATUS_URI {
            return Err(ErrorData::invalid_params(
                format!("no resource {:?}; toolshelf has {STATUS_URI}", request.uri),
                None,
            ));
        }
        let text = serde_json::to_string_pretty(&json!({"servers": self.hub.statuses()}))
            .unwrap_or_default();
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, STATUS_URI)]).into())
    }

    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {
        let mut r = self.record(AuditKind::Session);
        r.outcome = Some("start".into());
        self.hub.audit.append(&r);
        if !self.hub.config.hooks.session_start.is_empty() {
            let event = HookEvent::new(HookEventKind::SessionStart, &self.id);
            let v = hooks::run(&self.hub.config.hooks.session_start, event).await;
            self.report_hook_failures(&v, None);
        }
    }
}

impl Drop for GatewaySession {
    fn drop(&mut self) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let end = self.end.clone();
                rt.spawn(async move { end.run().await });
            }
            // Never the case in the gateway; without a runtime only the audit line can be written.
            Err(_) => {
                if let Ok(mut done) = self.end.done.try_lock()
                    && !std::mem::replace(&mut *done, true)
                {
                    self.end.record_end();
                    tracing::warn!(
                        "session {} ended outside the async runtime; its session_end hooks did not run",
                        self.id
                    );
                }
            }
        }
    }
}
