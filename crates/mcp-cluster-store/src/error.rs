//! Errors of the storage ports.

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backing store cannot be reached or answered with an error; the
    /// request should fail fast (HTTP 503 / -32603).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The stream does not exist in this session (never did, other session,
    /// or expired).
    #[error("stream not found")]
    StreamNotFound,
    /// The position named by a `Last-Event-ID` is not an event of the stream.
    #[error("event not found")]
    EventNotFound,
    /// The events after the requested position were trimmed by retention.
    #[error("events no longer retained")]
    Trimmed,
    /// A record already exists where a new one was to be created; or, for
    /// [`crate::EventLog::append_following`], the stream already holds an
    /// event after the one the append was to follow.
    #[error("already exists")]
    Conflict,
    /// Stored data could not be decoded.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The store no longer holds events it acknowledged (an asynchronously
    /// replicated Redis that failed over before its replica had them): what
    /// follows them would follow a gap.
    #[error("events lost: the store no longer holds events it acknowledged")]
    EventsLost,
    /// The store holds as many sessions as it may (the embedded store's
    /// maximum, the node's `max_sessions`): no new one is made.
    #[error("the store holds its most sessions")]
    Full,
}
