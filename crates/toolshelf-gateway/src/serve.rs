//! Serving sessions: one over stdio, or many over streamable HTTP at `/mcp` (with `GET /metrics`
//! beside it for Prometheus, behind `[ui] token` when one is set, as the dashboard at `/ui`).
//!
//! Over HTTP every client session gets its own [`GatewaySession`] (rmcp calls the factory once
//! per session), so frozen lists and loaded tools never leak between clients while the servers
//! and the catalog are shared.
//!
//! rmcp's streamable HTTP service sits behind `guard`, which adds what rmcp lacks: it refuses
//! a request with more than one `Host` or `Origin` header (rmcp reads only the first), checks
//! both against loopback and `[http]` with answers that name the key (rmcp, configured alike,
//! checks again behind it), refuses an `initialize` past `[http] max_sessions` (counted in the
//! metrics and the status file, and logged at most once per [`REFUSALS_SAID_EVERY`]), and answers a
//! body that is not JSON-RPC with a JSON-RPC error (parse error or invalid request, HTTP 400)
//! instead of rmcp's plain-text 415. For that it buffers the body, up to the 4 MiB rmcp allows,
//! and still lets rmcp answer first, so rmcp's order of checks (406, 415, 413) holds; only its
//! parse-failure and too-large answers are rewritten. A request whose params are not an object,
//! which rmcp cannot read at all, is a JSON-RPC request all the same: it is answered -32602
//! (invalid params) with its id, as over stdio (see `screen_requests`). rmcp answers the
//! `DELETE` of any session id 202; the guard makes that of a session rmcp does not have 404, as
//! for any other request of it, and that of one it ended 204 (the Python SDK takes only 200 or
//! 204 for a session ended, and logs a warning on every close otherwise). A session it ended has
//! its calls in flight abandoned before the 204: rmcp would let them run on for up to 5 s.
//!
//! A session without traffic for `[http] session_idle_secs` is closed, which drops its
//! [`GatewaySession`] and so runs its end (audit, `session_end` hooks). rmcp's idle timer also
//! runs during a silent tool call, which is why that setting must outlast the longest call. On
//! Ctrl-C, SIGTERM or SIGHUP every session still open is ended the same way before the server returns,
//! `ENDING_AT_ONCE` at a time; a second Ctrl-C, SIGTERM or SIGHUP returns at once, skipping the ends
//! not yet done.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use rmcp::model::{
    CallToolRequestParams, ClientNotification, JsonRpcMessage, JsonRpcNotification,
    ReadResourceRequestParams,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use toolshelf_core::http::Listener;

use crate::error::{GatewayError, Result};
use crate::hub::Hub;
use crate::session::{GatewaySession, SessionEnd};

/// How often sessions refused at `[http] max_sessions` are said in the log: the first at once,
/// then at most one line per this interval, with the number since.
pub const REFUSALS_SAID_EVERY: Duration = Duration::from_secs(30);

/// The largest request body, as rmcp's default `max_request_body_bytes`.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// How many sessions' ends (and `session_end` hooks) run at once when the HTTP server stops.
const ENDING_AT_ONCE: usize = 16;

/// Serves one session over stdin/stdout until the client closes it, then ends the session
/// (audit, `session_end` hooks) before returning, so the process does not exit under them.
/// Ctrl-C, SIGTERM or SIGHUP ([`signals`], counted from before the servers started) ends it the same way
/// (its calls are abandoned; a second signal skips what of the end is not done yet), also before
/// or during the client's handshake, when there is nothing to end: the caller then stops the
/// servers as after any session. The read of stdin, which the client may still hold open, is
/// left blocked: the caller shuts its runtime down without waiting for it
/// (`Runtime::shutdown_background`).
pub async fn serve_stdio(hub: Arc<Hub>, mut signals: Signals) -> Result<()> {
    let session = GatewaySession::new(hub);
    let end = session.end();
    let (screened, to_rmcp) = tokio::io::duplex(64 * 1024);
    let (refuse, refusals) = tokio::sync::mpsc::channel(16);
    tokio::spawn(screen_requests(tokio::io::stdin(), screened, refuse));
    let transport = UntilEof {
        inner: AsyncRwTransport::new_server(to_rmcp, tokio::io::stdout()),
        refusals,
        end: end.clone(),
    };
    let handshake = tokio::select! {
        served = session.serve(transport) => Some(served),
        Ok(()) = signals.changed() => None,
    };
    match handshake {
        Some(served) => {
            let running = served.map_err(|e| GatewayError::Serve {
                transport: "stdio",
                message: e.to_string(),
            })?;
            let stop = running.cancellation_token();
            // Held outside the select: dropping the running service cancels its requests, which
            // must come after the session is marked closing, or its calls in flight would read
            // as cancelled by the client.
            let waiting = running.waiting();
            tokio::pin!(waiting);
            tokio::select! {
                _ = &mut waiting => {}
                _ = signals.changed() => {
                    tracing::info!("stopping on a signal: ending the session");
                    end.abandon_calls();
                    stop.cancel();
                }
            }
        }
        None => tracing::info!("stopping on a signal before the client's handshake was done"),
    }
    tokio::select! {
        () = end.run() => {}
        _ = signals.wait_for(|n| *n > 1) => {
            tracing::warn!("a second signal: stopping now; the session's end is skipped");
        }
    }
    Ok(())
}

/// A stdio transport that abandons the session's calls as soon as stdin closes: the client is
/// gone, and rmcp would let them run on for seconds (to send answers nobody reads) before
/// cancelling them, by which time the client may have killed the process. It also announces
/// `notifications/initialized` to the session's end before rmcp hands it to its handler, so an
/// end that comes right after it waits for the start (see [`SessionEnd`]), and sends the
/// refusals of [`screen_requests`].
struct UntilEof<T> {
    inner: T,
    refusals: tokio::sync::mpsc::Receiver<TxJsonRpcMessage<RoleServer>>,
    end: Arc<SessionEnd>,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for UntilEof<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = std::result::Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        // rmcp polls this in a `select!` and may drop it at any await: both waits below lose
        // nothing when dropped, and a refusal is sent by a task of its own.
        let message = loop {
            tokio::select! {
                biased;
                Some(refusal) = self.refusals.recv() => {
                    tokio::spawn(self.inner.send(refusal));
                }
                message = self.inner.receive() => break message,
            }
        };
        match &message {
            None => self.end.abandon_calls(),
            Some(JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ClientNotification::InitializedNotification(_),
                ..
            })) => self.end.announce_start(),
            Some(_) => {}
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = std::result::Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Copies the client's messages from `input` to `output` (where rmcp reads them) line by line,
/// except a request whose params are not an object: rmcp cannot read it at all, and would answer
/// -32600 without its id, which leaves the client waiting. Such a request is answered -32602
/// through `refusals` instead, with its id (see [`unreadable_params`]). A line longer than rmcp
/// takes is passed on as it comes, for rmcp to drop; `output` ends when `input` does.
async fn screen_requests(
    input: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
    refusals: tokio::sync::mpsc::Sender<TxJsonRpcMessage<RoleServer>>,
) {
    const LONGEST: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut input)
            .take(LONGEST as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::error!("cannot read stdin: {e}");
                break;
            }
        }
        if line.ends_with(b"\n")
            && let Some((id, why)) = unreadable_params(&line)
        {
            let refusal = TxJsonRpcMessage::<RoleServer>::error(
                rmcp::ErrorData::invalid_params(why, None),
                Some(id),
            );
            if refusals.send(refusal).await.is_err() {
                break;
            }
            continue;
        }
        if output.write_all(&line).await.is_err() {
            break;
        }
        if !line.ends_with(b"\n") && line.len() > LONGEST {
            // The rest of the line, as it comes.
            loop {
                let rest = match input.fill_buf().await {
                    Ok([]) | Err(_) => return,
                    Ok(rest) => rest,
                };
                let (n, ends) = match rest.iter().position(|b| *b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (rest.len(), false),
                };
                if output.write_all(&rest[..n]).await.is_err() {
                    return;
                }
                input.consume(n);
                if ends {
                    break;
                }
            }
        }
    }
}

/// For a JSON-RPC 2.0 request (`body`, one message) whose params are there but not an object
/// (JSON-RPC allows an array; MCP's methods take an object, and rmcp cannot read the message at
/// all): its id and the -32602 message naming the params. `None` for any other message.
fn unreadable_params(body: &[u8]) -> Option<(rmcp::model::RequestId, String)> {
    /// The parts of a message this looks at; params unread, as their text.
    #[derive(Deserialize)]
    struct Probe<'a> {
        jsonrpc: Option<String>,
        id: Option<Value>,
        method: Option<String>,
        #[serde(borrow)]
        params: Option<&'a serde_json::value::RawValue>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let probe: Probe = serde_json::from_slice(body).ok()?;
    let (Some(method), Some(params), Some(id), None, None) = (
        probe.method,
        probe.params,
        probe.id,
        probe.result,
        probe.error,
    ) else {
        return None;
    };
    // An object or null is rmcp's to read; only what is neither is read here.
    let text = params.get().trim_start();
    if probe.jsonrpc.as_deref() != Some("2.0") || text.starts_with('{') || text == "null" {
        return None;
    }
    let params: Value = serde_json::from_str(params.get()).ok()?;
    let id = serde_json::from_value(id).ok()?;
    let why = invalid_params(&method, Some(&params)).unwrap_or_else(|| {
        format!(
            "Invalid params: the params of {method} must be an object, not {}",
            a(json_type(&params))
        )
    });
    Some((id, why))
}

/// Why `params` are not those of `method`, for a method the gateway serves (`None` for another
/// method, or params the MCP library reads): the first field that is missing or of the wrong
/// type, else the library's error with the field it is about. rmcp hands a request whose params
/// it cannot read as its method's to the session as a custom request, which it would answer
/// -32601 (method not found); the session answers it -32602 (invalid params) with this.
pub(crate) fn invalid_params(method: &str, params: Option<&Value>) -> Option<String> {
    // (field, whether required, the type it must be, what it holds)
    type Fields = &'static [(&'static str, bool, &'static str, &'static str)];
    let (fields, read): (Fields, fn(&Value) -> Option<serde_json::Error>) = match method {
        "tools/call" => (
            &[
                ("name", true, "string", "the tool's name"),
                ("arguments", false, "object", "the tool's parameters"),
            ],
            |p| CallToolRequestParams::deserialize(p).err(),
        ),
        "resources/read" => (&[("uri", true, "string", "the resource's URI")], |p| {
            ReadResourceRequestParams::deserialize(p).err()
        }),
        _ => return None,
    };
    let needs = || {
        fields
            .iter()
            .filter(|(_, required, _, _)| *required)
            .map(|(field, _, kind, holds)| format!("{field:?} ({holds}, {})", a(kind)))
            .collect::<Vec<_>>()
            .join(" and ")
    };
    let (given, object) = match params.filter(|p| !p.is_null()) {
        None => {
            return Some(format!(
                "Invalid params: {method} has no params; it takes an object with {}",
                needs()
            ));
        }
        Some(given @ Value::Object(object)) => (given, object),
        Some(other) => {
            return Some(format!(
                "Invalid params: the params of {method} must be an object with {}, not {}",
                needs(),
                a(json_type(other))
            ));
        }
    };
    for (field, required, kind, holds) in fields {
        match object.get(*field).filter(|v| !v.is_null()) {
            None if *required => {
                return Some(format!(
                    "Invalid params: {method} has no {field:?} ({holds}, {})",
                    a(kind)
                ));
            }
            Some(v) if json_type(v) != *kind => {
                return Some(format!(
                    "Invalid params: {field:?} of {method} must be {} ({holds}), not {}",
                    a(kind),
                    a(json_type(v))
                ));
            }
            _ => {}
        }
    }
    let error = read(given)?;
    // The field without which they are read (the library's error does not name it).
    let culprit = object.keys().find(|field| {
        let mut rest = object.clone();
        rest.remove(*field);
        read(&Value::Object(rest)).is_none()
    });
    Some(match culprit {
        Some(field) => format!("Invalid params: {field:?} of {method} cannot be read: {error}"),
        None => format!("Invalid params of {method}: {error}"),
    })
}

/// The JSON type of `v`: `string`, `object`, ...
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `kind` with its article: `a string`, `an object`.
fn a(kind: &str) -> String {
    match kind {
        "null" => "null".into(),
        k if k.starts_with(['a', 'e', 'i', 'o', 'u']) => format!("an {k}"),
        k => format!("a {k}"),
    }
}

tokio::task_local! {
    /// Set by [`guard`] around an `initialize` it passes to rmcp: the session factory leaves the
    /// new session's end there, so that the guard can file it under the id rmcp answers with.
    static MADE: Arc<Mutex<Option<Arc<SessionEnd>>>>;
}

/// The ends of the HTTP sessions still open.
#[derive(Debug, Default)]
struct OpenSessions {
    ends: Mutex<Vec<Weak<SessionEnd>>>,
    /// The same ends by rmcp's session id, for a `DELETE` to abandon the session's calls.
    by_id: Mutex<std::collections::HashMap<String, Weak<SessionEnd>>>,
    /// How many ends [`Self::end_all`] has still to finish, once it began.
    unfinished: Mutex<Option<usize>>,
}

impl OpenSessions {
    fn add(&self, end: &Arc<SessionEnd>) {
        let mut open = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|e| e.strong_count() > 0);
        open.push(Arc::downgrade(end));
        let _ = MADE.try_with(|made| {
            *made.lock().unwrap_or_else(|p| p.into_inner()) = Some(end.clone());
        });
    }

    /// Files `end` under rmcp's session id `id`.
    fn name(&self, id: &str, end: &Arc<SessionEnd>) {
        let mut by_id = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        by_id.retain(|_, e| e.strong_count() > 0);
        by_id.insert(id.to_owned(), Arc::downgrade(end));
    }

    /// The end of session `id`, which a `DELETE` ended, forgotten here.
    fn deleted(&self, id: &str) -> Option<Arc<SessionEnd>> {
        let mut by_id = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        by_id.remove(id)?.upgrade()
    }

    fn open(&self) -> Vec<Arc<SessionEnd>> {
        let open = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        open.iter().filter_map(Weak::upgrade).collect()
    }

    /// How many sessions' ends are not done yet.
    fn unfinished(&self) -> usize {
        let unfinished = *self.unfinished.lock().unwrap_or_else(|p| p.into_inner());
        unfinished.unwrap_or_else(|| self.open().len())
    }

    /// Ends every open session, [`ENDING_AT_ONCE`] at a time: its calls abandoned, its end
    /// recorded, its `session_end` hooks run (within their timeouts). A session whose end is
    /// already running (it was dropped) is waited for.
    async fn end_all(&self) {
        let open = self.open();
        *self.unfinished.lock().unwrap_or_else(|p| p.into_inner()) = Some(open.len());
        let slots = Arc::new(tokio::sync::Semaphore::new(ENDING_AT_ONCE));
        let mut ending = tokio::task::JoinSet::new();
        for end in open {
            let slots = slots.clone();
            ending.spawn(async move {
                let _slot = slots.acquire_owned().await;
                end.run().await
            });
        }
        while ending.join_next().await.is_some() {
            if let Some(n) = self
                .unfinished
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                *n = n.saturating_sub(1);
            }
        }
    }
}

/// Listens on `addr` for [`serve_http`]. Called before the hub starts: a gateway that cannot
/// have its address (another one has it) fails before it starts a server or writes a record.
pub async fn bind_http(addr: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| GatewayError::Serve {
            transport: "http",
            message: format!("cannot listen on {addr}: {e}"),
        })
}

/// Serves streamable HTTP at `http://ADDR/mcp` until Ctrl-C, SIGTERM or SIGHUP (counted by `signals`,
/// so one that came before stops it at once) on `listener` ([`bind_http`]); `on_bound` learns
/// the bound address (useful with port 0).
pub async fn serve_http(
    hub: Arc<Hub>,
    listener: tokio::net::TcpListener,
    signals: Signals,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    let err = |message: String| GatewayError::Serve {
        transport: "http",
        message,
    };
    let local = listener
        .local_addr()
        .map_err(|e| err(format!("no local address: {e}")))?;
    let checks = Listener::new(hub.config()).map_err(err)?;
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(Duration::from_secs(checks.session_idle_secs));
    let sessions = Arc::new(sessions);
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(checks.rmcp_hosts())
        .with_allowed_origins(checks.rmcp_origins());
    config.max_request_body_bytes = MAX_BODY;
    // Cancelling it ends every rmcp session and SSE stream, which the graceful shutdown waits
    // for.
    let stop = config.cancellation_token.clone();
    let open = Arc::new(OpenSessions::default());
    let counted = sessions.clone();
    let hub_for_ui = hub.clone();
    let hub_for_guard = hub.clone();
    let scraped = (hub.clone(), sessions.clone());
    hub.serving_http(checks.max_sessions);
    crate::metrics::serving_http();
    let registered = open.clone();
    let service = StreamableHttpService::new(
        move || {
            let session = GatewaySession::new(hub.clone()).with_http_sessions(counted.clone());
            registered.add(&session.end());
            Ok(session)
        },
        sessions.clone(),
        config,
    );
    let state = Arc::new(Guard {
        checks,
        sessions,
        admitting: tokio::sync::Mutex::new(()),
        open: open.clone(),
        hub: hub_for_guard,
        refusals_said: toolshelf_runtime::throttle::Throttle::every(REFUSALS_SAID_EVERY),
    });
    let ui = crate::ui::UiState {
        hub: hub_for_ui,
        loopback: local.ip().is_loopback(),
        sessions: state.sessions.clone(),
    };
    // `/ui/` and `/metrics/` are the pages without the slash, and `/favicon.ico`, which a
    // browser asks for with every page, is an empty answer, as the proxy has them; any other path
    // says which paths there are.
    let pages = axum::Router::new()
        .route("/ui", axum::routing::get(crate::ui::handle))
        .route("/ui/", axum::routing::get(crate::ui::handle))
        .route("/ui/{*page}", axum::routing::get(crate::ui::handle))
        .with_state(ui);
    let scrape = axum::routing::get(move |request: Request| {
        let (hub, sessions) = scraped.clone();
        metrics(hub, sessions, request)
    });
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .merge(pages)
        .route("/metrics", scrape.clone())
        .route("/metrics/", scrape)
        .route(
            "/favicon.ico",
            axum::routing::get(|| async {
                (
                    StatusCode::NO_CONTENT,
                    [(header::CACHE_CONTROL, "max-age=86400")],
                )
            }),
        )
        .fallback(|request: Request| async move {
            plain(
                StatusCode::NOT_FOUND,
                format!(
                    "{} is no page of the toolshelf gateway (it has /mcp, /ui and /metrics)\n",
                    request.uri().path()
                ),
            )
        })
        .layer(axum::middleware::from_fn_with_state(state, guard));
    on_bound(local);
    let mut first = signals.clone();
    let closing = open.clone();
    let served = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = first.wait_for(|n| *n >= 1).await;
        // Calls in flight are abandoned first, so that their records say why.
        for end in closing.open() {
            end.abandon_calls();
        }
        stop.cancel();
    });
    let stopping = async {
        let served = served.await.map_err(|e| err(e.to_string()));
        open.end_all().await;
        served
    };
    let mut second = signals;
    tokio::select! {
        served = stopping => served,
        Ok(_) = second.wait_for(|n| *n >= 2) => {
            tracing::warn!(
                "a second signal: stopping now; the ends of {} sessions (their end records and session_end hooks) are skipped",
                open.unfinished()
            );
            Ok(())
        }
    }
}

/// `GET /metrics`: the Prometheus text, server states as of now; 404 when this process records
/// no metrics. It names servers and their states, so with `[ui] token` set it needs the token as
/// the dashboard does, on a loopback listener too.
async fn metrics(hub: Arc<Hub>, sessions: Arc<LocalSessionManager>, request: Request) -> Response {
    if let Some(token) = hub.config().ui.required_token()
        && let Err(refused) =
            toolshelf_dashboard::require_token(token, request.headers(), request.uri().query())
    {
        return *refused;
    }
    crate::metrics::servers(&hub.statuses());
    let open = sessions.sessions.read().await.len();
    crate::metrics::scraped(open, hub.audit.status().as_ref());
    match toolshelf_runtime::metrics::render() {
        Some(text) => {
            let mut r = Response::new(Body::from(text));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(toolshelf_runtime::metrics::CONTENT_TYPE),
            );
            // It may be fetched with the token in its URL.
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        None => plain(
            StatusCode::NOT_FOUND,
            "no metrics are recorded in this process".into(),
        ),
    }
}

/// What [`guard`] needs.
#[derive(Debug)]
struct Guard {
    checks: Listener,
    sessions: Arc<LocalSessionManager>,
    /// Held from counting the sessions for an `initialize` until rmcp has made the new one, so
    /// concurrent handshakes cannot pass the limit together.
    admitting: tokio::sync::Mutex<()>,
    /// The sessions' ends, by id once their `initialize` is answered.
    open: Arc<OpenSessions>,
    /// The hub, which counts refused sessions for the status file.
    hub: Arc<Hub>,
    /// Refused sessions, said in the log at most once per [`REFUSALS_SAID_EVERY`].
    refusals_said: toolshelf_runtime::throttle::Throttle,
}

/// The checks in front of rmcp (see the module documentation).
async fn guard(State(g): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let values = |name| {
        headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>()
    };
    if let Err(refused) = g
        .checks
        .check(&values(header::HOST), &values(header::ORIGIN))
    {
        let status = StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::FORBIDDEN);
        let reason = status.canonical_reason().unwrap_or("Refused");
        return plain(status, format!("{reason}: {refused}"));
    }
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if request.method() == Method::DELETE {
        // rmcp answers 202 to the DELETE of any session id, known or not; POST and GET of an
        // unknown one get 404, as the MCP specification has it for every request.
        let unknown = match &session {
            Some(id) => !g.knows(id).await,
            None => false,
        };
        let response = next.run(request).await;
        return match response.status() {
            StatusCode::ACCEPTED if unknown => session_not_found(),
            // Ended: 204, which every SDK reads as done (the Python SDK warns on rmcp's 202).
            StatusCode::ACCEPTED => {
                // rmcp lets the session's calls run on for seconds after it closed the session,
                // to send answers nobody will read: they are abandoned now, as when the client
                // cancels them (the server is told, the audit says `cancelled`).
                if let Some(end) = session.as_deref().and_then(|id| g.open.deleted(id)) {
                    end.abandon_calls();
                }
                let mut ended = Response::new(Body::empty());
                *ended.status_mut() = StatusCode::NO_CONTENT;
                ended
            }
            _ => response,
        };
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // `None`: over the limit (or the client stopped sending, when no answer reaches it anyway).
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.ok();
    let message: Option<Value> = bytes
        .as_deref()
        .and_then(|b| serde_json::from_slice(b).ok());
    let initialize = !parts.headers.contains_key("mcp-session-id")
        && message
            .as_ref()
            .and_then(|m| m.get("method"))
            .and_then(Value::as_str)
            == Some("initialize");
    // rmcp reads the body again; one over the limit is replaced by one it refuses alike.
    let body = match &bytes {
        Some(b) => Body::from(b.clone()),
        None => Body::from(vec![b' '; MAX_BODY + 1]),
    };
    let request = Request::from_parts(parts, body);
    let _admitting = if initialize {
        let admitting = g.admitting.lock().await;
        let open = g.sessions.sessions.read().await.len();
        let max = g.checks.max_sessions;
        if open >= max {
            g.refused(open, max);
            let id = message.as_ref().map_or(Value::Null, id_of);
            return jsonrpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                -32000,
                format!(
                    "toolshelf is serving {open} HTTP sessions, its limit ([http] max_sessions = {max}); end a session or raise the limit"
                ),
            );
        }
        Some(admitting)
    } else {
        None
    };
    let response = if initialize {
        let made = Arc::new(Mutex::new(None));
        let response = MADE.scope(made.clone(), next.run(request)).await;
        let made = made.lock().unwrap_or_else(|p| p.into_inner()).take();
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let (Some(end), Some(id)) = (made, id) {
            g.open.name(id, &end);
        }
        response
    } else {
        next.run(request).await
    };
    match (response.status(), &bytes) {
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, Some(bytes)) => {
            unparsable(&g, session.as_deref(), initialize, response, bytes).await
        }
        (StatusCode::PAYLOAD_TOO_LARGE, _) => jsonrpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            Value::Null,
            -32600,
            format!(
                "Invalid Request: the body is over the {} MiB limit",
                MAX_BODY >> 20
            ),
        ),
        _ => response,
    }
}

impl Guard {
    /// Counts an `initialize` refused with `open` sessions at the limit `max`, and says so in
    /// the log unless it did less than [`REFUSALS_SAID_EVERY`] ago.
    fn refused(&self, open: usize, max: usize) {
        crate::metrics::session_refused();
        let total = self.hub.session_refused();
        let Some(since) = self.refusals_said.event() else {
            return;
        };
        tracing::warn!(
            "refused {since} new HTTP session{}: {open} open, the limit ([http] max_sessions = \
             {max}); {total} refused since start (said at most every {} s)",
            if since == 1 { "" } else { "s" },
            REFUSALS_SAID_EVERY.as_secs()
        );
    }

    /// Whether rmcp has an open session of this id.
    async fn knows(&self, session: &str) -> bool {
        self.sessions.sessions.read().await.contains_key(session)
    }
}

/// rmcp's answer to a request of a session it does not have.
fn session_not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "Not Found: Session not found".into())
}

/// rmcp's 415 for a body it could not read as a message becomes a JSON-RPC parse error (not
/// JSON) or invalid request (JSON, but not JSON-RPC); any other 415 is passed on. A request
/// whose params are not an object is a JSON-RPC request all the same (see
/// [`unreadable_params`]): it gets what rmcp answers a request of session `session` before
/// reading it (404 for a session it does not have, 400 without one, but for an `initialize`),
/// else -32602 (invalid params) with its id and, as rmcp sends that error, HTTP 200.
async fn unparsable(
    g: &Guard,
    session: Option<&str>,
    initialize: bool,
    response: Response,
    body: &[u8],
) -> Response {
    const RMCP_PREFIX: &str = "fail to deserialize request body";
    let (parts, answer) = response.into_parts();
    let answer = axum::body::to_bytes(answer, 64 * 1024)
        .await
        .unwrap_or_default();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let Some(why) = answer.strip_prefix(RMCP_PREFIX) else {
        return Response::from_parts(parts, Body::from(answer));
    };
    if let Some((id, params)) = unreadable_params(body) {
        return match session {
            Some(session) if !g.knows(session).await => session_not_found(),
            None if !initialize => plain(
                StatusCode::BAD_REQUEST,
                "Bad Request: Session ID is required".into(),
            ),
            _ => jsonrpc_error(
                StatusCode::OK,
                serde_json::to_value(id).unwrap_or_default(),
                -32602,
                params,
            ),
        };
    }
    match serde_json::from_slice::<Value>(body) {
        Err(e) => jsonrpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32700,
            format!("Parse error: {e}"),
        ),
        // MCP dropped JSON-RPC batching: an array is a batch this server does not take.
        Ok(Value::Array(_)) => jsonrpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32600,
            "Invalid Request: a JSON-RPC batch (an array of messages) is not supported; MCP over \
streamable HTTP takes one message per request"
                .into(),
        ),
        Ok(v) => jsonrpc_error(
            StatusCode::BAD_REQUEST,
            id_of(&v),
            -32600,
            format!(
                "Invalid Request: the body is JSON but not a JSON-RPC 2.0 message ({})",
                why.trim()
            ),
        ),
    }
}

/// A message's id, when it has a usable one.
fn id_of(message: &Value) -> Value {
    message
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned()
        .unwrap_or(Value::Null)
}

fn plain(status: StatusCode, text: String) -> Response {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn jsonrpc_error(status: StatusCode, id: Value, code: i64, message: String) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// How many times Ctrl-C, SIGTERM or SIGHUP came since [`signals`] was called.
pub type Signals = tokio::sync::watch::Receiver<u32>;

/// Counts Ctrl-C, SIGTERM and SIGHUP (the terminal closing) from now on: they no longer kill
/// the process, which must watch the count and stop on its own (the servers' process groups
/// with it). Call it before starting servers, inside the runtime. (The count never closes: a
/// process that cannot listen for signals runs until it is killed.)
pub fn signals() -> Signals {
    let (count, counted) = tokio::sync::watch::channel(0);
    // The listeners are made here, before this returns, so that no signal falls between two of
    // them or before them.
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listening = signal(SignalKind::interrupt()).and_then(|int| {
            Ok((
                int,
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
            ))
        });
        tokio::spawn(async move {
            match listening {
                Ok((mut int, mut term, mut hup)) => loop {
                    let got = tokio::select! {
                        got = int.recv() => got,
                        got = term.recv() => got,
                        got = hup.recv() => got,
                    };
                    if got.is_none() {
                        break;
                    }
                    count.send_modify(|n| *n += 1);
                },
                Err(e) => tracing::warn!("cannot listen for Ctrl-C, SIGTERM and SIGHUP: {e}"),
            }
            let _count = count;
            std::future::pending::<()>().await
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            count.send_modify(|n| *n += 1);
        }
        let _count = count;
        std::future::pending::<()>().await
    });
    counted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_that_cannot_be_read_are_named() {
        let says = |method: &str, params: Value| invalid_params(method, Some(&params));
        assert_eq!(
            says("resources/read", json!({"uri": 5})).as_deref(),
            Some(
                "Invalid params: \"uri\" of resources/read must be a string (the resource's URI), not a number"
            )
        );
        assert_eq!(
            says("tools/call", json!("x")).as_deref(),
            Some(
                "Invalid params: the params of tools/call must be an object with \"name\" (the tool's name, a string), not a string"
            )
        );
        // A field the checks do not know is found by leaving it out.
        assert_eq!(
            says("tools/call", json!({"name": "t", "requestState": 5})).as_deref(),
            Some(
                "Invalid params: \"requestState\" of tools/call cannot be read: invalid type: number, expected a string"
            )
        );
        // Params that can be read, and methods the gateway does not serve, are not judged here.
        assert_eq!(
            says("tools/call", json!({"name": "t", "arguments": null})),
            None
        );
        assert_eq!(says("prompts/get", json!({})), None);
    }

    #[test]
    fn only_requests_whose_params_are_not_an_object_are_screened() {
        let screened = |message: Value| unreadable_params(message.to_string().as_bytes());
        assert_eq!(
            screened(json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": [1]})),
            Some((
                rmcp::model::RequestId::String("a".into()),
                "Invalid params: the params of tools/call must be an object with \"name\" (the tool's name, a string), not an array".into()
            ))
        );
        assert_eq!(
            screened(json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": 5}))
                .map(|(_, why)| why)
                .as_deref(),
            Some("Invalid params: the params of ping must be an object, not a number")
        );
        for rmcp_answers in [
            // Params an object or null, or none: rmcp reads these.
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": null}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            // Not a request: a notification, a response, no JSON-RPC 2.0, an id rmcp cannot
            // take.
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1], "result": {}}),
            json!({"jsonrpc": "1.0", "id": 1, "method": "ping", "params": [1]}),
            json!({"id": 1, "method": "ping", "params": [1]}),
            json!({"jsonrpc": "2.0", "id": null, "method": "ping", "params": [1]}),
            json!({"jsonrpc": "2.0", "id": [1], "method": "ping", "params": [1]}),
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}]),
        ] {
            assert_eq!(screened(rmcp_answers.clone()), None, "{rmcp_answers}");
        }
        assert_eq!(
            unreadable_params(b"{\"jsonrpc\": \"2.0\", \"id\": 1,"),
            None
        );
    }
}
