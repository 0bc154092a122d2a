//! One client session: the MCP server a client talks to.
//!
//! `tools/list` and `tools/call` are written by hand because the list is computed, not declared.
//! The list is frozen on first use (after start-up has settled, so the first list is complete)
//! and served byte-identical for the session's life. Every call, through `defer_execute` or
//! direct to a pinned tool, takes the stages of [`toolshelf_core::invoke`]: resolve,
//! require-loaded, validate, authorize (asking the user when a rule says so), pre-call hooks, the
//! audit log's readiness, then the downstream call with its timeout and the post-call hooks. A
//! stage that refuses returns a typed [`Refusal`]; the tool result the model reads and the audit
//! record are both derived from it here, in one place. Refusals are tool results with
//! `isError: true` and a text that says how to recover; protocol errors are kept for requests
//! that cannot be routed at all, or that come once their session is closing (see [`SessionEnd`]).
//! A call abandoned (cancelled by its client, or its session ending) stops at once at whatever
//! stage it waits on: the user's answer (the question is withdrawn), a pre-call hook (killed with
//! its group), the downstream call (the server is told).
//!
//! A call whose request carries `_meta.progressToken` (a `defer_execute` request's token is its
//! target's) has the server's progress relayed to its client as `notifications/progress` with
//! that token, each before the call's result and none after it (see `relay_progress`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ClientResult, ContentBlock, CustomRequest, CustomResult, ElicitRequest, ElicitRequestParams,
    ElicitationAction, ErrorCode, Implementation, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, ServerRequest, Tool,
};
use rmcp::service::{ElicitationMode, NotificationContext, PeerRequestOptions, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use toolshelf_core::audit::{AuditHit, AuditKind, AuditRecord};
use toolshelf_core::authoring;
use toolshelf_core::catalog::Origin;
use toolshelf_core::hook::{Hook, HookEvent, HookEventKind};
use toolshelf_core::invoke::{
    self, AskRefusal, Authorization, CallFailure, Refusal, RefusalKind, Via, echo,
};
use toolshelf_core::meta::DeferExecuteArgs;
use toolshelf_core::name::{DEFER_EXECUTE, TOOL_SEARCH};
use toolshelf_core::reminder;
use toolshelf_core::search::SearchRequest;
use toolshelf_core::session::{FrozenSurface, NoticeHint, SessionState, schema_notice};

use crate::audit::Audit;
use crate::downstream::{Downstream, ProgressSink};
use crate::hooks::{self, HookVerdict};
use crate::hub::{Hub, Snapshot};
use crate::search::{Held, tool_search};

/// URI of the server-status resource.
pub const STATUS_URI: &str = "toolshelf://status";

#[derive(Debug, Default)]
struct Local {
    state: SessionState,
    list: Option<Arc<Vec<Tool>>>,
    /// Tools the model wrote with `tool_define`.
    authored: Vec<authoring::Authored>,
    /// The hub's snapshot it was built on, and the session's view with `authored` in it.
    overlay: Option<(Arc<Snapshot>, Arc<Snapshot>)>,
    /// Descriptions rendered from templates when the list froze, by canonical name: search
    /// results show them too. A tool that arrives later gets its rendering when a search first
    /// runs on a snapshot that has it (see `GatewaySession::described`); a rendering is never
    /// replaced, so a tool reads the same for the whole session.
    described: std::collections::BTreeMap<String, String>,
    /// The session's template values, once its list froze.
    values: Option<toolshelf_core::template::SessionValues>,
    /// The snapshot `described` covers.
    described_on: Option<Arc<Snapshot>>,
    /// The tools the frozen list carries with their schemas, by canonical name.
    pinned: std::collections::BTreeMap<String, Pinned>,
    /// Whether the frozen list has `tool_search`.
    searchable: bool,
}

/// A tool of the frozen list: the name it is listed by, the tool that name was given to, and
/// the input schema the model last saw for it (the list's, until a notice tells a new one).
#[derive(Debug, Clone)]
struct Pinned {
    listed: String,
    server: Option<String>,
    original: String,
    schema: Map<String, Value>,
}

/// The name a session calls canonical `name` by: a pinned tool as its list shows it; with
/// `direct` (short names and no `tool_search`), any other as a pinned one would be listed; else
/// the canonical name, which `defer_execute` takes.
fn shown_name(
    pinned: &std::collections::BTreeMap<String, Pinned>,
    direct: bool,
    snap: &Snapshot,
    name: &str,
) -> String {
    match pinned.get(name) {
        Some(p) => p.listed.clone(),
        None if direct => snap
            .catalog
            .get(name)
            .and_then(|t| t.client_name())
            .unwrap_or(name)
            .to_owned(),
        None => name.to_owned(),
    }
}

/// What the user did with an approval question they did not accept, as it completes "the user
/// ...".
fn refused_as(action: &ElicitationAction) -> String {
    match action {
        ElicitationAction::Decline => "declined".into(),
        ElicitationAction::Cancel => "cancelled the prompt".into(),
        other => format!(
            "answered {}",
            serde_json::to_string(other).unwrap_or_else(|_| "without accepting".into())
        ),
    }
}

/// How long a request waits for `notifications/initialized` before it goes ahead without the
/// session's `session_start` hooks having run (see [`GatewaySession::started`]).
const INITIALIZED_WAIT: Duration = Duration::from_secs(5);

/// How long a search by words waits for the embedding ranker while it is being prepared (the
/// model loading at start-up, new tools being embedded after a server's tools changed).
const RANKER_WAIT: Duration = Duration::from_secs(5);

/// Appended to a search by words that ran without the embedding ranker, which was still being
/// prepared: without it a tool described in other words, or in another language, is not found,
/// and an empty answer must not read as "no such tool".
const RANKER_STARTING: &str = "Meaning-based matching is still starting, so this search matched \
words only: a tool described in other words or in another language may be missing. Search again \
in a few seconds before concluding that no tool fits.";

/// Progress notifications of one call that may wait to be sent to its client: a burst of a few
/// hundred (one a step of a long loop) all reach it; past this, newer ones are dropped.
const PROGRESS_BACKLOG: usize = 1024;
/// How long a call of a name no tool has waits for the snapshot to hold tool changes servers
/// announced before it (a rebuild takes milliseconds; this bounds a hub that is stuck).
const CATCH_UP: Duration = Duration::from_secs(10);

/// Sends `client` each progress notification that comes in `progress`, with its `token` (the
/// client's own) in place of the gateway's, until the call's sink is dropped (its call returned)
/// and every notification that came before is sent: the caller awaits this before the result
/// goes out, so the client gets them all before it and none after. A notification that cannot be
/// sent (the client is gone) ends the relay, and so does `abandoned` (the call's result reaches
/// nobody); the call goes on either way.
async fn relay_progress(
    client: &Peer<RoleServer>,
    token: ProgressToken,
    mut progress: tokio::sync::mpsc::Receiver<ProgressNotificationParam>,
    abandoned: impl Future<Output = String>,
) {
    let relay = async {
        while let Some(p) = progress.recv().await {
            let mut relayed = ProgressNotificationParam::new(token.clone(), p.progress);
            relayed.total = p.total;
            relayed.message = p.message;
            if let Err(e) = client.notify_progress(relayed).await {
                tracing::debug!("a progress notification could not be sent to the client: {e}");
                return;
            }
        }
    };
    tokio::select! {
        biased;
        _ = abandoned => {}
        () = relay => {}
    }
}

/// Where a session's `session_start` hooks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// `notifications/initialized` has not come yet.
    Pending,
    /// The hooks are running.
    Running,
    /// The hooks are done, or there are none.
    Done,
}

/// Whether a session has a start, as its end sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// No `notifications/initialized` yet.
    No,
    /// The transport passed one on, and its handler has not run yet.
    Announced,
    /// Its handler recorded the start (its `session_start` hooks may still run).
    Started,
    /// The end came first: the session has neither a start nor an end.
    Never,
}

/// One client session.
#[derive(Debug)]
pub struct GatewaySession {
    hub: Arc<Hub>,
    id: String,
    local: tokio::sync::Mutex<Local>,
    end: Arc<SessionEnd>,
    /// Requests wait on it until the `session_start` hooks are done.
    start: tokio::sync::watch::Sender<Start>,
    /// The HTTP listener's sessions, counted in the status resource.
    http_sessions: Option<Arc<LocalSessionManager>>,
}

/// The end of a session: its calls still running abandoned, then its audit record and
/// `session_end` hooks, run once, and only for a session that started (an HTTP session that
/// never finished its handshake has neither).
///
/// A session has either both a start and an end, the end's record and hooks after the start's
/// (which hold the session's requests, as a request does, until their hooks are done or timed
/// out), or neither. The handler of `notifications/initialized` runs on a task of its own, so the
/// end may come before it: if the transport announced the notification (stdio, see
/// [`Self::announce_start`]), the end waits for that handler to record the start, up to
/// `INITIALIZED_WAIT`; otherwise, or past that wait, the end records nothing and the handler,
/// when it runs, records no start either. (An HTTP session's end runs when the session is
/// dropped, after every task of it, so only the server shutting down can come first.)
///
/// While the end runs it holds the session's requests whole: a request that comes once the
/// session is closing (its calls are being abandoned) is refused with a protocol error, runs no
/// hook and has no audit record: nothing of a session is recorded after its end.
///
/// Dropping the session starts it on the runtime, which suffices for HTTP sessions (the server
/// keeps running). The stdio server, and the HTTP server shutting down, must await it instead: a
/// task spawned then dies with the runtime when the process exits.
#[derive(Debug)]
pub struct SessionEnd {
    hub: Arc<Hub>,
    id: String,
    opened: tokio::sync::watch::Sender<Opened>,
    done: tokio::sync::Mutex<bool>,
    /// Set when the session ends: calls in flight are abandoned.
    closing: tokio::sync::watch::Sender<bool>,
    /// Held, shared, by every request while it runs; the end takes it whole, so the records of
    /// the calls it abandoned come before its own.
    requests: Arc<tokio::sync::RwLock<()>>,
}

impl SessionEnd {
    /// Abandons the session's calls in flight (each is audited as `cancelled`) and runs the end,
    /// unless that already happened or the session never started: waits for the requests still
    /// running (the start among them), records the end and runs the `session_end` hooks.
    pub async fn run(&self) {
        let mut done = self.done.lock().await;
        self.abandon_calls();
        if std::mem::replace(&mut *done, true) {
            return;
        }
        if *self.opened.borrow() == Opened::Announced {
            let mut opened = self.opened.subscribe();
            let claimed = opened.wait_for(|o| *o != Opened::Announced);
            if tokio::time::timeout(INITIALIZED_WAIT, claimed)
                .await
                .is_err()
            {
                tracing::warn!(
                    "session {}: its notifications/initialized was not handled within {}s of its end; it has neither a start nor an end",
                    self.id,
                    INITIALIZED_WAIT.as_secs()
                );
            }
        }
        let mut started = false;
        self.opened.send_if_modified(|o| {
            started = *o == Opened::Started;
            if !started {
                *o = Opened::Never;
            }
            !started
        });
        if !started {
            return;
        }
        let settle = self.settle_time();
        // Held until the end is done: requests still waiting for it are then refused.
        let _all = match tokio::time::timeout(settle, self.requests.clone().write_owned()).await {
            Ok(all) => Some(all),
            Err(_) => {
                tracing::warn!(
                    "session {}: requests still running {}s after it ended; ending it anyway",
                    self.id,
                    settle.as_secs()
                );
                None
            }
        };
        self.record_end();
        let hooks = self.hub.compiled().hooks().of(HookEventKind::SessionEnd);
        if !hooks.is_empty() {
            let event = HookEvent::new(HookEventKind::SessionEnd, &self.id);
            let v = hooks::run(hooks, None, event).await;
            report_hook_failures(&self.hub, &self.id, &v, None);
        }
    }

    /// Says that the session's `notifications/initialized` came, before its handler runs: an
    /// end that comes first then waits for the start.
    pub fn announce_start(&self) {
        self.opened.send_if_modified(|o| {
            let first = *o == Opened::No;
            if first {
                *o = Opened::Announced;
            }
            first
        });
    }

    /// Whether the session is closing: its calls are abandoned and new requests refused.
    fn closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// Tells the session's calls in flight to give up their downstream call.
    pub fn abandon_calls(&self) {
        self.closing.send_replace(true);
    }

    /// How long a request can still take once its call is abandoned: the wait for the
    /// `session_start` hooks (see [`GatewaySession::started`]) and its own hooks, each within its
    /// timeout, and a moment more.
    fn settle_time(&self) -> Duration {
        let compiled = self.hub.compiled();
        let hooks = compiled.hooks();
        let secs: u64 = [
            HookEventKind::SessionStart,
            HookEventKind::PreCall,
            HookEventKind::PostCall,
            HookEventKind::CallFailed,
            HookEventKind::PostSearch,
        ]
        .into_iter()
        .flat_map(|kind| hooks.of(kind))
        .map(|h| h.command.timeout_secs)
        .sum();
        INITIALIZED_WAIT + Duration::from_secs(secs.saturating_add(5))
    }

    fn record_end(&self) {
        let mut r = record(&self.id, AuditKind::Session);
        r.outcome = Some("end".into());
        let _ = self.hub.audit.append(&r);
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
        let _ = hub.audit.append(&r);
    }
}

/// Runs the hooks that may replace a result (`post_call`, `post_search`); a replacement must be
/// an MCP `CallToolResult`.
async fn run_result_hooks(
    hooks: &[Hook],
    tool: Option<&toolshelf_core::Tool>,
    event: HookEvent,
) -> (HookVerdict, Option<CallToolResult>) {
    hooks::run_replacing(hooks, tool, event, |v| {
        serde_json::from_value::<CallToolResult>(v.clone()).map_err(|e| e.to_string())
    })
    .await
}

/// What the admission stages let through: the tool, its server, the params to send and the
/// hooks' guidance so far.
struct Admitted {
    index: usize,
    /// `None` for a tool the gateway runs itself (`tool_define`, a model-authored tool).
    server: Option<Arc<Downstream>>,
    guidance: Vec<String>,
    /// The caller's params, when a `pre_call` hook rewrote them.
    rewritten_from: Option<Map<String, Value>>,
}

/// Why a call did not go out: a stage refused it, or it was abandoned while it waited for the
/// user's answer or a `pre_call` hook (why), which then stopped: the question is withdrawn, the
/// hook killed.
enum Stop {
    Refused(Refusal),
    Abandoned { admitted: Admitted, why: String },
}

impl From<Refusal> for Stop {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// Why a call is abandoned when its session ends.
const SESSION_ENDED: &str = "its session ended";
/// Why a call is abandoned when its client sent `notifications/cancelled` for it.
const CLIENT_CANCELLED: &str = "the client cancelled the call";

/// The audit log's `ask` of a call abandoned before the user answered.
const UNANSWERED: &str = "unanswered";

/// A label of an ask's outcome for the audit log.
fn ask_label(answer: &Result<(), AskRefusal>) -> &'static str {
    match answer {
        Ok(()) => "approved",
        Err(AskRefusal::Unsupported) => "unsupported",
        Err(AskRefusal::RunsInside) => "runs_inside",
        Err(AskRefusal::Declined(_)) => "declined",
        Err(AskRefusal::Failed(_)) => "failed",
        Err(AskRefusal::TooLong(_)) => "too_long",
    }
}

/// Test-only fault injection (see [`crate::failpoint_set`]): a failpoint set makes the code at
/// that point panic, so end-to-end tests can reach failure paths that correct input never
/// reaches.
fn failpoint(name: &str) {
    if crate::failpoint_set(name) {
        panic!("failpoint {name}");
    }
}

impl GatewaySession {
    /// A new session on `hub`.
    pub fn new(hub: Arc<Hub>) -> Self {
        let id = hub.new_session_id();
        let end = Arc::new(SessionEnd {
            hub: hub.clone(),
            id: id.clone(),
            opened: tokio::sync::watch::Sender::new(Opened::No),
            done: tokio::sync::Mutex::new(false),
            closing: tokio::sync::watch::Sender::new(false),
            requests: Arc::default(),
        });
        let hooked = !hub
            .compiled()
            .hooks()
            .of(HookEventKind::SessionStart)
            .is_empty();
        Self {
            hub,
            id,
            local: tokio::sync::Mutex::new(Local::default()),
            end,
            start: tokio::sync::watch::Sender::new(if hooked {
                Start::Pending
            } else {
                Start::Done
            }),
            http_sessions: None,
        }
    }

    /// A session served over HTTP by `sessions`, whose count the status resource shows.
    pub fn with_http_sessions(mut self, sessions: Arc<LocalSessionManager>) -> Self {
        self.http_sessions = Some(sessions);
        self
    }

    /// The session id (as in hook events and the audit log).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session's end, for a server that must await it (see [`SessionEnd`]).
    pub fn end(&self) -> Arc<SessionEnd> {
        self.end.clone()
    }

    /// Waits until the session's `session_start` hooks are done, so that none of its calls or
    /// searches runs before them. A client sends `notifications/initialized` before its first
    /// request, but rmcp handles each on a task of its own (and over HTTP each comes in its own
    /// request), so a request may get here first: it waits for the notification, up to
    /// [`INITIALIZED_WAIT`], and then for the hooks, which their own timeouts bound.
    async fn started(&self) {
        let mut start = self.start.subscribe();
        if *start.borrow() == Start::Pending {
            let initialized = start.wait_for(|s| *s != Start::Pending);
            if tokio::time::timeout(INITIALIZED_WAIT, initialized)
                .await
                .is_err()
            {
                let gave_up = self.start.send_if_modified(|s| {
                    let pending = *s == Start::Pending;
                    if pending {
                        *s = Start::Done;
                    }
                    pending
                });
                if gave_up {
                    tracing::warn!(
                        "session {}: no notifications/initialized within {}s; its requests go ahead without waiting for its session_start hooks",
                        self.id,
                        INITIALIZED_WAIT.as_secs()
                    );
                }
            }
        }
        let _ = start.wait_for(|s| *s == Start::Done).await;
    }

    /// Takes a share of the session's requests for one request, which holds it while it runs.
    /// A request that comes once the session is closing is refused (see [`SessionEnd`]).
    async fn admit_request(&self) -> Result<tokio::sync::OwnedRwLockReadGuard<()>, ErrorData> {
        let running = self.end.requests.clone().read_owned().await;
        if self.end.closing() {
            return Err(ErrorData::invalid_request(
                format!(
                    "session {} has ended; its requests are no longer served (start a new session)",
                    self.id
                ),
                None,
            ));
        }
        Ok(running)
    }

    /// Whether the result of the call of `context` reaches nobody: the client cancelled it, or
    /// the session is closing.
    fn unread(&self, context: &RequestContext<RoleServer>) -> bool {
        self.abandonment(context).is_some()
    }

    /// Why the result of the call of `context` reaches nobody, if it does not (see
    /// [`Self::abandoned`]).
    fn abandonment(&self, context: &RequestContext<RoleServer>) -> Option<&'static str> {
        if self.end.closing() {
            Some(SESSION_ENDED)
        } else if context.ct.is_cancelled() {
            Some(CLIENT_CANCELLED)
        } else {
            None
        }
    }

    /// Completes, saying why, when the call of `context` is to be abandoned: the session is
    /// ending (its HTTP session deleted among others; rmcp may also report that as a
    /// cancellation), or the client cancelled the call (`notifications/cancelled`).
    async fn abandoned(&self, context: &RequestContext<RoleServer>) -> String {
        let mut closing = self.end.closing.subscribe();
        tokio::select! {
            biased;
            _ = closing.wait_for(|c| *c) => SESSION_ENDED.into(),
            () = context.ct.cancelled() => CLIENT_CANCELLED.into(),
        }
    }

    /// The frozen tool list, freezing it on first use. With description templates, the list is
    /// rendered for this session (its mode, `client`, the workspace); a template that fails fails
    /// the list, naming the tool and the line.
    async fn list(&self, client: Option<String>) -> Result<Arc<Vec<Tool>>, ErrorData> {
        let mut local = self.local.lock().await;
        if let Some(list) = &local.list {
            return Ok(list.clone());
        }
        self.hub.settled().await;
        let snap = self.hub.snapshot();
        // A template runs to its step budget, which is work enough to hold a runtime worker (and
        // every session waiting on it) for a while: it renders on a blocking thread.
        let compiled = self.hub.compiled();
        let values = toolshelf_core::template::SessionValues {
            mode: compiled.mode().map(str::to_owned),
            client,
            workspace: toolshelf_runtime::files::workspace(compiled.templates().workspace()),
        };
        let (hub, id, rendered, given) = (
            self.hub.clone(),
            self.id.clone(),
            snap.clone(),
            values.clone(),
        );
        let (list, described) =
            tokio::task::spawn_blocking(move || Self::session_tools(&hub, &id, &rendered, &given))
                .await
                .map_err(|e| {
                    ErrorData::internal_error(format!("rendering the tool list failed: {e}"), None)
                })??;
        let short =
            compiled.config().gateway.pinned_names == toolshelf_core::config::PinnedNames::Short;
        local.pinned = snap
            .surface
            .resident
            .iter()
            .map(|&i| {
                let t = &snap.catalog.tools()[i];
                let listed = t.client_name().filter(|_| short).unwrap_or(&t.name);
                let pinned = Pinned {
                    listed: listed.to_owned(),
                    server: t.original_server.clone(),
                    original: t.original_name.clone(),
                    schema: t.input_schema.clone(),
                };
                (t.name.clone(), pinned)
            })
            .collect();
        local.searchable = list.iter().any(|t| t.name == TOOL_SEARCH);
        let list = Arc::new(list);
        local.described = described;
        local.values = Some(values);
        local.described_on = Some(snap.clone());
        local.state.freeze(snap.visible.clone(), || FrozenSurface {
            format: "mcp".into(),
            tools: serde_json::to_string(list.as_ref()).unwrap_or_default(),
        });
        local.list = Some(list.clone());
        Ok(list)
    }

    /// The session's renderings of its tools' descriptions on `snap`: those made when its list
    /// froze, and for tools that arrived since (a server that came up later), their templates
    /// rendered now with the session's values. A template that fails for a late tool is logged
    /// and the tool shows the catalog's description.
    async fn described(&self, snap: &Arc<Snapshot>) -> std::collections::BTreeMap<String, String> {
        let mut local = self.local.lock().await;
        let current = local
            .described_on
            .as_ref()
            .is_none_or(|s| Arc::ptr_eq(s, snap));
        let Some(values) = local.values.clone().filter(|_| !current) else {
            return local.described.clone();
        };
        local.described_on = Some(snap.clone());
        if !self.hub.compiled().templates().any(&snap.catalog) {
            return local.described.clone();
        }
        let (hub, rendered) = (self.hub.clone(), snap.clone());
        let outcome = tokio::task::spawn_blocking(move || {
            hub.compiled()
                .templates()
                .render(&rendered.catalog, &rendered.exposure, &values)
                .map(|d| d.tools_by_name(&rendered.catalog))
        })
        .await;
        match outcome {
            Ok(Ok(fresh)) => {
                for (name, text) in fresh {
                    local.described.entry(name).or_insert(text);
                }
            }
            Ok(Err(e)) => tracing::warn!(
                "session {}: a tool that arrived after its list froze keeps the catalog's description: {e}",
                self.id
            ),
            Err(e) => tracing::warn!("session {}: rendering failed: {e}", self.id),
        }
        local.described.clone()
    }

    /// The session's tool list and the descriptions its templates rendered (by canonical name).
    fn session_tools(
        hub: &Hub,
        id: &str,
        snap: &Snapshot,
        values: &toolshelf_core::template::SessionValues,
    ) -> Result<(Vec<Tool>, std::collections::BTreeMap<String, String>), ErrorData> {
        let compiled = hub.compiled();
        if !compiled.templates().any(&snap.catalog) {
            return Ok((snap.tools_list.clone(), Default::default()));
        }
        match compiled.session_surface(&snap.catalog, &snap.exposure, values) {
            Ok(surface) => {
                let described = surface.descriptions().tools_by_name(&snap.catalog);
                let list =
                    crate::hub::mcp_tools(&snap.catalog, &surface, &compiled.config().gateway);
                Ok((list, described))
            }
            Err(e) => {
                tracing::error!("session {id}: {e}");
                Err(ErrorData::internal_error(e.to_string(), None))
            }
        }
    }

    fn record(&self, kind: AuditKind) -> AuditRecord {
        record(&self.id, kind)
    }

    fn report_hook_failures(&self, verdict: &HookVerdict, tool: Option<&str>) {
        report_hook_failures(&self.hub, &self.id, verdict, tool);
    }

    /// The snapshot a search by words runs on, once its embedding ranker is ready: a search that
    /// comes while the ranker is still being prepared (the gateway has just started, or a server's
    /// tools changed) waits for it, up to [`RANKER_WAIT`], or until its call is abandoned. `true`
    /// with it when the ranker is still not there: the search then matches words only.
    async fn ranked_snapshot(&self, context: &RequestContext<RoleServer>) -> (Arc<Snapshot>, bool) {
        let Some(mut progress) = self.hub.ranker_progress() else {
            return (self.snapshot().await, false);
        };
        let deadline = tokio::time::Instant::now() + RANKER_WAIT;
        loop {
            progress.borrow_and_update();
            // The newest snapshot each time: one that arrived meanwhile has a ranker of its own.
            let snap = self.snapshot().await;
            if !self.hub.ranker_pending(&snap) {
                return (snap, false);
            }
            tokio::select! {
                biased;
                _ = self.abandoned(context) => return (snap, true),
                changed = tokio::time::timeout_at(deadline, progress.changed()) => {
                    if !matches!(changed, Ok(Ok(()))) {
                        return (snap, true);
                    }
                }
            }
        }
    }

    async fn search(
        &self,
        args: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        // An exact lookup by name needs no ranker.
        let by_words = matches!(
            SearchRequest::from_json(&Value::Object(args.clone())),
            Ok(SearchRequest::Queries { .. })
        );
        let (snap, unranked) = if by_words {
            self.ranked_snapshot(context).await
        } else {
            (self.snapshot().await, false)
        };
        // The latency shown on the dashboard is the search's own, without that wait.
        let started = Instant::now();
        let ttl = self.hub.config().session.activation_ttl_calls;
        let described = self.described(&snap).await;
        let (held, pinned) = {
            let local = self.local.lock().await;
            let pinned: std::collections::BTreeMap<String, String> = local
                .pinned
                .iter()
                .map(|(canonical, p)| (canonical.clone(), p.listed.clone()))
                .collect();
            (local.state.active_names(ttl), pinned)
        };
        let active = |name: &str| held.binary_search_by(|h| h.as_str().cmp(name)).is_ok();
        let listed = |name: &str| pinned.get(name).cloned();
        let mut outcome = tool_search(
            &snap,
            &self.hub.config().search,
            &args,
            &Held {
                active: &active,
                pinned: &listed,
                described: &described,
            },
            || failpoint("search"),
        );
        self.hub
            .search_latencies
            .push(started.elapsed().as_micros() as u64);
        let names: Vec<String> = outcome
            .loaded
            .iter()
            .map(|&i| snap.catalog.tools()[i].name.clone())
            .collect();
        let mut r = self.record(AuditKind::Search);
        r.set_params(&args);
        r.outcome = Some(outcome.outcome.into());
        let unranked = unranked && !outcome.is_error;
        if unranked {
            r.detail = Some(format!(
                "the embedding ranker was not ready after {}s: matched by words only",
                RANKER_WAIT.as_secs()
            ));
        }
        r.loaded = Some(
            outcome
                .loaded
                .iter()
                .map(|&i| AuditHit::of(&snap.catalog.tools()[i]))
                .collect(),
        );
        // A server that is down is named whatever the search found: its tools may be the ones
        // wanted. An exact lookup that found something concerns only the names it did not find.
        if !outcome.is_error {
            let names = match SearchRequest::from_json(&Value::Object(args.clone())) {
                Ok(SearchRequest::Names(names)) if outcome.outcome == "ok" => Some(names),
                _ => None,
            };
            // Before the servers' notes, which end the answer one line a server.
            if unranked {
                outcome.text = format!("{}\n{RANKER_STARTING}", outcome.text);
            }
            if let Some(note) =
                self.hub
                    .search_note(&snap.catalog, names.as_deref(), &outcome.shown)
            {
                outcome.text = format!("{}\n{note}", outcome.text);
            }
        }
        let mut result = if outcome.is_error {
            error_result(outcome.text)
        } else {
            CallToolResult::success(vec![ContentBlock::text(outcome.text)])
        };
        let hooks = self.hub.compiled().hooks().of(HookEventKind::PostSearch);
        if !hooks.is_empty() {
            let mut event = HookEvent::new(HookEventKind::PostSearch, &self.id);
            event.search = Some(Value::Object(args));
            event.loaded = Some(names.clone());
            event.result = serde_json::to_value(&result).ok();
            // Dropped when the search is abandoned, which kills the hooks with their groups.
            let ran = tokio::select! {
                biased;
                why = self.abandoned(context) => Err(why),
                ran = run_result_hooks(hooks, None, event) => Ok(ran),
            };
            let (verdict, rewritten) = match ran {
                Ok(ran) => ran,
                Err(why) => {
                    self.record_abandoned_search(r, &why);
                    return error_result(format!("The search was abandoned: {why}"));
                }
            };
            self.report_hook_failures(&verdict, None);
            if let Some(reason) = verdict.denied {
                // The model never saw the schemas, so nothing is loaded.
                r.set_withheld(&reason);
                r.loaded = Some(Vec::new());
                let _ = self.hub.audit.append(&r);
                return error_result(format!(
                    "The search result was withheld by a hook: {reason}"
                ));
            }
            if let Some(rewritten) = rewritten {
                r.hooks.push("result_replaced");
                result = rewritten;
            }
            for g in verdict.guidance {
                result.content.push(ContentBlock::text(g));
            }
        }
        // A result that reaches nobody loads nothing: the model never read the schemas.
        if let Some(why) = self.abandonment(context) {
            self.record_abandoned_search(r, why);
            return result;
        }
        let _ = self.hub.audit.append(&r);
        self.local
            .lock()
            .await
            .state
            .activate(names.iter().map(String::as_str));
        result
    }

    /// Records a search whose answer reaches nobody (why: see [`Self::abandoned`]): `cancelled`,
    /// and nothing loaded.
    fn record_abandoned_search(&self, mut r: AuditRecord, why: &str) {
        r.outcome = Some("cancelled".into());
        r.detail = Some(format!("the search was abandoned: {why}"));
        r.loaded = Some(Vec::new());
        let _ = self.hub.audit.append(&r);
    }

    /// Asks the user through MCP elicitation. `script`: the tool is one the model wrote in this
    /// session, which runs this script; the question says so and shows it. `Err(why)`: the call
    /// was abandoned before the user answered, and the question is withdrawn (the client is sent
    /// `notifications/cancelled` for it), since an answer would approve nothing.
    async fn ask(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &str,
        params: &Map<String, Value>,
        script: Option<&str>,
    ) -> Result<Result<(), AskRefusal>, String> {
        if !context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return Ok(Err(AskRefusal::Unsupported));
        }
        let question = || {
            let schema = serde_json::from_value(json!({"type": "object", "properties": {}}))
                .map_err(|e| {
                    AskRefusal::Failed(format!("cannot build the approval request: {e}"))
                })?;
            let message = match script {
                Some(script) => invoke::authored_approval_question(tool, params, script)?,
                None => invoke::approval_question(tool, params)?,
            };
            Ok(ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            })
        };
        let request = match question() {
            Ok(request) => ServerRequest::ElicitRequest(ElicitRequest::new(request)),
            Err(refusal) => return Ok(Err(refusal)),
        };
        let open = context
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await;
        let open = match open {
            Ok(open) => open,
            Err(e) => return Ok(Err(AskRefusal::Failed(e.to_string()))),
        };
        let id = open.id.clone();
        let answer = tokio::select! {
            biased;
            why = self.abandoned(context) => {
                // Sent on its own: the call waits on no client's transport once abandoned.
                let (peer, reason) = (context.peer.clone(), why.clone());
                tokio::spawn(async move {
                    let withdrawn = CancelledNotificationParam::new(Some(id), Some(reason));
                    if let Err(e) = peer.notify_cancelled(withdrawn).await {
                        tracing::debug!("an approval question could not be withdrawn: {e}");
                    }
                });
                return Err(why);
            }
            answer = open.await_response() => answer,
        };
        Ok(match answer {
            Ok(ClientResult::ElicitResult(answer))
                if answer.action == ElicitationAction::Accept =>
            {
                Ok(())
            }
            Ok(ClientResult::ElicitResult(answer)) => {
                Err(AskRefusal::Declined(refused_as(&answer.action)))
            }
            Ok(_) => Err(AskRefusal::Failed(
                "the client answered the question with something other than an answer".into(),
            )),
            Err(e) => Err(AskRefusal::Failed(e.to_string())),
        })
    }

    /// The stages before the call goes out. `params` ends as the params to send (pre-call hooks
    /// may rewrite them); `ask` records the outcome of asking the user, if a rule asked.
    async fn admit(
        &self,
        snap: &Arc<Snapshot>,
        requested: &str,
        params: &mut Map<String, Value>,
        via: Via,
        context: &RequestContext<RoleServer>,
        ask: &mut Option<&'static str>,
    ) -> Result<Admitted, Stop> {
        let (i, pinned) = match self.pinned_target(snap, requested).await? {
            Some(i) => (i, true),
            None => (
                invoke::resolve(&snap.catalog, &snap.exposure, requested)?,
                false,
            ),
        };
        let tool = &snap.catalog.tools()[i];
        let server = match self.hub.server_of(tool) {
            Some(s) => Some(s.clone()),
            None if self.runs_itself(tool) => None,
            None => return Err(Refusal::NotRunnable { tool: i }.into()),
        };
        // The rules first: a call they deny is refused before the model is sent to load the
        // schema or fix the params, neither of which would let it run; an `ask` waits for the
        // params to be valid.
        let verdict =
            invoke::authorize(&snap.catalog, self.hub.compiled().permissions(), i, params)?;
        // A tool the frozen list carries with its schema is loaded for the whole session,
        // whatever the current exposure says of it.
        if !pinned {
            let local = self.local.lock().await;
            let ttl = self.hub.config().session.activation_ttl_calls;
            invoke::require_loaded(
                &snap.exposure,
                i,
                self.hub.config().execute.require_search,
                local.state.activity(&tool.name, ttl),
                local.state.turn(),
            )?;
        }
        // The schema may be the model's own (`tool_define`), as costly to compile and to check
        // against as it chose: both run off the async workers.
        let define = tool.origin != Origin::Model && self.runs_itself(tool);
        let (given, checked) = {
            let (view, given) = (snap.clone(), std::mem::take(params));
            toolshelf_runtime::off_workers(move || {
                let validator = view.validator(i);
                let checked = if define {
                    authoring::validate(i, &validator, &given)
                } else {
                    invoke::validate(i, &validator, &given)
                };
                let checked = checked.map(|()| validator);
                (given, checked)
            })
            .await
        };
        *params = given;
        let validator = checked?;
        if let Authorization::Ask { because } = verdict {
            let script = if tool.origin == Origin::Model {
                let local = self.local.lock().await;
                local
                    .authored
                    .iter()
                    .find(|t| t.name() == tool.original_name)
                    .map(|t| t.script.clone())
            } else {
                None
            };
            let answer = self
                .ask(context, &tool.name, params, script.as_deref())
                .await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(why) => {
                    *ask = Some(UNANSWERED);
                    let admitted = Admitted {
                        index: i,
                        server,
                        guidance: Vec::new(),
                        rewritten_from: None,
                    };
                    return Err(Stop::Abandoned { admitted, why });
                }
            };
            *ask = Some(ask_label(&answer));
            invoke::approved(i, &because, answer)?;
        }
        let mut guidance = Vec::new();
        let mut rewritten_from = None;
        let hooks = self.hub.compiled().hooks().of(HookEventKind::PreCall);
        if hooks.iter().any(|h| h.applies_to(Some(tool))) {
            let mut event = self.call_event(HookEventKind::PreCall, tool, server.as_deref(), via);
            event.params = Some(params.clone());
            // Dropped when the call is abandoned, which kills the hook with its group.
            let pre = tokio::select! {
                biased;
                why = self.abandoned(context) => {
                    let admitted = Admitted {
                        index: i,
                        server,
                        guidance: Vec::new(),
                        rewritten_from: None,
                    };
                    return Err(Stop::Abandoned { admitted, why });
                }
                pre = hooks::run(hooks, Some(tool), event) => pre,
            };
            self.report_hook_failures(&pre, Some(&tool.name));
            let (denial, rewritten) = (pre.denial, pre.params);
            let after = toolshelf_runtime::off_workers(move || {
                invoke::after_pre_call(i, &validator, denial, rewritten)
            });
            if let Some(rewritten) = after.await? {
                rewritten_from = Some(std::mem::replace(params, rewritten));
            }
            guidance = pre.guidance;
        }
        self.hub
            .audit
            .ready()
            .map_err(|error| Refusal::AuditUnavailable { tool: i, error })?;
        Ok(Admitted {
            index: i,
            server,
            guidance,
            rewritten_from,
        })
    }

    /// The tool `requested` names when it is a name of the frozen list (as listed, or
    /// canonical): the tool that name was given to, while its server offers it. `None` for any
    /// other name, or one whose tool is not visible now (the usual stages then answer).
    async fn pinned_target(
        &self,
        snap: &Snapshot,
        requested: &str,
    ) -> Result<Option<usize>, Refusal> {
        let local = self.local.lock().await;
        let Some((canonical, p)) = local
            .pinned
            .iter()
            .find(|(canonical, p)| p.listed == requested || *canonical == requested)
        else {
            return Ok(None);
        };
        let here = snap.catalog.position(canonical).filter(|&i| {
            let t = &snap.catalog.tools()[i];
            t.original_server == p.server && t.original_name == p.original
        });
        match (here, &p.server) {
            (Some(i), _) => Ok(snap.is_visible(i).then_some(i)),
            (None, Some(server)) => {
                let down = match self.hub.servers.get(server).map(|s| s.state()) {
                    Some(crate::downstream::ServerState::Failed(reason)) => {
                        Some(crate::stdio::without_last_words(&reason))
                    }
                    _ => None,
                };
                Err(Refusal::Gone {
                    requested: requested.to_owned(),
                    server: server.clone(),
                    down,
                })
            }
            (None, None) => Ok(None),
        }
    }

    fn call_event(
        &self,
        kind: HookEventKind,
        tool: &toolshelf_core::Tool,
        server: Option<&Downstream>,
        via: Via,
    ) -> HookEvent {
        let mut event = HookEvent::new(kind, &self.id);
        event.tool = Some(tool.name.clone());
        event.server = server.map(|s| s.name().to_owned());
        event.original_tool = Some(tool.original_name.clone());
        event.via_defer_execute = Some(via == Via::DeferExecute);
        event
    }

    /// Audits a refusal and turns it into the tool result the model reads. A refusal that
    /// carries a schema loads the tool for this session.
    async fn refuse(
        &self,
        snap: &Snapshot,
        requested: &str,
        via: Via,
        params: &Map<String, Value>,
        refusal: &Refusal,
        ask: Option<&'static str>,
    ) -> CallToolResult {
        let tools = snap.catalog.tools();
        let mut r = self.record(if refusal.kind() == RefusalKind::Hidden {
            AuditKind::Hidden
        } else {
            AuditKind::Refused
        });
        r.requested = Some(echo(requested));
        r.via = Some(via);
        r.tool = refusal.tool().map(|i| tools[i].name.clone());
        r.server = match refusal {
            Refusal::Gone { server, .. } => Some(server.clone()),
            _ => refusal
                .tool()
                .and_then(|i| tools[i].original_server.clone()),
        };
        r.set_params(params);
        r.outcome = Some(refusal.kind().as_str().into());
        r.detail = Some(refusal.detail(&snap.catalog));
        r.ask = ask.map(str::to_owned);
        let _ = self.hub.audit.append(&r);
        if let Some(i) = refusal.loads() {
            self.local
                .lock()
                .await
                .state
                .activate([tools[i].name.as_str()]);
        }
        let mut text = {
            let local = self.local.lock().await;
            let direct = self.short_names() && !local.searchable;
            let listed = |name: &str| shown_name(&local.pinned, direct, snap, name);
            let voice = invoke::Voice {
                searchable: local.searchable,
                listed: &listed,
                // Rendered for the snapshot the session's list was built on (or a later one).
                described: Some(&local.described),
                // Each call of the session is a turn (see `call_tool`).
                turns: "tool calls",
            };
            refusal.text_in(&snap.catalog, &voice)
        };
        // A tool of a server that is down is unknown, not absent. (A hidden tool is known, so
        // its server's tools are too, and it reads exactly as before.)
        if matches!(refusal.kind(), RefusalKind::Unknown | RefusalKind::Hidden)
            && let Some(note) = self.hub.unknown_tools_note(&snap.catalog, Some(requested))
        {
            text = format!("{text}\n{note}");
        }
        error_result(text)
    }

    /// The one path every call takes. Returns the result and whether the tool ran: it returned
    /// a result (one with `isError` too), rather than being refused or failing without one.
    async fn execute(
        &self,
        requested: &str,
        mut params: Map<String, Value>,
        via: Via,
        context: &RequestContext<RoleServer>,
    ) -> (CallToolResult, bool) {
        let mut snap = self.snapshot().await;
        let mut ask = None;
        let mut admitted = self
            .admit(&snap, requested, &mut params, via, context, &mut ask)
            .await;
        // A name no tool has may be one a server has just listed, before the hub's snapshot
        // holds it (a server that came back): once the snapshot catches up, look again.
        if let Err(Stop::Refused(refusal)) = &admitted
            && refusal.kind() == RefusalKind::Unknown
            && self.hub.caught_up(CATCH_UP).await
        {
            snap = self.snapshot().await;
            admitted = self
                .admit(&snap, requested, &mut params, via, context, &mut ask)
                .await;
        }
        let (admitted, abandoned) = match admitted {
            Ok(a) => (a, None),
            Err(Stop::Abandoned { admitted, why }) => (admitted, Some(why)),
            Err(Stop::Refused(refusal)) => {
                let refused = self
                    .refuse(&snap, requested, via, &params, &refusal, ask)
                    .await;
                return (refused, false);
            }
        };
        let Admitted {
            index,
            server,
            mut guidance,
            rewritten_from,
        } = admitted;
        let tool = &snap.catalog.tools()[index];
        let name = tool.name.as_str();
        let started = Instant::now();
        // A call the client cancels is abandoned (the server is told), and no hook sees it: its
        // result would reach nobody.
        let outcome = match (&server, abandoned) {
            (_, Some(why)) => Err(CallFailure::Cancelled(why)),
            (Some(server), None) => {
                let timeout = server
                    .config()
                    .call_timeout_secs
                    .unwrap_or(self.hub.config().execute.call_timeout_secs);
                // The client's progress token, if it asked for progress: the server's progress
                // is relayed to it under that token while the call runs.
                let (sink, relay): (Option<ProgressSink>, _) =
                    match context.meta.get_progress_token() {
                        Some(token) => {
                            let (sink, progress) = tokio::sync::mpsc::channel(PROGRESS_BACKLOG);
                            (Some(sink), Some((token, progress)))
                        }
                        None => (None, None),
                    };
                let call = server.call(
                    &tool.original_name,
                    params.clone(),
                    timeout,
                    self.abandoned(context),
                    sink,
                );
                match relay {
                    None => call.await,
                    Some((token, progress)) => {
                        let relay =
                            relay_progress(&context.peer, token, progress, self.abandoned(context));
                        tokio::join!(call, relay).0
                    }
                }
            }
            (None, None) => tokio::select! {
                biased;
                why = self.abandoned(context) => Err(CallFailure::Cancelled(why)),
                result = self.run_own(&snap, index, &params) => Ok(result),
            },
        };
        // An abandoned call may never have been sent: it is not a use of the tool.
        if !matches!(outcome, Err(CallFailure::Cancelled(_))) {
            self.local.lock().await.state.record_call(name);
        }
        // The model reads of the tool by the name its list shows, as in a refusal; the audit log
        // and the hooks by its canonical name.
        let shown = {
            let local = self.local.lock().await;
            let direct = self.short_names() && !local.searchable;
            shown_name(&local.pinned, direct, &snap, name)
        };
        let mut record = self.record(AuditKind::Call);
        record.requested = Some(echo(requested));
        record.via = Some(via);
        record.tool = Some(name.to_owned());
        record.server = server.as_ref().map(|s| s.name().to_owned());
        record.set_params(&params);
        if let Some(requested) = &rewritten_from {
            record.set_rewritten_from(requested);
        }
        record.duration_ms = Some(started.elapsed().as_millis() as u64);
        record.ask = ask.map(str::to_owned);
        let mut event = self.call_event(HookEventKind::PostCall, tool, server.as_deref(), via);
        event.params = Some(params);
        let hooks = self.hub.compiled().hooks();
        let ran = outcome.is_ok();
        let mut result = match outcome {
            Ok(mut result) => {
                let post = hooks.of(HookEventKind::PostCall);
                if post.iter().any(|h| h.applies_to(Some(tool))) {
                    event.result = serde_json::to_value(&result).ok();
                    let (post, rewritten) = run_result_hooks(post, Some(tool), event).await;
                    self.report_hook_failures(&post, Some(name));
                    if let Some(reason) = post.denied {
                        record.set_withheld(&reason);
                        result = error_result(format!(
                            "{shown} ran, but a post_call hook withheld its result: {reason}"
                        ));
                    } else if let Some(r) = rewritten {
                        record.hooks.push("result_replaced");
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
            Err(failure) => {
                let text = failure.text(name);
                record.outcome = Some(failure.as_str().into());
                record.detail = Some(echo(&text));
                let failed = match failure {
                    CallFailure::Cancelled(_) => &[][..],
                    _ => hooks.of(HookEventKind::CallFailed),
                };
                if failed.iter().any(|h| h.applies_to(Some(tool))) {
                    event.event = HookEventKind::CallFailed;
                    event.error = Some(text.clone());
                    let failed = hooks::run(failed, Some(tool), event).await;
                    self.report_hook_failures(&failed, Some(name));
                    guidance.extend(failed.guidance);
                }
                error_result(failure.text(&shown))
            }
        };
        if let Err(e) = self.hub.audit.append(&record) {
            tracing::warn!("the call of {name} ran but its audit record was lost: {e}");
        }
        for g in guidance {
            result.content.push(ContentBlock::text(g));
        }
        (result, ran)
    }

    /// The catalog this session sees: the hub's newest snapshot, with the tools its model wrote
    /// when it wrote any (rebuilt when the hub's snapshot changes, and searched with the same
    /// rankers as the hub's once the hub has them).
    async fn snapshot(&self) -> Arc<Snapshot> {
        let base = self.hub.snapshot();
        let mut local = self.local.lock().await;
        if local.authored.is_empty() {
            return base;
        }
        if let Some((built_on, view)) = &local.overlay
            && Arc::ptr_eq(built_on, &base)
        {
            let view = view.clone();
            self.enrich(base, &view).await;
            return view;
        }
        // The view compiles and checks every schema, the model's own among them: off the async
        // workers.
        let (hub, built_on, authored) = (self.hub.clone(), base.clone(), local.authored.clone());
        let view = toolshelf_runtime::off_workers(move || {
            built_on.with_authored(&authored, hub.compiled())
        })
        .await;
        match view {
            Ok(view) => {
                let view = Arc::new(view);
                local.overlay = Some((base.clone(), view.clone()));
                self.enrich(base, &view).await;
                view
            }
            Err(e) => {
                tracing::warn!(
                    "session {}: its model-authored tools are left out: {e}",
                    self.id
                );
                base
            }
        }
    }

    /// Adds the hub's rankers to this session's own view of `base` (off the async workers: it
    /// embeds the session's tools).
    async fn enrich(&self, base: Arc<Snapshot>, view: &Arc<Snapshot>) {
        if view.is_enriched() || !base.is_enriched() {
            return;
        }
        let (hub, view) = (self.hub.clone(), view.clone());
        if let Err(e) = tokio::task::spawn_blocking(move || hub.enrich_view(&base, &view)).await {
            tracing::warn!("session {}: enriching its own view failed: {e}", self.id);
        }
    }

    /// Whether pinned tools are listed by their short names.
    fn short_names(&self) -> bool {
        self.hub.config().gateway.pinned_names == toolshelf_core::config::PinnedNames::Short
    }

    /// Whether the gateway runs `tool` itself: `tool_define` and the tools the model wrote, when
    /// authoring is on.
    fn runs_itself(&self, tool: &toolshelf_core::Tool) -> bool {
        self.hub.runner().is_some()
            && (tool.origin == Origin::Model
                || (tool.name == authoring::TOOL_DEFINE && tool.original_server.is_none()))
    }

    /// Runs `tool_define` or a tool the model wrote, in a runner process.
    async fn run_own(
        &self,
        snap: &Arc<Snapshot>,
        i: usize,
        params: &Map<String, Value>,
    ) -> CallToolResult {
        let Some(runner) = self.hub.runner() else {
            return error_result("this gateway runs no model-authored tools");
        };
        let tool = &snap.catalog.tools()[i];
        if tool.origin != Origin::Model {
            return self.define(snap, params, runner).await;
        }
        let item = {
            let local = self.local.lock().await;
            local
                .authored
                .iter()
                .find(|t| t.name() == tool.original_name)
                .cloned()
        };
        let Some(item) = item else {
            return error_result(format!("{:?} is not a tool of this session", tool.name));
        };
        match runner
            .run_authored(&item, Value::Object(params.clone()))
            .await
        {
            Ok(v) => CallToolResult::success(vec![ContentBlock::text(
                toolshelf_runtime::scripts::result_text(&v),
            )]),
            Err(e) => error_result(e),
        }
    }

    /// `tool_define`: checks the definition (its script's top level read in a runner, as a script
    /// tool's is) and keeps it in this session, whose catalog then holds it (searchable at once,
    /// announced on the next result). The frozen list is untouched. The session's other calls go
    /// on while it is checked; a definition of the session kept meanwhile is judged against once
    /// the check is done.
    async fn define(
        &self,
        snap: &Arc<Snapshot>,
        params: &Map<String, Value>,
        runner: &toolshelf_runtime::scripts::Runner,
    ) -> CallToolResult {
        let limits = &self.hub.config().authoring;
        let defined = self.local.lock().await.authored.len();
        // Checking compiles the schema the model wrote, which costs what the model chose: off
        // the async workers.
        let (hub, view, given) = (self.hub.clone(), snap.clone(), params.clone());
        let checked = toolshelf_runtime::off_workers(move || {
            authoring::check(
                &given,
                &view.catalog,
                &view.exposure,
                hub.compiled(),
                defined,
            )
        });
        let tool = match checked.await {
            Ok(tool) => tool,
            Err(e) => return error_result(e),
        };
        if let Err(e) = runner.check_authored(&tool).await {
            return error_result(e);
        }
        let mut local = self.local.lock().await;
        if let Some(e) = authoring::defined_meanwhile(&tool, &local.authored, limits.max_tools) {
            return error_result(e);
        }
        let name = tool.name().to_owned();
        toolshelf_runtime::scripts::keep_authored(
            limits,
            self.hub.config().dir.as_deref(),
            &self.id,
            &tool,
        );
        local.authored.push(tool);
        local.overlay = None;
        // The model wrote the schema: the tool is loaded.
        local.state.activate([name.as_str()]);
        tracing::info!(session = %self.id, tool = %name, "model-authored tool defined");
        CallToolResult::success(vec![ContentBlock::text(authoring::defined_text(&name))])
    }

    /// Evaluates the reminder rules for this call, one whose tool ran: its target tool and
    /// arguments (paths, `after_tools`) or, for `tool_search`, its queries (which clear reminders
    /// of a category searched for). Returns the blocks of the rules that fired, pointing at
    /// `tool_search` only in a session that has it (`searchable`).
    fn fired_reminders(
        &self,
        snap: &Snapshot,
        state: &mut SessionState,
        called: &str,
        args: &Map<String, Value>,
        searchable: bool,
    ) -> Vec<String> {
        let reminders = self.hub.compiled().reminders();
        if reminders.is_empty() {
            return Vec::new();
        }
        let mut searches = Vec::new();
        let mut target = None;
        match called {
            TOOL_SEARCH => {
                if let Ok(SearchRequest::Queries { queries, .. }) =
                    SearchRequest::from_json(&Value::Object(args.clone()))
                {
                    searches = queries;
                }
            }
            DEFER_EXECUTE => {
                if let Ok(call) = DeferExecuteArgs::parse(args) {
                    target = Some((call.tool_name, call.params));
                }
            }
            other => target = Some((other.to_owned(), args.clone())),
        }
        let resolved = target.and_then(|(name, params)| {
            invoke::resolve(&snap.catalog, &snap.exposure, &name)
                .ok()
                .map(|i| (i, params))
        });
        let calls: Vec<reminder::Call<'_>> = resolved
            .iter()
            .map(|(i, params)| reminder::Call {
                tool: &snap.catalog.tools()[*i],
                params,
            })
            .collect();
        let input = reminder::TurnInput {
            user_text: None,
            calls: &calls,
            searches: &searches,
        };
        let evaluation = reminders.evaluate(state, &input);
        for n in &evaluation.notes {
            tracing::debug!(session = %self.id, rule = %n.id, event = n.event, "reminder: {}", n.why);
        }
        evaluation
            .fired
            .iter()
            .map(|&i| reminders.block_in(i, searchable))
            .collect()
    }

    /// `defer_execute`: its own arguments first, then the target's pipeline. Returns the result
    /// and whether the target ran (see [`Self::execute`]).
    async fn defer_execute(
        &self,
        args: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> (CallToolResult, bool) {
        match DeferExecuteArgs::parse(&args) {
            Ok(call) => {
                self.execute(&call.tool_name, call.params, Via::DeferExecute, context)
                    .await
            }
            Err(message) => {
                let requested = args
                    .get("tool_name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let snap = self.snapshot().await;
                let refused = self
                    .refuse(
                        &snap,
                        &requested,
                        Via::DeferExecute,
                        &args,
                        &Refusal::BadArguments { message },
                        None,
                    )
                    .await;
                (refused, false)
            }
        }
    }
}

/// The client's name from its `initialize` request, as description templates read it.
fn client_name(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .peer
        .peer_info()
        .map(|info| info.client_info.name.clone())
}

impl ServerHandler for GatewaySession {
    /// A request rmcp could not read as the method it names (a `tools/call` whose `arguments` is
    /// not an object, or without a string `name`) arrives here: -32602 naming the field, not
    /// rmcp's -32601 (method not found), for a method the gateway serves.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(
            match crate::serve::invalid_params(&request.method, request.params.as_ref()) {
                Some(why) => ErrorData::invalid_params(why, None),
                None => ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("Method not found: {}", request.method),
                    None,
                ),
            },
        )
    }

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
            "toolshelf fronts many MCP servers. When the tool list has tool_search, the tools not in \
it are deferred: find them with tool_search, run them with defer_execute.",
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.list(client_name(&context)).await?.as_ref().clone(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _running = self.admit_request().await?;
        self.started().await;
        self.list(client_name(&context)).await?;
        // The gateway sees no model requests: each call of the session is a turn.
        self.local.lock().await.state.next_turn();
        let args = request.arguments.unwrap_or_default();
        let trigger = args.clone();
        // Reminders see searches, and calls whose tool ran: a refused call was not made.
        let (mut result, ran) = match request.name.as_ref() {
            TOOL_SEARCH => (self.search(args, &context).await, true),
            DEFER_EXECUTE => self.defer_execute(args, &context).await,
            other => self.execute(other, args, Via::Direct, &context).await,
        };
        // A result that reaches nobody (the client cancelled it, or the session is closing)
        // leaves the notice and the reminders for the next one.
        if self.unread(&context) {
            return Ok(result.into());
        }
        let snap = self.snapshot().await;
        let mut local = self.local.lock().await;
        let short = self.short_names();
        let Local {
            state,
            pinned,
            searchable,
            ..
        } = &mut *local;
        let (hint, direct) = if *searchable {
            (NoticeHint::ToolSearch, false)
        } else {
            (NoticeHint::FixedList, short)
        };
        let shown = |name: &str| shown_name(pinned, direct, &snap, name);
        if let Some(notice) = state.change_notice_for(&snap.visible, shown, hint) {
            result.content.push(ContentBlock::text(notice));
        }
        // The list keeps a pinned tool's old schema; a new one is told once, with the schema.
        for (canonical, p) in pinned.iter_mut() {
            let Some(t) = snap
                .catalog
                .position(canonical)
                .map(|i| &snap.catalog.tools()[i])
            else {
                continue;
            };
            if t.original_server == p.server
                && t.original_name == p.original
                && t.input_schema != p.schema
            {
                p.schema = t.input_schema.clone();
                result.content.push(ContentBlock::text(schema_notice(
                    &p.listed, canonical, &p.schema, hint,
                )));
            }
        }
        // Reminders this call fired reach the model once, on this result (the gateway cannot
        // touch the user's messages, and results always reach the model).
        if ran {
            let searchable = local.searchable;
            for block in
                self.fired_reminders(&snap, &mut local.state, &request.name, &trigger, searchable)
            {
                result.content.push(ContentBlock::text(block));
            }
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
                "State of each downstream server this session can use (starting, ready, failed with the reason) and what loading their tools warned about, as JSON.",
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
        let (servers, warnings) = self.hub.client_status();
        let mut status = json!({
            "servers": servers,
            "audit": self.hub.audit.status(),
            "warnings": warnings,
        });
        if let Some(sessions) = &self.http_sessions {
            status["http_sessions"] = sessions.sessions.read().await.len().into();
        }
        let text = serde_json::to_string_pretty(&status).unwrap_or_default();
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, STATUS_URI).with_mime_type("application/json"),
        ])
        .into())
    }

    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {
        // Held until the hooks are done, so that the end comes after them.
        let _running = self.end.requests.clone().read_owned().await;
        let mut first = false;
        self.end.opened.send_if_modified(|o| {
            first = matches!(o, Opened::No | Opened::Announced);
            if first {
                *o = Opened::Started;
            }
            first
        });
        if !first {
            // The end came first: no start, and nothing waits for its hooks. (A repeated
            // notification changes nothing.)
            if *self.end.opened.borrow() == Opened::Never {
                self.start.send_replace(Start::Done);
            }
            return;
        }
        let mut r = self.record(AuditKind::Session);
        r.outcome = Some("start".into());
        let _ = self.hub.audit.append(&r);
        let hooks = self.hub.compiled().hooks().of(HookEventKind::SessionStart);
        if !hooks.is_empty() {
            self.start.send_replace(Start::Running);
            let event = HookEvent::new(HookEventKind::SessionStart, &self.id);
            let v = hooks::run(hooks, None, event).await;
            self.report_hook_failures(&v, None);
            self.start.send_replace(Start::Done);
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
                    && *self.end.opened.borrow() == Opened::Started
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A hub with no servers, its audit log in `dir`, with more configuration in `extra`.
    fn hub(dir: &std::path::Path, extra: &str) -> Arc<Hub> {
        let text = format!(
            "[audit]\npath = {:?}\n[cache]\nenabled = false\n{extra}",
            dir.join("audit.jsonl").display().to_string()
        );
        let config =
            toolshelf_core::config::Config::from_toml_str(&text, "test").expect("a configuration");
        Hub::start(crate::Settings {
            config,
            label: "test".into(),
            mode: None,
            lazy: true,
            status_file: false,
            restarts: false,
            enrich: None,
            runner: None,
        })
        .expect("a hub")
    }

    /// A request that waits while the end waits for the requests in flight gets through only
    /// once the end's record and hooks are done, and is then refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_queued_behind_the_end_comes_after_it_and_is_refused() {
        let dir = std::env::temp_dir().join(format!("toolshelf-end-holds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let (late, log) = (dir.join("late"), dir.join("log"));
        // The end's hook waits up to 2 s for the late request to get through.
        let script = format!(
            "cat > /dev/null; i=0; while [ ! -e {late:?} ] && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done; if [ -e {late:?} ]; then echo overlapped; else echo alone; fi >> {log:?}"
        );
        let hub = hub(
            &dir,
            &format!("[[hooks.session_end]]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n"),
        );
        let session = Arc::new(GatewaySession::new(hub));
        let end = session.end();
        end.opened.send_replace(Opened::Started);
        let in_flight = end.requests.clone().read_owned().await;
        let ending = tokio::spawn({
            let end = end.clone();
            async move { end.run().await }
        });
        // A queued writer leaves no share to take.
        while end.requests.try_read().is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let waiting = tokio::spawn({
            let (session, late) = (session.clone(), late.clone());
            async move {
                let admitted = session.admit_request().await.map(drop);
                std::fs::write(&late, "").expect("the late request's mark");
                admitted
            }
        });
        drop(in_flight);
        ending.await.expect("the end");
        let admitted = waiting.await.expect("the late request");
        assert_eq!(
            std::fs::read_to_string(&log).expect("the hook's log"),
            "alone\n"
        );
        let refused = admitted.expect_err("the late request is refused");
        assert!(refused.message.contains("has ended"), "{refused:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
