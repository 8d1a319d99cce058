//! The event log port: every message written to an SSE stream is appended
//! here first, so a stream can be resumed from any event, on any node.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use tokio::sync::Notify;

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

/// The writing side of a stream's wake-ups: [`WakeSender::wake`] after an
/// append, [`WakeSender::subscribe`] for each reader. Dropping it ends the
/// readers' wait ([`Wakeup::changed`] answers `false`).
///
/// What a `tokio::sync::watch` channel of a counter would do, in a fifth
/// of its memory: a node keeps one per followed stream (an idle session's
/// GET stream among them), and the watch's shared state is 344 bytes, most
/// of them the eight notifiers it keeps so that many receivers do not
/// contend; a stream has one reader.
#[derive(Debug, Default)]
pub struct WakeSender(Arc<WakeState>);

/// What a [`WakeSender`] and its [`Wakeup`]s share.
#[derive(Debug, Default)]
struct WakeState {
    /// Bumped by every wake-up.
    version: AtomicU64,
    /// The sender is gone: no wake-up will come.
    closed: AtomicBool,
    /// Wakes the readers waiting in [`Wakeup::changed`].
    notify: Notify,
}

impl WakeSender {
    /// A sender with no reader yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every reader: something may have been appended.
    pub fn wake(&self) {
        self.0.version.fetch_add(1, Ordering::AcqRel);
        self.0.notify.notify_waiters();
    }

    /// A reader that sees the wake-ups from now on (not the earlier ones).
    pub fn subscribe(&self) -> Wakeup {
        Wakeup {
            seen: self.0.version.load(Ordering::Acquire),
            state: Arc::clone(&self.0),
        }
    }

    /// How many readers there are.
    pub fn receiver_count(&self) -> usize {
        Arc::strong_count(&self.0) - 1
    }
}

impl Drop for WakeSender {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }
}

/// A wake-up subscription to a stream: [`Wakeup::changed`] resolves when
/// something may have been appended (or the stream closed) since the
/// subscription was taken or last woken. Wake-ups may be spurious; readers
/// re-read. Subscribe *before* reading so that no append is missed.
#[derive(Debug)]
pub struct Wakeup {
    state: Arc<WakeState>,
    /// The sender's version when this reader last looked.
    seen: u64,
}

impl Wakeup {
    /// Waits for the next change. Returns `false` when the stream's writer
    /// side is gone (deleted): no further change will come.
    ///
    /// Cancel safety: safe to use in `select!`; a change that arrives while
    /// the future is dropped is reported by the next call.
    pub async fn changed(&mut self) -> bool {
        loop {
            // Registered before the version is read: a wake-up after the
            // read wakes this wait, one before it is in the version.
            let notified = self.state.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let version = self.state.version.load(Ordering::Acquire);
            if version != self.seen {
                self.seen = version;
                return true;
            }
            if self.state.closed.load(Ordering::Acquire) {
                return false;
            }
            notified.await;
        }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;

    /// Whether `changed` resolves before the (paused) clock has run a
    /// second: with time paused, the timeout fires only once nothing else
    /// can run, so "pending" is decided without waiting.
    async fn changes(wakeup: &mut Wakeup) -> Option<bool> {
        timeout(Duration::from_secs(1), wakeup.changed()).await.ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_sees_the_wake_ups_after_it_subscribed_coalesced() {
        let sender = WakeSender::new();
        sender.wake();
        let mut wakeup = sender.subscribe();
        assert_eq!(
            changes(&mut wakeup).await,
            None,
            "an earlier wake-up is not seen"
        );
        sender.wake();
        sender.wake();
        assert_eq!(changes(&mut wakeup).await, Some(true));
        assert_eq!(changes(&mut wakeup).await, None, "two wake-ups, one change");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_reader_is_woken_and_a_gone_sender_ends_its_wait() {
        let sender = WakeSender::new();
        let mut wakeup = sender.subscribe();
        let waiting = tokio::spawn(async move {
            let first = wakeup.changed().await;
            let second = wakeup.changed().await;
            (first, second)
        });
        tokio::task::yield_now().await;
        sender.wake();
        tokio::task::yield_now().await;
        drop(sender);
        assert_eq!(waiting.await.ok(), Some((true, false)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_before_the_end_is_reported_first() {
        let sender = WakeSender::new();
        let mut wakeup = sender.subscribe();
        sender.wake();
        drop(sender);
        assert_eq!(changes(&mut wakeup).await, Some(true));
        assert_eq!(changes(&mut wakeup).await, Some(false));
        assert_eq!(changes(&mut wakeup).await, Some(false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_given_up_loses_no_wake_up() {
        let sender = WakeSender::new();
        let mut wakeup = sender.subscribe();
        assert_eq!(changes(&mut wakeup).await, None);
        sender.wake();
        assert_eq!(changes(&mut wakeup).await, Some(true));
    }

    #[test]
    fn receivers_are_counted_until_dropped() {
        let sender = WakeSender::new();
        assert_eq!(sender.receiver_count(), 0);
        let first = sender.subscribe();
        let second = sender.subscribe();
        assert_eq!(sender.receiver_count(), 2);
        drop(first);
        assert_eq!(sender.receiver_count(), 1);
        drop(second);
        assert_eq!(sender.receiver_count(), 0);
    }
}
