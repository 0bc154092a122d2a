//! One downstream MCP server: starting it, calling it, watching it, restarting it.
//!
//! Each server is its own small state machine (cached, starting, ready, failed, disabled) behind
//! its own locks, so a server that hangs in start-up or crashes never holds up another. Starts are
//! serialised per server (two calls that both find it stopped start it once) and bounded by the
//! start-up timeout; calls are bounded by the call timeout. A watcher task owns the connection and
//! notices when it closes; a crash or a failed start is retried in the background with a doubling
//! delay, so tools of a server that was late come in without anyone asking. The last known tool
//! list survives a crash: the tools stay searchable while the server restarts.
//!
//! Stdio servers run behind [`ChildTransport`] rather than rmcp's child-process transport, so a
//! reply that cannot be read (too long, broken JSON, not JSON-RPC) fails its call at once with
//! the reason instead of at the call timeout.
//!
//! HTTP servers run behind `HttpConnection`, which ends the connection when the server cannot
//! be reached or no longer knows the session (it restarted): rmcp's HTTP client would go on
//! failing every call, or leave calls waiting for an answer that names no request, and its
//! connection would never close. Once it is closed the watcher sees it and the server is
//! restarted (connected again) with backoff like a stdio server that exited.
//!
//! Tools are listed raw (`tools/list` as a custom request, the result as JSON) rather than through
//! rmcp's typed `list_tools`: one malformed tool makes the typed result fail for the whole server,
//! while here that tool is skipped with a warning and the others load.
//!
//! A call made for a client that asked for progress (`_meta.progressToken`) gets a token of the
//! gateway's own, unique in the process, in place of the one rmcp's client gives every request
//! (rmcp cannot be told which to use, so `ProgressRelay`, beneath rmcp, puts it on the request
//! as it is sent); the server's `notifications/progress` with that token are handed, in the order
//! they came and each before the call's answer, to that call's [`ProgressSink`] while it runs.
//!
//! `notifications/tools/list_changed` is coalesced per server: rmcp hands over each notification
//! on its own task, and a server may send thousands in a burst, so at most one re-list runs and a
//! notice arriving meanwhile schedules exactly one more, which sees every change before it. Each
//! `tools/list` (the start's own and every re-list) takes a number when it is sent, and its
//! answer replaces the known tools only when no list sent later was answered first: a change
//! announced while the start's own list is on its way is not undone by that older list.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ClientJsonRpcMessage, ClientNotification, ClientRequest, CustomRequest, ErrorData, GetMeta,
    Implementation, JsonObject, JsonRpcMessage, NumberOrString, ProgressNotificationParam,
    ProgressToken, RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerNotification,
    ServerResult,
};
use rmcp::service::{
    NotificationContext, PeerRequestOptions, RunningServiceCancellationToken, ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde::Serialize;
use serde_json::Value;
use toolshelf_core::config::{ServerConfig, expand};
use toolshelf_core::http::{redact_url, scrub};
use toolshelf_core::invoke::CallFailure;

use crate::hub::{Events, HubEvent};
use crate::stdio::{CallTimeout, ChildTransport, Fault, is_unreadable_reply, without_last_words};

/// Longest delay between two restart attempts: a server that keeps failing is tried again this
/// often, for as long as the gateway runs (the model is told that it is restarted in the
/// background, and a server whose tools are not known has no other way back).
const MAX_DELAY: Duration = Duration::from_secs(60);
/// Pages of `tools/list` read before a server's cursor is taken to be endless.
const MAX_LIST_PAGES: usize = 100;
/// The `_meta` key that carries a call's relay token from [`Downstream::call`] down to
/// [`ProgressRelay`], which takes it off and sends it as the call's `progressToken`.
const RELAY_META: &str = "io.toolshelf/relayProgressToken";

/// Where a call's progress goes while it runs: the server's `notifications/progress` for it, as
/// the server sent them (the token is the gateway's; the caller puts back its client's).
pub type ProgressSink = tokio::sync::mpsc::Sender<ProgressNotificationParam>;

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Not started; its tools come from the catalog cache. Starts on the first call.
    Cached,
    /// Starting (spawn, initialize, tools/list).
    Starting,
    /// Connected.
    Ready,
    /// Not running, with the reason.
    Failed(String),
    /// `enabled = false`.
    Disabled,
}

/// A server's state as `toolshelf status` and the `toolshelf://status` resource show it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ServerStatus {
    /// The server, as configured.
    pub name: String,
    /// `cached`, `starting`, `ready`, `failed` or `disabled`.
    pub state: String,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Number of tools known (live or cached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<usize>,
    /// Process id of a running stdio server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `stdio` or `http`.
    pub transport: String,
    /// Failed starts and crashes since it was last ready (what its restart delay follows).
    pub failures: u32,
    /// Failed starts and crashes since the gateway started.
    #[serde(default)]
    pub failures_total: u64,
}

struct Inner {
    state: ServerState,
    peer: Option<Peer<RoleClient>>,
    stop: Option<RunningServiceCancellationToken>,
    pid: Option<u32>,
    /// Last known tools (live or cached), as MCP JSON; `None` until first listed.
    tools: Option<Vec<Value>>,
    /// Why tools of its last list were skipped.
    skipped: Vec<String>,
    /// Description for the index: configured, else the server's instructions.
    description: String,
    failures: u32,
    /// Every failure so far; `failures` counts only those since the server was last ready.
    failures_total: u64,
    retry_at: Option<Instant>,
    /// Bumped per connection, so a stale watcher cannot mark a newer connection failed.
    generation: u64,
    /// Why the transport ended the current connection, if it did.
    fault: Option<Fault>,
    /// The number of the `tools/list` whose answer `tools` holds (see [`Downstream::list_seq`]).
    listed: u64,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("state", &self.state)
            .field("pid", &self.pid)
            .field("failures", &self.failures)
            .finish_non_exhaustive()
    }
}

/// One downstream server.
#[derive(Debug)]
pub struct Downstream {
    name: String,
    config: ServerConfig,
    inner: Mutex<Inner>,
    start_lock: tokio::sync::Mutex<()>,
    events: Events,
    /// Whether failed and crashed servers are restarted in the background.
    restarts: bool,
    refresh: Mutex<Refresh>,
    /// The timeout its calls are made with, for its stdio transports: how long the late answer of
    /// an abandoned call may still come.
    call_timeout: CallTimeout,
    /// Numbers the `tools/list` requests, over every connection: an answer replaces the known
    /// tools only when its number is above that of the list they came from.
    list_seq: AtomicU64,
    /// The calls running whose progress is relayed, shared with every connection's transport.
    relays: Arc<Relays>,
    /// The configurations of the gateways this server is started under, for [`FRONTED_BY`].
    fronted_by: String,
}

/// The variable a server program is started with: the keys of the configurations of the
/// gateways it runs under, comma-separated, outermost first. A gateway started with its own key
/// in it is one of its own servers, and refuses to start rather than start itself without end.
pub const FRONTED_BY: &str = "TOOLSHELF_FRONTED_BY";

/// The calls whose progress is relayed, by the token the server was sent: unique in the process,
/// so no call ever gets another's progress, whichever session or connection either belongs to.
#[derive(Debug, Default)]
struct Relays(Mutex<HashMap<ProgressToken, ProgressSink>>);

impl Relays {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, ProgressSink>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `sink` under a new token, until the returned guard drops.
    fn open(self: &Arc<Self>, sink: ProgressSink) -> Relay {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let token = ProgressToken(NumberOrString::String(format!("toolshelf-{n}").into()));
        self.lock().insert(token.clone(), sink);
        Relay {
            relays: self.clone(),
            token,
        }
    }

    /// Hands `progress` to the call it is for, if that call is still running and relayed. A
    /// caller that does not keep up loses progress rather than holding up the connection.
    fn relay(&self, progress: &ProgressNotificationParam) {
        let relays = self.lock();
        let Some(sink) = relays.get(&progress.progress_token) else {
            return;
        };
        if let Err(tokio::sync::mpsc::error::TrySendError::Full(_)) =
            sink.try_send(progress.clone())
        {
            tracing::debug!(token = ?progress.progress_token, "a progress notification was dropped: its client is behind");
        }
    }
}

/// One relayed call's registration: its progress stops being relayed when this drops (the call
/// answered, failed, timed out or was abandoned).
struct Relay {
    relays: Arc<Relays>,
    token: ProgressToken,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.relays.lock().remove(&self.token);
    }
}

/// The re-listing after `notifications/tools/list_changed`.
#[derive(Debug, Default)]
struct Refresh {
    /// A re-list task is running.
    running: bool,
    /// A notice came after the running re-list began: list again, over this connection.
    next: Option<Peer<RoleClient>>,
}

impl Downstream {
    /// A server in `state`, with `tools` known from the cache if any.
    pub fn new(
        name: String,
        config: ServerConfig,
        cached: Option<(String, Vec<Value>)>,
        events: Events,
        restarts: bool,
    ) -> Self {
        let configured = config.description.clone();
        let call_timeout = CallTimeout::default();
        if let Some(secs) = config.call_timeout_secs {
            call_timeout.set(Duration::from_secs(secs));
        }
        let (state, description, tools) = match (config.enabled, cached) {
            (false, _) => (ServerState::Disabled, configured.unwrap_or_default(), None),
            (true, Some((desc, tools))) => {
                (ServerState::Cached, configured.unwrap_or(desc), Some(tools))
            }
            (true, None) => (ServerState::Starting, configured.unwrap_or_default(), None),
        };
        Self {
            name,
            config,
            inner: Mutex::new(Inner {
                state,
                peer: None,
                stop: None,
                pid: None,
                tools,
                skipped: Vec::new(),
                description,
                failures: 0,
                failures_total: 0,
                retry_at: None,
                generation: 0,
                fault: None,
                listed: 0,
            }),
            start_lock: tokio::sync::Mutex::new(()),
            events,
            restarts,
            refresh: Mutex::default(),
            call_timeout,
            list_seq: AtomicU64::new(0),
            relays: Arc::default(),
            fronted_by: String::new(),
        }
    }

    /// Starts its program with [`FRONTED_BY`] set to `chain`.
    #[must_use]
    pub fn fronted_by(mut self, chain: String) -> Self {
        self.fronted_by = chain;
        self
    }

    /// The server's name, as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its settings.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain data behind; keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current state.
    pub fn state(&self) -> ServerState {
        self.lock().state.clone()
    }

    /// Description and last known tools (`None` when never listed).
    pub fn tools(&self) -> (String, Option<Vec<Value>>) {
        let i = self.lock();
        (i.description.clone(), i.tools.clone())
    }

    /// Whether its tools are known (listed now, or cached from an earlier run).
    pub fn has_tools(&self) -> bool {
        self.lock().tools.is_some()
    }

    /// A warning for each tool of its last list that was skipped as unusable.
    pub fn skipped(&self) -> Vec<String> {
        self.lock().skipped.clone()
    }

    /// The status line.
    pub fn status(&self) -> ServerStatus {
        let i = self.lock();
        let (state, reason) = match &i.state {
            ServerState::Cached => ("cached", None),
            ServerState::Starting => ("starting", None),
            ServerState::Ready => ("ready", None),
            ServerState::Failed(r) => ("failed", Some(r.clone())),
            ServerState::Disabled => ("disabled", None),
        };
        ServerStatus {
            name: self.name.clone(),
            state: state.into(),
            reason,
            tools: i.tools.as_ref().map(Vec::len),
            pid: i.pid,
            transport: if self.config.url.is_some() {
                "http"
            } else {
                "stdio"
            }
            .into(),
            failures: i.failures,
            failures_total: i.failures_total,
        }
    }

    fn set_state(&self, state: ServerState) {
        self.lock().state = state;
        self.changed(false);
    }

    /// Tells the hub that state (and maybe tools) changed. A hub that is gone has no one left
    /// to tell.
    fn changed(&self, tools: bool) {
        self.events.send(HubEvent::Changed {
            server: self.name.clone(),
            tools,
        });
    }

    fn ready_peer(&self) -> Option<Peer<RoleClient>> {
        let i = self.lock();
        (i.state == ServerState::Ready)
            .then(|| i.peer.clone())
            .flatten()
    }

    fn delay(&self, failures: u32) -> Duration {
        let base = Duration::from_secs(self.config.restart_delay_secs.max(1));
        base.saturating_mul(1 << failures.saturating_sub(1).min(6))
            .min(MAX_DELAY)
    }

    /// Connects if needed and returns the peer. Concurrent callers share one start.
    pub async fn ensure_started(self: &Arc<Self>) -> Result<Peer<RoleClient>, String> {
        if let Some(p) = self.ready_peer() {
            return Ok(p);
        }
        let _one_start = self.start_lock.lock().await;
        if let Some(p) = self.ready_peer() {
            return Ok(p);
        }
        {
            let i = self.lock();
            match &i.state {
                ServerState::Disabled => {
                    return Err(format!(
                        "server {:?} is disabled in the configuration",
                        self.name
                    ));
                }
                ServerState::Failed(reason) => {
                    if let Some(at) = i.retry_at.filter(|at| *at > Instant::now()) {
                        return Err(format!(
                            "server {:?} is not running: {reason}; next restart attempt in {:.1}s",
                            self.name,
                            at.saturating_duration_since(Instant::now()).as_secs_f64()
                        ));
                    }
                }
                _ => {}
            }
        }
        self.set_state(ServerState::Starting);
        tracing::info!(server = %self.name, "starting");
        let secs = self.config.startup_timeout_secs;
        let result = match tokio::time::timeout(Duration::from_secs(secs), self.connect()).await {
            Ok(r) => r.map_err(|e| self.scrub(&e)),
            Err(_) => Err(format!(
                "did not start within {secs}s (startup_timeout_secs)"
            )),
        };
        match result {
            Ok(peer) => Ok(peer),
            Err(reason) => {
                let failures = {
                    let mut i = self.lock();
                    i.failures += 1;
                    i.failures_total += 1;
                    i.retry_at = Some(Instant::now() + self.delay(i.failures));
                    i.state = ServerState::Failed(reason.clone());
                    i.failures
                };
                tracing::warn!(server = %self.name, "failed: {reason}");
                self.changed(false);
                self.schedule_retry(failures);
                Err(format!("server {:?} could not start: {reason}", self.name))
            }
        }
    }

    /// Retries in the background after `failures` consecutive failures, with the delay doubling
    /// up to [`MAX_DELAY`], and then at that interval for good.
    fn schedule_retry(self: &Arc<Self>, failures: u32) {
        if !self.restarts {
            return;
        }
        let me = Arc::downgrade(self);
        let delay = self.delay(failures);
        if delay == MAX_DELAY && self.delay(failures.saturating_sub(1)) < MAX_DELAY {
            tracing::warn!(
                server = %self.name,
                "{failures} failures in a row; trying again every {}s from now on",
                MAX_DELAY.as_secs()
            );
        }
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(me) = me.upgrade() else { return };
            if matches!(me.state(), ServerState::Failed(_)) {
                let _ = me.ensure_started().await;
            }
        });
    }

    /// Spawns or connects, initializes, lists tools, and starts the watcher.
    async fn connect(self: &Arc<Self>) -> Result<Peer<RoleClient>, String> {
        let handler = DownstreamClient {
            server: Arc::downgrade(self),
        };
        let env = |k: &str| std::env::var(k).ok();
        // Expanded once, each error naming the key it is in, never the value (a secret).
        let config = self.config.expanded(&self.name, &env)?;
        let fault = Fault::default();
        let (service, pid) = match (&config.command, &config.url) {
            (Some(program), _) => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(&config.args);
                cmd.envs(&config.env);
                if !self.fronted_by.is_empty() {
                    cmd.env(FRONTED_BY, &self.fronted_by);
                }
                if let Some(cwd) = &config.cwd {
                    // Spawning in a missing directory fails like a missing program would.
                    if !std::path::Path::new(&cwd).is_dir() {
                        return Err(format!("its cwd {cwd:?} is not a directory"));
                    }
                    cmd.current_dir(cwd);
                }
                let timeout = self.call_timeout.clone();
                let process = ChildTransport::spawn(&self.name, cmd, fault.clone(), timeout)
                    .map_err(|e| {
                        // `command = "python3 server.py"` names a program with a space in it.
                        let hint = match program.split_once(' ') {
                            Some((first, rest))
                                if e.kind() == std::io::ErrorKind::NotFound
                                    && self.config.args.is_empty() =>
                            {
                                format!(
                                    "; command is one program, its arguments go in args: \
command = {first:?}, args = {:?}",
                                    rest.split_whitespace().collect::<Vec<_>>()
                                )
                            }
                            _ => String::new(),
                        };
                        format!("cannot run {program:?}: {e}{hint}")
                    })?;
                let pid = process.pid();
                let process = ProgressRelay::new(process, self.relays.clone());
                let service = match handler.serve(process).await {
                    Ok(service) => service,
                    Err(e) => return Err(format!("initialize failed: {}", fault.explain(e).await)),
                };
                (service, pid)
            }
            (None, Some(url)) => {
                let url = url.clone();
                let mut headers = std::collections::HashMap::new();
                for (name, value) in &config.headers {
                    let header = axum::http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("headers: {name:?} is not a valid header name"))?;
                    // The message leaves the value out: it is a secret.
                    let mut value = axum::http::HeaderValue::from_str(value).map_err(|_| {
                        format!(
                            "headers: the value of {name:?} is not a valid HTTP header value \
(after ${{VAR}} expansion)"
                        )
                    })?;
                    value.set_sensitive(true);
                    headers.insert(header, value);
                }
                // The HTTP client sends a URL's userinfo as `Authorization: Basic`, and custom
                // headers go along beside it: a configured `Authorization` (its name matched
                // in any case, as `HeaderName` is) is the more specific intent, as in curl, and
                // is the only one sent.
                let target = if headers.contains_key(&axum::http::header::AUTHORIZATION) {
                    without_userinfo(&url)
                } else {
                    url.clone()
                };
                let transport = HttpConnection::new(
                    &self.name,
                    &url,
                    StreamableHttpClientTransport::from_config(
                        StreamableHttpClientTransportConfig::with_uri(target.as_str())
                            .custom_headers(headers),
                    ),
                    fault.clone(),
                );
                let transport = ProgressRelay::new(transport, self.relays.clone());
                let service = match handler.serve(transport).await {
                    Ok(service) => service,
                    Err(e) => {
                        let why = match unreachable(&url).await {
                            Some(why) => why,
                            None => {
                                let why = toolshelf_runtime::with_causes(&e);
                                refused_access(&why).unwrap_or(why)
                            }
                        };
                        return Err(format!("initialize at {} failed: {why}", redact_url(&url)));
                    }
                };
                (service, None)
            }
            (None, None) => return Err("neither command nor url is set".into()),
        };
        let peer = service.peer().clone();
        let startup = Duration::from_secs(self.config.startup_timeout_secs);
        let seq = self.list_seq.fetch_add(1, Ordering::SeqCst) + 1;
        let (tools, skipped) = match list_tools(&self.name, &peer, startup).await {
            Ok(listed) => listed,
            Err(e) if service.is_closed() => return Err(fault.explain(e).await),
            Err(e) => return Err(e),
        };
        let instructions = peer
            .peer_info()
            .map(|info| {
                header_from(
                    info.server_info
                        .as_ref()
                        .and_then(|i| i.description.as_deref()),
                    info.instructions.as_deref(),
                )
            })
            .unwrap_or_default();
        let generation = {
            let mut i = self.lock();
            i.generation += 1;
            i.state = ServerState::Ready;
            i.peer = Some(peer.clone());
            i.stop = Some(service.cancellation_token());
            i.pid = pid;
            i.fault = Some(fault.clone());
            // A re-list sent after this one (a change announced during the start) was answered
            // first: its tools are the newer.
            if seq > i.listed {
                i.listed = seq;
                i.tools = Some(tools);
                i.skipped = skipped;
            }
            i.failures = 0;
            i.retry_at = None;
            if self.config.description.is_none() {
                i.description = instructions;
            }
            i.generation
        };
        match pid {
            Some(pid) => tracing::info!(server = %self.name, pid, "ready"),
            None => tracing::info!(server = %self.name, "ready"),
        }
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let reason = service.waiting().await;
            let why = fault
                .explain(format!("the server closed the connection ({reason:?})"))
                .await;
            if let Some(me) = me.upgrade() {
                let why = me.scrub(&why);
                me.on_closed(generation, why);
            }
        });
        self.changed(true);
        Ok(peer)
    }

    /// The watcher saw the connection close.
    fn on_closed(self: &Arc<Self>, generation: u64, why: String) {
        let failures = {
            let mut i = self.lock();
            if i.generation != generation || i.state != ServerState::Ready {
                return;
            }
            i.failures += 1;
            i.failures_total += 1;
            i.retry_at = Some(Instant::now() + self.delay(i.failures));
            i.fault = None;
            i.state = ServerState::Failed(why.clone());
            i.peer = None;
            i.pid = None;
            // Closed already when the watcher calls; the service is ended in any case.
            if let Some(stop) = i.stop.take() {
                stop.cancel();
            }
            i.failures
        };
        tracing::warn!(server = %self.name, "connection closed: {why}; restarting with backoff");
        self.changed(false);
        self.schedule_retry(failures);
    }

    /// Schedules a re-list after `notifications/tools/list_changed` from `peer`: starts the one
    /// re-list task, or has the running one list once more when it is done.
    fn list_changed(self: &Arc<Self>, peer: Peer<RoleClient>) {
        {
            let mut r = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
            r.next = Some(peer);
            if std::mem::replace(&mut r.running, true) {
                return;
            }
        }
        let me = self.clone();
        // Outside the notification handler: the handler must not wait on a request to the same
        // peer.
        tokio::spawn(async move {
            loop {
                let peer = {
                    let mut r = me.refresh.lock().unwrap_or_else(|p| p.into_inner());
                    match r.next.take() {
                        Some(p) => p,
                        None => {
                            r.running = false;
                            return;
                        }
                    }
                };
                me.refresh(peer).await;
            }
        });
    }

    /// Re-lists tools, within the start-up timeout. Its answer is dropped when a list sent after
    /// it (over this connection or a newer one) was answered first.
    async fn refresh(self: &Arc<Self>, peer: Peer<RoleClient>) {
        let startup = Duration::from_secs(self.config.startup_timeout_secs);
        let seq = self.list_seq.fetch_add(1, Ordering::SeqCst) + 1;
        match list_tools(&self.name, &peer, startup).await {
            Ok((tools, skipped)) => {
                let mut i = self.lock();
                if seq < i.listed {
                    tracing::debug!(server = %self.name, "dropping a tool list older than the one known");
                    return;
                }
                i.listed = seq;
                i.tools = Some(tools);
                i.skipped = skipped;
                drop(i);
                tracing::info!(server = %self.name, "tool list changed");
                self.changed(true);
            }
            Err(e) => tracing::warn!(
                server = %self.name,
                "re-listing tools failed: {}",
                self.scrub(&e)
            ),
        }
    }

    /// Calls `tool` (the server's own name for it) with a timeout. When `cancelled` completes
    /// first (with the reason), the call is abandoned: the server is sent
    /// `notifications/cancelled`, as at the timeout, and whatever it answers later is dropped.
    ///
    /// With a `progress` sink, the call asks the server for progress and the server's progress
    /// notifications for it go to the sink, in order, each before this returns, until it returns
    /// (the sink is dropped then). The timeout is the same either way: progress does not extend it.
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: JsonObject,
        timeout_secs: u64,
        cancelled: impl Future<Output = String>,
        progress: Option<ProgressSink>,
    ) -> Result<CallToolResult, CallFailure> {
        let mut cancelled = std::pin::pin!(cancelled);
        // What the model reads of a failure leaves out the server's stderr (see
        // `stdio::without_last_words`): the status and the log keep it.
        let unavailable = |why: String| CallFailure::Unavailable(without_last_words(&why));
        let peer = match self.ready_peer() {
            Some(peer) => peer,
            None => {
                // A start goes on when its caller gives up, so the next call finds the server up
                // (and a start is never cut short halfway).
                let me = self.clone();
                let start = tokio::spawn(async move { me.ensure_started().await });
                tokio::select! {
                    biased;
                    why = &mut cancelled => return Err(CallFailure::Cancelled(why)),
                    started = start => match started {
                        Ok(started) => started.map_err(unavailable)?,
                        Err(e) => return Err(unavailable(format!(
                            "starting server {:?} failed: {e}",
                            self.name
                        ))),
                    },
                }
            }
        };
        let fault = self.lock().fault.clone();
        // Its transport learns the timeout here: a server without its own has the gateway's.
        self.call_timeout.set(Duration::from_secs(timeout_secs));
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        // Registered until this returns: a late notification finds no call to go to.
        let _relay = progress.map(|sink| {
            let relay = self.relays.open(sink);
            let mut meta = RequestMetaObject::new();
            meta.0.0.insert(
                RELAY_META.to_owned(),
                serde_json::to_value(&relay.token).unwrap_or_default(),
            );
            params.meta = Some(meta);
            relay
        });
        // Dropping the request future (at the timeout, or cancelled) sends the server
        // `notifications/cancelled` for it.
        let call = tokio::time::timeout(
            Duration::from_secs(timeout_secs),
            peer.call_tool_once(params),
        );
        let answer = tokio::select! {
            biased;
            why = &mut cancelled => return Err(CallFailure::Cancelled(why)),
            answer = call => answer,
        };
        match answer {
            Err(_) => Err(CallFailure::Timeout(timeout_secs)),
            Ok(Ok(CallToolResponse::Complete(result))) => Ok(result),
            Ok(Ok(_)) => Err(CallFailure::Protocol(
                "the server asked for client input or created a task; toolshelf passes on only complete results".into(),
            )),
            // A server's own error may echo what it was sent, a token among it.
            Ok(Err(ServiceError::McpError(e))) if is_unreadable_reply(&e) => {
                Err(CallFailure::Protocol(self.scrub(&e.message)))
            }
            Ok(Err(ServiceError::McpError(e))) => Err(CallFailure::Protocol(self.scrub(&format!(
                "the server answered with error {}: {}",
                e.code.0, e.message
            )))),
            Ok(Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
                let what = match &e {
                    ServiceError::TransportSend(d) => format!(
                        "sending the call failed: {}",
                        toolshelf_runtime::with_causes(&*d.error)
                    ),
                    _ => "the connection closed".to_owned(),
                };
                let fallback = self.scrub(&format!(
                    "server {:?} closed the connection during the call ({what})",
                    self.name
                ));
                let why = match fault {
                    Some(fault) => fault.explain(fallback).await,
                    None => fallback,
                };
                tracing::warn!(server = %self.name, "a call failed: {why}");
                Err(CallFailure::Crashed(format!(
                    "{}; it is restarted with backoff",
                    without_last_words(&why)
                )))
            }
            Ok(Err(e)) => {
                let why = self.scrub(&e.to_string());
                Err(CallFailure::Protocol(refused_access(&why).unwrap_or(why)))
            }
        }
    }

    /// `text` fit for a message, a log line or the status: this server's URL with its userinfo
    /// and query hidden, and its header values left out (library errors quote both).
    fn scrub(&self, text: &str) -> String {
        let Some(raw) = &self.config.url else {
            return text.to_owned();
        };
        let env = |k: &str| std::env::var(k).ok();
        let url = expand(raw, &env).unwrap_or_else(|_| raw.clone());
        let mut secrets = Vec::new();
        for value in self.config.headers.values() {
            secrets.push(value.clone());
            secrets.extend(expand(value, &env).ok());
        }
        let out = scrub(text, Some(&url), &secrets);
        scrub(&out, Some(raw), &[])
    }

    /// Closes the connection (the gateway's shutdown then kills every stdio server's process
    /// group, [`crate::stdio::kill_all_groups`]).
    pub fn stop(&self) {
        let token = {
            let mut i = self.lock();
            i.generation += 1;
            i.peer = None;
            i.fault = None;
            i.pid = None;
            i.stop.take()
        };
        if let Some(t) = token {
            t.cancel();
        }
    }
}

/// `url` without the `user:password@` of its authority, if it has one.
fn without_userinfo(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    // The authority ends where a URL parser ends it (`\` too, for http and https).
    let end = url[start..]
        .find(['/', '?', '#', '\\'])
        .map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}{}", &url[..start], &url[start + at + 1..]),
        None => url.to_owned(),
    }
}

/// A plain reading of an HTTP server's refusal (401 or 403, as rmcp reports them in `why`).
fn refused_access(why: &str) -> Option<String> {
    let status = if why.contains("Auth required")
        || why.contains("authorization required")
        || why.contains("HTTP 401")
    {
        "401 Unauthorized"
    } else if why.contains("Insufficient scope")
        || why.contains("insufficient scope")
        || why.contains("HTTP 403")
    {
        "403 Forbidden"
    } else {
        return None;
    };
    Some(format!(
        "the server answered {status}: check its headers/token ([servers.NAME] headers, or \
\"headers\" in mcp.json)"
    ))
}

/// Why nothing listens at `url`'s host and port (`cannot connect to 127.0.0.1:9: Connection
/// refused`), if that is why: the MCP library's error for it names only the request that failed.
async fn unreachable(url: &str) -> Option<String> {
    let uri: axum::http::Uri = url.parse().ok()?;
    let host = uri.host()?;
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("https") => 443,
        _ => 80,
    });
    let address = format!("{host}:{port}");
    let connect = tokio::net::TcpStream::connect(address.as_str());
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!("cannot connect to {address}: {e}")),
        Err(_) => Some(format!("cannot connect to {address}: no answer within 5s")),
    }
}

/// The connection to an HTTP server, over rmcp's streamable HTTP client: it ends (its stream
/// closes, so the connection's watcher restarts the server) when the server cannot be reached,
/// or answers in a way that shows it no longer knows the session, which is how a server that
/// restarted answers. rmcp re-initializes by itself only after a 404; after a 400, or once the
/// server is gone, it would fail every call or leave them waiting, with the connection open.
/// Why it ended is kept in the connection's [`Fault`], in words.
struct HttpConnection<T> {
    inner: T,
    server: String,
    url: String,
    fault: Fault,
    /// Requests sent and not answered (nor cancelled, nor failed to send) yet.
    pending: Arc<Mutex<HashSet<RequestId>>>,
    /// Set by a send that failed in a way that ends the connection.
    lost: Arc<tokio::sync::Notify>,
}

impl<T> HttpConnection<T> {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new(server: &str, url: &str, inner: T, fault: Fault) -> Self {
        Self {
            inner,
            server: server.to_owned(),
            url: url.to_owned(),
            fault,
            pending: Arc::default(),
            lost: Arc::default(),
        }
    }

    /// Why `error`, an answer of the server, ends the connection, if it does: an error naming
    /// no request while requests wait (over HTTP each answer belongs to the request it came
    /// with, so that request would wait for its timeout), or one saying that the session is
    /// not found.
    fn ends_connection(&self, error: &ErrorData, id: Option<&RequestId>) -> Option<String> {
        let server = &self.server;
        let waiting = !self.pending().is_empty();
        let told = format!("error {}: {}", error.code.0, error.message);
        let session = names_lost_session(&error.message);
        match id {
            None if waiting => Some(format!(
                "server {server:?} answered with an error that names no request ({told}){}; the \
connection was closed",
                if session {
                    ", as a server that no longer knows the session does (after a restart)"
                } else {
                    ", so the calls waiting would never be answered"
                }
            )),
            Some(_) if session && matches!(error.code.0, -32001 | -32000) => Some(format!(
                "server {server:?} no longer knows the session of this connection (it answered \
{told}), as after a restart; the connection was closed"
            )),
            _ => None,
        }
    }
}

/// Why sending to the HTTP server at `url` failed, in words, when that ends the connection: it
/// cannot be reached, or the request failed short of an answer. An answer the server gave (a
/// rate limit, a refusal of access, an error status) leaves the connection as it is.
async fn lost_connection(server: &str, url: &str, error: &str) -> Option<String> {
    if http_status(error).is_some() || refused_access(error).is_some() {
        return None;
    }
    let why = match unreachable(url).await {
        Some(why) => why,
        None => error.to_owned(),
    };
    Some(format!(
        "cannot reach server {server:?} at {}: {why}",
        redact_url(url)
    ))
}

/// The HTTP status the server answered with, as the MCP library writes it into an error
/// (`HTTP 500`, `HTTP 429: …`): an answer, so the server is there.
fn http_status(error: &str) -> Option<u16> {
    error.match_indices("HTTP ").find_map(|(at, _)| {
        let digits = error.get(at + 5..at + 8)?;
        let after = error[at + 8..].chars().next();
        (digits.bytes().all(|b| b.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    })
}

/// Whether an error's message says the server no longer knows the connection's session (`Session
/// not found`, `No valid session ID provided`), as a server does after a restart; a tool's own
/// error that merely speaks of a session (`No browser session is open`) does not.
fn names_lost_session(message: &str) -> bool {
    let m = message.to_lowercase();
    [
        "session not found",
        "no valid session",
        "invalid session",
        "unknown session",
        "session id",
        "session expired",
        "session has expired",
        "session does not exist",
    ]
    .iter()
    .any(|p| m.contains(p))
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for HttpConnection<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let mut request = None;
        match &item {
            JsonRpcMessage::Request(r) => {
                self.pending().insert(r.id.clone());
                request = Some(r.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.pending().remove(id);
                }
            }
            _ => {}
        }
        let sent = self.inner.send(item);
        let (server, url) = (self.server.clone(), self.url.clone());
        let (fault, lost) = (self.fault.clone(), self.lost.clone());
        let pending = self.pending.clone();
        async move {
            let result = sent.await;
            if let Err(e) = &result {
                // Its caller has the error: no answer is waited for.
                if let Some(id) = &request {
                    pending.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
                }
                let error = toolshelf_runtime::with_causes(e);
                if let Some(why) = lost_connection(&server, &url, &error).await {
                    tracing::warn!(server = %server, "{why}; the connection was closed");
                    fault.record(why);
                    lost.notify_one();
                }
            }
            result
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        let message = tokio::select! {
            biased;
            () = self.lost.notified() => return None,
            message = self.inner.receive() => message?,
        };
        let ends = match &message {
            JsonRpcMessage::Response(r) => {
                self.pending().remove(&r.id);
                None
            }
            JsonRpcMessage::Error(e) => {
                let ends = self.ends_connection(&e.error, e.id.as_ref());
                if let Some(id) = &e.id {
                    self.pending().remove(id);
                }
                ends
            }
            _ => None,
        };
        if let Some(why) = ends {
            tracing::warn!(server = %self.server, "{why}");
            self.fault.record(why);
            return None;
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// A connection's transport, beneath rmcp, that relays progress (see [`Relays`]): a `tools/call`
/// carrying a relay token in `_meta` (put there by [`Downstream::call`]) is sent with it as its
/// `progressToken`, in place of rmcp's own, and the relay token is taken off; each
/// `notifications/progress` received is handed to its call's sink before rmcp sees it, so it
/// reaches the sink before the call's answer, which comes after it. rmcp still gets every message.
struct ProgressRelay<T> {
    inner: T,
    relays: Arc<Relays>,
}

impl<T> ProgressRelay<T> {
    fn new(inner: T, relays: Arc<Relays>) -> Self {
        Self { inner, relays }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for ProgressRelay<T> {
    type Error = T::Error;

    // Errors name the transport: the one beneath.
    fn name() -> std::borrow::Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        mut item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(r) = &mut item
            && let ClientRequest::CallToolRequest(call) = &mut r.request
            && let Some(meta) = call.params.meta.as_mut()
            && let Some(relayed) = meta.0.0.remove(RELAY_META)
        {
            if meta.0.0.is_empty() {
                call.params.meta = None;
            }
            match serde_json::from_value::<ProgressToken>(relayed) {
                Ok(token) => r.request.get_meta_mut().set_progress_token(token),
                Err(e) => tracing::warn!("a relay token that cannot be read: {e}"),
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(n) = &message
            && let ServerNotification::ProgressNotification(p) = &n.notification
        {
            self.relays.relay(&p.params);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Every tool of `server` as MCP JSON, page by page, each page within `timeout`, and a warning
/// for each tool skipped because it has no string `name` or no object `inputSchema`.
async fn list_tools(
    server: &str,
    peer: &Peer<RoleClient>,
    timeout: Duration,
) -> Result<(Vec<Value>, Vec<String>), String> {
    let mut tools = Vec::new();
    let mut skipped = Vec::new();
    let mut cursor: Option<String> = None;
    let mut index = 0;
    for _ in 0..MAX_LIST_PAGES {
        let params = cursor.take().map(|c| serde_json::json!({ "cursor": c }));
        let request = ClientRequest::CustomRequest(CustomRequest::new("tools/list", params));
        let answer = match peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await
        {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        };
        let page = match answer {
            Ok(ServerResult::CustomResult(r)) => r.0,
            Ok(other) => serde_json::to_value(other).map_err(|e| e.to_string())?,
            Err(ServiceError::Timeout { .. }) => {
                return Err(format!(
                    "tools/list got no answer within {}s (startup_timeout_secs)",
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("tools/list failed: {e}")),
        };
        let Some(items) = page.get("tools").and_then(Value::as_array) else {
            return Err("tools/list answered without a \"tools\" array".into());
        };
        for tool in items {
            if let Some(problem) = malformed(tool) {
                let named = tool
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| format!(" {n:?}"))
                    .unwrap_or_default();
                skipped.push(format!(
                    "server {server:?}: skipping tools[{index}]{named}: {problem}"
                ));
            } else {
                tools.push(tool.clone());
            }
            index += 1;
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
            _ => return Ok((tools, skipped)),
        }
    }
    Err(format!(
        "tools/list still had a nextCursor after {MAX_LIST_PAGES} pages ({index} tools); the server's pagination does not end"
    ))
}

/// What makes a listed tool unusable, if anything.
fn malformed(tool: &Value) -> Option<&'static str> {
    if !tool.is_object() {
        Some("it is not a JSON object")
    } else if !tool.get("name").is_some_and(Value::is_string) {
        Some("it has no string \"name\"")
    } else if !tool.get("inputSchema").is_some_and(Value::is_object) {
        Some("it has no object \"inputSchema\"")
    } else {
        None
    }
}

/// The client side of one downstream connection: identifies toolshelf and reacts to
/// `notifications/tools/list_changed`.
#[derive(Debug, Clone)]
struct DownstreamClient {
    server: Weak<Downstream>,
}

impl ClientHandler for DownstreamClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolshelf", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        if let Some(server) = self.server.upgrade() {
            server.list_changed(context.peer);
        }
    }
}

/// The index header of a server configured without a `description`: the description its
/// `serverInfo` gives, else the first line of its instructions, a Markdown heading's marks
/// (`# Everything Server`) taken off.
fn header_from(description: Option<&str>, instructions: Option<&str>) -> String {
    let first_line = |text: &str| {
        text.lines()
            .map(|l| l.trim().trim_start_matches('#').trim())
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    };
    description
        .and_then(first_line)
        .or_else(|| instructions.and_then(first_line))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_header_is_the_servers_description_else_its_instructions_first_line() {
        use super::header_from;
        assert_eq!(
            header_from(
                None,
                Some("\n# Everything Server – Instructions\n\nAudience: …")
            ),
            "Everything Server – Instructions"
        );
        assert_eq!(
            header_from(Some("Reads mail."), Some("# Mail\nUse it.")),
            "Reads mail."
        );
        assert_eq!(header_from(Some("  "), Some("Use it.\nMore.")), "Use it.");
        assert_eq!(header_from(None, Some("###\n\n")), "");
        assert_eq!(header_from(None, None), "");
    }

    use super::*;

    #[test]
    fn userinfo_is_taken_out_of_a_url_and_nothing_else() {
        for (url, without) in [
            ("http://u:p@h:1/mcp?a=b@c", "http://h:1/mcp?a=b@c"),
            ("https://u@h/mcp", "https://h/mcp"),
            ("http://u:p%40x@h", "http://h"),
            ("http://h:1/a@b", "http://h:1/a@b"),
            ("http://h\\u@v", "http://h\\u@v"),
            ("h/mcp", "h/mcp"),
        ] {
            assert_eq!(without_userinfo(url), without, "{url}");
        }
    }

    #[test]
    fn http_statuses_are_read_from_the_librarys_errors() {
        assert_eq!(http_status("Transport send error: HTTP 500"), Some(500));
        assert_eq!(
            http_status("unexpected server response: HTTP 429: slow down"),
            Some(429)
        );
        assert_eq!(
            http_status("error sending request: Connection refused"),
            None
        );
        assert_eq!(http_status("HTTP 5000 things"), None);
        assert_eq!(http_status("HTTP 50"), None);
    }

    #[test]
    fn only_a_lost_session_reads_as_one() {
        for lost in [
            "Session not found",
            "Bad Request: No valid session ID provided",
        ] {
            assert!(names_lost_session(lost), "{lost}");
        }
        for other in [
            "No browser session is open; call browser_open first",
            "timeout",
        ] {
            assert!(!names_lost_session(other), "{other}");
        }
    }

    #[test]
    fn refusals_read_in_plain_words() {
        for (why, status) in [
            (
                "Send message error Transport [rmcp::transport::worker::WorkerTransport<X>] error: Auth required",
                Some("401 Unauthorized"),
            ),
            (
                "unexpected server response: HTTP 403 Forbidden: no",
                Some("403 Forbidden"),
            ),
            ("Transport closed", None),
        ] {
            let plain = refused_access(why);
            assert_eq!(
                plain.as_deref().map(|p| p.contains(&format!(
                    "the server answered {}: check its headers/token",
                    status.unwrap_or_default()
                ))),
                status.map(|_| true),
                "{why}: {plain:?}"
            );
        }
    }
}
