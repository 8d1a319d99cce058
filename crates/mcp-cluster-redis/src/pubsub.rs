//! The node's one pub/sub connection, shared by every stream wake-up and the
//! control bus.
//!
//! A task owns the connection. It forwards each message on a wake channel
//! (`mcp:{<session>}:wake:<stream>`) to the [`WakeSender`] whose
//! [`Wakeup`]s every local reader of that stream holds, and decodes each
//! message on the control channel into a tokio `broadcast`. However many
//! streams are followed, the node holds this one connection.
//!
//! Subscriptions are refcounted by the senders' receivers: the first
//! [`PubSub::wake`] of a channel sends `SUBSCRIBE` (and waits for Redis to
//! confirm it, so a reader that subscribes before reading misses nothing);
//! later ones share it. Every [`SWEEP_INTERVAL`] the task `UNSUBSCRIBE`s the
//! channels whose receivers were all dropped.
//!
//! When the connection is lost (closed, or a [`PING_INTERVAL`] ping
//! unanswered within the command timeout), the task reconnects with capped
//! exponential backoff, subscribes again to the control channel and every
//! wake channel it held, then wakes every sender's readers once: a wake-up may have
//! been missed meanwhile, and readers re-read. Control messages published
//! while the connection was down are not delivered by Redis (pub/sub keeps
//! nothing): the task replays them from the control log (`bus`), from a
//! second before the last sign of life of the lost connection, skipping
//! those it received live (it remembers the last [`SEEN`] messages).
//! Meanwhile [`PubSub::wake`] fails fast with `StoreError::Unavailable`.
//!
//! On a Redis Cluster the channels are sharded (`SSUBSCRIBE`; the scripts
//! and the bus `SPUBLISH`): the cluster client keeps one RESP3 connection
//! per member it subscribed on, and resubscribes by itself after a lost
//! connection; every confirmation of a channel's subscription wakes its
//! readers, since a wake-up may have been missed before it. A connection lost
//! to any member replaces the whole pub/sub connection as above (the client
//! would wait for the dead member instead of following its shard's
//! failover): until every channel is subscribed again, on the member that
//! holds its slot then, the node is not ready. So does a change of the
//! cluster's layout (the `layout` module), made from its members then.
//!
//! Owner and stop path: the task runs until the last [`PubSub`] handle (held
//! by the event log and the bus of one store) is dropped, then closes the
//! connection and drops the senders, so pending `Wakeup::changed` calls
//! return `false`.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use mcp_cluster_store::{ControlMessage, StoreError, WakeSender, Wakeup};
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster_async::ClusterConnection;
use redis::{Msg, PushInfo, PushKind, RedisResult};
use tokio::sync::{RwLock, broadcast, mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use crate::ClusterError;
use crate::error::{connect_failed, timed_out, unavailable};
use crate::target::Target;

/// Capacity of the control message broadcast; a subscriber that lags
/// further loses the oldest messages and is told so by the channel.
const CONTROL_CAPACITY: usize = 1024;
/// Why the connection is replaced when a Redis Cluster's layout changed.
const LAYOUT_CHANGED: &str = "the Redis Cluster's layout changed";
/// First delay before reconnecting a lost pub/sub connection.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(50);
/// Cap of the reconnection backoff: a failover is followed within this of
/// its end.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(500);
/// Control messages remembered as dispatched (their hashes), so that a
/// replay skips them: more than the control log holds.
const SEEN: usize = 2 * crate::bus::LOG_LEN;
/// How long after a replay the live copy of a message it handed out may
/// come (it was published between the new subscription and the read of
/// the log); no two messages are alike (`bus`: each has a nonce), this
/// only bounds what is remembered.
const REPLAY_ECHO: Duration = Duration::from_secs(10);
/// How long a replay tries to read the control log.
const REPLAY_PATIENCE: Duration = Duration::from_secs(10);
/// How far before the last sign of life of a lost connection the replay
/// starts: messages can be in flight, and clocks differ.
const REPLAY_MARGIN_MS: u64 = 1000;
/// How often the connection is pinged, to notice one that died silently.
const PING_INTERVAL: Duration = Duration::from_secs(5);
/// How often channels without receivers are unsubscribed.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Most channels named in one `SUBSCRIBE` / `UNSUBSCRIBE`.
const CHANNELS_PER_COMMAND: usize = 512;

/// A handle on the node's pub/sub connection. Cloning is cheap; the task
/// stops when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct PubSub {
    inner: Arc<Handle>,
}

/// What the handles share; dropping it stops the task.
struct Handle {
    shared: Arc<Shared>,
    /// Never sent on: its drop (with the last handle) tells the task to stop.
    _stop: oneshot::Sender<()>,
}

/// State shared by the handles and the task.
struct Shared {
    /// Where new connections go (reconnection): after a failover, the
    /// primary the Sentinels name then.
    target: Target,
    /// Whether `target` speaks TLS (for the errors' hints).
    tls: bool,
    /// Bound on connecting and on each subscription command.
    timeout: Duration,
    /// The control bus channel.
    ctl: String,
    /// The control log's key.
    log: String,
    /// Reads the control log (set once the store's command connection
    /// exists; no replay before).
    commands: std::sync::OnceLock<crate::connection::Redis>,
    /// The control messages dispatched lately.
    seen: Mutex<Seen>,
    /// When the connection last showed it was alive (a message, a pong,
    /// its subscription), in ms since the epoch.
    alive_ms: AtomicU64,
    /// Written by the task with each decoded control message; read by
    /// `RedisBus::subscribe` receivers.
    control: broadcast::Sender<ControlMessage>,
    /// Orders subscription changes: [`PubSub::wake`] holds it shared while it
    /// subscribes; the task holds it exclusively while it unsubscribes or
    /// resubscribes, so an `UNSUBSCRIBE` never overtakes a new `SUBSCRIBE`
    /// of the same channel.
    gate: RwLock<()>,
    /// Short critical sections only, never held across `.await`.
    state: Mutex<State>,
    /// The command connection's trouble count (see `Redis::trouble`),
    /// bumped when this connection is lost too: Redis may have restarted
    /// without the command connection noticing yet.
    trouble: Arc<AtomicU64>,
}

/// Hashes of the control messages dispatched lately: those received live
/// (the last [`SEEN`], oldest first), which a replay skips, and those a
/// replay handed out, whose live copy (a message published after the new
/// subscription is both logged and received) is skipped if it comes within
/// [`REPLAY_ECHO`]. No two messages are alike (each has a nonce); one from
/// a node that predates the nonce, alike another, is dispatched twice when
/// both arrive live.
#[derive(Default)]
struct Seen {
    order: std::collections::VecDeque<u64>,
    live: std::collections::HashSet<u64>,
    replayed: HashMap<u64, tokio::time::Instant>,
}

impl Seen {
    /// Whether a message received live is to be dispatched; remembers it.
    fn live(&mut self, hash: u64) -> bool {
        if let Some(at) = self.replayed.remove(&hash)
            && at.elapsed() < REPLAY_ECHO
        {
            return false;
        }
        if self.live.insert(hash) {
            self.order.push_back(hash);
            if self.order.len() > SEEN
                && let Some(oldest) = self.order.pop_front()
            {
                self.live.remove(&oldest);
            }
        }
        true
    }

    /// Whether a replayed message is to be dispatched (it was not received
    /// live); remembers it for a while, for its live copy.
    fn replayed(&mut self, hash: u64) -> bool {
        if self.live.contains(&hash) {
            return false;
        }
        self.replayed.retain(|_, at| at.elapsed() < REPLAY_ECHO);
        if self.replayed.len() >= SEEN {
            return true;
        }
        self.replayed
            .insert(hash, tokio::time::Instant::now())
            .is_none()
    }
}

/// The connection and the wake channels.
struct State {
    /// Sends (un)subscriptions on the live connection; `None` while down.
    sink: Option<Sink>,
    /// Bumped on each new connection.
    generation: u64,
    /// Wake channels by name.
    wakes: HashMap<String, Wake>,
}

/// One wake channel.
struct Wake {
    /// Woken by the task on each message (and after a reconnection); its
    /// receivers are the `Wakeup`s handed out. Dropped when no receiver is
    /// left (sweep) or with the task.
    tx: WakeSender,
    /// The connection generation whose `SUBSCRIBE` Redis confirmed.
    subscribed_in: u64,
}

/// The sending half of the pub/sub connection.
#[derive(Clone)]
enum Sink {
    /// One Redis (or the Sentinels' primary).
    One(PubSubSink),
    /// A Redis Cluster: sharded channels, each on the member of its slot.
    Cluster(ClusterConnection),
}

impl Sink {
    async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Self::One(sink) => sink.subscribe(channels).await,
            Self::Cluster(con) => {
                // One command per channel, all at once: they may sit on
                // different shards.
                let calls = channels.iter().map(|channel| {
                    let mut con = con.clone();
                    async move { con.ssubscribe(channel).await }
                });
                futures_util::future::try_join_all(calls).await.map(drop)
            }
        }
    }

    async fn unsubscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Self::One(sink) => sink.unsubscribe(channels).await,
            Self::Cluster(con) => {
                let calls = channels.iter().map(|channel| {
                    let mut con = con.clone();
                    async move { con.sunsubscribe(channel).await }
                });
                futures_util::future::try_join_all(calls).await.map(drop)
            }
        }
    }
}

/// The receiving half of the pub/sub connection.
enum Incoming {
    One(PubSubStream),
    Cluster(mpsc::UnboundedReceiver<PushInfo>),
}

/// What arrived on the pub/sub connection.
enum Event {
    /// A message on a channel.
    Message(Msg),
    /// Redis confirmed a subscription to this channel (the cluster client
    /// resubscribes by itself after a lost connection or a failover).
    Subscribed(String),
    /// The connection to a Redis Cluster member was lost. Its client would
    /// reconnect to the same address, and move the subscriptions only when
    /// a command of its own finds the slots moved: it sends none, so the
    /// subscriptions of a shard that failed over would stay with the dead
    /// member. The connection is replaced instead.
    MemberLost,
    /// Anything else (an unsubscription).
    Other,
}

impl Incoming {
    /// The next event; `None` when the connection closed.
    async fn next(&mut self) -> Option<Event> {
        match self {
            Self::One(stream) => stream.next().await.map(Event::Message),
            Self::Cluster(rx) => rx.recv().await.map(Self::event),
        }
    }

    /// An event already received and not read yet, if any (a Redis
    /// Cluster's connection only: the one being replaced after a layout
    /// change).
    fn buffered(&mut self) -> Option<Event> {
        match self {
            Self::One(_) => None,
            Self::Cluster(rx) => rx.try_recv().ok().map(Self::event),
        }
    }

    fn event(push: PushInfo) -> Event {
        match push.kind {
            PushKind::SSubscribe | PushKind::Subscribe => push
                .data
                .first()
                .and_then(|channel| redis::from_redis_value::<String>(channel.clone()).ok())
                .map_or(Event::Other, Event::Subscribed),
            PushKind::Disconnection => Event::MemberLost,
            _ => Msg::from_push_info(push).map_or(Event::Other, Event::Message),
        }
    }
}

impl fmt::Debug for PubSub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.shared.lock();
        f.debug_struct("PubSub")
            .field("connected", &state.sink.is_some())
            .field("wake_channels", &state.wakes.len())
            .finish_non_exhaustive()
    }
}

impl PubSub {
    /// Whether the pub/sub connection is up (readiness: without it, SSE
    /// streams get no wake-ups and control messages are missed).
    pub(crate) fn is_connected(&self) -> bool {
        self.inner.shared.lock().sink.is_some()
    }

    /// Connects, subscribes to the control channel and starts the task.
    ///
    /// # Errors
    /// [`ClusterError::Connect`], [`ClusterError::Rejected`] or
    /// [`ClusterError::Timeout`] when the first connection fails.
    pub(crate) async fn start(
        target: Target,
        keys: &crate::keys::Keys,
        timeout: Duration,
        trouble: Arc<AtomicU64>,
    ) -> Result<Self, ClusterError> {
        let shared = Arc::new(Shared {
            tls: target.is_tls(),
            target,
            timeout,
            ctl: keys.ctl(),
            log: keys.ctl_log(),
            commands: std::sync::OnceLock::new(),
            seen: Mutex::new(Seen::default()),
            alive_ms: AtomicU64::new(0),
            control: broadcast::channel(CONTROL_CAPACITY).0,
            gate: RwLock::new(()),
            state: Mutex::new(State {
                sink: None,
                generation: 0,
                wakes: HashMap::new(),
            }),
            trouble,
        });
        let layout = shared
            .target
            .cluster_seeds()
            .map(|seeds| seeds.layout_changes());
        let stream = shared.establish().await?;
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::spawn(run(Arc::clone(&shared), stream, stop_rx, layout));
        Ok(Self {
            inner: Arc::new(Handle {
                shared,
                _stop: stop_tx,
            }),
        })
    }

    /// Lets the task read the control log through `commands` (the
    /// store's command connection) after a reconnection.
    pub(crate) fn replay_with(&self, commands: crate::connection::Redis) {
        let _ = self.inner.shared.commands.set(commands);
    }

    /// Receives every control message decoded from now on.
    pub(crate) fn control(&self) -> broadcast::Receiver<ControlMessage> {
        self.inner.shared.control.subscribe()
    }

    /// A receiver woken on every message of `channel`, subscribed (and
    /// confirmed by Redis) before this returns.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the connection is down or Redis does
    /// not confirm in time.
    pub(crate) async fn wake(&self, channel: String) -> Result<Wakeup, StoreError> {
        let shared = &self.inner.shared;
        let _gate = shared.gate.read().await;
        let (rx, mut sink, generation) = {
            let mut state = shared.lock();
            let Some(sink) = state.sink.clone() else {
                return Err(StoreError::Unavailable(
                    "redis pub/sub connection is down".into(),
                ));
            };
            let generation = state.generation;
            let wake = state.wakes.entry(channel.clone()).or_insert_with(|| Wake {
                tx: WakeSender::new(),
                subscribed_in: 0,
            });
            let rx = wake.tx.subscribe();
            if wake.subscribed_in == generation {
                return Ok(rx);
            }
            (rx, sink, generation)
        };
        // Not confirmed on this connection yet (new, or another caller's
        // SUBSCRIBE is in flight): subscribing twice is harmless.
        shared
            .bounded(sink.subscribe(std::slice::from_ref(&channel)))
            .await?;
        let mut state = shared.lock();
        if state.generation == generation
            && let Some(wake) = state.wakes.get_mut(&channel)
        {
            wake.subscribed_in = generation;
        }
        Ok(rx)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation is a single insert, remove or field write, so the
        // state stays consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(unavailable(&err)),
            Err(_) => Err(timed_out(self.timeout)),
        }
    }

    /// Opens a connection, subscribes to every channel, installs it and
    /// wakes every reader.
    async fn establish(&self) -> Result<Incoming, ClusterError> {
        let (mut sink, incoming) = if let Some(seeds) = self.target.cluster_seeds() {
            let (push, rx) = mpsc::unbounded_channel();
            let client = seeds.client(Some(push))?;
            let con = tokio::time::timeout(self.timeout, client.get_async_connection())
                .await
                .map_err(|_| ClusterError::Timeout(self.timeout))?
                .map_err(|err| connect_failed(err, self.tls))?;
            (Sink::Cluster(con), Incoming::Cluster(rx))
        } else {
            let open = async {
                let client = self.target.primary().await?;
                client.get_async_pubsub().await
            };
            let pubsub = tokio::time::timeout(self.timeout, open)
                .await
                .map_err(|_| ClusterError::Timeout(self.timeout))?
                .map_err(|err| connect_failed(err, self.tls))?;
            let (sink, stream) = pubsub.split();
            (Sink::One(sink), Incoming::One(stream))
        };
        let _gate = self.gate.write().await;
        let mut channels = vec![self.ctl.clone()];
        channels.extend(self.lock().wakes.keys().cloned());
        for batch in channels.chunks(CHANNELS_PER_COMMAND) {
            tokio::time::timeout(self.timeout, sink.subscribe(batch))
                .await
                .map_err(|_| ClusterError::Timeout(self.timeout))?
                .map_err(|err| connect_failed(err, self.tls))?;
        }
        self.alive();
        let mut state = self.lock();
        state.generation += 1;
        let generation = state.generation;
        state.sink = Some(sink);
        for wake in state.wakes.values_mut() {
            wake.subscribed_in = generation;
            // A wake-up may have been published while disconnected.
            wake.tx.wake();
        }
        Ok(incoming)
    }

    /// Wakes the readers of a channel whose subscription Redis confirmed
    /// again: a wake-up may have gone out while it was not.
    fn resubscribed(&self, channel: &str) {
        if let Some(wake) = self.lock().wakes.get(channel) {
            wake.tx.wake();
        }
    }

    /// Notes that the connection is alive now.
    fn alive(&self) {
        self.alive_ms
            .store(crate::session_store::now_ms(), Ordering::Release);
    }

    /// Routes one message.
    fn dispatch(&self, msg: &Msg) {
        self.alive();
        let channel = msg.get_channel_name();
        if channel == self.ctl {
            self.control_payload(msg.get_payload_bytes(), false);
        } else if let Some(wake) = self.lock().wakes.get(channel) {
            wake.tx.wake();
        }
    }

    /// Decodes and hands out one control message, unless it was already
    /// ([`Seen`]).
    fn control_payload(&self, payload: &[u8], replayed: bool) {
        let hash = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(payload)
        };
        let dispatch = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if replayed {
                seen.replayed(hash)
            } else {
                seen.live(hash)
            }
        };
        if !dispatch {
            return;
        }
        let m = mcp_cluster_telemetry::metrics::metrics();
        match serde_json::from_slice::<ControlMessage>(payload) {
            // No receiver is not an error: nobody needed to hear it.
            Ok(message) => {
                m.bus_received.with_label_values(&[message.kind()]).inc();
                if replayed {
                    m.bus_replayed.inc();
                }
                drop(self.control.send(message));
            }
            Err(err) => {
                m.bus_dropped.with_label_values(&["malformed"]).inc();
                warn!(%err, "Undecodable control message dropped.");
            }
        }
    }

    /// Hands out the control messages of the log from `since_ms` on that
    /// were not dispatched yet: those published while the connection was
    /// down. `Err` when the log could not be read.
    async fn replay_once(&self, since_ms: u64) -> Result<(), StoreError> {
        let Some(commands) = self.commands.get() else {
            return Ok(());
        };
        let read = redis::cmd("XRANGE")
            .arg(&self.log)
            .arg(format!("{since_ms}-0"))
            .arg("+")
            .arg("COUNT")
            .arg(crate::bus::LOG_LEN)
            .clone();
        let redis::Value::Array(entries) = commands.cmd("bus_replay", &read).await? else {
            return Ok(());
        };
        for entry in entries {
            // [id, [field, value, ...]]
            let redis::Value::Array(parts) = entry else {
                continue;
            };
            let Some(redis::Value::Array(fields)) = parts.get(1) else {
                continue;
            };
            for pair in fields.chunks(2) {
                if let [
                    redis::Value::BulkString(field),
                    redis::Value::BulkString(value),
                ] = pair
                    && field.as_slice() == crate::bus::LOG_FIELD.as_bytes()
                {
                    self.control_payload(value, true);
                }
            }
        }
        Ok(())
    }

    /// Unsubscribes the channels nobody listens to any more.
    async fn sweep(&self) {
        let any_idle = self
            .lock()
            .wakes
            .values()
            .any(|w| w.tx.receiver_count() == 0);
        if !any_idle {
            return;
        }
        let _gate = self.gate.write().await;
        let (idle, sink) = {
            let mut state = self.lock();
            let idle: Vec<String> = state
                .wakes
                .iter()
                .filter(|(_, w)| w.tx.receiver_count() == 0)
                .map(|(channel, _)| channel.clone())
                .collect();
            for channel in &idle {
                state.wakes.remove(channel);
            }
            (idle, state.sink.clone())
        };
        // Down: the next connection subscribes only to what is left.
        let Some(mut sink) = sink else { return };
        for batch in idle.chunks(CHANNELS_PER_COMMAND) {
            if let Err(err) = self.bounded(sink.unsubscribe(batch)).await {
                debug!(%err, "Unsubscribe failed; the connection is being replaced.");
                return;
            }
        }
    }

    /// Checks that the connection answers. A Redis Cluster's client
    /// watches its connections itself (a ping would go to every member, and
    /// one member down would replace every subscription).
    async fn ping(&self) -> Result<(), StoreError> {
        let Some(Sink::One(mut sink)) = self.lock().sink.clone() else {
            return Ok(());
        };
        self.bounded(sink.ping::<redis::Value>()).await?;
        self.alive();
        Ok(())
    }
}

/// Replays the control log from `since_ms` ([`Shared::replay_once`]),
/// trying again for a while: just after a failover, the log's shard may
/// not answer yet.
async fn replay(shared: Arc<Shared>, since_ms: u64) {
    let mut delay = RECONNECT_MIN_DELAY;
    let started = tokio::time::Instant::now();
    loop {
        match shared.replay_once(since_ms).await {
            Ok(()) => return,
            Err(err) if started.elapsed() + delay >= REPLAY_PATIENCE => {
                warn!(%err, "Control messages missed while the pub/sub connection was down could not be replayed.");
                return;
            }
            Err(err) => {
                debug!(%err, "Control log not read yet; trying again.");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RECONNECT_MAX_DELAY);
            }
        }
    }
}

/// Resolves when a Redis Cluster's layout changed (never for one Redis,
/// or once the layout task is gone).
async fn layout_changed(layout: &mut Option<watch::Receiver<u64>>) {
    let changed = match layout {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !changed {
        std::future::pending::<()>().await;
    }
}

/// The task owning the connection: see the module doc. `layout`, on a
/// Redis Cluster: bumped when its layout changed, which replaces the
/// connection (the client would keep the subscriptions of a shard that
/// failed over with the member that left).
async fn run(
    shared: Arc<Shared>,
    mut stream: Incoming,
    mut stop: oneshot::Receiver<()>,
    mut layout: Option<watch::Receiver<u64>>,
) {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let reason = loop {
            tokio::select! {
                _ = &mut stop => return,
                event = stream.next() => match event {
                    Some(Event::Message(msg)) => shared.dispatch(&msg),
                    Some(Event::Subscribed(channel)) => shared.resubscribed(&channel),
                    Some(Event::Other) => {}
                    Some(Event::MemberLost) => break "a Redis Cluster member's connection was lost".to_owned(),
                    None => break "connection closed".to_owned(),
                },
                () = layout_changed(&mut layout) => break LAYOUT_CHANGED.to_owned(),
                _ = sweep.tick() => shared.sweep().await,
                _ = ping.tick() => {
                    if let Err(err) = shared.ping().await {
                        break err.to_string();
                    }
                }
            }
        };
        // A layout change leaves a working connection: it serves until the
        // new one is subscribed (make before break), and what it received
        // meanwhile is dispatched before it goes.
        let moving = reason == LAYOUT_CHANGED;
        if moving {
            info!("The Redis Cluster's layout changed; moving the pub/sub connection.");
        } else {
            shared.lock().sink = None;
            warn!(%reason, "Redis pub/sub connection lost; reconnecting.");
        }
        shared.trouble.fetch_add(1, Ordering::AcqRel);
        let since_ms = shared
            .alive_ms
            .load(Ordering::Acquire)
            .saturating_sub(REPLAY_MARGIN_MS);
        let mut delay = RECONNECT_MIN_DELAY;
        stream = loop {
            tokio::select! {
                _ = &mut stop => return,
                () = tokio::time::sleep(delay) => {}
            }
            match shared.establish().await {
                Ok(fresh) => {
                    if moving {
                        while let Some(event) = stream.buffered() {
                            if let Event::Message(msg) = event {
                                shared.dispatch(&msg);
                            }
                        }
                    }
                    break fresh;
                }
                Err(err) => {
                    debug!(%err, ?delay, "Redis pub/sub reconnection failed.");
                    delay = (delay * 2).min(RECONNECT_MAX_DELAY);
                }
            }
        };
        // What was published meanwhile (read after the subscriptions, so
        // that nothing falls between the replay and the live messages; in
        // its own task: the log may not answer at once, just after a
        // failover, and live messages go on meanwhile).
        tokio::spawn(replay(Arc::clone(&shared), since_ms));
        info!("Redis pub/sub connection restored.");
        mcp_cluster_telemetry::metrics::metrics()
            .redis_reconnects
            .with_label_values(&["pubsub"])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_skips_what_came_live_and_the_live_copy_of_what_it_replayed() {
        let mut seen = Seen::default();
        assert!(seen.live(1));
        // The same message again, live: a session changed twice.
        assert!(seen.live(1));
        // Replayed: 1 came live; 2 did not, and its live copy is skipped once.
        assert!(!seen.replayed(1));
        assert!(seen.replayed(2));
        assert!(!seen.live(2));
        assert!(seen.live(2));
        // A message alike long after a replay is another one.
        assert!(seen.replayed(3));
        let long_ago = tokio::time::Instant::now()
            .checked_sub(REPLAY_ECHO)
            .unwrap();
        seen.replayed.insert(3, long_ago);
        assert!(seen.live(3));
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut seen = Seen::default();
        for hash in 0..(SEEN as u64 * 3) {
            seen.live(hash);
            seen.replayed(hash + 1_000_000);
        }
        assert_eq!(seen.live.len(), SEEN);
        assert_eq!(seen.order.len(), SEEN);
        assert!(seen.replayed.len() <= SEEN);
        // The oldest live ones are forgotten: a replay would hand them out.
        assert!(seen.replayed(0));
    }
}
