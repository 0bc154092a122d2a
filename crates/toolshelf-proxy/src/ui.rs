//! The proxy's dashboard at `/ui`: its figures, on the pages of `toolshelf-dashboard`.
//!
//! The overview shows the status totals, a chart of tokens per request (actual against all
//! resident), search latency and the recent sessions; the catalog, index and search playground
//! show the most recent request's tools; a session page (`/ui/sessions/ID`, by the session's
//! [`crate::session_id`]: two keys shown alike are still two pages) shows what each of its
//! requests did, updated by htmx every second. Tool arguments (the queries a model searched
//! for) are shown only with `[ui] show_arguments = true`, escaped as session keys are.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use toolshelf_dashboard::{
    CatalogPage, Chrome, Hits, IndexPage, Overview, SearchPage, SessionPage, SessionRow, Timeline,
    admitted, html, htmx, latency_summary, param, token_chart,
};

use crate::server::AppState;

pub use toolshelf_dashboard::{Events, TurnEvent};

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
    if let Err(r) = admitted(
        &app.proxy.compiled.config().ui,
        app.loopback(),
        headers,
        query,
    ) {
        return Some(*r);
    }
    let page = page(app, path, query);
    Some(toolshelf_dashboard::remember_token(
        page,
        &app.proxy.compiled.config().ui,
        query,
    ))
}

fn page(app: &AppState, path: &str, query: Option<&str>) -> Response {
    let q = query.and_then(|q| param(q, "q")).unwrap_or_default();
    let shelf = app.proxy.latest_shelf();
    let source = "the tools of the most recent request".to_owned();
    let found = shelf.as_deref().map(|s| &s.search);
    match path.trim_end_matches('/') {
        "/ui" => html(&overview(app)),
        "/ui/catalog" => html(&match &shelf {
            Some(s) => CatalogPage::of(
                Chrome::proxy(),
                source,
                &s.catalog,
                &s.exposure,
                format!(
                    "Tool list sent upstream: {} tokens instead of {}.",
                    s.upstream_tokens, s.all_resident_tokens
                ),
            ),
            None => CatalogPage::empty(Chrome::proxy(), "No request with tools seen yet."),
        }),
        "/ui/index" => {
            // A session's model-written tools are searched, never listed in its frozen index.
            let index = app.proxy.latest_index();
            let source = match index.as_deref() {
                Some(s) if s.authored > 0 => format!(
                    "the tools of the most recent request, with {} tools its session's model wrote, which a session's frozen index never lists",
                    s.authored
                ),
                _ => source,
            };
            html(&IndexPage::of(
                Chrome::proxy(),
                source,
                index.as_deref().map(|s| &s.surface),
            ))
        }
        "/ui/search" => html(&SearchPage {
            chrome: Chrome::proxy(),
            hits: askama::Template::render(&Hits::of(&q, found, None)).unwrap_or_default(),
            query: q,
        }),
        "/ui/search/hits" => html(&Hits::of(&q, found, None)),
        "/ui/assets/htmx.min.js" => htmx(),
        p => match p.strip_prefix("/ui/sessions/") {
            Some(rest) => {
                let (id, fragment) = match rest.strip_suffix("/timeline") {
                    Some(id) => (id, true),
                    None => (rest, false),
                };
                if !is_session_id(id) {
                    return (
                        StatusCode::NOT_FOUND,
                        "a session page is named by the session's id (32 hex digits), as the overview links it",
                    )
                        .into_response();
                }
                let timeline = Timeline {
                    events: app.events.of(id),
                };
                if fragment {
                    html(&timeline)
                } else {
                    // The key as shown: from the status's list, else from a kept request.
                    let key = app
                        .sessions()
                        .into_iter()
                        .find(|s| s.id == id)
                        .map(|s| s.key)
                        .or_else(|| timeline.events.last().map(|e| e.session.clone()))
                        .unwrap_or_else(|| "(not seen lately)".to_owned());
                    html(&SessionPage {
                        chrome: Chrome::proxy(),
                        key,
                        id: id.to_owned(),
                        timeline: askama::Template::render(&timeline).unwrap_or_default(),
                    })
                }
            }
            None => (StatusCode::NOT_FOUND, "no such dashboard page").into_response(),
        },
    }
}

/// Whether `id` is a session id as [`crate::session_id`] writes it.
fn is_session_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The session store's health as the overview says it, from the status's `store`.
fn store_line(store: &serde_json::Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let ago = now.saturating_sub(store["since"].as_u64().unwrap_or(now));
    let held = store["entries"].as_u64().unwrap_or(0);
    let (what, held) = match store["kind"].as_str() {
        Some("redis") => (
            "Redis".to_owned(),
            format!(
                "{held} keys as counted {} s ago",
                store["entries_age_secs"].as_u64().unwrap_or(0)
            ),
        ),
        _ => (
            "embedded".to_owned(),
            format!(
                "{held} sessions of at most {}, {} evicted to stay within it",
                store["max_sessions"].as_u64().unwrap_or(0),
                store["evicted"].as_u64().unwrap_or(0)
            ),
        ),
    };
    let last = store["last_error"].as_str();
    if store["up"] == false {
        let failing: Vec<&str> = store["failing"]
            .as_array()
            .map(|f| f.iter().filter_map(|k| k.as_str()).collect())
            .unwrap_or_default();
        format!(
            "{what}, failing for {ago} s ({} failing, {} failures): {}. {held}.",
            failing.join(" and "),
            store["failures"].as_u64().unwrap_or(0),
            last.unwrap_or("no error recorded")
        )
    } else {
        let before = last.map_or(String::new(), |e| format!(" (the last error: {e})"));
        format!("{what}, answering for {ago} s{before}. {held}.")
    }
}

fn overview(app: &AppState) -> Overview {
    let status = app.status();
    let t = &status["totals"];
    let n = |k: &str| t[k].as_i64().unwrap_or(0).to_string();
    let totals = vec![
        ("requests", n("requests")),
        ("rewritten", n("rewritten")),
        ("passed through", n("passed")),
        ("upstream rounds", n("rounds")),
        ("searches", n("searches")),
        ("refused calls", n("refused")),
        ("prefix breaks", n("prefix_breaks")),
        ("sessions missing", n("sessions_missing")),
        ("tool tokens saved", n("tokens_saved")),
        (
            "cache-read tokens",
            t["tokens"]["cache_read"].as_u64().unwrap_or(0).to_string(),
        ),
        ("errors", n("errors")),
        ("abandoned", n("abandoned")),
    ];
    let events = app.events.all();
    let latencies = events
        .iter()
        .flat_map(|e| e.search_us.iter().copied())
        .collect();
    let p = &app.proxy.compiled.config().proxy;
    let (audit, audit_ok) = app
        .proxy
        .audit
        .status()
        .map_or((String::new(), true), |a| a.in_words());
    Overview {
        chrome: Chrome::proxy(),
        anthropic: crate::server::shown_url(&p.anthropic_upstream),
        openai: crate::server::shown_url(&p.openai_upstream),
        uptime: status["uptime_secs"].as_u64().unwrap_or(0),
        store: store_line(&status["store"]),
        store_up: status["store"]["up"] != false,
        audit,
        audit_ok,
        totals,
        chart: token_chart(&events),
        latency: latency_summary(latencies),
        sessions: app
            .sessions()
            .into_iter()
            .map(|s| SessionRow {
                id: s.id,
                key: s.key,
                turn: s.turn,
                requests: s.figures.requests,
                searches: s.figures.searches,
                refused: s.figures.refused,
                prefix_breaks: s.figures.prefix_breaks,
                tokens_saved: s.figures.tokens_saved,
                bytes: s.bytes,
                active: s.active.join(", "),
            })
            .collect(),
    }
}
