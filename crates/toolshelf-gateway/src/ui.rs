//! The gateway's dashboard at `/ui` on its HTTP listener: its servers and their states, the
//! merged catalog with each tool's exposure decision, the index as clients read it, and a search
//! playground over the same index its sessions search. The pages are `toolshelf-dashboard`'s.

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
}

/// Serves every `/ui…` page.
pub async fn handle(State(ui): State<UiState>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    let hub = &ui.hub;
    let query = parts.uri.query();
    if let Err(r) = admitted(&hub.config().ui, ui.loopback, &parts.headers, query) {
        return *r;
    }
    let page = page(hub, parts.uri.path(), query);
    toolshelf_dashboard::remember_token(page, &hub.config().ui, query)
}

fn page(hub: &Hub, path: &str, query: Option<&str>) -> Response {
    let q = query.and_then(|q| param(q, "q")).unwrap_or_default();
    let snap = hub.snapshot();
    let source = format!("the merged catalog of {}", hub.label());
    let found = Some(snap.search_index());
    match path.trim_end_matches('/') {
        "/ui" => html(&servers(hub)),
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

fn servers(hub: &Hub) -> ServersPage {
    let statuses = hub.statuses();
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
    }
}
