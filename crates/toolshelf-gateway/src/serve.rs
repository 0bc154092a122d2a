//! Serving sessions: one over stdio, or many over streamable HTTP at `/mcp`.
//!
//! Over HTTP every client session gets its own [`GatewaySession`] (rmcp calls the factory once
//! per session), so frozen lists and loaded tools never leak between clients while the servers
//! and the catalog are shared.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::error::{GatewayError, Result};
use crate::hub::Hub;
use crate::session::GatewaySession;

/// Serves one session over stdin/stdout until the client closes it, then ends the session
/// (audit, `session_end` hooks) before returning, so the process does not exit under them.
pub async fn serve_stdio(hub: Arc<Hub>) -> Result<()> {
    let session = GatewaySession::new(hub);
    let end = session.end();
    let running =
        session
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| GatewayError::Serve {
                transport: "stdio",
                message: e.to_string(),
            })?;
    let _ = running.waiting().await;
    end.run().await;
    Ok(())
}

/// Serves streamable HTTP at `http://ADDR/mcp` until Ctrl-C or SIGTERM; `on_bound` learns the
/// bound address (useful with port 0).
pub async fn serve_http(
    hub: Arc<Hub>,
    addr: &str,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    let err = |message: String| GatewayError::Serve {
        transport: "http",
        message,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| err(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| err(format!("no local address: {e}")))?;
    let service = StreamableHttpService::new(
        move || Ok(GatewaySession::new(hub.clone())),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    on_bound(local);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| err(e.to_string()))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
