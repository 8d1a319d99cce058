//! Following one stream of the event log: replay what was missed, then tail
//! it live until it closes. Every SSE connection (POST answer, GET stream,
//! resumption, legacy SSE) and the stdio writer is a [`Follow`].
//!
//! At most one reader follows a stream on this node at a time
//! ([`Attachments`]): a new reader takes over (the old one ends with `retry`),
//! so a message is never delivered on two connections.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

#[derive(Debug)]
enum Slot {
    Reader {
        generation: u64,
        kick: CancellationToken,
        /// Cancelled when the stream's writer on this node could not write
        /// its response or close it ([`Attachments::fail`]).
        failed: CancellationToken,
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
    },
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
    /// Registers a new reader of `stream`, ending the previous one.
    pub fn attach(self: &Arc<Self>, stream: &StreamId) -> Attachment {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let kick = CancellationToken::new();
        let failed = CancellationToken::new();
        let previous = self.slots.insert(
            stream.clone(),
            Slot::Reader {
                generation,
                kick: kick.clone(),
                failed: failed.clone(),
            },
        );
        match previous {
            Some(Slot::Reader { kick: old, .. }) => {
                mcp_cluster_telemetry::metrics::metrics()
                    .sse_takeovers
                    .inc();
                old.cancel();
            }
            // The server asked to disconnect before this reader arrived.
            Some(Slot::KickPending) => kick.cancel(),
            Some(Slot::FailPending) => failed.cancel(),
            Some(Slot::Resuming { .. }) | None => {}
        }
        Attachment {
            attachments: Arc::clone(self),
            stream: stream.clone(),
            generation,
            kick,
            failed,
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
                Slot::Reader { failed, .. } => failed.cancel(),
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
        if let Some(Slot::Reader { failed, .. }) = self.slots.get(stream).as_deref() {
            failed.cancel();
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
                if let Slot::Reader { kick, .. } = slot.get() {
                    kick.cancel();
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
        }) && let Slot::Reader { kick, .. } = slot
        {
            mcp_cluster_telemetry::metrics::metrics()
                .sse_takeovers
                .inc();
            kick.cancel();
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
            Some(Slot::Resuming { until }) => (*until > now, *until <= now),
            _ => (false, false),
        };
        if expired {
            self.slots.remove_if(
                stream,
                |_, slot| matches!(slot, Slot::Resuming { until } if *until <= now),
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
            .filter(|slot| matches!(slot.value(), Slot::Resuming { until } if *until > now))
            .count()
    }

    /// The reader of `generation` ended telling its client to reconnect.
    fn resuming(&self, stream: &StreamId, generation: u64) {
        if let Entry::Occupied(mut slot) = self.slots.entry(stream.clone())
            && matches!(slot.get(), Slot::Reader { generation: g, .. } if *g == generation)
        {
            slot.insert(Slot::Resuming {
                until: tokio::time::Instant::now() + RESUME_WINDOW,
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
                .retain(|_, slot| !matches!(slot, Slot::Resuming { until } if *until <= now));
        }
    }
}

/// One reader's registration; dropping it detaches.
#[derive(Debug)]
pub struct Attachment {
    attachments: Arc<Attachments>,
    stream: StreamId,
    generation: u64,
    /// Cancelled when another reader takes over or the server kicks.
    kick: CancellationToken,
    /// Cancelled when the stream's writer could not finish it.
    failed: CancellationToken,
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
    ) -> Result<Self, StoreError> {
        // Subscribe before the first read so that no append is missed.
        let wake = events.subscribe(&session, &stream).await?;
        // Validates `after` (an event of this stream, or its start).
        events.read(&session, &stream, after, 0).await?;
        let attachment = attachments.attach(&stream);
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
            lease.yield_to_takeover(self.attachment.kick.clone());
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
            if self.attachment.kick.is_cancelled() {
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
                    tokio::select! {
                        () = self.attachment.kick.cancelled() => return Some(self.end(FollowEnd::Kicked)),
                        () = self.shutdown.cancelled() => return Some(self.end(FollowEnd::ShuttingDown)),
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
            if self.attachment.failed.is_cancelled() {
                return Some(self.unanswered(NOT_KEPT, FollowEnd::Failed));
            }
            tokio::select! {
                alive = self.wake.changed() => {
                    if !alive {
                        return self.lost().await;
                    }
                }
                // Read once more (whatever was written goes out), then end.
                () = self.attachment.failed.cancelled() => {}
                () = self.attachment.kick.cancelled() => return Some(self.end(FollowEnd::Kicked)),
                // Read once more before ending: events appended just before
                // the drain (a response, say) go out on this connection.
                () = self.shutdown.cancelled() => {}
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
        let mut attachment = attachments.attach(stream);
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

    #[tokio::test]
    async fn a_reader_that_ends_without_retry_leaves_no_mark() {
        let attachments = Arc::new(Attachments::default());
        let stream = StreamId::random();
        drop(attachments.attach(&stream));
        assert!(!attachments.is_listening(&stream));
        assert!(attachments.slots.is_empty());
    }
}
