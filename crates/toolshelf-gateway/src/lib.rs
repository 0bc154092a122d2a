//! toolshelf-gateway: one MCP server that fronts many.
//!
//! A client connects to toolshelf instead of to each of its MCP servers and sees a few pinned
//! tools plus `tool_search` and `defer_execute`. Everything about *what* the model sees and *may*
//! run (catalog, policy, index, validation, permissions, hook answers, audit records) is decided
//! by `toolshelf-core`, which has no I/O; this crate adds the moving parts: processes and
//! connections to the downstream servers ([`downstream`], [`stdio`]), the shared state ([`hub`]),
//! one MCP session per client ([`session`]), hook processes ([`hooks`]) and the audit log
//! ([`audit`]), both shared with the proxy, the catalog cache ([`cache`]), the stdio and HTTP
//! listeners ([`serve`]) and what `GET /metrics` shows ([`metrics`]).
//!
//! Logs go through `tracing` to stderr: over stdio, stdout is the MCP channel.

pub use toolshelf_runtime::audit;
pub mod cache;
pub mod downstream;
pub mod error;
pub use toolshelf_runtime::hooks;
pub mod hub;
pub mod metrics;
pub mod scripts;
pub mod search;
pub mod serve;
pub mod session;
pub mod stdio;
pub mod ui;

pub use error::{GatewayError, Result};

pub use hub::{Enricher, Hub, Settings, Snapshot};
pub use session::GatewaySession;

/// Test-only fault injection: in debug builds, whether `name` is listed in `TOOLSHELF_FAILPOINTS`
/// (comma-separated), so that end-to-end tests can reach states that correct input never reaches
/// on demand. Release builds ignore it.
pub(crate) fn failpoint_set(name: &str) -> bool {
    #[cfg(debug_assertions)]
    return std::env::var("TOOLSHELF_FAILPOINTS")
        .is_ok_and(|v| v.split(',').any(|p| p.trim() == name));
    #[cfg(not(debug_assertions))]
    {
        let _ = name;
        false
    }
}
