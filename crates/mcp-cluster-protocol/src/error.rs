//! JSON-RPC error codes used by MCP and the error object sent on the wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A JSON-RPC error code. The constants are every code this project sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// Invalid JSON was received (JSON-RPC 2.0).
    pub const PARSE_ERROR: Self = Self(-32700);
    /// The JSON sent is not a valid request object (JSON-RPC 2.0).
    pub const INVALID_REQUEST: Self = Self(-32600);
    /// The method does not exist or is not available (JSON-RPC 2.0).
    pub const METHOD_NOT_FOUND: Self = Self(-32601);
    /// Invalid method parameters; also unknown tool, bad cursor (MCP).
    pub const INVALID_PARAMS: Self = Self(-32602);
    /// Internal error: handler panic, timeout, store failure.
    pub const INTERNAL_ERROR: Self = Self(-32603);
    /// Resource not found (MCP, all revisions).
    pub const RESOURCE_NOT_FOUND: Self = Self(-32002);
    /// HTTP headers do not match the body (`Mcp-Method`, `Mcp-Name`,
    /// `Mcp-Param-*`); the code the released 2026-07-28 schema allocates.
    pub const HEADER_MISMATCH: Self = Self(-32020);
    /// The request needs a client capability its `_meta` does not declare
    /// (2026-07-28 `MissingRequiredClientCapabilityError`).
    pub const MISSING_CLIENT_CAPABILITY: Self = Self(-32021);
    /// The request's protocol version is not served (2026-07-28
    /// `UnsupportedProtocolVersionError`; `data` lists `supported` and
    /// `requested`).
    pub const UNSUPPORTED_PROTOCOL_VERSION: Self = Self(-32022);
    /// A quota refused the request (HTTP 429 with `Retry-After`): this
    /// server's code, from the range JSON-RPC 2.0 leaves to servers
    /// (-32000 to -32099); `data` names the quota.
    pub const QUOTA_EXCEEDED: Self = Self(-32029);
    /// URL-mode elicitation required (2025-11-25).
    pub const URL_ELICITATION_REQUIRED: Self = Self(-32042);
}

/// The `error` member of a JSON-RPC error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code.
    pub code: ErrorCode,
    /// A short sentence saying what failed.
    pub message: String,
    /// Optional structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches structured detail.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// `-32602` with a message.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_PARAMS, message)
    }

    /// `-32603` with a message.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INTERNAL_ERROR, message)
    }

    /// `-32042` (2025-11-25 and later): the request cannot go on until the
    /// user has completed these URL-mode elicitations; `data.elicitations`
    /// lists them, and the client retries once they are done.
    pub fn url_elicitation_required(
        message: impl Into<String>,
        elicitations: &[crate::types::ElicitUrlParams],
    ) -> Self {
        Self::new(ErrorCode::URL_ELICITATION_REQUIRED, message)
            .with_data(serde_json::json!({ "elicitations": elicitations }))
    }

    /// `-32601` for a method name.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )
    }
}

impl std::fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code.0)
    }
}

impl std::error::Error for ErrorObject {}

/// The `data` of an error that says when to retry, as the answer's
/// `Retry-After` header does: `retryAfterSeconds`, and `retryAfterMs`
/// (the field the next revision's drafts give rate-limit and overload
/// errors; a client that knows it takes it over the header).
pub fn retry_after_data(secs: u64) -> serde_json::Value {
    serde_json::json!({
        "retryAfterSeconds": secs,
        "retryAfterMs": secs.saturating_mul(1000),
    })
}
