//! The node's one pub/sub connection, shared by every stream wake-up and the
//! control bus.
//!
//! A task owns the connection. It forwards each message on a wake channel
//! (`mcp:{<session>}:wake:<stream>`) to a tokio `watch` that every local
//! [`mcp_cluster_store::Wakeup`] of that stream holds, and decodes each message on
//! the control channel into a tokio `broadcast`. However many streams are
//! followed, the node holds this one connection.
//!
//! Subscriptions are refcounted by the watches' receivers: the first
//! [`PubSub::wake`] of a channel sends `SUBSCRIBE` (and waits for Redis to
//! confirm it, so a reader that subscribes before reading misses nothing);
//! later ones share it. Every [`SWEEP_INTERVAL`] the task `UNSUBSCRIBE`s the
//! channels whose receivers were all dropped.
//!
//! When the connection is lost (closed, or a [`PING_INTERVAL`] ping
//! unanswered within the command timeout), the task reconnects with capped
//! exponential backoff, subscribes again to the control channel and every
//! wake channel it held, then bumps every watch once: a wake-up may have
//! been missed meanwhile, and readers re-read. Control messages published
//! while the connection was down are lost (Redis pub/sub keeps nothing);
//! meanwhile [`PubSub::wake`] fails fast with `StoreError::Unavailable`.
//!
//! Owner and stop path: the task runs until the last [`PubSub`] handle (held
//! by the event log and the bus of one store) is dropped, then closes the
//! connection and drops the watches, so pending `Wakeup::changed` calls
//! return `false`.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use mcp_cluster_store::{ControlMessage, StoreError};
use redis::aio::{PubSubSink, PubSubStream};
use redis::{Msg, RedisResult};
use tokio::sync::{RwLock, broadcast, oneshot, watch};
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use crate::ClusterError;
use crate::error::{connect_failed, timed_out, unavailable};
use crate::target::Target;

/// Capacity of the control message broadcast; a subscriber that lags
/// further loses the oldest messages and is told so by the channel.
const CONTROL_CAPACITY: usize = 1024;
/// First delay before reconnecting a lost pub/sub connection.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(50);
/// Cap of the reconnection backoff.
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(2);
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
}

/// The connection and the wake channels.
struct State {
    /// Sends (un)subscriptions on the live connection; `None` while down.
    sink: Option<PubSubSink>,
    /// Bumped on each new connection.
    generation: u64,
    /// Wake channels by name.
    wakes: HashMap<String, Wake>,
}

/// One wake channel.
struct Wake {
    /// Bumped by the task on each message (and after a reconnection); its
    /// receivers are the `Wakeup`s handed out. Dropped when no receiver is
    /// left (sweep) or with the task.
    tx: watch::Sender<u64>,
    /// The connection generation whose `SUBSCRIBE` Redis confirmed.
    subscribed_in: u64,
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
        ctl: String,
        timeout: Duration,
    ) -> Result<Self, ClusterError> {
        let shared = Arc::new(Shared {
            tls: target.is_tls(),
            target,
            timeout,
            ctl,
            control: broadcast::channel(CONTROL_CAPACITY).0,
            gate: RwLock::new(()),
            state: Mutex::new(State {
                sink: None,
                generation: 0,
                wakes: HashMap::new(),
            }),
        });
        let stream = shared.establish().await?;
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::spawn(run(Arc::clone(&shared), stream, stop_rx));
        Ok(Self {
            inner: Arc::new(Handle {
                shared,
                _stop: stop_tx,
            }),
        })
    }

    /// Receives every control message decoded from now on.
    pub(crate) fn control(&self) -> broadcast::Receiver<ControlMessage> {
        self.inner.shared.control.subscribe()
    }

    /// A receiver bumped on every message of `channel`, subscribed (and
    /// confirmed by Redis) before this returns.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the connection is down or Redis does
    /// not confirm in time.
    pub(crate) async fn wake(&self, channel: String) -> Result<watch::Receiver<u64>, StoreError> {
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
                tx: watch::channel(0).0,
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
        shared.bounded(sink.subscribe(&channel)).await?;
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
    /// bumps every watch.
    async fn establish(&self) -> Result<PubSubStream, ClusterError> {
        let open = async {
            let client = self.target.primary().await?;
            client.get_async_pubsub().await
        };
        let pubsub = tokio::time::timeout(self.timeout, open)
            .await
            .map_err(|_| ClusterError::Timeout(self.timeout))?
            .map_err(|err| connect_failed(err, self.tls))?;
        let (mut sink, stream) = pubsub.split();
        let _gate = self.gate.write().await;
        let mut channels = vec![self.ctl.clone()];
        channels.extend(self.lock().wakes.keys().cloned());
        for batch in channels.chunks(CHANNELS_PER_COMMAND) {
            tokio::time::timeout(self.timeout, sink.subscribe(batch))
                .await
                .map_err(|_| ClusterError::Timeout(self.timeout))?
                .map_err(|err| connect_failed(err, self.tls))?;
        }
        let mut state = self.lock();
        state.generation += 1;
        let generation = state.generation;
        state.sink = Some(sink);
        for wake in state.wakes.values_mut() {
            wake.subscribed_in = generation;
            // A wake-up may have been published while disconnected.
            wake.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok(stream)
    }

    /// Routes one message.
    fn dispatch(&self, msg: &Msg) {
        let channel = msg.get_channel_name();
        if channel == self.ctl {
            match serde_json::from_slice::<ControlMessage>(msg.get_payload_bytes()) {
                // No receiver is not an error: nobody needed to hear it.
                Ok(message) => {
                    mcp_cluster_telemetry::metrics::metrics()
                        .bus_received
                        .with_label_values(&[message.kind()])
                        .inc();
                    drop(self.control.send(message));
                }
                Err(err) => {
                    mcp_cluster_telemetry::metrics::metrics()
                        .bus_dropped
                        .with_label_values(&["malformed"])
                        .inc();
                    warn!(%err, "Undecodable control message dropped.");
                }
            }
        } else if let Some(wake) = self.lock().wakes.get(channel) {
            wake.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
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

    /// Checks that the connection answers.
    async fn ping(&self) -> Result<(), StoreError> {
        let Some(mut sink) = self.lock().sink.clone() else {
            return Ok(());
        };
        self.bounded(sink.ping::<redis::Value>()).await.map(drop)
    }
}

/// The task owning the connection: see the module doc.
async fn run(shared: Arc<Shared>, mut stream: PubSubStream, mut stop: oneshot::Receiver<()>) {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let reason = loop {
            tokio::select! {
                _ = &mut stop => return,
                msg = stream.next() => match msg {
                    Some(msg) => shared.dispatch(&msg),
                    None => break "connection closed".to_owned(),
                },
                _ = sweep.tick() => shared.sweep().await,
                _ = ping.tick() => {
                    if let Err(err) = shared.ping().await {
                        break err.to_string();
                    }
                }
            }
        };
        shared.lock().sink = None;
        warn!(%reason, "Redis pub/sub connection lost; reconnecting.");
        let mut delay = RECONNECT_MIN_DELAY;
        stream = loop {
            tokio::select! {
                _ = &mut stop => return,
                () = tokio::time::sleep(delay) => {}
            }
            match shared.establish().await {
                Ok(stream) => break stream,
                Err(err) => {
                    debug!(%err, ?delay, "Redis pub/sub reconnection failed.");
                    delay = (delay * 2).min(RECONNECT_MAX_DELAY);
                }
            }
        };
        info!("Redis pub/sub connection restored.");
        mcp_cluster_telemetry::metrics::metrics()
            .redis_reconnects
            .with_label_values(&["pubsub"])
            .inc();
    }
}
