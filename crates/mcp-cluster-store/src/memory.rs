//! Embedded in-memory store: the same ports as Redis, for a node running
//! alone. Retention is bounded per stream by count, bytes and time, closed
//! streams and finished tasks by byte budgets ([`crate::Ledger`]), and sessions
//! expire after their idle TTL; expired entries are swept lazily by the calls
//! that create new ones, so no background task is needed.
//!
//! # Layout
//! - [`MemoryEventLog`], [`MemorySessionStore`], [`MemoryBus`],
//!   [`MemoryNodes`]: here.
//! - [`MemoryQuotas`] (`quota`): rate counters and lease sets.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use dashmap::DashMap;
use mcp_cluster_protocol::RequestId;
use tokio::time::Instant;

use crate::budget::{ByteBudget, Ledger};
use crate::{
    ControlBus, ControlMessage, EventId, EventLog, NodeId, NodeRegistry, OpenStream, Position,
    ReadBatch, SessionId, SessionRecord, SessionStore, StoreError, StoredEvent, StreamId,
    Subscribed, WakeSender, Wakeup,
};

mod quota;
mod tasks;

pub use quota::{MAX_QUOTA_KEYS, MemoryQuotas};
pub use tasks::{MAX_TASKS, MemoryTasks};

/// How long sweeps wait between runs.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// How long sweeps forced by the stream cap wait between runs: when open
/// streams alone fill the cap, a sweep cannot help and must not run on every
/// new stream.
const CAP_SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// Event log retention limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Most events kept per stream; older ones are dropped and a reader that
    /// needs them gets [`StoreError::Trimmed`]. Default 10,000: enough to
    /// resume a long tool call's full progress history.
    pub max_events_per_stream: usize,
    /// How long a closed stream stays readable, for clients that resume after
    /// the response was written. Default 5 minutes.
    pub closed_stream_ttl: Duration,
    /// How long an open stream with no append stays, as a bound on streams a
    /// vanished writer left behind. Default 1 hour.
    pub idle_stream_ttl: Duration,
    /// Most streams held in all; beyond it the oldest closed streams are
    /// dropped early (their clients can no longer resume them). Bounds memory
    /// under sustained SSE load. Default 100,000.
    pub max_streams: usize,
    /// Most bytes of events kept per stream; beyond it the oldest events
    /// are dropped as by `max_events_per_stream` (the newest is always
    /// kept). Default 32 MiB.
    pub max_stream_bytes: u64,
    /// Bytes of closed streams kept: per node, and per client (the owner
    /// of the request that made the stream: its principal, else its
    /// address; never per session, which a client opens at will). Past a
    /// client's share its own oldest closed streams go; past the node's
    /// budget, the oldest of the clients above their floor. Default 64 MiB
    /// per node, 16 MiB per client, a floor of 4 MiB.
    pub closed_streams: ByteBudget,
    /// Bytes of finished tasks (records, results and answers) kept: per
    /// node, and per client (principal, or address without one), as for
    /// `closed_streams`. Default 64 MiB per node, 16 MiB per client, a
    /// floor of 4 MiB.
    pub finished_tasks: ByteBudget,
}

/// Default of [`Retention::max_stream_bytes`].
pub const MAX_STREAM_BYTES: u64 = 32 << 20;
/// Default of [`Retention::closed_streams`].
pub const CLOSED_STREAMS: ByteBudget = ByteBudget {
    per_node: 64 << 20,
    per_client: 16 << 20,
    floor: RETAINED_FLOOR,
};
/// Default of [`Retention::finished_tasks`].
pub const FINISHED_TASKS: ByteBudget = ByteBudget {
    per_node: 64 << 20,
    per_client: 16 << 20,
    floor: RETAINED_FLOOR,
};
/// Default floor of [`CLOSED_STREAMS`] and [`FINISHED_TASKS`]: what no
/// other client can push out of a client's kept bytes. 4 MiB keeps a
/// few large unread answers of each client safe, while 16 clients at
/// their floor still fit the node's 64 MiB before it refuses new work.
pub const RETAINED_FLOOR: u64 = 4 << 20;

impl Default for Retention {
    fn default() -> Self {
        Self {
            max_events_per_stream: 10_000,
            closed_stream_ttl: Duration::from_secs(300),
            idle_stream_ttl: Duration::from_secs(3600),
            max_streams: 100_000,
            max_stream_bytes: MAX_STREAM_BYTES,
            closed_streams: CLOSED_STREAMS,
            finished_tasks: FINISHED_TASKS,
        }
    }
}

/// One stream's events and state.
#[derive(Debug)]
struct StreamLog {
    session: SessionId,
    /// The requests answered on the stream (none for a standalone stream).
    requests: Box<[RequestId]>,
    events: VecDeque<StoredEvent>,
    /// Bytes of `events`' data.
    bytes: u64,
    /// Position of the newest event dropped by retention (`START` if none).
    trimmed_through: Position,
    /// Position of the newest event appended.
    last: Position,
    closed: bool,
    /// Woken on every append and on close; readers hold its wake-ups. Made
    /// by the first reader: most standalone streams are never read, and an
    /// idle session should not pay for a sender.
    wake: Option<WakeSender>,
    /// Last append or close, for time-based retention.
    touched: Instant,
}

impl StreamLog {
    fn wake_readers(&self) {
        if let Some(wake) = &self.wake {
            wake.wake();
        }
    }
}

/// In-memory [`EventLog`].
#[derive(Debug)]
pub struct MemoryEventLog {
    streams: DashMap<StreamId, Arc<Mutex<StreamLog>>>,
    by_session: DashMap<SessionId, Vec<StreamId>>,
    retention: Retention,
    /// Closed streams and their bytes, against `retention.closed_streams`.
    closed: Ledger<StreamId>,
    last_sweep: Mutex<Instant>,
}

impl MemoryEventLog {
    /// One append; with `follows`, only when that is the stream's last
    /// position (see [`EventLog::append_following`]; a log that loses
    /// nothing refuses only a caller that names a position it was not
    /// given, or whose earlier append it did not see answered).
    fn append_after(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
        follows: Option<Position>,
    ) -> Result<EventId, StoreError> {
        let log = self.stream(session, stream)?;
        let mut log = lock(&log);
        if log.closed {
            return Err(StoreError::StreamNotFound);
        }
        match follows {
            Some(follows) if log.last < follows => return Err(StoreError::EventsLost),
            Some(follows) if log.last > follows => return Err(StoreError::Conflict),
            _ => {}
        }
        let position = log.last.next(now_ms());
        log.last = position;
        log.bytes += data.len() as u64;
        log.events.push_back(StoredEvent { position, data });
        while (log.events.len() > self.retention.max_events_per_stream
            || log.bytes > self.retention.max_stream_bytes)
            && log.events.len() > 1
            && let Some(dropped) = log.events.pop_front()
        {
            log.bytes -= dropped.data.len() as u64;
            log.trimmed_through = dropped.position;
            mcp_cluster_telemetry::metrics::metrics().event_trims.inc();
        }
        log.touched = Instant::now();
        log.wake_readers();
        Ok(EventId {
            stream: stream.clone(),
            position,
        })
    }

    /// An empty log with the given retention.
    pub fn new(retention: Retention) -> Self {
        Self {
            streams: DashMap::new(),
            by_session: DashMap::new(),
            retention,
            closed: Ledger::new(retention.closed_streams).reporting("closed_streams", "stream"),
            last_sweep: Mutex::new(Instant::now()),
        }
    }

    /// Number of streams held (for tests and metrics).
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Bytes of events held in closed streams (for tests and metrics).
    pub fn closed_bytes(&self) -> u64 {
        self.closed.bytes()
    }

    /// Drops one stream (retention, budget or its session's end).
    fn drop_stream(&self, stream: &StreamId, session: &SessionId) {
        self.streams.remove(stream);
        self.closed.forget(stream);
        if let Some(mut ids) = self.by_session.get_mut(session) {
            ids.retain(|s| s != stream);
        }
    }

    fn stream(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Arc<Mutex<StreamLog>>, StoreError> {
        let log = self
            .streams
            .get(stream)
            .map(|e| Arc::clone(e.value()))
            .ok_or(StoreError::StreamNotFound)?;
        // A stream of another session is reported exactly like a missing one.
        if lock(&log).session != *session {
            return Err(StoreError::StreamNotFound);
        }
        Ok(log)
    }

    fn maybe_sweep(&self) {
        let now = Instant::now();
        let over_cap = self.streams.len() >= self.retention.max_streams;
        {
            let mut last = lock(&self.last_sweep);
            let wait = if over_cap {
                CAP_SWEEP_INTERVAL
            } else {
                SWEEP_INTERVAL
            };
            if now.duration_since(*last) < wait {
                return;
            }
            *last = now;
        }
        let r = self.retention;
        let mut expired = Vec::new();
        let mut closed = Vec::new();
        for entry in &self.streams {
            let log = lock(entry.value());
            let ttl = if log.closed {
                r.closed_stream_ttl
            } else {
                r.idle_stream_ttl
            };
            if now.duration_since(log.touched) >= ttl {
                expired.push((entry.key().clone(), log.session.clone()));
            } else if over_cap && log.closed {
                closed.push((log.touched, entry.key().clone(), log.session.clone()));
            }
        }
        if over_cap {
            // Down to 90% of the cap, oldest closed first, so that the next
            // sweep is not due at the next stream.
            let target = r.max_streams - r.max_streams / 10;
            let excess = (self.streams.len() - expired.len()).saturating_sub(target);
            closed.sort_unstable_by_key(|(touched, _, _)| *touched);
            expired.extend(
                closed
                    .into_iter()
                    .take(excess)
                    .map(|(_, stream, session)| (stream, session)),
            );
        }
        for (stream, session) in expired {
            self.drop_stream(&stream, &session);
        }
        self.by_session.retain(|_, ids| !ids.is_empty());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these short critical sections leaves
    // consistent data (every mutation is a single push/flag write).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[async_trait]
impl EventLog for MemoryEventLog {
    async fn create_stream_as(
        &self,
        session: &SessionId,
        id: &StreamId,
        requests: &[RequestId],
    ) -> Result<(), StoreError> {
        self.maybe_sweep();
        let log = StreamLog {
            session: session.clone(),
            requests: requests.into(),
            events: VecDeque::new(),
            bytes: 0,
            trimmed_through: Position::START,
            last: Position::START,
            closed: false,
            wake: None,
            touched: Instant::now(),
        };
        // A stream that exists stays as it is, events and all: made twice
        // (two first readers of a standalone stream), it is made once.
        match self.streams.entry(id.clone()) {
            dashmap::Entry::Occupied(_) => return Ok(()),
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(Arc::new(Mutex::new(log)));
            }
        }
        self.by_session
            .entry(session.clone())
            .or_default()
            .push(id.clone());
        Ok(())
    }

    async fn stream_requests(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Vec<RequestId>, StoreError> {
        let log = self.stream(session, stream)?;
        let requests = lock(&log).requests.to_vec();
        Ok(requests)
    }

    async fn append(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
    ) -> Result<EventId, StoreError> {
        self.append_after(session, stream, data, None)
    }

    async fn append_following(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
        follows: Position,
    ) -> Result<EventId, StoreError> {
        self.append_after(session, stream, data, Some(follows))
    }

    async fn close_stream(
        &self,
        session: &SessionId,
        stream: &StreamId,
        owner: &str,
    ) -> Result<(), StoreError> {
        let log = self.stream(session, stream)?;
        let bytes = {
            let mut log = lock(&log);
            if log.closed {
                return Ok(());
            }
            log.closed = true;
            log.touched = Instant::now();
            log.wake_readers();
            log.bytes
        };
        let dropped = self.closed.admit(
            stream.clone(),
            owner,
            Some(session.as_str()),
            bytes,
            self.retention.closed_stream_ttl,
        );
        for old in &dropped {
            // Its session is the one named in its log.
            let owner = self
                .streams
                .get(old)
                .map(|l| lock(l.value()).session.clone());
            if let Some(owner) = owner {
                self.drop_stream(old, &owner);
            }
        }
        Ok(())
    }

    async fn read(
        &self,
        session: &SessionId,
        stream: &StreamId,
        after: Position,
        max: usize,
    ) -> Result<ReadBatch, StoreError> {
        let log = self.stream(session, stream)?;
        let log = lock(&log);
        if after < log.trimmed_through {
            return Err(StoreError::Trimmed);
        }
        // Index of the first event after `after` (events are ordered).
        let start = log.events.partition_point(|e| e.position <= after);
        let known = after == Position::START
            || after == log.trimmed_through
            || (start > 0 && log.events[start - 1].position == after);
        if !known {
            return Err(StoreError::EventNotFound);
        }
        let events: Vec<StoredEvent> = log.events.iter().skip(start).take(max).cloned().collect();
        let closed = log.closed && start + events.len() == log.events.len();
        Ok(ReadBatch { events, closed })
    }

    async fn tail(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError> {
        let log = self.stream(session, stream)?;
        let last = lock(&log).last;
        Ok(last)
    }

    async fn oldest(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError> {
        let log = self.stream(session, stream)?;
        let trimmed = lock(&log).trimmed_through;
        Ok(trimmed)
    }

    async fn subscribe(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Wakeup, StoreError> {
        let log = self.stream(session, stream)?;
        let wakeup = lock(&log)
            .wake
            .get_or_insert_with(WakeSender::new)
            .subscribe();
        Ok(wakeup)
    }

    async fn touch(&self, session: &SessionId, stream: &StreamId) -> Result<(), StoreError> {
        let log = self.stream(session, stream)?;
        lock(&log).touched = Instant::now();
        Ok(())
    }

    async fn delete_session(&self, session: &SessionId) -> Result<(), StoreError> {
        if let Some((_, ids)) = self.by_session.remove(session) {
            for id in ids {
                // Dropping the log drops its wake sender: readers see the end.
                self.streams.remove(&id);
            }
            self.closed.forget_group(session.as_str());
        }
        Ok(())
    }

    fn over_budget(&self) -> bool {
        self.closed.over_budget()
    }
}

/// In-memory [`SessionStore`] with idle expiry, holding at most a maximum
/// of live sessions.
#[derive(Debug)]
pub struct MemorySessionStore {
    sessions: DashMap<SessionId, (SessionRecord, Instant)>,
    /// Most live sessions held: a `create` beyond it gets
    /// [`StoreError::Full`]. The node's `max_sessions`, so that sessions
    /// whose actors stopped while idle (their records stay here) still
    /// count against it.
    max_sessions: usize,
    /// Sessions ended by `delete`, until [`crate::ENDED_MEMORY`] after; swept
    /// with the sessions (bounded by the sessions ended in that time).
    ended: DashMap<SessionId, Instant>,
    /// Sessions swept out after expiring, until [`SessionStore::take_expired`]
    /// hands them out. Bounded by the sessions that existed: each id enters
    /// once, when its entry leaves `sessions`.
    expired: Mutex<Vec<SessionId>>,
    last_sweep: Mutex<Option<Instant>>,
}

impl Default for MemorySessionStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySessionStore {
    /// An empty store, without a maximum.
    pub fn new() -> Self {
        Self::with_max_sessions(usize::MAX)
    }

    /// An empty store holding at most `max_sessions` live sessions.
    pub fn with_max_sessions(max_sessions: usize) -> Self {
        Self {
            sessions: DashMap::new(),
            ended: DashMap::new(),
            expired: Mutex::new(Vec::new()),
            last_sweep: Mutex::new(None),
            max_sessions,
        }
    }

    /// Moves expired sessions to `expired`, at most every
    /// [`SWEEP_INTERVAL`] unless `force`.
    fn sweep(&self, force: bool) {
        let now = Instant::now();
        {
            let mut last = lock(&self.last_sweep);
            if !force && last.is_some_and(|t| now.duration_since(t) < SWEEP_INTERVAL) {
                return;
            }
            *last = Some(now);
        }
        let mut gone = Vec::new();
        self.sessions.retain(|id, (_, expires)| {
            let live = *expires > now;
            if !live {
                gone.push(id.clone());
            }
            live
        });
        if !gone.is_empty() {
            lock(&self.expired).extend(gone);
        }
        self.ended.retain(|_, until| *until > now);
    }
}

impl MemorySessionStore {
    /// Replaces a live session's record whose stored state `may` accepts,
    /// and renews its TTL; its subscriptions stay (they change only
    /// through `subscribe`). `false` when it is gone or refused.
    fn replace(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        may: impl FnOnce(&SessionRecord) -> bool,
    ) -> bool {
        let now = Instant::now();
        match self.sessions.get_mut(&record.id) {
            Some(mut e) if e.1 > now && may(&e.0) => {
                let subscriptions = std::mem::take(&mut e.0.subscriptions);
                *e = (record.clone(), now + idle_ttl);
                e.0.subscriptions = subscriptions;
                true
            }
            _ => false,
        }
    }
}

#[async_trait]
impl SessionStore for MemorySessionStore {
    async fn create(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<(), StoreError> {
        self.sweep(false);
        let now = Instant::now();
        // A new session holds no subscriptions (they change only through
        // `subscribe`), as in every store.
        let fresh = || {
            let mut record = record.clone();
            record.subscriptions.clear();
            (record, now + idle_ttl)
        };
        // Counted before the entry is taken (`len` reads every shard): two
        // creates at the maximum may both pass, by at most the number of
        // `initialize`s in flight at that instant.
        if self.sessions.len() >= self.max_sessions {
            self.sweep(true);
            if self.sessions.len() >= self.max_sessions {
                return Err(StoreError::Full);
            }
        }
        match self.sessions.entry(record.id.clone()) {
            dashmap::Entry::Occupied(e) if e.get().1 > now => Err(StoreError::Conflict),
            dashmap::Entry::Occupied(mut e) => {
                e.insert(fresh());
                Ok(())
            }
            dashmap::Entry::Vacant(e) => {
                e.insert(fresh());
                Ok(())
            }
        }
    }

    /// Writes the record alone: the standalone stream is made by
    /// [`Self::open_standalone`] when a client first opens it, which most
    /// sessions never do (as in the Redis store).
    async fn create_with_stream(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        _events: &dyn EventLog,
    ) -> Result<(), StoreError> {
        self.create(record, idle_ttl).await
    }

    /// Makes the stream if the session is live and the stream missing
    /// ([`EventLog::create_stream_as`] of the memory log leaves a stream
    /// that exists as it is, so two first readers make one stream).
    async fn open_standalone(
        &self,
        id: &SessionId,
        stream: &StreamId,
        events: &dyn EventLog,
    ) -> Result<Position, StoreError> {
        match events.tail(id, stream).await {
            Err(StoreError::StreamNotFound) => {}
            tail => return tail,
        }
        let now = Instant::now();
        if self.sessions.get(id).is_none_or(|e| e.1 <= now) {
            return Err(StoreError::StreamNotFound);
        }
        events.create_stream_as(id, stream, &[]).await?;
        events.tail(id, stream).await
    }

    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let now = Instant::now();
        Ok(self
            .sessions
            .get(id)
            .filter(|e| e.1 > now)
            .map(|e| e.0.clone()))
    }

    async fn save(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<bool, StoreError> {
        Ok(self.replace(record, idle_ttl, |_| true))
    }

    async fn rehost(
        &self,
        record: &SessionRecord,
        from: &str,
        idle_ttl: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.replace(record, idle_ttl, |stored| {
            stored.host.as_deref() == Some(from)
        }))
    }

    async fn subscribe(
        &self,
        id: &SessionId,
        uri: &str,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        let now = Instant::now();
        Ok(match self.sessions.get_mut(id) {
            Some(mut e) if e.1 > now => {
                let subscriptions = &mut e.0.subscriptions;
                if subscriptions.contains(uri) {
                    Subscribed::AlreadySubscribed
                } else if subscriptions.len() >= max {
                    Subscribed::Full
                } else {
                    subscriptions.insert(uri.to_owned());
                    Subscribed::Added
                }
            }
            _ => Subscribed::SessionGone,
        })
    }

    async fn unsubscribe(&self, id: &SessionId, uri: &str) -> Result<bool, StoreError> {
        let now = Instant::now();
        Ok(match self.sessions.get_mut(id) {
            Some(mut e) if e.1 > now => {
                e.0.subscriptions.remove(uri);
                true
            }
            _ => false,
        })
    }

    async fn touch(&self, id: &SessionId, idle_ttl: Duration) -> Result<bool, StoreError> {
        let now = Instant::now();
        match self.sessions.get_mut(id) {
            Some(mut e) if e.1 > now => {
                e.1 = now + idle_ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn take_expired(&self, max: usize) -> Result<Vec<SessionId>, StoreError> {
        self.sweep(true);
        let mut expired = lock(&self.expired);
        let keep = expired.len().saturating_sub(max);
        Ok(expired.split_off(keep))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn ended(&self, id: &SessionId) -> Result<bool, StoreError> {
        let now = Instant::now();
        Ok(self.ended.get(id).is_some_and(|until| *until > now))
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, StoreError> {
        let now = Instant::now();
        self.ended.insert(id.clone(), now + crate::ENDED_MEMORY);
        Ok(self
            .sessions
            .remove(id)
            .is_some_and(|(_, (_, expires))| expires > now))
    }
}

/// Capacity of the in-memory control bus; a lagging subscriber loses the
/// oldest messages.
const BUS_CAPACITY: usize = 1024;

/// In-memory [`ControlBus`]: every message loops back to the process.
/// [`ControlBus::subscribe`] hears them all; [`ControlBus::subscribe_as`]
/// leaves out the node's own messages that do not concern their origin:
/// on one node, a session's life then wakes no other task (or thread) for
/// its announcements.
#[derive(Debug)]
pub struct MemoryBus {
    /// Every message.
    tx: tokio::sync::broadcast::Sender<ControlMessage>,
    /// One channel per node subscribed with [`ControlBus::subscribe_as`]
    /// (one per node of the process, usually one), dropped with its last
    /// receiver.
    nodes: Mutex<Vec<(NodeId, tokio::sync::broadcast::Sender<ControlMessage>)>>,
}

impl MemoryBus {
    /// A bus with no subscriber yet.
    pub fn new() -> Self {
        Self {
            tx: tokio::sync::broadcast::channel(BUS_CAPACITY).0,
            nodes: Mutex::new(Vec::new()),
        }
    }
}

impl Default for MemoryBus {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl ControlBus for MemoryBus {
    async fn publish(&self, message: &ControlMessage) -> Result<(), StoreError> {
        // No subscriber is not an error: nobody needed to hear it.
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(message.clone());
        }
        let mut nodes = lock(&self.nodes);
        nodes.retain(|(_, tx)| tx.receiver_count() > 0);
        for (node, tx) in nodes.iter() {
            if message.concerns(node) {
                let _ = tx.send(message.clone());
            }
        }
        Ok(())
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ControlMessage> {
        self.tx.subscribe()
    }

    fn subscribe_as(&self, node: &NodeId) -> tokio::sync::broadcast::Receiver<ControlMessage> {
        let mut nodes = lock(&self.nodes);
        nodes.retain(|(_, tx)| tx.receiver_count() > 0);
        if let Some((_, tx)) = nodes.iter().find(|(n, _)| n == node) {
            return tx.subscribe();
        }
        let (tx, rx) = tokio::sync::broadcast::channel(BUS_CAPACITY);
        nodes.push((node.clone(), tx));
        rx
    }
}

/// In-memory [`NodeRegistry`].
#[derive(Debug, Default)]
pub struct MemoryNodes {
    /// Heartbeat expiry per known node.
    alive: DashMap<NodeId, Instant>,
    /// Open streams per node.
    streams: DashMap<NodeId, Vec<OpenStream>>,
    /// The request-state key ring: when each key was made, the key.
    state_keys: std::sync::Mutex<Vec<(Instant, String)>>,
}

#[async_trait]
impl NodeRegistry for MemoryNodes {
    async fn state_keys(
        &self,
        fresh: &str,
        rotate: Duration,
        keep: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let now = Instant::now();
        let mut ring = lock(&self.state_keys);
        ring.sort_by_key(|(made, _)| std::cmp::Reverse(*made));
        if ring
            .first()
            .is_none_or(|(made, _)| now.duration_since(*made) >= rotate)
        {
            ring.insert(0, (now, fresh.to_owned()));
        }
        let mut first = true;
        ring.retain(|(made, _)| {
            std::mem::take(&mut first) || now.duration_since(*made) < rotate + keep
        });
        Ok(ring.iter().map(|(_, key)| key.clone()).collect())
    }

    async fn heartbeat(&self, node: &NodeId, ttl: Duration) -> Result<bool, StoreError> {
        Ok(self
            .alive
            .insert(node.clone(), Instant::now() + ttl)
            .is_none())
    }

    async fn leave(&self, node: &NodeId) -> Result<(), StoreError> {
        self.alive.remove(node);
        self.streams.remove(node);
        Ok(())
    }

    async fn open_stream(&self, node: &NodeId, stream: &OpenStream) -> Result<(), StoreError> {
        self.streams
            .entry(node.clone())
            .or_default()
            .push(stream.clone());
        Ok(())
    }

    async fn close_stream(&self, node: &NodeId, stream: &StreamId) -> Result<(), StoreError> {
        if let Some(mut open) = self.streams.get_mut(node) {
            open.retain(|s| s.stream != *stream);
        }
        Ok(())
    }

    async fn alive(&self, node: &NodeId) -> Result<bool, StoreError> {
        let now = Instant::now();
        Ok(self.alive.get(node).is_some_and(|expiry| *expiry > now))
    }

    async fn dead_nodes(&self) -> Result<Vec<NodeId>, StoreError> {
        let now = Instant::now();
        Ok(self
            .alive
            .iter()
            .filter(|e| *e.value() <= now)
            .map(|e| e.key().clone())
            .collect())
    }

    async fn claim_orphans(&self, dead: &NodeId) -> Result<Vec<OpenStream>, StoreError> {
        // Removing the node is the claim: a second claimer finds nothing.
        let now = Instant::now();
        if self
            .alive
            .remove_if(dead, |_, expiry| *expiry <= now)
            .is_none()
        {
            return Ok(Vec::new());
        }
        Ok(self
            .streams
            .remove(dead)
            .map(|(_, open)| open)
            .unwrap_or_default())
    }
}
