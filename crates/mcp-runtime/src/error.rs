//! Errors the runtime reports to transports.

use mcp_store::StoreError;

/// Why the runtime could not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The session never existed, ended or expired (HTTP 404).
    #[error("session not found")]
    SessionNotFound,
    /// The node holds its maximum of sessions (HTTP 503).
    #[error("too many sessions")]
    TooManySessions,
    /// A session's mailbox is full (HTTP 503).
    #[error("session overloaded")]
    Overloaded,
    /// The node is draining and takes no new sessions (HTTP 503).
    #[error("node is shutting down")]
    ShuttingDown,
    /// The `Last-Event-ID` names no stream or event of this session (HTTP 400).
    #[error("unknown Last-Event-ID")]
    UnknownEvent,
    /// The events after the `Last-Event-ID` are no longer retained (HTTP 400).
    #[error("events after Last-Event-ID are no longer retained")]
    EventsExpired,
    /// The store failed (HTTP 503).
    #[error("store unavailable")]
    Store(#[source] StoreError),
}

impl RuntimeError {
    /// What a client is told, on every transport.
    pub fn client_message(&self) -> &'static str {
        match self {
            Self::SessionNotFound => "session not found",
            Self::TooManySessions => "too many sessions",
            Self::Overloaded => "session overloaded, retry later",
            Self::ShuttingDown => "node is shutting down",
            Self::UnknownEvent => "unknown Last-Event-ID",
            Self::EventsExpired => "events after Last-Event-ID are no longer retained",
            Self::Store(_) => "session store unavailable",
        }
    }
}

impl From<StoreError> for RuntimeError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::StreamNotFound | StoreError::EventNotFound => Self::UnknownEvent,
            StoreError::Trimmed => Self::EventsExpired,
            other => Self::Store(other),
        }
    }
}
