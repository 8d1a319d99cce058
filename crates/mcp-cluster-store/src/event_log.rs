//! The event log port: every message written to an SSE stream is appended
//! here first, so a stream can be resumed from any event, on any node.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use mcp_cluster_protocol::RequestId;

use crate::{EventId, Position, SessionId, StoreError, StreamId};

/// One stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its position in the stream.
    pub position: Position,
    /// The encoded JSON-RPC message.
    pub data: Arc<str>,
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadBatch {
    /// Events after the requested position, oldest first.
    pub events: Vec<StoredEvent>,
    /// The stream is closed and `events` reaches its end: nothing will follow.
    pub closed: bool,
}

/// A wake-up subscription to a stream: [`Wakeup::changed`] resolves when
/// something may have been appended (or the stream closed) since the
/// subscription was taken or last woken. Wake-ups may be spurious; readers
/// re-read. Subscribe *before* reading so that no append is missed.
#[derive(Debug)]
pub struct Wakeup(watch::Receiver<u64>);

impl Wakeup {
    /// Wraps a watch receiver; the sender side bumps the value on append.
    pub fn new(rx: watch::Receiver<u64>) -> Self {
        Self(rx)
    }

    /// Waits for the next change. Returns `false` when the stream's writer
    /// side is gone (deleted): no further change will come.
    ///
    /// Cancel safety: safe to use in `select!`; a change that arrives while
    /// the future is dropped is reported by the next call.
    pub async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }
}

/// The SSE event log.
///
/// Streams belong to a session; every call names both, and a stream of
/// another session is [`StoreError::StreamNotFound`]. Retention (length and
/// time) is bounded by each implementation and documented in `proto-docs/`.
#[async_trait]
pub trait EventLog: Send + Sync + Debug + 'static {
    /// Creates an empty open stream in the session. `requests`: the ids of
    /// the requests whose responses the stream will carry (none for a
    /// session's standalone stream), kept with the stream so that any node
    /// following it can answer them should the stream's data be lost.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the backend cannot be reached.
    async fn create_stream(
        &self,
        session: &SessionId,
        requests: &[RequestId],
    ) -> Result<StreamId, StoreError> {
        let stream = StreamId::random();
        self.create_stream_as(session, &stream, requests).await?;
        Ok(stream)
    }

    /// As [`Self::create_stream`], under an id the caller drew with
    /// [`StreamId::random`], so that the stream and what names it (a new
    /// session's record) can be written at once.
    ///
    /// # Errors
    /// As [`Self::create_stream`].
    async fn create_stream_as(
        &self,
        session: &SessionId,
        stream: &StreamId,
        requests: &[RequestId],
    ) -> Result<(), StoreError>;

    /// The request ids given to [`Self::create_stream`].
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`]; [`StoreError::Unavailable`].
    async fn stream_requests(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Vec<RequestId>, StoreError>;

    /// Appends one encoded message; returns its event id.
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] for an unknown or closed stream.
    async fn append(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
    ) -> Result<EventId, StoreError>;

    /// As [`Self::append`], on a stream that only the caller writes, whose
    /// last append the store acknowledged at `follows` ([`Position::START`]
    /// before the first): appends only if `follows` is still the stream's
    /// last position. A store that can lose acknowledged writes (Redis with
    /// an asynchronous replica, after a failover) refuses with
    /// [`StoreError::EventsLost`] when the stream no longer holds that
    /// event, instead of appending after a gap its readers could not see;
    /// and with [`StoreError::Conflict`] when the stream holds a later event,
    /// which for a single writer means an earlier append of the caller went
    /// in without the caller seeing it answered (a retry must not append
    /// twice). This default, for stores that check nothing, appends.
    ///
    /// # Errors
    /// As [`Self::append`], [`StoreError::EventsLost`] and
    /// [`StoreError::Conflict`].
    async fn append_following(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
        follows: Position,
    ) -> Result<EventId, StoreError> {
        let _ = follows;
        self.append(session, stream, data).await
    }

    /// Closes the stream: readers end after its last event. Idempotent.
    /// From then on its events are kept for clients that resume late,
    /// charged to `owner` (who made the stream: a principal's key, else
    /// the client's address subject; see [`crate::budget`]) in the store's
    /// closed-stream budget.
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] for an unknown stream.
    async fn close_stream(
        &self,
        session: &SessionId,
        stream: &StreamId,
        owner: &str,
    ) -> Result<(), StoreError>;

    /// Whether the closed streams kept are over the store's budget with
    /// nothing left to drop (every owner at or under its floor, see
    /// [`crate::Ledger::over_budget`]): work that would close more streams
    /// should be refused until it is not. `false` for stores that keep no
    /// budget.
    fn over_budget(&self) -> bool {
        false
    }

    /// Reads up to `max` events after `after` (exclusive).
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] for an unknown stream;
    /// [`StoreError::EventNotFound`] when `after` is neither
    /// [`Position::START`] nor the position of an event of the stream;
    /// [`StoreError::Trimmed`] when events after `after` were dropped by
    /// retention, so the reader would see a gap.
    async fn read(
        &self,
        session: &SessionId,
        stream: &StreamId,
        after: Position,
        max: usize,
    ) -> Result<ReadBatch, StoreError>;

    /// The position of the newest event (or [`Position::START`]).
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] for an unknown stream.
    async fn tail(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError>;

    /// The position just before the oldest retained event: [`Position::START`]
    /// unless retention trimmed the stream, then the newest trimmed
    /// position. Reading after it never reports [`StoreError::Trimmed`].
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] for an unknown stream.
    async fn oldest(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError>;

    /// Subscribes to wake-ups for a stream.
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] for an unknown stream.
    async fn subscribe(&self, session: &SessionId, stream: &StreamId)
    -> Result<Wakeup, StoreError>;

    /// Renews an open stream's idle retention (the session's standalone
    /// stream lives as long as its session, appended to or not).
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] for an unknown stream.
    async fn touch(&self, session: &SessionId, stream: &StreamId) -> Result<(), StoreError>;

    /// Deletes every stream of a session.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the backend cannot be reached.
    async fn delete_session(&self, session: &SessionId) -> Result<(), StoreError>;
}
