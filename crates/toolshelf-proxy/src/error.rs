//! The proxy's error type.
//!
//! Two kinds of failure are kept apart. What the *model* did wrong (an unknown tool, bad
//! arguments, a refused call) is never an error here: it becomes a tool result the model reads
//! and recovers from, inside the conversation. What is left are failures of the exchange itself,
//! each mapped to the HTTP status and the format's error body the client receives.

use axum::http::StatusCode;

/// A failure of one exchange, or of the proxy's start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The configuration is invalid.
    #[error(transparent)]
    Core(#[from] toolshelf_core::Error),
    /// Description templates that would fail every request's render.
    #[error(
        "{}: no request could be rewritten (check a template with `toolshelf check-template`)",
        .0.join("; ")
    )]
    Templates(Vec<String>),
    /// The listener could not start.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The client's request cannot be read.
    #[error("{0}")]
    BadRequest(String),
    /// The request is larger than `[proxy] max_body_bytes`.
    #[error("the request body is larger than {limit} bytes ([proxy] max_body_bytes)")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The request could not be rewritten and the proxy fails closed.
    #[error("toolshelf could not rewrite this request ({0}); it was not sent upstream")]
    Rewrite(String),
    /// The upstream could not be reached or broke the exchange.
    #[error("upstream {url}: {message}")]
    Upstream {
        /// Where the request went.
        url: String,
        /// What happened.
        message: String,
    },
    /// The upstream took longer than `[proxy] upstream_timeout_secs`.
    #[error("upstream {url} did not answer within {secs} s ([proxy] upstream_timeout_secs)")]
    Timeout {
        /// Where the request went.
        url: String,
        /// The limit.
        secs: u64,
    },
}

impl ProxyError {
    /// The HTTP status the client receives.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) | Self::Rewrite(_) => StatusCode::BAD_REQUEST,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Upstream { .. } => StatusCode::BAD_GATEWAY,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Core(_) | Self::Listen { .. } | Self::Templates(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The error type named in the body (Anthropic's names, which OpenAI clients read as codes).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::BadRequest(_) | Self::Rewrite(_) => "invalid_request_error",
            Self::TooLarge { .. } => "request_too_large",
            Self::Upstream { .. } | Self::Timeout { .. } => "api_error",
            Self::Core(_) | Self::Listen { .. } | Self::Templates(_) => "api_error",
        }
    }
}

/// Result alias for the proxy.
pub type Result<T, E = ProxyError> = std::result::Result<T, E>;
