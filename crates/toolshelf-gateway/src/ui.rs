//! The gateway's dashboard at `/ui` on its HTTP listener: its servers and their states, the
//! merged catalog with each tool's exposure decision, the index as clients read it, and a search
//! playground over the same index its sessions search. The servers page also says whether the
//! audit log takes every record (and why not) and, over HTTP, how many sessions are open, the
//! limit, and how many were refused at it; it refreshes its figures by itself. The pages are
//! `toolshelf-dashboard`'s.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use toolshelf_dashboard::{
    CatalogPage, Chrome, Hits, IndexPage, SearchPage, ServerRow, ServersPage, admitted, html, htmx,
    param,
};

use crate::hub::Hub;

/// What the dashboard's handler needs.
#[derive(Debug, Clone)]
pub struct UiState {
    /// The hub.
    pub hub: Arc<Hub>,
    /// Whether the listener is on a loopback address.
    pub loopback: bool,
    /// The listener's HTTP sessions.
    pub sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
}

/// Serves every `/ui…` page.
pub async fn handle(State(ui): State<UiState>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    let hub = &ui.hub;
    let query = parts.uri.query();
    if let Err(r) = admitted(&hub.config().ui, ui.loopback, &parts.headers, query) {
        return *r;
    }
    let open = ui.sessions.sessions.read().await.len();
    let page = page(hub, parts.uri.path(), query, open);
    toolshelf_dashboard::remember_token(page, &hub.config().ui, query)
}

fn page(hub: &Hub, path: &str, query: Option<&str>, open: usize) -> Response {
    let q = query.and_then(|q| param(q, "q")).unwrap_or_default();
    let snap = hub.snapshot();
    let source = format!("the merged catalog of {}", hub.label());
    let found = Some(snap.search_index());
    match path.trim_end_matches('/') {
        "/ui" => html(&servers(hub, open)),
        "/ui/catalog" => html(&CatalogPage::of(
            Chrome::gateway(),
            source,
            &snap.catalog,
            &snap.exposure,
            format!("{} tools visible to clients.", snap.visible.len()),
        )),
        "/ui/index" => html(&IndexPage::of(
            Chrome::gateway(),
            source,
            Some(&snap.surface),
        )),
        "/ui/search" => html(&SearchPage {
            chrome: Chrome::gateway(),
            hits: askama::Template::render(&Hits::of(&q, found, None)).unwrap_or_default(),
            query: q,
        }),
        "/ui/search/hits" => html(&Hits::of(&q, found, None)),
        "/ui/assets/htmx.min.js" => htmx(),
        _ => (StatusCode::NOT_FOUND, "no such dashboard page").into_response(),
    }
}

fn servers(hub: &Hub, open: usize) -> ServersPage {
    let statuses = hub.statuses();
    let (audit, audit_ok) = hub
        .audit
        .status()
        .map_or((String::new(), true), |a| a.in_words());
    let tools: usize = statuses.iter().filter_map(|s| s.tools).sum();
    ServersPage {
        chrome: Chrome::gateway(),
        summary: format!(
            "{} servers, {} tools known, configuration {}.",
            statuses.len(),
            tools,
            hub.label()
        ),
        servers: statuses
            .into_iter()
            .map(|s| ServerRow {
                name: s.name,
                state: s.state,
                tools: s.tools.map(|n| n.to_string()).unwrap_or_default(),
                transport: s.transport,
                pid: s.pid.map(|p| p.to_string()).unwrap_or_default(),
                failures: s.failures_total,
                reason: s.reason.unwrap_or_default(),
            })
            .collect(),
        latency: hub.search_latencies.summary(),
        audit,
        audit_ok,
        sessions: hub.http_status().map_or_else(String::new, |h| {
            format!(
                "{open} open of at most {} ([http] max_sessions); {} refused at that limit since start.",
                h.max_sessions, h.sessions_refused
            )
        }),
    }
}
