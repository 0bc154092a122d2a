//! The gateway's one error type: what stops the gateway itself from starting or serving.
//!
//! Failures of single calls or single servers are not errors here: they become tool results the
//! model reads, or a server state (`failed: reason`), because one broken server must never take
//! the gateway down.

/// Everything that can stop the gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The configuration or a catalog is invalid.
    #[error(transparent)]
    Core(#[from] toolshelf_core::Error),
    /// A server section cannot be used as written (e.g. an unset `${VAR}`).
    #[error("[servers.{server}] {message}")]
    Server {
        /// The server, as configured.
        server: String,
        /// What is wrong.
        message: String,
    },
    /// Serving MCP to the client failed.
    #[error("serving MCP over {transport}: {message}")]
    Serve {
        /// `stdio` or `http`.
        transport: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The gateway was started as a server of a gateway of the same configuration.
    #[error(
        "this gateway ({label}) was started by a gateway of the same configuration, as one of its servers: it would start itself again without end. Remove the server that runs toolshelf on this configuration (in an mcp.json the gateway reuses, the client's own toolshelf entry)"
    )]
    FrontsItself {
        /// The configuration.
        label: String,
    },
    /// A script tool's file that cannot be read (the message names its `[tools.NAME]`).
    #[error("{0}")]
    Script(String),
    /// Description templates that would fail every session's render.
    #[error(
        "{}: every session would fail to start (check a template with `toolshelf check-template`)",
        faults.join("; ")
    )]
    Templates {
        /// One message per fault, naming the template and its line.
        faults: Vec<String>,
    },
    /// A file the gateway needs could not be read or written.
    #[error("{}: {cause}", if path.is_empty() { what.to_string() } else { format!("{what} {path}") })]
    Io {
        /// Which setting the path comes from: `[audit] path`, `[cache] path`.
        what: &'static str,
        /// The file.
        path: String,
        /// The cause (said in the message, so not a `source` a caller would print again).
        cause: std::io::Error,
    },
}

impl From<toolshelf_runtime::audit::OpenError> for GatewayError {
    fn from(e: toolshelf_runtime::audit::OpenError) -> Self {
        Self::Io {
            what: e.what,
            path: e.path,
            cause: e.cause,
        }
    }
}

/// Result alias for the gateway.
pub type Result<T, E = GatewayError> = std::result::Result<T, E>;
