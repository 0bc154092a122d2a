//! The dashboard at `/ui`: server-rendered pages on the proxy's own listener.
//!
//! Pages are askama templates (`templates/`), escaped by default; the only script is htmx,
//! embedded in the binary, for the search playground and the live session timeline. Nothing is
//! loaded from elsewhere, and nothing on these pages changes any state: they read the status
//! figures, the most recent request's catalog and the per-request events kept in memory.
//!
//! On a loopback listener the pages are open. On any other address they need `[ui] token`,
//! given as `Authorization: Bearer …` or `?token=…`; without a configured token they are not
//! served there at all. Tool arguments (the queries a model searched for) are shown only with
//! `[ui] show_arguments = true`; credentials never reach the proxy's memory in the first place.

use std::collections::VecDeque;
use std::fmt::Write as _;

use askama::Template;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use toolshelf_core::policy::State;

use crate::server::{AppState, SessionSummary};

/// What one request did, for the timeline and the charts.
#[derive(Debug, Clone, Serialize)]
pub struct TurnEvent {
    /// The session, as shown (hash keys cut).
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

/// Events kept: the most recent requests of every session.
pub const EVENTS: usize = 2000;

/// The ring of recent events.
#[derive(Debug, Default)]
pub struct Events(std::sync::Mutex<VecDeque<TurnEvent>>);

impl Events {
    /// Adds one, dropping the oldest past [`EVENTS`].
    pub fn push(&self, e: TurnEvent) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= EVENTS {
            q.pop_front();
        }
        q.push_back(e);
    }

    /// A copy of all, oldest first.
    pub fn all(&self) -> Vec<TurnEvent> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

#[derive(Template)]
#[template(path = "overview.html")]
struct Overview {
    anthropic: String,
    openai: String,
    uptime: u64,
    totals: Vec<(&'static str, String)>,
    chart: String,
    latency: String,
    sessions: Vec<SessionSummary>,
}

struct CatalogRow {
    name: String,
    server: String,
    state: &'static str,
    reason: String,
}

#[derive(Template)]
#[template(path = "catalog.html")]
struct CatalogPage {
    tools: Vec<CatalogRow>,
    resident: usize,
    deferred: usize,
    hidden: usize,
    upstream_tokens: usize,
    all_tokens: usize,
}

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    text: String,
}

#[derive(Template)]
#[template(path = "search.html")]
struct SearchPage {
    query: String,
    hits: String,
}

struct HitRow {
    name: String,
    score: String,
    reason: String,
}

#[derive(Template)]
#[template(path = "hits.html")]
struct Hits {
    query: String,
    hits: Vec<HitRow>,
}

#[derive(Template)]
#[template(path = "session.html")]
struct SessionPage {
    key: String,
    timeline: String,
}

#[derive(Template)]
#[template(path = "timeline.html")]
struct Timeline {
    events: Vec<TurnEvent>,
}

const HTMX: &[u8] = include_bytes!("../assets/htmx.min.js");

fn html(t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the page could not be rendered: {e}"),
        )
            .into_response(),
    }
}

/// Whether a request may see the dashboard; `Err` is the answer when not.
fn admitted(app: &AppState, headers: &HeaderMap, query: Option<&str>) -> Result<(), Box<Response>> {
    let ui = &app.proxy.compiled.config().ui;
    if !ui.enabled {
        return Err(Box::new(
            (
                StatusCode::NOT_FOUND,
                "the dashboard is off ([ui] enabled = false)",
            )
                .into_response(),
        ));
    }
    if app.loopback() {
        return Ok(());
    }
    let Some(token) = ui.token.as_deref().filter(|t| !t.is_empty()) else {
        return Err(Box::new(
            (
                StatusCode::FORBIDDEN,
                "the dashboard is served on a non-loopback listener only with [ui] token set",
            )
                .into_response(),
        ));
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let in_query = query.and_then(|q| param(q, "token"));
    if bearer == Some(token) || in_query.as_deref() == Some(token) {
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

/// A query parameter, percent-decoded.
fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Serves `/ui…`; `None` when the path is not the dashboard's.
pub fn handle(
    app: &AppState,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Option<Response> {
    if path != "/ui" && !path.starts_with("/ui/") {
        return None;
    }
    if let Err(r) = admitted(app, headers, query) {
        return Some(*r);
    }
    let q = query.and_then(|q| param(q, "q")).unwrap_or_default();
    Some(match path.trim_end_matches('/') {
        "/ui" => html(&overview(app)),
        "/ui/catalog" => html(&catalog(app)),
        "/ui/index" => html(&IndexPage {
            text: app
                .proxy
                .latest_shelf()
                .and_then(|s| s.surface.index.as_ref().map(|i| i.text.clone()))
                .unwrap_or_default(),
        }),
        "/ui/search" => html(&SearchPage {
            hits: hits(app, &q).render().unwrap_or_default(),
            query: q,
        }),
        "/ui/search/hits" => html(&hits(app, &q)),
        "/ui/assets/htmx.min.js" => (
            [
                (header::CONTENT_TYPE, "text/javascript"),
                (header::CACHE_CONTROL, "max-age=86400"),
            ],
            HTMX,
        )
            .into_response(),
        p => match p.strip_prefix("/ui/sessions/") {
            Some(rest) => {
                let (key, fragment) = match rest.strip_suffix("/timeline") {
                    Some(k) => (k, true),
                    None => (rest, false),
                };
                let timeline = Timeline {
                    events: app
                        .events
                        .all()
                        .into_iter()
                        .filter(|e| e.session == key)
                        .collect(),
                };
                if fragment {
                    html(&timeline)
                } else {
                    html(&SessionPage {
                        key: key.to_owned(),
                        timeline: timeline.render().unwrap_or_default(),
                    })
                }
            }
            None => (StatusCode::NOT_FOUND, "no such dashboard page").into_response(),
        },
    })
}

fn overview(app: &AppState) -> Overview {
    let status = app.status();
    let t = &status["totals"];
    let n = |k: &str| t[k].as_u64().unwrap_or(0).to_string();
    let totals = vec![
        ("requests", n("requests")),
        ("rewritten", n("rewritten")),
        ("passed through", n("passed")),
        ("upstream rounds", n("rounds")),
        ("searches", n("searches")),
        ("refused calls", n("refused")),
        ("prefix breaks", n("prefix_breaks")),
        ("tool tokens saved", n("tokens_saved")),
        (
            "cache-read tokens",
            t["tokens"]["cache_read"].as_u64().unwrap_or(0).to_string(),
        ),
        ("errors", n("errors")),
    ];
    let events = app.events.all();
    let mut latencies: Vec<u64> = events
        .iter()
        .flat_map(|e| e.search_us.iter().copied())
        .collect();
    latencies.sort_unstable();
    let latency = if latencies.is_empty() {
        "No search yet.".to_owned()
    } else {
        let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
        format!(
            "{} searches: p50 {} µs, p90 {} µs, max {} µs.",
            latencies.len(),
            at(0.5),
            at(0.9),
            latencies[latencies.len() - 1]
        )
    };
    let p = &app.proxy.compiled.config().proxy;
    Overview {
        anthropic: p.anthropic_upstream.clone(),
        openai: p.openai_upstream.clone(),
        uptime: status["uptime_secs"].as_u64().unwrap_or(0),
        totals,
        chart: token_chart(&events),
        latency,
        sessions: app.sessions(),
    }
}

/// Bars of tokens per request, all resident (light) behind actual (dark), the last 60 requests.
fn token_chart(events: &[TurnEvent]) -> String {
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

fn catalog(app: &AppState) -> CatalogPage {
    let Some(shelf) = app.proxy.latest_shelf() else {
        return CatalogPage {
            tools: Vec::new(),
            resident: 0,
            deferred: 0,
            hidden: 0,
            upstream_tokens: 0,
            all_tokens: 0,
        };
    };
    let tools: Vec<CatalogRow> = shelf
        .catalog
        .tools()
        .iter()
        .zip(&shelf.exposure.decisions)
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
    CatalogPage {
        resident: count("resident"),
        deferred: count("deferred"),
        hidden: count("hidden"),
        upstream_tokens: shelf.upstream_tokens,
        all_tokens: shelf.all_resident_tokens,
        tools,
    }
}

fn hits(app: &AppState, query: &str) -> Hits {
    let rows = match app.proxy.latest_shelf() {
        Some(shelf) if !query.trim().is_empty() => shelf
            .search
            .rank(&shelf.catalog, &[query.to_owned()], 10)
            .into_iter()
            .map(|h| HitRow {
                name: h.name,
                score: format!("{:.3}", h.score),
                reason: h.reason,
            })
            .collect(),
        _ => Vec::new(),
    };
    Hits {
        query: query.to_owned(),
        hits: rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        assert_eq!(param("q=read+file&x=1", "q").as_deref(), Some("read file"));
        assert_eq!(param("q=%E8%AF%BB%E5%8F%96", "q").as_deref(), Some("读取"));
        assert_eq!(param("q=100%", "q").as_deref(), Some("100%"));
        assert_eq!(param("a=1", "q"), None);
    }

    #[test]
    fn the_chart_draws_both_bars_per_request_and_escapes_names() {
        let e = TurnEvent {
            session: "<s>".into(),
            turn: 1,
            rounds: 1,
            searched: String::new(),
            activated: Vec::new(),
            expired: Vec::new(),
            fired: Vec::new(),
            refused: 0,
            prefix: "first",
            actual_tokens: 100,
            resident_tokens: 400,
            search_us: Vec::new(),
        };
        let svg = token_chart(&[e.clone(), e]);
        assert_eq!(svg.matches("class=\"resident\"").count(), 2);
        assert_eq!(svg.matches("class=\"actual\"").count(), 2);
        assert!(!svg.contains("<s>") && svg.contains("&lt;s&gt;"));
    }
}
