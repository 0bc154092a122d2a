//! toolshelf-dashboard: the pages of `/ui`, shared by the proxy and the gateway.
//!
//! Pages are askama templates (`templates/`), escaped by default; the only script is htmx,
//! embedded in the binary ([`HTMX`]), for the search playground, live timelines and the figures
//! of the overview and servers pages, which fetch their own page again every
//! [`REFRESH_SECS`] seconds and swap in its `#live` part (no reload: the scroll position stays). This crate
//! renders what it is given and decides who may look ([`admitted`]); each edge gathers its own
//! figures (the proxy its sessions, the gateway its servers) and routes the requests.
//!
//! Nothing on these pages changes any state. A configured `[ui] token` is required wherever they
//! are served (as `Authorization: Bearer …` or `?token=…`), a loopback listener included: a
//! reverse proxy in front of one makes it reachable by others. Without a token they are open on
//! a loopback listener and not served on any other address.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

use askama::Template;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use toolshelf_core::config::{UiConfig, Unserved};
use toolshelf_core::policy::{Exposure, State};
use toolshelf_core::search::SearchIndex;
use toolshelf_core::{Catalog, Surface};

/// How often the overview and servers pages refresh their figures, in seconds.
pub const REFRESH_SECS: u32 = 5;

/// htmx 2.0.11 (Zero-Clause BSD), served at `/ui/assets/htmx.min.js`.
pub const HTMX: &[u8] = include_bytes!("../assets/htmx.min.js");

/// What every page's frame shows: which edge, and its navigation.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// `proxy` or `gateway`.
    pub edge: &'static str,
    /// (label, href), in order.
    pub nav: Vec<(&'static str, &'static str)>,
}

impl Chrome {
    /// The proxy's frame.
    pub fn proxy() -> Self {
        Self {
            edge: "proxy",
            nav: vec![
                ("overview", "/ui"),
                ("catalog", "/ui/catalog"),
                ("index", "/ui/index"),
                ("search", "/ui/search"),
            ],
        }
    }

    /// The gateway's frame.
    pub fn gateway() -> Self {
        Self {
            edge: "gateway",
            nav: vec![
                ("servers", "/ui"),
                ("catalog", "/ui/catalog"),
                ("index", "/ui/index"),
                ("search", "/ui/search"),
            ],
        }
    }
}

/// What one proxy request did, for the timeline and the charts.
#[derive(Debug, Clone, Serialize)]
pub struct TurnEvent {
    /// The session's id: what tells it apart from every other (its page is named by it).
    pub id: String,
    /// The session, as shown (hash keys cut): for reading, not for telling sessions apart.
    pub session: String,
    /// Its turn.
    pub turn: u64,
    /// Upstream rounds.
    pub rounds: u32,
    /// What was searched: the queries when shown, else how many searches.
    pub searched: String,
    /// Tools activated.
    pub activated: Vec<String>,
    /// Tools whose activation expired as the turn began.
    pub expired: Vec<String>,
    /// Reminder rules that fired.
    pub fired: Vec<String>,
    /// Calls refused.
    pub refused: u64,
    /// `first`, `kept` or `broken`.
    pub prefix: &'static str,
    /// Input tokens the upstream counted, cache reads and writes included.
    pub actual_tokens: u64,
    /// The same with every client tool resident.
    pub resident_tokens: u64,
    /// Search latencies, µs.
    pub search_us: Vec<u64>,
}

impl TurnEvent {
    /// The latencies as text.
    pub fn search_us_text(&self) -> String {
        self.search_us
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Sessions whose requests are kept: the most recently seen.
pub const SESSIONS: usize = 50;

/// Requests kept in all, over [`SESSIONS`] sessions.
pub const EVENTS: usize = 2000;

/// The most recent requests of each of the [`SESSIONS`] sessions seen most recently, at most
/// [`EVENTS`] in all. Past that, the session with the most requests kept loses its oldest: a busy
/// session cannot push a quiet one's out, and each keeps at least its last
/// `EVENTS / SESSIONS`. A session beyond the [`SESSIONS`] most recently seen loses all of its.
#[derive(Debug, Default)]
pub struct Events(std::sync::Mutex<Kept>);

/// What [`Events`] holds.
#[derive(Debug, Default)]
struct Kept {
    /// Events pushed so far: each event's number, and each session's last.
    pushed: u64,
    /// Events held.
    held: usize,
    /// By session id: when it was last seen, and its events with their numbers, oldest first.
    sessions: HashMap<String, (u64, VecDeque<(u64, TurnEvent)>)>,
}

impl Events {
    /// Adds one, dropping what is past the bounds.
    pub fn push(&self, e: TurnEvent) {
        let mut k = self.0.lock().unwrap_or_else(|p| p.into_inner());
        k.pushed += 1;
        let n = k.pushed;
        let (last, events) = k.sessions.entry(e.id.clone()).or_default();
        *last = n;
        events.push_back((n, e));
        k.held += 1;
        if k.sessions.len() > SESSIONS
            && let Some(stale) = k
                .sessions
                .iter()
                .min_by_key(|(_, (last, _))| *last)
                .map(|(id, _)| id.clone())
            && let Some((_, gone)) = k.sessions.remove(&stale)
        {
            k.held -= gone.len();
        }
        while k.held > EVENTS {
            // The longest timeline; of two as long, the one whose oldest event is older.
            let Some(events) = k
                .sessions
                .values_mut()
                .map(|(_, events)| events)
                .max_by_key(|events| {
                    (
                        events.len(),
                        std::cmp::Reverse(events.front().map_or(0, |e| e.0)),
                    )
                })
            else {
                break;
            };
            events.pop_front();
            k.held -= 1;
        }
    }

    /// A copy of all, oldest first.
    pub fn all(&self) -> Vec<TurnEvent> {
        let k = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<&(u64, TurnEvent)> =
            k.sessions.values().flat_map(|(_, events)| events).collect();
        all.sort_by_key(|e| e.0);
        all.into_iter().map(|(_, e)| e.clone()).collect()
    }

    /// A copy of the session `id`'s, oldest first.
    pub fn of(&self, id: &str) -> Vec<TurnEvent> {
        let k = self.0.lock().unwrap_or_else(|p| p.into_inner());
        k.sessions
            .get(id)
            .map(|(_, events)| events.iter().map(|(_, e)| e.clone()).collect())
            .unwrap_or_default()
    }
}

/// Search latencies, kept for the percentiles shown (the most recent [`EVENTS`]).
#[derive(Debug, Default)]
pub struct Latencies(std::sync::Mutex<VecDeque<u64>>);

impl Latencies {
    /// Adds one, µs.
    pub fn push(&self, us: u64) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= EVENTS {
            q.pop_front();
        }
        q.push_back(us);
    }

    /// "The last N searches: p50 …" or "No search yet.".
    pub fn summary(&self) -> String {
        let v: Vec<u64> = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        latency_summary(v)
    }
}

/// "The last N searches: p50 …, p90 …, max …" of `latencies` (µs), the searches a page keeps
/// (not every search since start: the totals count those).
pub fn latency_summary(mut latencies: Vec<u64>) -> String {
    if latencies.is_empty() {
        return "No search yet.".to_owned();
    }
    latencies.sort_unstable();
    if let [one] = latencies[..] {
        return format!("The last search: {one} µs.");
    }
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    format!(
        "The last {} searches: p50 {} µs, p90 {} µs, max {} µs.",
        latencies.len(),
        at(0.5),
        at(0.9),
        latencies[latencies.len() - 1]
    )
}

/// A session as the overview lists it.
#[derive(Debug, Clone)]
pub struct SessionRow {
    /// The session's id, which its page is named by.
    pub id: String,
    /// The key, as shown.
    pub key: String,
    /// Its turn.
    pub turn: u64,
    /// Requests.
    pub requests: u64,
    /// Searches.
    pub searches: u64,
    /// Refused calls.
    pub refused: u64,
    /// Prefix breaks.
    pub prefix_breaks: u64,
    /// Tool tokens saved (negative where deferral cost more than it saved).
    pub tokens_saved: i64,
    /// Stored bytes.
    pub bytes: usize,
    /// Active tools, joined.
    pub active: String,
}

/// The proxy's overview.
#[derive(Debug, Template)]
#[template(path = "overview.html")]
pub struct Overview {
    /// The frame.
    pub chrome: Chrome,
    /// Anthropic upstream.
    pub anthropic: String,
    /// OpenAI upstream.
    pub openai: String,
    /// Seconds up.
    pub uptime: u64,
    /// The session store's health in words: which store, answering or failing since when, why.
    pub store: String,
    /// Whether the session store answers (else its line stands out).
    pub store_up: bool,
    /// The audit log's health in words (empty without a log).
    pub audit: String,
    /// Whether the audit log takes every record (else its line stands out).
    pub audit_ok: bool,
    /// (label, value) figures.
    pub totals: Vec<(&'static str, String)>,
    /// The token chart (SVG, from [`token_chart`]).
    pub chart: String,
    /// The latency summary.
    pub latency: String,
    /// Recent sessions, most recent first.
    pub sessions: Vec<SessionRow>,
}

/// One catalog row.
#[derive(Debug, Clone)]
pub struct CatalogRow {
    /// Canonical name.
    pub name: String,
    /// Server or "(built-in)".
    pub server: String,
    /// `resident`, `deferred`, `hidden`.
    pub state: &'static str,
    /// The decisive step.
    pub reason: String,
}

/// The catalog page.
#[derive(Debug, Template)]
#[template(path = "catalog.html")]
pub struct CatalogPage {
    /// The frame.
    pub chrome: Chrome,
    /// Where the catalog comes from.
    pub source: String,
    /// What to say when there is none.
    pub empty: String,
    /// Rows, in catalog order.
    pub tools: Vec<CatalogRow>,
    /// Counts.
    pub resident: usize,
    /// Counts.
    pub deferred: usize,
    /// Counts.
    pub hidden: usize,
    /// What the list costs.
    pub cost: String,
}

impl CatalogPage {
    /// The page for `catalog` under `exposure`.
    pub fn of(
        chrome: Chrome,
        source: String,
        catalog: &Catalog,
        exposure: &Exposure,
        cost: String,
    ) -> Self {
        let tools: Vec<CatalogRow> = catalog
            .tools()
            .iter()
            .zip(&exposure.decisions)
            .map(|(t, d)| CatalogRow {
                name: t.name.clone(),
                server: t.server.clone().unwrap_or_else(|| "(built-in)".into()),
                state: match d.state {
                    State::Resident => "resident",
                    State::Deferred => "deferred",
                    State::Hidden => "hidden",
                },
                reason: d.reason.clone(),
            })
            .collect();
        let count = |s: &str| tools.iter().filter(|t| t.state == s).count();
        Self {
            chrome,
            source,
            empty: String::new(),
            resident: count("resident"),
            deferred: count("deferred"),
            hidden: count("hidden"),
            tools,
            cost,
        }
    }

    /// An empty page saying `why`.
    pub fn empty(chrome: Chrome, why: &str) -> Self {
        Self {
            chrome,
            source: String::new(),
            empty: why.to_owned(),
            tools: Vec::new(),
            resident: 0,
            deferred: 0,
            hidden: 0,
            cost: String::new(),
        }
    }
}

/// The index page.
#[derive(Debug, Template)]
#[template(path = "index.html")]
pub struct IndexPage {
    /// The frame.
    pub chrome: Chrome,
    /// Where it comes from.
    pub source: String,
    /// The index text (empty: nothing deferred).
    pub text: String,
}

impl IndexPage {
    /// The page for `surface`.
    pub fn of(chrome: Chrome, source: String, surface: Option<&Surface>) -> Self {
        Self {
            chrome,
            source,
            text: surface
                .and_then(|s| s.index.as_ref().map(|i| i.text.clone()))
                .unwrap_or_default(),
        }
    }
}

/// The search playground.
#[derive(Debug, Template)]
#[template(path = "search.html")]
pub struct SearchPage {
    /// The frame.
    pub chrome: Chrome,
    /// The query, if any.
    pub query: String,
    /// The hits fragment.
    pub hits: String,
}

/// One hit.
#[derive(Debug, Clone)]
pub struct HitRow {
    /// Canonical name.
    pub name: String,
    /// Score, 3 decimals.
    pub score: String,
    /// Why.
    pub reason: String,
}

/// The hits fragment.
#[derive(Debug, Template)]
#[template(path = "hits.html")]
pub struct Hits {
    /// The query.
    pub query: String,
    /// Ranked hits.
    pub hits: Vec<HitRow>,
}

impl Hits {
    /// The ten best hits for `query` in `index`, timed into `latencies`.
    pub fn of(query: &str, index: Option<&SearchIndex>, latencies: Option<&Latencies>) -> Self {
        let hits = match index {
            Some(index) if !query.trim().is_empty() => {
                let started = std::time::Instant::now();
                let hits = index.rank(&[query.to_owned()], 10);
                if let Some(l) = latencies {
                    l.push(started.elapsed().as_micros() as u64);
                }
                hits.into_iter()
                    .map(|h| HitRow {
                        name: h.name.to_string(),
                        score: format!("{:.3}", h.score),
                        reason: h.reason,
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        Self {
            query: query.to_owned(),
            hits,
        }
    }
}

/// A session page.
#[derive(Debug, Template)]
#[template(path = "session.html")]
pub struct SessionPage {
    /// The frame.
    pub chrome: Chrome,
    /// The session key, as shown.
    pub key: String,
    /// The session's id, which the page is named by.
    pub id: String,
    /// The timeline fragment.
    pub timeline: String,
}

/// The timeline fragment.
#[derive(Debug, Template)]
#[template(path = "timeline.html")]
pub struct Timeline {
    /// The session's events, oldest first.
    pub events: Vec<TurnEvent>,
}

impl Timeline {
    /// What the timeline keeps, for a session it holds nothing of.
    pub fn kept(&self) -> String {
        format!(
            "No request of this session is among those the dashboard keeps: the last requests of \
             the {SESSIONS} sessions seen most recently, {EVENTS} in all, at least the last {} of \
             each.",
            EVENTS / SESSIONS
        )
    }
}

/// One server row.
#[derive(Debug, Clone)]
pub struct ServerRow {
    /// Name.
    pub name: String,
    /// State.
    pub state: String,
    /// Tools known.
    pub tools: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Pid, if running.
    pub pid: String,
    /// Failed starts and crashes since the gateway started.
    pub failures: u64,
    /// Why it failed.
    pub reason: String,
}

/// The gateway's servers page.
#[derive(Debug, Template)]
#[template(path = "servers.html")]
pub struct ServersPage {
    /// The frame.
    pub chrome: Chrome,
    /// One line about the gateway.
    pub summary: String,
    /// Servers, sorted by name.
    pub servers: Vec<ServerRow>,
    /// The latency summary.
    pub latency: String,
    /// The audit log's health in words (empty without a log).
    pub audit: String,
    /// Whether the audit log takes every record (else its line stands out).
    pub audit_ok: bool,
    /// The HTTP sessions in words: open, the limit, refused at it (empty over stdio).
    pub sessions: String,
}

/// A rendered page as a response: never cached (a page may have been reached with the token in
/// its URL), never sniffed, and sending no referrer.
pub fn html(t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::REFERRER_POLICY, "no-referrer"),
            ],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the page could not be rendered: {e}"),
        )
            .into_response(),
    }
}

/// The htmx asset.
pub fn htmx() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript"),
            (header::CACHE_CONTROL, "max-age=86400"),
        ],
        HTMX,
    )
        .into_response()
}

/// Whether a request may see the dashboard; `Err` is the answer when not.
pub fn admitted(
    ui: &UiConfig,
    loopback: bool,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(), Box<Response>> {
    let refused = match ui.unserved(loopback) {
        Some(Unserved::Off) => (
            StatusCode::NOT_FOUND,
            "the dashboard is off ([ui] enabled = false)",
        ),
        Some(Unserved::NoToken) => (
            StatusCode::FORBIDDEN,
            "the dashboard is served on a non-loopback listener only with [ui] token set",
        ),
        None => {
            return match ui.required_token() {
                Some(token) => require_token(token, headers, query),
                None => Ok(()),
            };
        }
    };
    Err(Box::new(refused.into_response()))
}

/// Whether the request carries `token` (as `Authorization: Bearer`, `?token=` or the cookie a
/// `?token=` visit set); `Err` is the 401 when not.
pub fn require_token(
    token: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(), Box<Response>> {
    // The scheme is read without regard to case, and the spaces after it skipped (RFC 7235).
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, given)| given.trim_matches(' '));
    let in_query = query.and_then(|q| param(q, "token"));
    let is_token = |given: Option<&str>| given.is_some_and(|g| same_bytes(g, token));
    if is_token(bearer)
        || is_token(in_query.as_deref())
        || is_token(cookie(headers, TOKEN_COOKIE).as_deref())
    {
        Ok(())
    } else {
        Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is required",
            )
                .into_response(),
        ))
    }
}

/// Whether `a` and `b` are the same, in a time that depends on their lengths only: a token's
/// comparison tells nothing of how much of it a guess got right.
fn same_bytes(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// The cookie a `?token=` visit sets, so the pages, links and live updates that follow (which a
/// browser cannot give a bearer header) are admitted too.
const TOKEN_COOKIE: &str = "toolshelf_ui_token";

/// `response` with the token cookie set when `query` carried the right `?token=`: one visit with
/// it in the URL opens the dashboard for the browser's session.
pub fn remember_token(mut response: Response, ui: &UiConfig, query: Option<&str>) -> Response {
    let token = ui.required_token();
    let given = query.and_then(|q| param(q, "token"));
    if let (Some(token), Some(given)) = (token, given)
        && token == given
        && let Ok(v) = header::HeaderValue::from_str(&format!(
            "{TOKEN_COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict",
            encode_component(token)
        ))
    {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// The value of cookie `name`, percent-decoded.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then(|| decode_path(v))
        })
}

/// `text` percent-encoded for one path segment or cookie value: every byte but ASCII letters,
/// digits and `-._~`.
pub fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A path segment, percent-decoded (`+` stays `+`).
pub fn decode_path(s: &str) -> String {
    decode_with(s, false)
}

/// A query parameter, percent-decoded.
pub fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    decode_with(s, true)
}

fn decode_with(s: &str, plus_is_space: bool) -> String {
    String::from_utf8_lossy(&toolshelf_core::http::percent_decode(s, plus_is_space)).into_owned()
}

/// Bars of tokens per request, all resident (light) behind actual (dark), the last 60 requests.
pub fn token_chart(events: &[TurnEvent]) -> String {
    let shown: Vec<&TurnEvent> = events.iter().rev().take(60).rev().collect();
    if shown.is_empty() {
        return "<p class=\"muted\">No request yet.</p>".into();
    }
    let (w, h, pad) = (900.0_f64, 200.0_f64, 30.0_f64);
    let max = shown
        .iter()
        .map(|e| e.resident_tokens.max(e.actual_tokens))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let step = (w - 2.0 * pad) / shown.len() as f64;
    let bar = (step * 0.8).clamp(1.0, 40.0);
    let mut svg = format!(
        "<svg id=\"tokens-chart\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"tokens per request\">"
    );
    for (i, e) in shown.iter().enumerate() {
        let x = pad + i as f64 * step;
        for (v, color, class) in [
            (e.resident_tokens, "#c9d6ea", "resident"),
            (e.actual_tokens, "#0b5cad", "actual"),
        ] {
            let bh = (v as f64 / max) * (h - 2.0 * pad);
            let _ = write!(
                svg,
                "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{bh:.1}\" fill=\"{color}\"><title>{} turn {}: {v} tokens ({class})</title></rect>",
                h - pad - bh,
                html_escape(&e.session),
                e.turn
            );
        }
    }
    let _ = write!(
        svg,
        "<text x=\"{pad}\" y=\"18\" font-size=\"12\">max {max} tokens · light: all tools resident · dark: through toolshelf</text></svg>"
    );
    svg
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                header::HeaderValue::from_str(value).expect("value"),
            );
            require_token("sesame", &headers, None).is_ok()
        };
        for ok in [
            "Bearer sesame",
            "bearer sesame",
            "BEARER sesame",
            "Bearer  sesame",
        ] {
            assert!(with(ok), "{ok}");
        }
        for refused in [
            "Bearer sesame2",
            "Basic sesame",
            "Bearersesame",
            "Bearer",
            "sesame",
        ] {
            assert!(!with(refused), "{refused}");
        }
        assert!(require_token("sesame", &HeaderMap::new(), Some("token=sesame")).is_ok());
        assert!(require_token("sesame", &HeaderMap::new(), Some("token=sesam")).is_err());
    }

    #[test]
    fn query_parameters_are_decoded() {
        assert_eq!(param("q=read+file&x=1", "q").as_deref(), Some("read file"));
        assert_eq!(param("q=%E8%AF%BB%E5%8F%96", "q").as_deref(), Some("读取"));
        assert_eq!(param("q=100%", "q").as_deref(), Some("100%"));
        assert_eq!(param("a=1", "q"), None);
    }

    fn event(id: &str, turn: u64) -> TurnEvent {
        TurnEvent {
            id: id.into(),
            session: format!("h:{id}"),
            turn,
            rounds: 1,
            searched: String::new(),
            activated: Vec::new(),
            expired: Vec::new(),
            fired: Vec::new(),
            refused: 0,
            prefix: "kept",
            actual_tokens: 100,
            resident_tokens: 400,
            search_us: Vec::new(),
        }
    }

    /// A busy session does not push a quiet one's requests out; each keeps its last ones.
    #[test]
    fn a_busy_session_leaves_a_quiet_ones_timeline() {
        let events = Events::default();
        events.push(event("quiet", 1));
        for turn in 1..=(EVENTS as u64 + 1) {
            events.push(event("busy", turn));
        }
        let quiet = events.of("quiet");
        assert_eq!(quiet.len(), 1, "the quiet session keeps its request");
        let busy = events.of("busy");
        assert_eq!(busy.len(), EVENTS - 1, "at most {EVENTS} in all");
        assert_eq!(busy.last().map(|e| e.turn), Some(EVENTS as u64 + 1));
        assert_eq!(busy.first().map(|e| e.turn), Some(3), "the oldest went");
        let all = events.all();
        assert_eq!(all.len(), EVENTS);
        assert_eq!(all[0].id, "quiet", "oldest first: {:?}", all[0]);
        // Past SESSIONS sessions, the one seen least recently goes whole.
        for n in 1..SESSIONS {
            events.push(event(&format!("s{n}"), 1));
        }
        assert!(events.of("quiet").is_empty(), "seen least recently");
        // The quiet one's place made room for one new request; the other new ones took the
        // busy one's oldest.
        assert_eq!(events.of("busy").len(), EVENTS - (SESSIONS - 1));
        // Each of many busy sessions keeps its share.
        let events = Events::default();
        for turn in 1..=200 {
            for n in 0..SESSIONS {
                events.push(event(&format!("s{n}"), turn));
            }
        }
        for n in 0..SESSIONS {
            assert_eq!(events.of(&format!("s{n}")).len(), EVENTS / SESSIONS, "s{n}");
        }
    }

    #[test]
    fn a_timeline_with_nothing_kept_says_what_is_kept() {
        let text = Timeline { events: Vec::new() }.render().expect("renders");
        assert!(
            text.contains("No request of this session is among those the dashboard keeps"),
            "{text}"
        );
        assert!(!text.contains("seen since the proxy started"), "{text}");
    }

    #[test]
    fn the_chart_draws_both_bars_per_request_and_escapes_names() {
        let e = TurnEvent {
            id: "0".repeat(32),
            session: "<s>".into(),
            prefix: "first",
            ..event("s", 1)
        };
        let svg = token_chart(&[e.clone(), e]);
        assert_eq!(svg.matches("class=\"resident\"").count(), 2);
        assert_eq!(svg.matches("class=\"actual\"").count(), 2);
        assert!(!svg.contains("<s>") && svg.contains("&lt;s&gt;"));
    }

    #[test]
    fn latency_percentiles() {
        assert_eq!(latency_summary(Vec::new()), "No search yet.");
        assert_eq!(
            latency_summary(vec![30, 10, 20]),
            "The last 3 searches: p50 20 µs, p90 30 µs, max 30 µs."
        );
        assert_eq!(latency_summary(vec![7]), "The last search: 7 µs.");
    }
}
