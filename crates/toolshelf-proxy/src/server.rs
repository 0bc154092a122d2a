//! The HTTP side: one handler for every request.
//!
//! `POST …/messages`, `…/chat/completions` and `…/responses` are the exchanges the proxy
//! rewrites; `GET /toolshelf/status` answers with the figures, and `GET /metrics` with them and
//! more for Prometheus; everything else (`/v1/models`, `count_tokens`, files, batches, any
//! method) passes through byte for byte, streamed both ways, headers included. Credentials
//! travel in headers the proxy forwards and never reads, logs or stores. The proxy's own paths
//! (`/ui…`, `/toolshelf…`, `/metrics…`, with or without a trailing slash, and the
//! `/favicon.ico` a browser asks for) are never forwarded, however the path spells them
//! (repeated slashes, dot segments, percent-escapes): one it has no page at gets a 404 of its
//! own (`OwnPage`).
//!
//! Where a request goes: Anthropic paths (`/v1/messages…`, `/v1/complete`) and requests with an
//! `anthropic-version` header go to `[proxy] anthropic_upstream`, everything else to
//! `openai_upstream`; the path and query are appended to the upstream URL as they are.
//!
//! Every request, to any path, first meets the listener's `Host` and `Origin` checks, the
//! gateway's ([`Listener::check`]): loopback values and those `[http] allowed_hosts` and
//! `allowed_origins` list. A web page that reaches the port by DNS rebinding (its own name for
//! the address) could otherwise drive the model with its own key and have the proxy run script
//! tools and model-written tools for it. A refused API request gets the error in its API's shape.
//!
//! An upstream URL may carry `user:password@` (sent as basic authentication): everything that
//! shows the URL (the status, the dashboard, logs, error bodies) shows it as `…@` ([`shown_url`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value, json};
use toolshelf_core::config::OnRewriteFailure;
use toolshelf_core::http::{Listener, Refusal, redact_url, scrub};
use toolshelf_core::request::Api;

use crate::api::{Dialect, Streamer, Tokens};
use crate::exchange::{Next, PassReason, Plan, Prefix, Turn, prepare};
use crate::sse::Reader;
use crate::{HARNESS_SESSION_HEADER, Proxy, ProxyError, SESSION_HEADER, Saved, Totals};

/// Per-session figures kept for the status page (the most recent sessions).
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    /// The session's id ([`crate::session_id`]): what tells it apart from every other, and what
    /// its dashboard page is named by.
    pub id: String,
    /// The session key as shown ([`crate::shown_key`]: a hash cut, or the header's value).
    pub key: String,
    /// Its turn.
    pub turn: u64,
    /// Its figures.
    pub figures: crate::session::Figures,
    /// Bytes of its stored state.
    pub bytes: usize,
    /// Tools active now.
    pub active: Vec<String>,
}

/// What the handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The proxy.
    pub proxy: Proxy,
    /// The recent sessions by id, with when each was last recorded.
    recent: Mutex<BTreeMap<String, (u64, SessionSummary)>>,
    /// Tool-list tokens saved since start, signed: a request whose deferred list costs more
    /// than the client's own list counts what it cost as a negative saving. The totals'
    /// `tokens_saved`, which the Prometheus counter mirrors, sums the savings only.
    tokens_saved: std::sync::atomic::AtomicI64,
    seq: std::sync::atomic::AtomicU64,
    started: Instant,
    /// What each recent request did, for the dashboard.
    pub events: crate::ui::Events,
    loopback: std::sync::atomic::AtomicBool,
    /// The `Host` and `Origin` checks of `[http]`.
    checks: Listener,
    /// Per session key, the lock a finished request holds while it writes the session and
    /// records its summary ([`AppState::writing`]); gone when no request holds or awaits it.
    writes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Requests being answered now, a streamed answer until its last byte is handed on.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

/// A request's turn to write one session ([`AppState::writing`]), given up on drop.
struct Writing<'a> {
    app: &'a AppState,
    key: &'a str,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut writes = self.app.writes.lock().unwrap_or_else(|p| p.into_inner());
        self.guard = None;
        // Held by the map and by this turn only: no request awaits it.
        if Arc::strong_count(&self.lock) == 2 {
            writes.remove(self.key);
        }
    }
}

/// How many sessions the status page lists: as many as the dashboard keeps timelines of.
const RECENT: usize = toolshelf_dashboard::SESSIONS;

impl AppState {
    /// Shared state over `proxy`.
    pub fn new(proxy: Proxy) -> Arc<Self> {
        // The configuration was compiled, which checks `[http]`; the fallback (loopback only)
        // is never taken.
        let checks = Listener::new(proxy.compiled.config())
            .or_else(|_| Listener::new(&toolshelf_core::Config::default()))
            .expect("the default [http] is valid");
        Arc::new(Self {
            checks,
            proxy,
            recent: Mutex::new(BTreeMap::new()),
            tokens_saved: std::sync::atomic::AtomicI64::new(0),
            seq: std::sync::atomic::AtomicU64::new(0),
            started: Instant::now(),
            events: crate::ui::Events::default(),
            loopback: std::sync::atomic::AtomicBool::new(true),
            writes: Mutex::new(HashMap::new()),
            in_flight: Arc::default(),
        })
    }

    /// How many requests are being answered now (a streamed answer until it is whole).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits for the turn to write the session under `key`: requests of one session write it,
    /// and record what they wrote, one at a time.
    async fn writing<'a>(&'a self, key: &'a str) -> Writing<'a> {
        let lock = self
            .writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_owned())
            .or_default()
            .clone();
        let guard = lock.clone().lock_owned().await;
        Writing {
            app: self,
            key,
            lock,
            guard: Some(guard),
        }
    }

    /// Records whether the listener is on a loopback address (without `[ui] token` the dashboard
    /// is served there only).
    pub fn set_loopback(&self, loopback: bool) {
        self.loopback
            .store(loopback, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the listener is on a loopback address.
    pub fn loopback(&self) -> bool {
        self.loopback.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The recent sessions, most recent first.
    pub fn sessions(&self) -> Vec<SessionSummary> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<&(u64, SessionSummary)> = recent.values().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.0));
        v.into_iter().map(|(_, s)| s.clone()).collect()
    }

    fn remember(&self, s: SessionSummary) {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.insert(s.id.clone(), (n, s));
        if recent.len() > RECENT
            && let Some(oldest) = recent
                .iter()
                .min_by_key(|(_, (n, _))| *n)
                .map(|(k, _)| k.clone())
        {
            recent.remove(&oldest);
        }
    }

    /// The status document.
    pub fn status(&self) -> Value {
        let totals = self
            .proxy
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let sessions = self.sessions();
        let bytes: Vec<usize> = sessions.iter().map(|s| s.bytes).collect();
        let mean = if bytes.is_empty() {
            0
        } else {
            bytes.iter().sum::<usize>() / bytes.len()
        };
        let p = &self.proxy.compiled.config().proxy;
        let mut totals = serde_json::to_value(totals).unwrap_or_default();
        // Signed: what deferral cost where it cost more than it saved counts against it.
        totals["tokens_saved"] = self
            .tokens_saved
            .load(std::sync::atomic::Ordering::Relaxed)
            .into();
        json!({
            "uptime_secs": self.started.elapsed().as_secs(),
            "upstreams": {
                "anthropic": shown_url(&p.anthropic_upstream),
                "openai": shown_url(&p.openai_upstream),
            },
            "store_entries": self.proxy.store.len(),
            "store": self.store_status(),
            "audit": self.proxy.audit.status(),
            "session_bytes": {"mean": mean, "max": bytes.iter().max().copied().unwrap_or(0)},
            "totals": totals,
            "recent_sessions": sessions,
        })
    }
}

impl AppState {
    /// The session store's part of the status: which store, whether it answers (since when,
    /// why not), the sessions it holds (for Redis, with the age of that count, which grows while
    /// Redis cannot be counted) and, for the embedded store, its bound and the live sessions
    /// evicted to keep it.
    fn store_status(&self) -> Value {
        let config = self.proxy.compiled.config();
        let store = &self.proxy.store;
        let mut v = match store.health() {
            Some(h) => serde_json::to_value(h).unwrap_or_default(),
            None => json!({"up": true}),
        };
        v["kind"] = if config.store.url.is_some() {
            "redis"
        } else {
            "memory"
        }
        .into();
        v["entries"] = store.len().into();
        if let Some(age) = store.len_age() {
            v["entries_age_secs"] = age.as_secs().into();
        }
        if config.store.url.is_none() {
            v["max_sessions"] = config.proxy.max_sessions.into();
            v["evicted"] = store.evicted().into();
        }
        v
    }
}

/// The router.
pub fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

/// Which format a path is, if the proxy rewrites it.
pub fn dialect_of(method: &Method, path: &str) -> Option<Dialect> {
    if method != Method::POST {
        return None;
    }
    let p = path.trim_end_matches('/');
    if p.ends_with("/messages") {
        Some(Dialect(Api::Anthropic))
    } else if p.ends_with("/chat/completions") {
        Some(Dialect(Api::OpenAiChat))
    } else if p.ends_with("/responses") {
        Some(Dialect(Api::OpenAiResponses))
    } else {
        None
    }
}

/// Whether a request goes to the Anthropic upstream (else to the OpenAI one).
fn goes_to_anthropic(headers: &HeaderMap, path_and_query: &str) -> bool {
    path_and_query.starts_with("/v1/messages")
        || path_and_query.starts_with("/v1/complete")
        || headers.contains_key("anthropic-version")
}

fn upstream_url(proxy: &Proxy, headers: &HeaderMap, path_and_query: &str) -> String {
    let p = &proxy.compiled.config().proxy;
    let base = if goes_to_anthropic(headers, path_and_query) {
        &p.anthropic_upstream
    } else {
        &p.openai_upstream
    };
    format!("{}{}", base.trim_end_matches('/'), path_and_query)
}

/// `url` as the status, the dashboard, logs and error bodies show it: a `user:password@` becomes
/// `…@` ([`redact_url`] of the scheme and authority); the path and query stay as they are.
pub fn shown_url(url: &str) -> String {
    let (origin, rest) = url.split_at(origin_end(url));
    format!("{}{rest}", redact_url(origin))
}

/// Where `url`'s scheme and authority end.
fn origin_end(url: &str) -> usize {
    let start = url.find("://").map_or(0, |i| i + 3);
    url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i)
}

/// A failure to reach `url` or to read its answer, with the URL's userinfo hidden in both parts.
fn upstream_error(url: &str, message: &str) -> ProxyError {
    ProxyError::Upstream {
        url: shown_url(url),
        message: scrub(message, Some(&url[..origin_end(url)]), &[]),
    }
}

/// `url` did not answer within `secs`.
fn timeout_error(url: &str, secs: u64) -> ProxyError {
    ProxyError::Timeout {
        url: shown_url(url),
        secs,
    }
}

/// The answer to a request the listener's `Host` and `Origin` checks refuse: plain text for the
/// proxy's own pages, and for the API the error body of the API the path or headers name.
fn refusal(own: bool, parts: &axum::http::request::Parts, why: &Refusal) -> Response {
    let status = StatusCode::from_u16(why.status()).unwrap_or(StatusCode::FORBIDDEN);
    if own {
        let reason = status.canonical_reason().unwrap_or("Refused");
        return (status, format!("{reason}: {why}")).into_response();
    }
    let path = parts.uri.path();
    let dialect =
        dialect_of(&parts.method, path).unwrap_or(if goes_to_anthropic(&parts.headers, path) {
            Dialect(Api::Anthropic)
        } else {
            Dialect(Api::OpenAiChat)
        });
    let kind = match why {
        Refusal::Repeated(_) => "invalid_request_error",
        Refusal::Origin(_) | Refusal::Host(_) => "permission_error",
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        dialect.error_body(kind, &why.to_string()).to_string(),
    )
        .into_response()
}

/// Headers that describe one hop, not the message.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
    )
}

fn forward_headers(headers: &HeaderMap, rewritten: bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        if hop_by_hop(k) || k.as_str() == SESSION_HEADER {
            continue;
        }
        // A rewritten exchange reads the upstream body, so it must arrive uncompressed.
        if rewritten && k == header::ACCEPT_ENCODING {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

fn response_headers(upstream: &HeaderMap, rewritten: bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (k, v) in upstream {
        if hop_by_hop(k)
            || (rewritten && (k == header::CONTENT_ENCODING || k == header::CONTENT_TYPE))
        {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

fn error_response(dialect: Option<Dialect>, e: &ProxyError) -> Response {
    let d = dialect.unwrap_or(Dialect(Api::Anthropic));
    (
        e.status(),
        [(header::CONTENT_TYPE, "application/json")],
        d.error_body(e.kind(), &e.to_string()).to_string(),
    )
        .into_response()
}

/// A path of the proxy's own: the dashboard (`/ui`, `/ui/…`), the status and anything else
/// under `/toolshelf`, the metrics (`/metrics`, `/metrics/…`) and `/favicon.ico`, which a
/// browser asks for when it shows the dashboard (no model API has it). Such a request is
/// answered here, a page the proxy does not have with 404, and never forwarded upstream: the
/// dashboard only reads, and a browser's request must not reach the upstream with its
/// credentials, nor count as a client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnPage {
    Dashboard,
    Status,
    Metrics,
    Icon,
    Missing,
}

impl OwnPage {
    /// The page a request for `path` gets: the one its resolved form names ([`resolved`]), so
    /// that no spelling of a page (`//toolshelf/status`, `/v1/../toolshelf/status`,
    /// `/toolshelf%2Fstatus`) passes for an API path; and 404 for a path that is the proxy's only
    /// as written (`/ui/../v1/models`).
    fn for_path(path: &str) -> Option<Self> {
        Self::of(&resolved(path)).or_else(|| Self::of(path).map(|_| Self::Missing))
    }

    /// The page `path` names, trailing slashes aside; `None` for a path that is not the proxy's.
    fn of(path: &str) -> Option<Self> {
        let under = |root: &str| {
            path.strip_prefix(root)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        let page = match path.trim_end_matches('/') {
            _ if under("/ui") => Self::Dashboard,
            "/toolshelf/status" => Self::Status,
            "/metrics" => Self::Metrics,
            "/favicon.ico" => Self::Icon,
            _ if under("/toolshelf") || under("/metrics") => Self::Missing,
            _ => return None,
        };
        Some(page)
    }
}

/// `path` as a server reads it: percent-escapes decoded (once), repeated slashes collapsed and
/// dot segments resolved; no trailing slash.
fn resolved(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| path.get(i + 1..i + 3))
            .flatten()
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b) => {
                decoded.push(b);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded);
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    format!("/{}", segments.join("/"))
}

/// Why a request for one of the proxy's own pages is not served, if it is not (past the `Host`
/// and `Origin` checks every request meets): a method other than GET or HEAD (such a request
/// was forwarded upstream as an API call; HEAD is answered as GET, without the body, as HTTP
/// asks); and for the paths besides the dashboard's (the status and metrics name sessions and
/// tools), no `[ui] token` where the dashboard needs one.
fn own_page_refusal(
    app: &AppState,
    page: OwnPage,
    parts: &axum::http::request::Parts,
) -> Option<Response> {
    if parts.method != Method::GET && parts.method != Method::HEAD {
        return Some(
            (
                StatusCode::METHOD_NOT_ALLOWED,
                [(header::ALLOW, "GET, HEAD")],
                format!("{} is read with GET or HEAD only", parts.uri.path()),
            )
                .into_response(),
        );
    }
    match app.proxy.compiled.config().ui.required_token() {
        // The dashboard admits its own requests; the icon is nothing but "no icon".
        Some(token) if !matches!(page, OwnPage::Dashboard | OwnPage::Icon) => {
            toolshelf_dashboard::require_token(token, &parts.headers, parts.uri.query())
                .err()
                .map(|r| *r)
        }
        _ => None,
    }
}

/// A request counted in [`AppState::in_flight`] while this lives.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl InFlight {
    fn enter(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Answers a request, counting it in flight until its answer is handed on whole: a body whose
/// length is known is complete already; a stream is counted until it ends.
async fn handle(State(app): State<Arc<AppState>>, req: Request) -> Response {
    let counted = InFlight::enter(&app.in_flight);
    let response = answer(app, req).await;
    if axum::body::HttpBody::size_hint(response.body())
        .exact()
        .is_some()
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = Body::from_stream(body.into_data_stream().map(move |chunk| {
        let _held = &counted;
        chunk
    }));
    Response::from_parts(parts, body)
}

async fn answer(app: Arc<AppState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let path = parts.uri.path();
    let own = OwnPage::for_path(path);
    let values = |name| {
        parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>()
    };
    let checked = app
        .checks
        .check(&values(header::HOST), &values(header::ORIGIN));
    if let Some(page) = own {
        if let Err(why) = &checked {
            return refusal(true, &parts, why);
        }
        if let Some(refused) = own_page_refusal(&app, page, &parts) {
            return refused;
        }
        return match page {
            OwnPage::Dashboard => {
                crate::ui::handle(&app, &resolved(path), parts.uri.query(), &parts.headers)
                    .unwrap_or_else(|| {
                        (StatusCode::NOT_FOUND, "no such dashboard page").into_response()
                    })
            }
            // Never stored: both name sessions and tools, and may be fetched with the token
            // in the URL.
            OwnPage::Status => (
                [
                    (header::CONTENT_TYPE, "application/json"),
                    (header::CACHE_CONTROL, "no-store"),
                ],
                app.status().to_string(),
            )
                .into_response(),
            OwnPage::Metrics => (
                [(header::CACHE_CONTROL, "no-store")],
                metrics_response(&app),
            )
                .into_response(),
            // No icon, for a day: the pages name none (`data:,`), and a browser that asks
            // anyway is not asked again soon.
            OwnPage::Icon => (
                StatusCode::NO_CONTENT,
                [(header::CACHE_CONTROL, "max-age=86400")],
            )
                .into_response(),
            OwnPage::Missing => (
                StatusCode::NOT_FOUND,
                format!(
                    "{} is no page of the toolshelf proxy (it has /toolshelf/status, /metrics and /ui); it is not forwarded upstream\n",
                    crate::short(path)
                ),
            )
                .into_response(),
        };
    }
    let proxy = &app.proxy;
    proxy.count(|t| t.requests += 1);
    if let Err(why) = &checked {
        proxy.count(|t| t.errors += 1);
        tracing::warn!(target: "toolshelf::proxy", "refused {} {path}: {why}", parts.method);
        return refusal(false, &parts, why);
    }
    let url = upstream_url(proxy, &parts.headers, &path_and_query);
    let Some(dialect) = dialect_of(&parts.method, parts.uri.path()) else {
        proxy.count(|t| t.passed += 1);
        // A body of known, bounded length goes with its length (many servers refuse chunked
        // requests); anything else streams.
        let length = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        let limit = proxy.compiled.config().proxy.max_body_bytes;
        let body = match length {
            Some(n) if n <= limit => match axum::body::to_bytes(Body::new(body), limit).await {
                Ok(b) => reqwest::Body::from(b),
                Err(e) => {
                    return error_response(
                        None,
                        &ProxyError::BadRequest(format!("reading the request body: {e}")),
                    );
                }
            },
            _ => reqwest::Body::wrap_stream(Body::new(body).into_data_stream()),
        };
        return pass(proxy, parts.method, &url, &parts.headers, body).await;
    };
    let limit = proxy.compiled.config().proxy.max_body_bytes;
    let refuse = |e: ProxyError| {
        proxy.count(|t| t.errors += 1);
        log_failure(dialect, None, &e.to_string());
        error_response(Some(dialect), &e)
    };
    // Which session a request belongs to is read from one header: two of them (two session
    // names, or the same twice from a client that adds its own) are refused rather than one
    // being picked, as two `Host` or `Origin` headers are.
    for name in [SESSION_HEADER, HARNESS_SESSION_HEADER] {
        let n = parts.headers.get_all(name).iter().count();
        if n > 1 {
            return refuse(ProxyError::BadRequest(format!(
                "the request has {n} {name} headers; send one, naming the request's session"
            )));
        }
    }
    // A compressed body is not read as JSON text: said as such, not as "not valid JSON".
    if let Some(coding) = parts
        .headers
        .get(axum::http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .filter(|c| !c.trim().eq_ignore_ascii_case("identity"))
    {
        return refuse(ProxyError::BadRequest(format!(
            "the request body is {coding:?}-encoded; toolshelf reads request bodies uncompressed (no content-encoding)"
        )));
    }
    let bytes = match axum::body::to_bytes(Body::new(body), limit).await {
        Ok(b) => b,
        Err(_) => return refuse(ProxyError::TooLarge { limit }),
    };
    let body: Map<String, Value> = match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            return refuse(ProxyError::BadRequest(
                "the request body must be a JSON object".into(),
            ));
        }
        Err(e) => {
            return refuse(ProxyError::BadRequest(format!(
                "the request body is not valid JSON: {e}"
            )));
        }
    };
    // The upstream would stream for a truthy value the proxy reads as "no": refused here.
    if let Some(v) = body
        .get("stream")
        .filter(|v| !v.is_boolean() && !v.is_null())
    {
        return refuse(ProxyError::BadRequest(format!(
            "\"stream\" must be true or false, not {}",
            toolshelf_core::echo::echo(&v.to_string())
        )));
    }
    // The Responses API echoes the request's tools and tool choice in its response: the
    // client's, not the upstream's (see `ClientTurn::echo`).
    let echo: Map<String, Value> = ["tools", "tool_choice"]
        .into_iter()
        .filter_map(|k| Some((k.to_owned(), body.get(k)?.clone())))
        .collect();
    // What the proxy cannot serve when it rewrites (a request it passes through goes as sent).
    let unsupported = dialect.unsupported(&body);
    // A session id is text: any UTF-8, not only the visible ASCII `to_str` admits. One that is
    // no UTF-8 is refused rather than dropped, which would merge the conversation into whatever
    // session its opening hashes to.
    let session = match parts
        .headers
        .get(SESSION_HEADER)
        .map(|v| utf8(v.as_bytes()))
    {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            return refuse(ProxyError::BadRequest(format!(
                "the {SESSION_HEADER} header is not UTF-8 text ({e}); send the session's name as UTF-8"
            )));
        }
    };
    let harness = parts
        .headers
        .get(HARNESS_SESSION_HEADER)
        .and_then(|v| utf8(v.as_bytes()).ok());
    let client = parts
        .headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let ids = crate::exchange::Ids {
        session: session.as_deref(),
        harness: harness.as_deref(),
        client,
    };
    match prepare(proxy, dialect, body, ids).await {
        Ok(Plan::Pass(reason)) => {
            proxy.count(|t| t.passed += 1);
            if reason == PassReason::ProviderDeferral {
                tracing::info!("passing through a request that uses the provider's own deferral");
            }
            pass_bytes(proxy, &url, &parts.headers, bytes).await
        }
        Ok(Plan::Rewrite(_)) if let Some((param, why)) = unsupported => {
            proxy.count(|t| t.errors += 1);
            log_failure(dialect, None, &why);
            field_refusal(dialect, param, &why)
        }
        Ok(Plan::Rewrite(prepared)) => {
            proxy.count(|t| t.rewritten += 1);
            let mut turn = Turn::new(*prepared);
            turn.client.echo = echo;
            turn.check_prefix();
            let headers = forward_headers(&parts.headers, true);
            if turn.prepared.stream {
                run_stream(app.clone(), turn, url, headers).await
            } else {
                run_json(&app, turn, &url, &headers).await
            }
        }
        Err(why) => {
            // A request passed through as sent reaches the model with every tool and none of
            // what governs calls and the tool list applied: `auto` refuses it whenever the
            // configuration has any of that, as it takes over a provider-deferral request then.
            let (closed, because) = match proxy.compiled.config().proxy.on_rewrite_failure {
                OnRewriteFailure::Open => (false, String::new()),
                OnRewriteFailure::Closed => (true, String::new()),
                OnRewriteFailure::Auto => {
                    let governing = crate::governance(&proxy.compiled);
                    (!governing.is_empty(), governing.join(", "))
                }
            };
            tracing::warn!(
                target: "toolshelf::proxy",
                "cannot rewrite this {} request ({why}); {}",
                dialect.api().name(),
                match (closed, because.is_empty()) {
                    (true, true) => "refused (fail-closed)".to_owned(),
                    (true, false) => format!("refused (fail-closed: {because} in force)"),
                    (false, _) => "passed through as sent (fail-open)".to_owned(),
                }
            );
            if closed {
                proxy.count(|t| t.errors += 1);
                error_response(Some(dialect), &ProxyError::Rewrite(why))
            } else {
                proxy.count(|t| t.passed += 1);
                pass_bytes(proxy, &url, &parts.headers, bytes).await
            }
        }
    }
}

/// A header value as UTF-8 text.
fn utf8(bytes: &[u8]) -> Result<String, std::str::Utf8Error> {
    std::str::from_utf8(bytes).map(str::to_owned)
}

/// A 400 for a request the proxy cannot serve as it asks, naming the field at fault (`param`,
/// in the OpenAI formats' error body).
fn field_refusal(dialect: Dialect, param: &str, why: &str) -> Response {
    let mut body = dialect.error_body("invalid_request_error", why);
    if let Some(e) = body.get_mut("error").and_then(Value::as_object_mut)
        && e.contains_key("param")
    {
        e.insert("param".into(), param.into());
    }
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `GET /metrics`: the Prometheus text, its gauges as of now, or 404 when this process records
/// no metrics.
fn metrics_response(app: &AppState) -> Response {
    crate::metrics::scraped(app.proxy.store.as_ref(), app.proxy.audit.status().as_ref());
    match toolshelf_runtime::metrics::render() {
        Some(text) => (
            [(
                header::CONTENT_TYPE,
                toolshelf_runtime::metrics::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "no metrics are recorded in this process\n",
        )
            .into_response(),
    }
}

async fn pass_bytes(proxy: &Proxy, url: &str, headers: &HeaderMap, bytes: Bytes) -> Response {
    pass(
        proxy,
        Method::POST,
        url,
        headers,
        reqwest::Body::from(bytes),
    )
    .await
}

/// Forwards a request as it is and streams the answer back as it is.
async fn pass(
    proxy: &Proxy,
    method: Method,
    url: &str,
    headers: &HeaderMap,
    body: reqwest::Body,
) -> Response {
    let req = proxy
        .http
        .request(method, url)
        .headers(forward_headers(headers, false))
        .body(body);
    match req.send().await {
        Ok(resp) => {
            let status = resp.status();
            if status.is_success() {
                tracing::info!(
                    target: "toolshelf::proxy",
                    "passed through {}: {status}",
                    shown_url(url)
                );
            } else {
                proxy.count(|t| t.errors += 1);
                tracing::warn!(
                    target: "toolshelf::proxy",
                    "passing a request through failed: {}",
                    upstream_status(url, status)
                );
            }
            let headers = response_headers(resp.headers(), false);
            let mut r = Response::new(Body::from_stream(resp.bytes_stream()));
            *r.status_mut() = status;
            *r.headers_mut() = headers;
            r
        }
        Err(e) => {
            proxy.count(|t| t.errors += 1);
            let e = upstream_error(url, &toolshelf_runtime::with_causes(&e));
            tracing::warn!(target: "toolshelf::proxy", "passing a request through failed: {e}");
            error_response(None, &e)
        }
    }
}

async fn send(
    proxy: &Proxy,
    url: &str,
    headers: &HeaderMap,
    body: &Map<String, Value>,
) -> Result<reqwest::Response, ProxyError> {
    let secs = proxy.compiled.config().proxy.upstream_timeout_secs;
    let mut headers = headers.clone();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let req = proxy
        .http
        .post(url)
        .headers(headers)
        .body(serde_json::to_vec(body).unwrap_or_default());
    match tokio::time::timeout(Duration::from_secs(secs), req.send()).await {
        Err(_) => Err(timeout_error(url, secs)),
        Ok(Err(e)) => Err(upstream_error(url, &toolshelf_runtime::with_causes(&e))),
        Ok(Ok(r)) => Ok(r),
    }
}

/// The body of an upstream error response (empty when it breaks), or the timeout when it does
/// not arrive within `[proxy] upstream_timeout_secs`.
async fn error_body(
    proxy: &Proxy,
    url: &str,
    resp: reqwest::Response,
) -> Result<Bytes, ProxyError> {
    let secs = proxy.compiled.config().proxy.upstream_timeout_secs;
    match tokio::time::timeout(Duration::from_secs(secs), resp.bytes()).await {
        Ok(body) => Ok(body.unwrap_or_default()),
        Err(_) => Err(timeout_error(url, secs)),
    }
}

/// An upstream error response, relayed with its status and body.
async fn relay_error(
    proxy: &Proxy,
    url: &str,
    dialect: Dialect,
    resp: reqwest::Response,
) -> Response {
    let status = resp.status();
    let headers = response_headers(resp.headers(), false);
    let body = match error_body(proxy, url, resp).await {
        Ok(b) => b,
        Err(e) => return error_response(Some(dialect), &e),
    };
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

async fn run_json(app: &AppState, turn: Turn, url: &str, headers: &HeaderMap) -> Response {
    let proxy = &app.proxy;
    let dialect = turn.prepared.dialect;
    let mut first_headers = None;
    let secs = proxy.compiled.config().proxy.upstream_timeout_secs;
    // Booked as abandoned if the client goes away while the rounds run.
    let mut watch = Unanswered {
        proxy,
        turn: Some(turn),
        in_flight: false,
    };
    loop {
        // The limit holds for the whole round: the body, too, must arrive by then.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        watch.in_flight = true;
        let resp = match send(proxy, url, headers, &watch.turn().prepared.body).await {
            Ok(r) => r,
            Err(e) => {
                book_unfinished(proxy, &watch.disarm(), &e.to_string());
                return error_response(Some(dialect), &e);
            }
        };
        if !resp.status().is_success() {
            let why = upstream_status(url, resp.status());
            book_unfinished(proxy, &watch.disarm(), &why);
            return relay_error(proxy, url, dialect, resp).await;
        }
        if first_headers.is_none() {
            first_headers = Some(response_headers(resp.headers(), true));
        }
        let Ok(bytes) = tokio::time::timeout_at(deadline, resp.bytes()).await else {
            let e = timeout_error(url, secs);
            book_unfinished(proxy, &watch.disarm(), &e.to_string());
            return error_response(Some(dialect), &e);
        };
        let parsed = bytes.map_err(|e| e.to_string()).and_then(|b| {
            serde_json::from_slice::<Value>(&b).map_err(|e| format!("not JSON: {e}"))
        });
        // A failed response is answered as an error event before any output is: the client has
        // seen nothing of this request, and the status its error means is what SDKs retry by.
        if let Ok(v) = &parsed
            && let Some(why) = dialect.failed_response(v)
        {
            book_unfinished(proxy, &watch.disarm(), &why);
            return event_answer(dialect, v);
        }
        let round = match parsed.and_then(|v| dialect.parse_response(v)) {
            Ok(r) => r,
            Err(message) => {
                let e = upstream_error(url, &message);
                book_unfinished(proxy, &watch.disarm(), &e.to_string());
                return error_response(Some(dialect), &e);
            }
        };
        // From here the round is the turn's own (`Turn::round` counts it).
        watch.in_flight = false;
        if let Next::Done(_) = watch.turn().round(proxy, round).await {
            break;
        }
    }
    let turn = watch.disarm();
    let body = dialect.client_response(&turn.client);
    finish(app, turn).await;
    let mut r = Response::new(Body::from(body.to_string()));
    *r.headers_mut() = first_headers.unwrap_or_default();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Books a finished request: figures, the log line, the session write.
async fn finish(app: &AppState, turn: Turn) {
    let proxy = &app.proxy;
    let Turn {
        mut prepared,
        rounds,
        client,
        refused,
        searches,
        prefix,
        search_us,
        activated,
        queries,
        ..
    } = turn;
    let tokens = client.usage.as_ref().map(Tokens::of).unwrap_or_default();
    // Signed: a deferred list (the resident tools, `tool_search` with its index,
    // `defer_execute`) can cost more than a client's short list of its own.
    let saved = (prepared.shelf.all_resident_tokens as i64 - prepared.shelf.upstream_tokens as i64)
        * i64::from(rounds);
    // The totals' figure (which the Prometheus counter mirrors, and a counter cannot go down)
    // sums the savings; the signed sums are the session's and `AppState::tokens_saved`.
    let gained = u64::try_from(saved).unwrap_or(0);
    app.tokens_saved
        .fetch_add(saved, std::sync::atomic::Ordering::Relaxed);
    let f = &mut prepared.session.figures;
    f.requests += 1;
    f.rounds += u64::from(rounds);
    f.tokens.input += tokens.input;
    f.tokens.output += tokens.output;
    f.tokens.cache_read += tokens.cache_read;
    f.tokens.cache_creation += tokens.cache_creation;
    f.tokens_saved += saved;
    crate::metrics::finished(rounds);
    proxy.count(|t| {
        t.rounds += u64::from(rounds);
        t.searches += searches;
        t.refused += refused;
        t.prefix_breaks += u64::from(prefix == Prefix::Broken);
        t.sessions_missing += u64::from(prefix == Prefix::Missing);
        t.tokens.input += tokens.input;
        t.tokens.output += tokens.output;
        t.tokens.cache_read += tokens.cache_read;
        t.tokens.cache_creation += tokens.cache_creation;
        t.tokens_saved += gained;
    });
    let turn_no = prepared.session.state.turn();
    tracing::info!(
        target: "toolshelf::proxy",
        "{} session={} turn={} rounds={} searches={} refused={} input={} cache_read={} cache_creation={} output={} tool_tokens_saved={} prefix={}",
        prepared.dialect.api().name(),
        crate::shown_key(&prepared.key),
        turn_no,
        rounds,
        searches,
        refused,
        tokens.input,
        tokens.cache_read,
        tokens.cache_creation,
        tokens.output,
        saved,
        prefix.as_str()
    );
    let actual = tokens.input + tokens.cache_read + tokens.cache_creation;
    app.events.push(crate::ui::TurnEvent {
        id: crate::session_id(&prepared.key),
        session: crate::shown_key(&prepared.key),
        turn: turn_no,
        rounds,
        // A model's query is escaped as a session key is: a bidirectional mark or a control
        // character cannot reorder or forge what the timeline shows.
        searched: if proxy.compiled.config().ui.show_arguments {
            queries
                .iter()
                .map(|q| toolshelf_core::echo::for_log(q, QUERY_SHOWN))
                .collect::<Vec<_>>()
                .join(" · ")
        } else if searches > 0 {
            format!("{searches} search(es)")
        } else {
            String::new()
        },
        activated,
        expired: std::mem::take(&mut prepared.expired),
        fired: std::mem::take(&mut prepared.fired),
        refused,
        prefix: prefix.as_str(),
        actual_tokens: actual,
        resident_tokens: u64::try_from(actual as i64 + saved).unwrap_or(0),
        search_us,
    });
    let stored = prepared.session.to_bytes();
    let summary = summarize(app, &prepared.key, &prepared.session, stored.len());
    if prepared.dialect.api() == Api::OpenAiResponses
        && let Some(id) = client.envelope.get("id").and_then(Value::as_str)
    {
        let ttl = Duration::from_secs(proxy.compiled.config().proxy.session_ttl_secs);
        let alias = crate::exchange::response_alias(id);
        if proxy
            .store
            .put(&alias, prepared.key.clone().into_bytes(), ttl)
            .await
            .is_err()
        {
            proxy.store_failed();
        }
    }
    // The session's figures as stored go to the status page: this request's, or, when its write
    // met another's (or the stored session this request could not read), the merge of both,
    // read back. One request of a session at a time writes
    // and records, so the summary left is the one of the last write.
    let _writing = app.writing(&prepared.key).await;
    let saved = proxy
        .save_session(
            &prepared.key,
            prepared.session,
            stored,
            prepared.version,
            prepared.store_failed,
            &prepared.base_figures,
        )
        .await;
    let summary = if saved == Saved::Merged {
        let loaded = proxy.load_session(&prepared.key).await;
        match loaded.version {
            Some(_) if !loaded.failed => {
                let bytes = loaded.session.to_bytes().len();
                summarize(app, &prepared.key, &loaded.session, bytes)
            }
            _ => summary,
        }
    } else {
        summary
    };
    app.remember(summary);
}

/// What the status page shows of the session under `key`.
fn summarize(
    app: &AppState,
    key: &str,
    session: &crate::session::ProxySession,
    bytes: usize,
) -> SessionSummary {
    let ttl = app.proxy.compiled.config().session.activation_ttl_turns;
    SessionSummary {
        id: crate::session_id(key),
        key: crate::shown_key(key),
        turn: session.state.turn(),
        figures: session.figures.clone(),
        bytes,
        active: session.state.active_names(ttl),
    }
}

/// The longest query the timeline shows (with `[ui] show_arguments`), in characters.
const QUERY_SHOWN: usize = 200;

/// Books a request that failed without its answer, saying `why` (logged, as every finished
/// request is, and counted in `errors`): the rounds the upstream served, the searches and
/// refusals the proxy answered and their tokens count all the same.
fn book_unfinished(proxy: &Proxy, turn: &Turn, why: &str) {
    log_failure(turn.prepared.dialect, Some(turn), why);
    count_unanswered(proxy, turn, turn.rounds, |t| t.errors += 1);
}

/// Books a rewritten request whose client went away before its answer was whole: its log line
/// (with its session and turn), the `abandoned` count, and what it had done: its upstream
/// rounds (the one in flight too, which was sent), searches, refusals and tokens.
fn book_abandoned(proxy: &Proxy, turn: &Turn, in_flight: bool) {
    let rounds = turn.rounds + u32::from(in_flight);
    tracing::info!(
        target: "toolshelf::proxy",
        "{} session={} turn={} abandoned: the client went away before the answer was whole, after {rounds} upstream round{}",
        turn.prepared.dialect.api().name(),
        crate::shown_key(&turn.prepared.key),
        turn.prepared.session.state.turn(),
        if rounds == 1 { "" } else { "s" },
    );
    count_unanswered(proxy, turn, rounds, |t| t.abandoned += 1);
}

/// Counts what a request that ended without its answer had done (`rounds` upstream rounds, its
/// searches, refusals and tokens) with its `outcome`.
fn count_unanswered(proxy: &Proxy, turn: &Turn, rounds: u32, outcome: impl Fn(&mut Totals)) {
    let tokens = turn
        .client
        .usage
        .as_ref()
        .map(Tokens::of)
        .unwrap_or_default();
    proxy.count(|t| {
        outcome(t);
        t.rounds += u64::from(rounds);
        t.searches += turn.searches;
        t.refused += turn.refused;
        t.tokens.input += tokens.input;
        t.tokens.output += tokens.output;
        t.tokens.cache_read += tokens.cache_read;
        t.tokens.cache_creation += tokens.cache_creation;
    });
}

/// Books, when dropped armed, the request whose answer was being made: dropped so, the
/// request's future was (its client went away, and the server stopped serving it).
struct Unanswered<'a> {
    proxy: &'a Proxy,
    turn: Option<Turn>,
    /// Whether an upstream round is on its way (sent, its answer not yet taken as a round).
    in_flight: bool,
}

impl Unanswered<'_> {
    /// The turn back, for booking it as answered or failed.
    fn disarm(mut self) -> Turn {
        self.turn.take().expect("armed")
    }

    fn turn(&mut self) -> &mut Turn {
        self.turn.as_mut().expect("armed")
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(turn) = &self.turn {
            book_abandoned(self.proxy, turn, self.in_flight);
        }
    }
}

/// The log line of a request that failed, with its session and turn when it had them.
fn log_failure(dialect: Dialect, turn: Option<&Turn>, why: &str) {
    match turn {
        Some(turn) => tracing::warn!(
            target: "toolshelf::proxy",
            "{} session={} turn={} failed: {why}",
            dialect.api().name(),
            crate::shown_key(&turn.prepared.key),
            turn.prepared.session.state.turn(),
        ),
        None => {
            tracing::warn!(target: "toolshelf::proxy", "{} failed: {why}", dialect.api().name())
        }
    }
}

/// Why an upstream's error response failed a request.
fn upstream_status(url: &str, status: reqwest::StatusCode) -> String {
    format!(
        "upstream {} answered {}",
        shown_url(url),
        status_line(status)
    )
}

/// A status as a log line shows it: `429 Too Many Requests`, and `529 Overloaded` for the
/// status Anthropic sends when it is overloaded, which HTTP does not name.
fn status_line(status: reqwest::StatusCode) -> String {
    let reason = match status.as_u16() {
        529 => Some("Overloaded"),
        _ => status.canonical_reason(),
    };
    match reason {
        Some(r) => format!("{} {r}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// The HTTP answer to an error event an upstream streamed before the client's stream showed
/// anything, or to a failed Responses response (its `response.failed` event, or a response whose
/// status is `failed`): the status its type means (a rate limit or quota 429; an overloaded model
/// 529 from Anthropic, 503 from OpenAI; an invalid request 400, authentication 401, permission
/// 403, not found 404, too large 413, another `invalid_…` code 400; anything else 502), with the
/// error in the format's error body (Anthropic's and Chat's events are that body already).
fn event_answer(dialect: Dialect, event: &Value) -> Response {
    // A failed response names its error as the response's `error`.
    let event = match event.get("response") {
        Some(r) if event["type"] == "response.failed" => r,
        _ => event,
    };
    let text = |p: &str| event.pointer(p).and_then(Value::as_str);
    // What names the error: Anthropic's `error.type`, Chat's `error.type` and `error.code`,
    // the Responses event's `code` (or a nested `error`).
    let names: Vec<&str> = ["/error/type", "/error/code", "/code"]
        .iter()
        .filter_map(|p| text(p))
        .collect();
    let message = text("/error/message")
        .or_else(|| text("/message"))
        .unwrap_or("the upstream reported an error");
    let api = dialect.api();
    let named = |part: &str| names.iter().any(|n| n.contains(part));
    let status = if named("rate_limit") || named("quota") {
        StatusCode::TOO_MANY_REQUESTS
    } else if named("overload") {
        match api {
            Api::Anthropic => StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            _ => StatusCode::SERVICE_UNAVAILABLE,
        }
    } else if named("invalid_request") {
        StatusCode::BAD_REQUEST
    } else if named("authentication") {
        StatusCode::UNAUTHORIZED
    } else if named("permission") {
        StatusCode::FORBIDDEN
    } else if named("not_found") {
        StatusCode::NOT_FOUND
    } else if named("too_large") {
        StatusCode::PAYLOAD_TOO_LARGE
    } else if names.iter().any(|n| n.starts_with("invalid_")) {
        // A failed response's code for what the request held (`invalid_prompt`,
        // `invalid_image`): a request sent again fails again.
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::BAD_GATEWAY
    };
    let body = match api {
        // OpenAI's HTTP error body, its type and code kept apart as the event gives them.
        Api::OpenAiResponses => {
            let kind = text("/error/type").unwrap_or(match status {
                StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
                StatusCode::BAD_REQUEST => "invalid_request_error",
                _ => "server_error",
            });
            let param = event
                .pointer("/error/param")
                .or_else(|| event.get("param"))
                .cloned()
                .unwrap_or(Value::Null);
            let code = text("/error/code").or_else(|| text("/code"));
            json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
        }
        _ => event.clone(),
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// What an upstream's error body says: its `error.message` (or `message`) when it is JSON that
/// has one, else the body itself, cut.
fn upstream_said(body: &str) -> String {
    let said = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    crate::short(&said.unwrap_or_else(|| body.to_owned()))
}

type Chunk = Result<Bytes, std::io::Error>;

/// Why pumping a round stopped early.
enum Pump {
    ClientGone,
    /// The upstream's stream failed: it broke, ended early, or is no event stream.
    Upstream(String),
    /// The upstream's stream sent nothing for `[proxy] upstream_timeout_secs`.
    Stalled(String),
    /// An event of the upstream's stream failed the round: an error event it sent (or a
    /// Responses `response.failed`), or one that cannot be read.
    Event(String),
}

/// The client's side of a stream. Until the stream shows output past its opening (see
/// [`Streamer::shown`]), what it writes is held and no status is sent, for at most
/// `[proxy] stream_hold_secs`: a failure before then, such as a 429 or 529 in a round the proxy added after
/// answering a search itself, still reaches the client as an HTTP status (the upstream's, with
/// its `retry-after` and body), which SDKs retry, rather than as an error event after a 200.
struct Gate {
    tx: tokio::sync::mpsc::Sender<Chunk>,
    held: Vec<Bytes>,
    /// Told how to answer once that is known: `None` to stream, or a response to give instead.
    start: Option<tokio::sync::oneshot::Sender<Option<Response>>>,
    /// When holding ends whatever comes: `[proxy] stream_hold_secs` after it began. A round
    /// that only writes a long call (which shows when its round ends) must not keep a client, or
    /// a proxy in front of it, from hearing anything for longer.
    until: Instant,
}

impl Gate {
    fn new(
        tx: tokio::sync::mpsc::Sender<Chunk>,
        start: tokio::sync::oneshot::Sender<Option<Response>>,
        hold: Duration,
    ) -> Self {
        Self {
            tx,
            held: Vec::new(),
            start: Some(start),
            until: Instant::now() + hold,
        }
    }

    /// Sends `bytes` on, or holds them while the stream shows nothing (`shown` says whether it
    /// does with them). `Err` when the client went away.
    async fn send(&mut self, bytes: Vec<u8>, shown: bool) -> Result<(), ()> {
        if self.client_gone() {
            return Err(());
        }
        if self.start.is_some() && !shown && Instant::now() < self.until {
            if !bytes.is_empty() {
                self.held.push(Bytes::from(bytes));
            }
            return Ok(());
        }
        self.open().await?;
        if bytes.is_empty() {
            return Ok(());
        }
        self.tx.send(Ok(Bytes::from(bytes))).await.map_err(|_| ())
    }

    /// Starts the client's stream (status 200) with what was held.
    async fn open(&mut self) -> Result<(), ()> {
        if let Some(start) = self.start.take() {
            start.send(None).map_err(|_| ())?;
            for b in std::mem::take(&mut self.held) {
                self.tx.send(Ok(b)).await.map_err(|_| ())?;
            }
        }
        Ok(())
    }

    /// Awaits `fut` (an upstream round's answer or events, the proxy's own work on a round),
    /// starting the client's stream meanwhile if the hold runs out first: the hold is a bound
    /// on the time to the status, whether or not the upstream says anything.
    async fn wait<T>(&mut self, fut: impl std::future::Future<Output = T>) -> T {
        let mut fut = std::pin::pin!(fut);
        if self.start.is_some() {
            let until = tokio::time::Instant::from_std(self.until);
            tokio::select! {
                out = &mut fut => return out,
                () = tokio::time::sleep_until(until) => {
                    // A client gone is noticed by the next send.
                    let _ = self.open().await;
                }
            }
        }
        fut.await
    }

    /// Whether the client went away: its request's handler is gone while the status waits, or
    /// the stream's reader once it started.
    fn client_gone(&self) -> bool {
        match &self.start {
            Some(start) => start.is_closed(),
            None => self.tx.is_closed(),
        }
    }

    /// Whether the client's stream has not started: a failure can still be answered with a
    /// status of its own.
    fn unsent(&self) -> bool {
        self.start.is_some()
    }

    /// Ends the client's stream with the format's error event (an event the upstream sent, as
    /// it sent it: see [`Streamer::error`]), after what was held.
    async fn fail(&mut self, streamer: &mut dyn Streamer, kind: &str, why: &str) {
        let mut out = Vec::new();
        streamer.error(kind, why, &mut out);
        let _ = self.send(out, true).await;
    }

    /// Answers with `response` instead of a stream (only while [`Self::unsent`]).
    fn answer(&mut self, response: Response) {
        if let Some(start) = self.start.take() {
            let _ = start.send(Some(response));
        }
    }
}

async fn pump(
    resp: reqwest::Response,
    streamer: &mut dyn Streamer,
    gate: &mut Gate,
    idle: Duration,
) -> Result<crate::api::Round, Pump> {
    let media = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("text/event-stream")
        .to_owned();
    let mut stream = resp.bytes_stream();
    // A stream labelled otherwise (`text/plain`) is still read as one when its first bytes are
    // event-stream fields.
    let mut first = None;
    if !media
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("text/event-stream")
    {
        let start = match gate.wait(tokio::time::timeout(idle, stream.next())).await {
            Ok(Some(Ok(c))) => c,
            _ => Bytes::new(),
        };
        if !looks_like_events(&start) {
            // An upstream that ignores `stream` answers with one document: say that, with its
            // start, rather than that the stream ended early.
            return Err(Pump::Upstream(format!(
                "the upstream answered a streaming request with {}, not an event stream (does it stream on this API?): {}",
                crate::short(&media),
                crate::short(&String::from_utf8_lossy(&start))
            )));
        }
        first = Some(start);
    }
    let mut reader = Reader::default();
    loop {
        let next = match first.take() {
            Some(c) => Some(Ok(c)),
            None => match gate.wait(tokio::time::timeout(idle, stream.next())).await {
                Err(_) => {
                    return Err(Pump::Stalled(format!(
                        "the upstream stream stalled for {} s",
                        idle.as_secs()
                    )));
                }
                Ok(n) => n,
            },
        };
        let chunk = match next {
            None => {
                return Err(Pump::Upstream(
                    "the upstream stream ended before the response was complete".into(),
                ));
            }
            Some(Err(e)) => return Err(Pump::Upstream(format!("the upstream stream broke: {e}"))),
            Some(Ok(c)) => c,
        };
        let mut out = Vec::new();
        for event in reader.feed(&chunk) {
            if let Err(why) = streamer.event(&event, &mut out) {
                // What the events before it in this chunk produced still reaches the client.
                let _ = gate.send(out, streamer.shown()).await;
                return Err(Pump::Event(why));
            }
            if streamer.round_done() {
                break;
            }
        }
        if gate.send(out, streamer.shown()).await.is_err() {
            return Err(Pump::ClientGone);
        }
        if streamer.round_done() {
            return Ok(streamer.take_round());
        }
    }
}

/// Whether `start` begins with an event-stream field (`data:`, `event:`, `id:`, `retry:`) or a
/// comment line.
fn looks_like_events(start: &[u8]) -> bool {
    let start = start.strip_prefix("\u{feff}".as_bytes()).unwrap_or(start);
    let start = &start[start
        .iter()
        .take_while(|b| matches!(b, b'\r' | b'\n'))
        .count()..];
    [&b"data:"[..], b"event:", b"id:", b"retry:", b":"]
        .iter()
        .any(|f| start.starts_with(f))
}

async fn run_stream(app: Arc<AppState>, turn: Turn, url: String, headers: HeaderMap) -> Response {
    let dialect = turn.prepared.dialect;
    // Booked as abandoned if the client goes away before the upstream answers.
    let mut watch = Unanswered {
        proxy: &app.proxy,
        turn: Some(turn),
        in_flight: true,
    };
    let first = match send(&app.proxy, &url, &headers, &watch.turn().prepared.body).await {
        Ok(r) => r,
        Err(e) => {
            book_unfinished(&app.proxy, &watch.disarm(), &e.to_string());
            return error_response(Some(dialect), &e);
        }
    };
    if !first.status().is_success() {
        let why = upstream_status(&url, first.status());
        book_unfinished(&app.proxy, &watch.disarm(), &why);
        return relay_error(&app.proxy, &url, dialect, first).await;
    }
    let mut turn = watch.disarm();
    let mut client_headers = response_headers(first.headers(), true);
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(64);
    let (start, started) = tokio::sync::oneshot::channel();
    let idle = Duration::from_secs(app.proxy.compiled.config().proxy.upstream_timeout_secs);
    tokio::spawn(async move {
        let hold = Duration::from_secs(app.proxy.compiled.config().proxy.stream_hold_secs);
        let mut gate = Gate::new(tx, start, hold);
        let mut streamer = dialect.streamer(turn.prepared.include_usage, turn.client.echo.clone());
        let mut resp = first;
        loop {
            let round = match pump(resp, streamer.as_mut(), &mut gate, idle).await {
                Ok(r) => r,
                // The client left while the round came: it is dropped, and counted.
                Err(Pump::ClientGone) => {
                    book_abandoned(&app.proxy, &turn, true);
                    return;
                }
                // A failure the client is no longer there to hear: it left first. The failed
                // round is not counted, as for a request that failed.
                Err(_) if gate.client_gone() => {
                    book_abandoned(&app.proxy, &turn, false);
                    return;
                }
                Err(Pump::Stalled(message)) if gate.unsent() => {
                    book_unfinished(&app.proxy, &turn, &message);
                    gate.answer(error_response(
                        Some(dialect),
                        &timeout_error(&url, idle.as_secs()),
                    ));
                    return;
                }
                Err(Pump::Upstream(message)) if gate.unsent() => {
                    book_unfinished(&app.proxy, &turn, &message);
                    gate.answer(error_response(
                        Some(dialect),
                        &upstream_error(&url, &message),
                    ));
                    return;
                }
                Err(Pump::Event(message)) if gate.unsent() => {
                    book_unfinished(&app.proxy, &turn, &message);
                    let answer = match streamer.upstream_error() {
                        Some(event) => event_answer(dialect, event),
                        None => error_response(Some(dialect), &upstream_error(&url, &message)),
                    };
                    gate.answer(answer);
                    return;
                }
                Err(Pump::Upstream(message) | Pump::Stalled(message) | Pump::Event(message)) => {
                    book_unfinished(&app.proxy, &turn, &message);
                    gate.fail(streamer.as_mut(), "api_error", &message).await;
                    return;
                }
            };
            match gate.wait(turn.round(&app.proxy, round)).await {
                // No further paid round for a client that left meanwhile.
                Next::Continue if gate.client_gone() => {
                    book_abandoned(&app.proxy, &turn, false);
                    return;
                }
                Next::Continue => {
                    let sent = gate
                        .wait(send(&app.proxy, &url, &headers, &turn.prepared.body))
                        .await;
                    if gate.client_gone() {
                        // A round that came is dropped and counted; one that failed is not.
                        let came = sent.as_ref().is_ok_and(|r| r.status().is_success());
                        book_abandoned(&app.proxy, &turn, came);
                        return;
                    }
                    resp = match sent {
                        Ok(r) if r.status().is_success() => r,
                        Ok(r) if gate.unsent() => {
                            book_unfinished(&app.proxy, &turn, &upstream_status(&url, r.status()));
                            gate.answer(relay_error(&app.proxy, &url, dialect, r).await);
                            return;
                        }
                        Ok(r) => {
                            let status = r.status();
                            let body = match error_body(&app.proxy, &url, r).await {
                                Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                                Err(e) => e.to_string(),
                            };
                            book_unfinished(&app.proxy, &turn, &upstream_status(&url, status));
                            let why = format!(
                                "upstream {}: {}",
                                status_line(status),
                                upstream_said(&body)
                            );
                            gate.fail(streamer.as_mut(), &upstream_kind(status), &why)
                                .await;
                            return;
                        }
                        Err(e) if gate.unsent() => {
                            book_unfinished(&app.proxy, &turn, &e.to_string());
                            gate.answer(error_response(Some(dialect), &e));
                            return;
                        }
                        Err(e) => {
                            book_unfinished(&app.proxy, &turn, &e.to_string());
                            gate.fail(streamer.as_mut(), "api_error", &e.to_string())
                                .await;
                            return;
                        }
                    };
                }
                Next::Done(calls) => {
                    let mut out = Vec::new();
                    // A note the proxy added after the stream, then the client's calls.
                    if let Some(note) = turn.note.take() {
                        streamer.write_text(&note, &mut out);
                    }
                    for c in &calls {
                        streamer.write_call(c, &mut out);
                    }
                    streamer.finish(
                        turn.client.stop.as_deref(),
                        turn.client.usage.as_ref(),
                        &mut out,
                    );
                    if gate.send(out, true).await.is_ok() {
                        finish(&app, turn).await;
                    } else {
                        book_abandoned(&app.proxy, &turn, false);
                    }
                    return;
                }
            }
        }
    });
    // The status waits for the stream's first output, or for the failure that comes first.
    if let Ok(Some(refused)) = started.await {
        return refused;
    }
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    client_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    client_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let mut r = Response::new(Body::from_stream(body));
    *r.status_mut() = StatusCode::OK;
    *r.headers_mut() = client_headers;
    r
}

fn upstream_kind(status: reqwest::StatusCode) -> String {
    match status.as_u16() {
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxys_own_paths_are_known_with_or_without_a_trailing_slash() {
        for (path, page) in [
            ("/toolshelf/status", Some(OwnPage::Status)),
            ("/toolshelf/status/", Some(OwnPage::Status)),
            ("/metrics", Some(OwnPage::Metrics)),
            ("/metrics//", Some(OwnPage::Metrics)),
            ("/ui", Some(OwnPage::Dashboard)),
            ("/ui/", Some(OwnPage::Dashboard)),
            ("/ui/sessions/a/timeline", Some(OwnPage::Dashboard)),
            ("/toolshelf", Some(OwnPage::Missing)),
            ("/toolshelf/", Some(OwnPage::Missing)),
            ("/toolshelf/status/x", Some(OwnPage::Missing)),
            ("/metrics/x", Some(OwnPage::Missing)),
            ("/favicon.ico", Some(OwnPage::Icon)),
            ("/v1/models", None),
            ("/uix", None),
            ("/metricsx", None),
            ("/toolshelfx/status", None),
            ("/", None),
        ] {
            assert_eq!(OwnPage::of(path), page, "{path}");
            assert_eq!(OwnPage::for_path(path), page, "{path}");
        }
    }

    /// A path is the proxy's when it resolves to one of its own, however it is spelled; one that
    /// is the proxy's only as written is a page it does not have.
    #[test]
    fn the_proxys_own_paths_are_known_however_spelled() {
        for (path, page) in [
            ("//toolshelf/status", Some(OwnPage::Status)),
            ("/v1/../toolshelf/status", Some(OwnPage::Status)),
            ("/toolshelf%2Fstatus", Some(OwnPage::Status)),
            ("/toolshelf%2fstatus", Some(OwnPage::Status)),
            ("/%74oolshelf/./status", Some(OwnPage::Status)),
            ("/v1/%2e%2e/toolshelf//status/", Some(OwnPage::Status)),
            ("//ui", Some(OwnPage::Dashboard)),
            ("/v1/../ui/catalog", Some(OwnPage::Dashboard)),
            ("/ui%2Fcatalog", Some(OwnPage::Dashboard)),
            ("//metrics", Some(OwnPage::Metrics)),
            ("/v1/../metrics", Some(OwnPage::Metrics)),
            ("/metrics%2F", Some(OwnPage::Metrics)),
            ("/metrics%2Fx", Some(OwnPage::Missing)),
            ("//toolshelf/nothing", Some(OwnPage::Missing)),
            ("/ui/../v1/models", Some(OwnPage::Missing)),
            ("/toolshelf/../v1/messages", Some(OwnPage::Missing)),
            ("//favicon.ico", Some(OwnPage::Icon)),
            ("/v1//models", None),
            ("/v1/models%2F", None),
            ("/toolshelf%3Fstatus", None),
            ("/toolshelf%2+status", None),
            ("/..", None),
        ] {
            assert_eq!(OwnPage::for_path(path), page, "{path}");
        }
        assert_eq!(resolved("/a/%2e/b/../%2E%2E/c%2"), "/c%2");
        assert_eq!(resolved("/a%ZZ%2+b"), "/a%ZZ%2+b");
        assert_eq!(resolved("/%C3%BC/%FF"), "/ü/\u{fffd}");
    }

    #[test]
    fn a_long_session_key_is_shown_cut_and_apart_from_its_likes() {
        let long = format!("h:{}", "a".repeat(6000));
        let other = format!("{long}b");
        let shown = crate::shown_key(&long);
        assert!(
            shown.chars().count() <= crate::SHOWN_KEY,
            "{} characters",
            shown.chars().count()
        );
        assert!(shown.starts_with("h:aaaa"), "{shown}");
        assert_eq!(shown, crate::shown_key(&long));
        assert_ne!(shown, crate::shown_key(&other));
        assert_eq!(crate::shown_key("h:sess with spaces"), "h:sess with spaces");
        assert_eq!(crate::shown_key("h:ünïcödé"), "h:ünïcödé");
        assert_eq!(
            crate::shown_key("h:tab\there\u{7}"),
            "h:tab\\u{9}here\\u{7}",
            "every control character is escaped, a tab too"
        );
        assert_eq!(
            crate::shown_key("h:a\u{202e}b"),
            "h:a\\u{202e}b",
            "a bidirectional mark cannot reorder a log line"
        );
        assert_eq!(
            crate::shown_key(&format!("r:{}", "0".repeat(32))),
            "r:000000000000"
        );
    }

    /// Keys that were shown alike: a key holding U+202E and one holding the text of its escape;
    /// a long key and a short one spelling its cut form. Shown apart, and with ids apart.
    #[test]
    fn keys_shown_alike_before_are_shown_and_named_apart() {
        let long = format!("h:{}", "Q".repeat(5000));
        // A key of 61 characters that spells the long one's cut form.
        let spelling = crate::shown_key(&long);
        assert_eq!(spelling.chars().count(), 61, "{spelling}");
        let pairs = [
            // A real U+202E, and the text of its escape.
            ("h:\u{202e}RTL".to_owned(), r"h:\u{202e}RTL".to_owned()),
            (long.clone(), spelling),
        ];
        for (a, b) in &pairs {
            assert_ne!(crate::shown_key(a), crate::shown_key(b), "{a:?} {b:?}");
            assert_ne!(crate::session_id(a), crate::session_id(b), "{a:?} {b:?}");
        }
        assert_eq!(crate::shown_key("h:\u{202e}RTL"), r"h:\u{202e}RTL");
        assert_eq!(crate::shown_key(r"h:\u{202e}RTL"), r"h:\\u{202e}RTL");
        assert_eq!(crate::shown_key("h:a…b"), r"h:a\u{2026}b");
        let id = crate::session_id(&long);
        assert_eq!(id.len(), 32);
        assert_eq!(id, crate::session_id(&long), "the same key, the same id");
    }

    /// Every error type the upstreams stream before any output, in each format, gets the HTTP
    /// status it means, with the error in that format's error body.
    #[test]
    fn an_early_error_event_is_answered_with_the_status_its_type_means() {
        use futures_util::FutureExt;
        let answer = |api: Api, event: Value| {
            let response = event_answer(Dialect(api), &event);
            let status = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .now_or_never()
                .expect("the body is whole")
                .expect("the body reads");
            (
                status,
                serde_json::from_slice::<Value>(&body).expect("JSON"),
            )
        };
        // Anthropic's error types, as its stream's `error` event carries them.
        for (kind, status) in [
            ("invalid_request_error", 400),
            ("authentication_error", 401),
            ("permission_error", 403),
            ("not_found_error", 404),
            ("request_too_large", 413),
            ("rate_limit_error", 429),
            ("api_error", 502),
            ("overloaded_error", 529),
        ] {
            let event = json!({"type": "error", "error": {"type": kind, "message": "m"}});
            let (got, body) = answer(Api::Anthropic, event.clone());
            assert_eq!(got, status, "{kind}");
            assert_eq!(body, event, "{kind}: Anthropic's event is its error body");
        }
        // OpenAI's types and codes, in a Chat chunk's `error` and in a Responses `error` event
        // (flat, and with the error nested).
        for (kind, code, status) in [
            (
                "invalid_request_error",
                Some("context_length_exceeded"),
                400,
            ),
            ("invalid_request_error", None, 400),
            ("authentication_error", Some("invalid_api_key"), 401),
            ("permission_error", None, 403),
            ("not_found_error", Some("model_not_found"), 404),
            ("requests", Some("rate_limit_exceeded"), 429),
            ("insufficient_quota", Some("insufficient_quota"), 429),
            ("server_error", Some("server_is_overloaded"), 503),
            ("server_error", None, 502),
        ] {
            let chunk =
                json!({"error": {"message": "m", "type": kind, "param": null, "code": code}});
            let (got, body) = answer(Api::OpenAiChat, chunk.clone());
            assert_eq!(got, status, "chat {kind} {code:?}");
            assert_eq!(body, chunk, "chat {kind}: the chunk is its error body");

            let nested = json!({"type": "error", "sequence_number": 1, "error":
                {"type": kind, "code": code, "message": "m", "param": "p"}});
            let (got, body) = answer(Api::OpenAiResponses, nested);
            assert_eq!(got, status, "responses {kind} {code:?}");
            assert_eq!(
                body,
                json!({"error": {"message": "m", "type": kind, "param": "p", "code": code}}),
                "responses {kind} {code:?}"
            );
        }
        // The flat Responses event names the error by its code alone; the body's type is the
        // one its status stands for.
        for (code, status, kind) in [
            ("rate_limit_exceeded", 429, "rate_limit_error"),
            ("invalid_request_error", 400, "invalid_request_error"),
            ("server_is_overloaded", 503, "server_error"),
            ("ERR_SOMETHING", 502, "server_error"),
        ] {
            let event = json!({"type": "error", "sequence_number": 3, "code": code,
                "message": "m", "param": null});
            let (got, body) = answer(Api::OpenAiResponses, event);
            assert_eq!(got, status, "{code}");
            assert_eq!(
                body,
                json!({"error": {"message": "m", "type": kind, "param": null, "code": code}}),
                "{code}"
            );
        }
    }

    /// A failed Responses response, streamed (`response.failed`) or not (status `failed`), is
    /// answered with the status its error's code means and OpenAI's error body.
    #[test]
    fn a_failed_response_is_answered_with_the_status_its_code_means() {
        use futures_util::FutureExt;
        for (code, status, kind) in [
            ("server_error", 502, "server_error"),
            ("rate_limit_exceeded", 429, "rate_limit_error"),
            ("server_is_overloaded", 503, "server_error"),
            ("invalid_prompt", 400, "invalid_request_error"),
            ("vector_store_timeout", 502, "server_error"),
        ] {
            let response = json!({"id": "resp_1", "object": "response", "status": "failed",
                "output": [], "error": {"code": code, "message": "m"}});
            let event = json!({"type": "response.failed", "sequence_number": 1,
                               "response": response});
            for answered in [&event, &response] {
                let answer = event_answer(Dialect(Api::OpenAiResponses), answered);
                assert_eq!(answer.status().as_u16(), status, "{code}");
                let body = axum::body::to_bytes(answer.into_body(), usize::MAX)
                    .now_or_never()
                    .expect("the body is whole")
                    .expect("the body reads");
                assert_eq!(
                    serde_json::from_slice::<Value>(&body).expect("JSON"),
                    json!({"error": {"message": "m", "type": kind, "param": null, "code": code}}),
                    "{code}"
                );
            }
        }
    }

    #[test]
    fn an_upstream_url_is_shown_without_its_userinfo() {
        for (url, shown) in [
            (
                "http://proxyuser:sk-SECRET123@127.0.0.1:9/v1/messages?beta=true",
                "http://…@127.0.0.1:9/v1/messages?beta=true",
            ),
            ("https://u:p@api.example.com", "https://…@api.example.com"),
            (
                "http://127.0.0.1:9/v1/chat/completions",
                "http://127.0.0.1:9/v1/chat/completions",
            ),
        ] {
            assert_eq!(shown_url(url), shown);
        }
        let url = "http://proxyuser:sk-SECRET123@127.0.0.1:9/v1/messages";
        let e = upstream_error(url, &format!("error sending request for url ({url})"));
        assert_eq!(
            e.to_string(),
            "upstream http://…@127.0.0.1:9/v1/messages: error sending request for url (http://…@127.0.0.1:9/v1/messages)"
        );
        assert!(!timeout_error(url, 5).to_string().contains("SECRET"));
        assert!(!upstream_status(url, reqwest::StatusCode::BAD_GATEWAY).contains("SECRET"));
    }
}
