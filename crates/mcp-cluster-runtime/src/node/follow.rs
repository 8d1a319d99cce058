//! Following one stream of the event log: replay what was missed, then tail
//! it live until it closes. Every SSE connection (POST answer, GET stream,
//! resumption, legacy SSE) and the stdio writer is a [`Follow`].
//!
//! At most one reader follows a stream on this node at a time
//! ([`Attachments`]): a new reader takes over (the old one ends with `retry`),
//! so a message is never delivered on two connections.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use futures_util::Stream;
use mcp_cluster_protocol::jsonrpc::decode_message;
use mcp_cluster_protocol::types::{LoggingLevel, LoggingMessageParams};
use mcp_cluster_protocol::{ErrorObject, Message, Notification, RequestId, Response, methods};
use mcp_cluster_store::{
    EventId, EventLog, Position, SessionId, SessionStore, StoreError, StoredEvent, StreamId, Wakeup,
};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::node::quota::SlotLease;

/// Events read from the log per round trip; also the most a slow reader
/// holds in memory.
const READ_BATCH: usize = 64;

/// How long a reader retries a store that does not answer before it ends
/// its connection with `retry`: a short outage (Redis restarting, a
/// reconnect) is ridden out, and a store that comes back without the stream
/// gets the lost-stream error rather than a silent reconnect.
const STORE_PATIENCE: Duration = Duration::from_secs(10);

/// Pause between reads of a store that does not answer.
const STORE_RETRY: Duration = Duration::from_millis(250);

/// What a follower yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowItem {
    /// An event to send.
    Event(EventId, Arc<str>),
    /// Nothing happened for a while: send a keep-alive comment.
    KeepAlive,
    /// A message the server made up, sent without an event id: the error
    /// answering a request whose stream's data is gone (or, on a stream
    /// that answers no request, an `error` log message saying so), so that
    /// a client can tell the loss from a cancellation. [`FollowEnd::Gone`]
    /// follows.
    Notice(Arc<str>),
    /// The follow ended; nothing follows this item.
    End(FollowEnd),
}

/// Why a follow ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowEnd {
    /// The stream closed after its last event (the response was sent).
    Completed,
    /// Another reader took over, or the server asked the client to poll:
    /// the client should reconnect after `retry`.
    Kicked,
    /// The node is draining: the client should reconnect (elsewhere).
    ShuttingDown,
    /// The stream or its session was deleted.
    Gone,
    /// The log failed or dropped events this reader still needed.
    Failed,
}

/// The session whose standalone stream a reader here follows: what this
/// node keeps so that the session's actor need not run while its client
/// only listens (it passivates, see `Session::at_rest`). The node renews
/// the session in the store for the reader ([`Attachments::due_renewals`])
/// and writes the server's events to the stream itself
/// ([`Attachments::listened`]) while no actor of the session runs here.
#[derive(Debug)]
pub(crate) struct Listened {
    session: SessionId,
    /// The principal that created the session, whose quota slot for it is
    /// renewed with it.
    owner: Option<Box<str>>,
    /// When the node last renewed the session for this reader; `None`
    /// until the first renewal, which the next sweep makes.
    renewed: Option<tokio::time::Instant>,
}

impl Listened {
    pub(crate) fn new(session: SessionId, owner: Option<&str>) -> Box<Self> {
        Box::new(Self {
            session,
            owner: owner.map(Box::from),
            renewed: None,
        })
    }
}

/// A session to renew for the reader of its standalone stream
/// ([`Attachments::due_renewals`]).
#[derive(Debug)]
pub(crate) struct Renewal {
    pub(crate) session: SessionId,
    pub(crate) stream: StreamId,
    pub(crate) owner: Option<Box<str>>,
}

/// What tells a reader to end or to finish up: another reader took over
/// (or the server asked its client to poll), its stream's writer on this
/// node could not write its response or close it ([`Attachments::fail`]),
/// or the node drains ([`Attachments::wake_all`]). One small allocation
/// per reader, and one `Notified` in its wait.
#[derive(Debug, Default)]
pub(crate) struct ReaderSignal {
    kicked: AtomicBool,
    failed: AtomicBool,
    notify: Notify,
}

impl ReaderSignal {
    fn kick(&self) {
        self.kicked.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether another reader took over, or the server kicked this one.
    pub(crate) fn is_kicked(&self) -> bool {
        self.kicked.load(Ordering::Acquire)
    }

    fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Returns once the reader is kicked, its writer failed, or `drain` is
    /// cancelled (at once if any already is). Cancel safe.
    async fn raised(&self, drain: &CancellationToken) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the flags are read: a signal raised after
            // the read wakes this wait.
            notified.as_mut().enable();
            if self.is_kicked() || self.is_failed() || drain.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

#[derive(Debug)]
enum Slot {
    Reader {
        generation: u64,
        signal: Arc<ReaderSignal>,
        /// Set when the stream is its session's standalone stream.
        listened: Option<Box<Listened>>,
    },
    KickPending,
    /// The writer failed before a reader attached. Taken by the next reader
    /// (the POST's own connection attaches right after the stream is made);
    /// at most one per stream whose write failed.
    FailPending,
    /// The reader here ended telling its client to reconnect (the node
    /// drains, the server closed the connection to be polled, the store
    /// failed): until `until`, or until a reader attaches here or elsewhere,
    /// the stream counts as listened to, so that what is written for its
    /// client meanwhile is in the log when it resumes.
    Resuming {
        until: tokio::time::Instant,
        listened: Option<Box<Listened>>,
    },
}

impl Slot {
    /// The session listened to through this slot now: a reader's, or one
    /// whose reader ended with `retry` less than the window ago.
    fn listened(&self, now: tokio::time::Instant) -> Option<&Listened> {
        match self {
            Slot::Reader { listened, .. } => listened.as_deref(),
            Slot::Resuming { until, listened } if *until > now => listened.as_deref(),
            _ => None,
        }
    }
}

/// How long a stream whose reader ended with `retry` counts as listened to
/// ([`Attachments::is_listening`]): the client's reconnect delay (the
/// `retry` sent, 1 s by default) and a connection, with room to spare. A
/// draining node waits this long at most for a client that does not come
/// back.
const RESUME_WINDOW: Duration = Duration::from_secs(5);

/// Every this many readers that end with `retry`, the resume marks that
/// expired are swept (each is otherwise removed only when its stream is
/// looked at again).
const RESUMING_SWEEP_EVERY: u64 = 256;

/// Which reader follows which stream on this node.
#[derive(Debug, Default)]
pub struct Attachments {
    slots: DashMap<StreamId, Slot>,
    next_generation: AtomicU64,
    /// Resume marks set so far; every [`RESUMING_SWEEP_EVERY`]th sweeps.
    resumes: AtomicU64,
}

impl Attachments {
    /// Registers a new reader of `stream`, ending the previous one;
    /// `listened` when the stream is its session's standalone stream.
    pub(crate) fn attach(
        self: &Arc<Self>,
        stream: &StreamId,
        listened: Option<Box<Listened>>,
    ) -> Attachment {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(ReaderSignal::default());
        let previous = self.slots.insert(
            stream.clone(),
            Slot::Reader {
                generation,
                signal: Arc::clone(&signal),
                listened,
            },
        );
        match previous {
            Some(Slot::Reader { signal: old, .. }) => {
                mcp_cluster_telemetry::metrics::metrics()
                    .sse_takeovers
                    .inc();
                old.kick();
            }
            // The server asked to disconnect before this reader arrived.
            Some(Slot::KickPending) => signal.kick(),
            Some(Slot::FailPending) => signal.fail(),
            Some(Slot::Resuming { .. }) | None => {}
        }
        Attachment {
            attachments: Arc::clone(self),
            stream: stream.clone(),
            generation,
            signal,
            resume: false,
        }
    }

    /// Tells the reader of `stream` on this node, if any, that the stream's
    /// response could not be written or the stream not closed (the store
    /// refused the write, e.g. Redis out of memory): the reader sends what
    /// the log holds, then an error for each request still unanswered, and
    /// ends, instead of waiting for a response that will never come.
    pub fn fail(&self, stream: &StreamId) {
        // As `kick`: one entry lock, so an attaching reader is not lost.
        match self.slots.entry(stream.clone()) {
            Entry::Occupied(mut slot) => match slot.get() {
                Slot::Reader { signal, .. } => signal.fail(),
                Slot::FailPending => {}
                Slot::KickPending | Slot::Resuming { .. } => {
                    slot.insert(Slot::FailPending);
                }
            },
            Entry::Vacant(slot) => {
                slot.insert(Slot::FailPending);
            }
        }
    }

    /// As [`Self::fail`], for a stream written on another node: only a
    /// reader here now is told (no mark is left for a later one, as this
    /// node may never see the stream).
    pub fn fail_reader(&self, stream: &StreamId) {
        if let Some(Slot::Reader { signal, .. }) = self.slots.get(stream).as_deref() {
            signal.fail();
        }
    }

    /// Ends the current reader of `stream` (or the next one, right after it
    /// attaches).
    pub fn kick(&self, stream: &StreamId) {
        // One entry lock for the look and the write: a reader attaching in
        // between (on another thread) would otherwise be overwritten by the
        // pending kick and never kicked.
        match self.slots.entry(stream.clone()) {
            Entry::Occupied(slot) => {
                if let Slot::Reader { signal, .. } = slot.get() {
                    signal.kick();
                }
            }
            Entry::Vacant(slot) => {
                slot.insert(Slot::KickPending);
            }
        }
    }

    /// Ends the current reader of `stream` if there is one here (a reader
    /// attached on another node took over); the stream is then listened to
    /// there, not here.
    pub fn kick_reader(&self, stream: &StreamId) {
        if let Some((_, slot)) = self.slots.remove_if(stream, |_, slot| {
            matches!(slot, Slot::Reader { .. } | Slot::Resuming { .. })
        }) && let Slot::Reader { signal, .. } = slot
        {
            mcp_cluster_telemetry::metrics::metrics()
                .sse_takeovers
                .inc();
            signal.kick();
        }
    }

    /// Wakes every reader on this node, once the node's drain token is
    /// cancelled: each sends what its stream's log holds, then ends with
    /// `retry` ([`FollowEnd::ShuttingDown`]).
    pub(crate) fn wake_all(&self) {
        for slot in &self.slots {
            if let Slot::Reader { signal, .. } = slot.value() {
                signal.notify.notify_waiters();
            }
        }
    }

    /// Forgets a pending kick of a stream that has closed.
    pub fn forget(&self, stream: &StreamId) {
        self.slots
            .remove_if(stream, |_, slot| matches!(slot, Slot::KickPending));
    }

    /// Whether a reader follows `stream` now.
    pub fn is_attached(&self, stream: &StreamId) -> bool {
        matches!(self.slots.get(stream).as_deref(), Some(Slot::Reader { .. }))
    }

    /// Whether what is written for `stream`'s client goes to it: a reader
    /// follows it here, or the one here ended moments ago telling its
    /// client to reconnect and no reader took it since (here or elsewhere).
    pub fn is_listening(&self, stream: &StreamId) -> bool {
        let now = tokio::time::Instant::now();
        // The read guard goes before an expired mark is removed (removing
        // locks the same shard for writing: holding both would deadlock).
        let (listening, expired) = match self.slots.get(stream).as_deref() {
            Some(Slot::Reader { .. }) => (true, false),
            Some(Slot::Resuming { until, .. }) => (*until > now, *until <= now),
            _ => (false, false),
        };
        if expired {
            self.slots.remove_if(
                stream,
                |_, slot| matches!(slot, Slot::Resuming { until, .. } if *until <= now),
            );
        }
        listening
    }

    /// How many streams count as listened to only because their reader
    /// here ended with `retry` moments ago (see [`Self::is_listening`]).
    pub fn awaiting_resume(&self) -> usize {
        let now = tokio::time::Instant::now();
        self.slots
            .iter()
            .filter(|slot| matches!(slot.value(), Slot::Resuming { until, .. } if *until > now))
            .count()
    }

    /// The reader of `generation` ended telling its client to reconnect.
    fn resuming(&self, stream: &StreamId, generation: u64) {
        if let Entry::Occupied(mut slot) = self.slots.entry(stream.clone())
            && let Slot::Reader {
                generation: g,
                listened,
                ..
            } = slot.get_mut()
            && *g == generation
        {
            let listened = listened.take();
            slot.insert(Slot::Resuming {
                until: tokio::time::Instant::now() + RESUME_WINDOW,
                listened,
            });
        } else {
            return;
        }
        if self
            .resumes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(RESUMING_SWEEP_EVERY)
        {
            let now = tokio::time::Instant::now();
            self.slots
                .retain(|_, slot| !matches!(slot, Slot::Resuming { until, .. } if *until <= now));
        }
    }

    /// The sessions listened to here (a reader follows their standalone
    /// stream, or did moments ago, see [`Self::is_listening`]) that `skip`
    /// does not take, with their streams. `skip` is asked with no lock of
    /// this map held.
    pub(crate) fn listened(&self, skip: impl Fn(&SessionId) -> bool) -> Vec<(SessionId, StreamId)> {
        let now = tokio::time::Instant::now();
        let mut listened: Vec<(SessionId, StreamId)> = self
            .slots
            .iter()
            .filter_map(|slot| {
                let listened = slot.value().listened(now)?;
                Some((listened.session.clone(), slot.key().clone()))
            })
            .collect();
        listened.retain(|(session, _)| !skip(session));
        listened
    }

    /// The sessions listened to here whose last renewal for their reader
    /// is `every` ago or more (or which had none yet), marked renewed now:
    /// the caller renews them. A session keeps its TTL while a client
    /// listens, whether its actor runs or not.
    pub(crate) fn due_renewals(&self, every: Duration) -> Vec<Renewal> {
        let now = tokio::time::Instant::now();
        let mut due = Vec::new();
        for mut slot in self.slots.iter_mut() {
            let (stream, slot) = slot.pair_mut();
            let listened = match slot {
                Slot::Reader { listened, .. } => listened.as_deref_mut(),
                Slot::Resuming { until, listened } if *until > now => listened.as_deref_mut(),
                _ => None,
            };
            let Some(listened) = listened else { continue };
            if listened
                .renewed
                .is_some_and(|at| now.duration_since(at) < every)
            {
                continue;
            }
            listened.renewed = Some(now);
            due.push(Renewal {
                session: listened.session.clone(),
                stream: stream.clone(),
                owner: listened.owner.clone(),
            });
        }
        due
    }
}

/// One reader's registration; dropping it detaches.
#[derive(Debug)]
pub struct Attachment {
    attachments: Arc<Attachments>,
    stream: StreamId,
    generation: u64,
    /// Raised when another reader takes over or the server kicks, or when
    /// the stream's writer could not finish it.
    signal: Arc<ReaderSignal>,
    /// Set when the follow of a standalone stream ended telling its client
    /// to reconnect: the detach leaves a resume mark ([`Slot::Resuming`]).
    resume: bool,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let generation = self.generation;
        if self.resume {
            self.attachments.resuming(&self.stream, generation);
            return;
        }
        self.attachments.slots.remove_if(
            &self.stream,
            |_, slot| matches!(slot, Slot::Reader { generation: g, .. } if *g == generation),
        );
    }
}

/// Replays and tails one stream of the event log.
#[derive(Debug)]
pub struct Follow {
    events: Arc<dyn EventLog>,
    /// Asked, when the stream is gone, whether the client ended the session.
    sessions: Arc<dyn SessionStore>,
    session: SessionId,
    stream: StreamId,
    /// Position of the last event yielded.
    after: Position,
    wake: Wakeup,
    attachment: Attachment,
    /// The node's shutdown token: draining ends every follow.
    shutdown: CancellationToken,
    /// Events read but not yet yielded; at most [`READ_BATCH`].
    buffer: VecDeque<StoredEvent>,
    keep_alive: Duration,
    /// The requests this stream answers (none for a standalone stream).
    requests: Vec<RequestId>,
    /// Those whose response this follow has yielded.
    answered: HashSet<RequestId>,
    /// Notices to yield before the end (a lost stream's errors); at most
    /// one per request of the stream, or one.
    notices: VecDeque<Arc<str>>,
    /// The end, yielded once the notices are out.
    ending: Option<FollowEnd>,
    /// Since when reads have failed (the store not answering), if they do.
    failing_since: Option<tokio::time::Instant>,
    done: bool,
    /// The principal's stream slot this follow holds, if counted: given
    /// back when the follow is dropped (its connection ended), kept for
    /// the reader that took the stream over.
    lease: Option<SlotLease>,
}

/// What a client reads when a stream's data is gone (the session was
/// deleted, expired, or the store lost it, e.g. Redis restarted empty).
const LOST: &str = "stream lost: the session's data is no longer in the store \
     (the session ended or expired, or the store lost it); start a new session";

/// The `logger` of the log message that tells a standalone stream's client
/// its stream's data is gone.
const NOTICE_LOGGER: &str = "mcp-cluster";

/// What a client reads when the store no longer holds events of its
/// stream around what it read (an asynchronous replica promoted without
/// them, or retention dropping them before this reader got them).
const EVENTS_LOST: &str = "events of this stream are no longer in the store (lost in a \
     failover, or dropped by retention); the request's outcome is unknown: retry it";

/// What a client reads when the node could not keep a request's response
/// (the store refused the write, e.g. Redis out of memory).
const NOT_KEPT: &str = "the response could not be kept: the server's store \
     refused the write (it may be full); retry the request later";

impl Follow {
    /// Starts following `stream` after `after`.
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] / [`StoreError::EventNotFound`] when
    /// the stream or position is not in this session, [`StoreError::Trimmed`]
    /// when events after `after` are gone, or a backend failure.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        events: Arc<dyn EventLog>,
        sessions: Arc<dyn SessionStore>,
        attachments: &Arc<Attachments>,
        session: SessionId,
        stream: StreamId,
        after: Position,
        shutdown: CancellationToken,
        keep_alive: Duration,
        requests: Vec<RequestId>,
        listened: Option<Box<Listened>>,
    ) -> Result<Self, StoreError> {
        // Subscribe before the first read so that no append is missed.
        let wake = events.subscribe(&session, &stream).await?;
        // Validates `after` (an event of this stream, or its start).
        events.read(&session, &stream, after, 0).await?;
        let attachment = attachments.attach(&stream, listened);
        Ok(Self {
            events,
            sessions,
            session,
            stream,
            after,
            wake,
            attachment,
            shutdown,
            buffer: VecDeque::new(),
            keep_alive,
            requests,
            answered: HashSet::new(),
            notices: VecDeque::new(),
            ending: None,
            failing_since: None,
            done: false,
            lease: None,
        })
    }

    /// Holds `lease` (a stream slot) for as long as this follow lives; a
    /// reader that takes the stream over takes the slot with it.
    pub(crate) fn hold(&mut self, mut lease: Option<SlotLease>) {
        if let Some(lease) = &mut lease {
            lease.yield_to_takeover(Arc::clone(&self.attachment.signal));
        }
        self.lease = lease;
    }

    /// The stream followed.
    pub fn stream(&self) -> &StreamId {
        &self.stream
    }

    /// The next item; `None` after [`FollowItem::End`].
    ///
    /// Cancel safety: not cancel safe (an event read but not yet yielded
    /// would be lost); call it to completion.
    pub async fn next(&mut self) -> Option<FollowItem> {
        if self.done {
            return None;
        }
        if let Some(notice) = self.notices.pop_front() {
            return Some(FollowItem::Notice(notice));
        }
        if let Some(why) = self.ending.take() {
            return Some(self.end(why));
        }
        loop {
            if let Some(event) = self.buffer.pop_front() {
                self.after = event.position;
                self.note_answer(&event.data);
                let id = EventId {
                    stream: self.stream.clone(),
                    position: event.position,
                };
                return Some(FollowItem::Event(id, event.data));
            }
            if self.attachment.signal.is_kicked() {
                return Some(self.end(FollowEnd::Kicked));
            }
            match self
                .events
                .read(&self.session, &self.stream, self.after, READ_BATCH)
                .await
            {
                Ok(batch) if !batch.events.is_empty() => {
                    self.failing_since = None;
                    mcp_cluster_telemetry::metrics::metrics()
                        .events_replayed
                        .inc_by(batch.events.len() as u64);
                    self.buffer.extend(batch.events);
                    continue;
                }
                Ok(batch) if batch.closed => return Some(self.end(FollowEnd::Completed)),
                Ok(_) => {}
                Err(StoreError::StreamNotFound) => return self.lost().await,
                // The stream no longer holds what this reader sent last or
                // what follows it: the store lost events (a failover before
                // the replica had them) or retention dropped them. Resuming
                // could only be refused: the requests get an error that says
                // so, never a gap.
                Err(StoreError::EventNotFound | StoreError::Trimmed) => {
                    tracing::warn!(stream = %self.stream, after = ?self.after, "Events a reader had were lost by the store.");
                    return Some(self.unanswered(EVENTS_LOST, FollowEnd::Gone));
                }
                Err(err @ StoreError::Unavailable(_)) => {
                    let since = *self
                        .failing_since
                        .get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= STORE_PATIENCE {
                        tracing::warn!(stream = %self.stream, error = %err, "Stream read failed; the client is told to reconnect.");
                        return Some(self.end(FollowEnd::Failed));
                    }
                    tracing::debug!(stream = %self.stream, error = %err, "Stream read failed; retrying.");
                    if self.shutdown.is_cancelled() {
                        return Some(self.end(FollowEnd::ShuttingDown));
                    }
                    let signal = &self.attachment.signal;
                    tokio::select! {
                        () = signal.raised(&self.shutdown), if !signal.is_failed() => {
                            if self.shutdown.is_cancelled() {
                                return Some(self.end(FollowEnd::ShuttingDown));
                            }
                            // Kicked (seen at the top), or failed: read again.
                            continue;
                        }
                        () = tokio::time::sleep(STORE_RETRY) => continue,
                    }
                }
                Err(err) => {
                    tracing::warn!(stream = %self.stream, error = %err, "Stream read failed.");
                    return Some(self.end(FollowEnd::Failed));
                }
            }
            self.failing_since = None;
            // Draining: what the log already holds has been sent (the read
            // above found nothing new), so the client resumes after it.
            if self.shutdown.is_cancelled() {
                return Some(self.end(FollowEnd::ShuttingDown));
            }
            if self.attachment.signal.is_failed() {
                return Some(self.unanswered(NOT_KEPT, FollowEnd::Failed));
            }
            tokio::select! {
                alive = self.wake.changed() => {
                    if !alive {
                        return self.lost().await;
                    }
                }
                // Kicked: ends at the top of the loop. The writer failed, or
                // the node drains: read once more (whatever was written
                // goes out, a response appended just before the drain
                // too), then end.
                () = self.attachment.signal.raised(&self.shutdown) => {}
                () = tokio::time::sleep(self.keep_alive) => return Some(FollowItem::KeepAlive),
            }
        }
    }

    /// The follow as a stream of items, ending after [`FollowItem::End`].
    pub fn into_stream(self) -> impl Stream<Item = FollowItem> {
        futures_util::stream::unfold(self, |mut follow| async move {
            follow.next().await.map(|item| (item, follow))
        })
    }

    /// Remembers the response a yielded event carries, if any (only on
    /// streams that answer requests; only events that can be responses are
    /// decoded).
    fn note_answer(&mut self, data: &str) {
        if self.requests.is_empty() || !(data.contains("\"result\"") || data.contains("\"error\""))
        {
            return;
        }
        if let Ok(Message::Response(Response { id: Some(id), .. })) =
            decode_message(data.as_bytes())
        {
            self.answered.insert(id);
        }
    }

    /// The stream is gone. Ended by the client's DELETE: the end, quietly
    /// (its requests were cancelled: no response). Otherwise its data was
    /// lost: an error for each request it answers that got no response
    /// here (one without id on a stream that answers none), then the end.
    async fn lost(&mut self) -> Option<FollowItem> {
        if self.sessions.ended(&self.session).await.unwrap_or(false) {
            return Some(self.end(FollowEnd::Gone));
        }
        tracing::debug!(stream = %self.stream, "Followed stream lost.");
        Some(self.unanswered(LOST, FollowEnd::Gone))
    }

    /// An error saying `why` for each request the stream answers that got
    /// no response here, then the end. A stream that answers no request (a
    /// session's standalone stream) may carry no response at all (2025-11-25
    /// transports: a GET stream carries no JSON-RPC response unless it
    /// resumes a request's stream): it gets `why` as an `error` log message
    /// instead.
    fn unanswered(&mut self, why: &str, ending: FollowEnd) -> FollowItem {
        self.notices = if self.requests.is_empty() {
            let params = LoggingMessageParams {
                level: LoggingLevel::Error,
                logger: Some(NOTICE_LOGGER.to_owned()),
                data: Value::String(why.to_owned()),
            };
            let notice = Notification::new(methods::NOTIFICATION_MESSAGE, params);
            VecDeque::from([Arc::from(Message::Notification(notice).to_json())])
        } else {
            let error = ErrorObject::internal(why);
            self.requests
                .iter()
                .filter(|id| !self.answered.contains(*id))
                .map(|id| {
                    let response = Response::error(Some(id.clone()), error.clone());
                    Arc::from(Message::Response(response).to_json())
                })
                .collect()
        };
        self.ending = Some(ending);
        match self.notices.pop_front() {
            Some(notice) => FollowItem::Notice(notice),
            None => {
                self.ending = None;
                self.end(ending)
            }
        }
    }

    fn end(&mut self, why: FollowEnd) -> FollowItem {
        self.done = true;
        // The client of a stream that answers no request (a standalone
        // stream: what it carries is written by whoever listens, not by an
        // exchange) is told to reconnect (`retry`): its stream still counts
        // as listened to until it is back. A takeover elsewhere removed
        // this reader's slot already, so no mark is left then.
        self.attachment.resume = self.requests.is_empty()
            && matches!(
                why,
                FollowEnd::Kicked | FollowEnd::ShuttingDown | FollowEnd::Failed
            );
        FollowItem::End(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader of `stream` that ended telling its client to reconnect.
    fn ended_with_retry(attachments: &Arc<Attachments>, stream: &StreamId) {
        let mut attachment = attachments.attach(stream, None);
        attachment.resume = true;
        drop(attachment);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_left_with_retry_is_listened_to_until_its_client_is_back_or_the_window_ends() {
        let attachments = Arc::new(Attachments::default());
        let (back, gone) = (StreamId::random(), StreamId::random());
        ended_with_retry(&attachments, &back);
        ended_with_retry(&attachments, &gone);
        assert!(attachments.is_listening(&back) && attachments.is_listening(&gone));
        assert_eq!(attachments.awaiting_resume(), 2);

        // The first client resumed on another node.
        attachments.kick_reader(&back);
        assert!(!attachments.is_listening(&back));
        assert_eq!(attachments.awaiting_resume(), 1);

        // The other never came back: the mark lapses (and is removed while
        // its look holds no lock on the map).
        tokio::time::advance(RESUME_WINDOW + Duration::from_millis(1)).await;
        assert!(!attachments.is_listening(&gone));
        assert_eq!(attachments.awaiting_resume(), 0);
        assert!(attachments.slots.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_listened_session_is_due_for_renewal_at_once_then_once_per_interval() {
        let attachments = Arc::new(Attachments::default());
        let (standalone, answer) = (StreamId::random(), StreamId::random());
        let session = SessionId::random();
        let every = Duration::from_secs(60);
        let reader = attachments.attach(
            &standalone,
            Some(Listened::new(session.clone(), Some("alice"))),
        );
        let _answer = attachments.attach(&answer, None);
        let due = attachments.due_renewals(every);
        assert_eq!(
            due.len(),
            1,
            "only the standalone stream's session: {due:?}"
        );
        assert_eq!(due[0].session, session);
        assert_eq!(due[0].stream, standalone);
        assert_eq!(due[0].owner.as_deref(), Some("alice"));
        assert!(
            attachments.due_renewals(every).is_empty(),
            "renewed just now"
        );
        tokio::time::advance(every - Duration::from_millis(1)).await;
        assert!(attachments.due_renewals(every).is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(attachments.due_renewals(every).len(), 1);

        // A reader that ended with `retry` keeps the session renewed while
        // its client may come back, and no longer.
        let mut reader = reader;
        reader.resume = true;
        drop(reader);
        let often = Duration::from_secs(1);
        tokio::time::advance(often).await;
        assert_eq!(attachments.due_renewals(often).len(), 1);
        tokio::time::advance(RESUME_WINDOW).await;
        assert!(attachments.due_renewals(often).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_sessions_listened_to_are_those_of_readers_here_or_moments_ago() {
        let attachments = Arc::new(Attachments::default());
        let (a, b, c) = (
            SessionId::random(),
            SessionId::random(),
            SessionId::random(),
        );
        let (sa, sb, sc) = (StreamId::random(), StreamId::random(), StreamId::random());
        let _reading = attachments.attach(&sa, Some(Listened::new(a.clone(), None)));
        let mut resuming = attachments.attach(&sb, Some(Listened::new(b.clone(), None)));
        resuming.resume = true;
        drop(resuming);
        // A reader that left without `retry`.
        drop(attachments.attach(&sc, Some(Listened::new(c, None))));
        let mut listened = attachments.listened(|_| false);
        listened.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
        let mut want = vec![(a.clone(), sa.clone()), (b.clone(), sb)];
        want.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
        assert_eq!(listened, want);
        // Those the caller serves otherwise (an actor runs) are skipped.
        assert_eq!(attachments.listened(|id| *id != a), vec![(a, sa.clone())]);
        tokio::time::advance(RESUME_WINDOW).await;
        assert_eq!(attachments.listened(|_| false).len(), 1, "the mark lapsed");
        // Taken over by a reader on another node: listened to there.
        attachments.kick_reader(&sa);
        assert!(attachments.listened(|_| false).is_empty());
    }

    /// Whether `wait` is still pending after everything runnable ran.
    async fn pending<F: std::future::Future>(wait: std::pin::Pin<&mut F>) -> bool {
        tokio::select! {
            biased;
            _ = wait => false,
            () = tokio::task::yield_now() => true,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_waits_until_kicked_failed_or_woken_by_the_drain() {
        let attachments = Arc::new(Attachments::default());
        let drain = CancellationToken::new();
        let (a, b, c) = (StreamId::random(), StreamId::random(), StreamId::random());
        let (ra, rb, rc) = (
            attachments.attach(&a, None),
            attachments.attach(&b, None),
            attachments.attach(&c, None),
        );
        let (wa, wb, wc) = (
            ra.signal.raised(&drain),
            rb.signal.raised(&drain),
            rc.signal.raised(&drain),
        );
        tokio::pin!(wa, wb, wc);
        assert!(pending(wa.as_mut()).await && pending(wb.as_mut()).await);
        assert!(pending(wc.as_mut()).await);

        attachments.kick(&a);
        assert!(!pending(wa.as_mut()).await, "kicked");
        assert!(ra.signal.is_kicked());
        attachments.fail(&b);
        assert!(!pending(wb.as_mut()).await, "its writer failed");
        assert!(!rb.signal.is_kicked() && rb.signal.is_failed());
        assert!(pending(wc.as_mut()).await);
        // The node drains: the token first, then every reader is woken.
        drain.cancel();
        attachments.wake_all();
        assert!(!pending(wc.as_mut()).await, "woken by the drain");
        assert!(!rc.signal.is_kicked() && !rc.signal.is_failed());
        // A wait begun after the drain returns at once.
        assert!(!pending(std::pin::pin!(rc.signal.raised(&drain))).await);
    }

    #[tokio::test]
    async fn a_reader_that_ends_without_retry_leaves_no_mark() {
        let attachments = Arc::new(Attachments::default());
        let stream = StreamId::random();
        drop(attachments.attach(&stream, None));
        assert!(!attachments.is_listening(&stream));
        assert!(attachments.slots.is_empty());
    }
}
