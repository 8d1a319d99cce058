//! What the node itself holds, below any MCP request: its settings, its
//! errors, its quotas, the reading of event-log streams, and the state
//! every part of the runtime on this node shares (`NodeContext`).
//!
//! Owner: the [`crate::runtime::Runtime`] makes the node's context once and
//! hands it to both eras. Stop path: dropped with the runtime.

pub mod config;
pub mod error;
pub mod follow;
pub mod quota;
pub(crate) mod registry;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::time::Duration;

use mcp_cluster_store::{
    ControlMessage, Hold, HoldRefused, InFlightBytes, NodeId, Store, StoreError,
};
use tokio_util::sync::CancellationToken;

use crate::node::error::RuntimeError;
use crate::node::follow::Attachments;
use crate::node::quota::{Quota, Quotas};

/// What every part of the runtime on this node shares: its identity in the
/// cluster, the store, and which streams it is reading.
#[derive(Debug)]
pub(crate) struct NodeContext {
    /// This node, as the node registry and the control bus know it.
    pub(crate) id: NodeId,
    /// The shared store.
    pub(crate) store: Store,
    /// The streams read on this node.
    pub(crate) attachments: Arc<Attachments>,
    /// Requests running on this node: incremented by a session when it
    /// starts one, decremented when the request actor stops.
    pub(crate) in_flight: AtomicUsize,
    /// Exchanges of POSTed requests not yet fully answered: counted from
    /// the moment the transport opens one until its last response is
    /// written (and its stream closed), or it is dropped unanswered.
    pub(crate) open_exchanges: AtomicUsize,
    /// Set by `Runtime::leave`: no heartbeat after it. A tokio mutex: held
    /// across the heartbeat and the leave, so neither overtakes the other.
    pub(crate) membership: tokio::sync::Mutex<bool>,
    /// Set by the first heartbeat that made this node a member of the
    /// cluster (`Runtime::heartbeat`).
    pub(crate) joined: AtomicBool,
    /// Quota checks, and the stream slots this node's connections hold.
    pub(crate) quotas: Arc<Quotas>,
    /// The bytes this node's running work holds, per owner and in all:
    /// held by admission ([`NodeContext::admit_bytes`]) for a request's
    /// parameters, grown by an exchange for its stream's events; each
    /// [`Hold`] gives its bytes back when dropped.
    pub(crate) in_flight_bytes: Arc<InFlightBytes>,
    /// Parent of every request's token: tripped when in-flight requests
    /// must stop (end of the drain grace period).
    pub(crate) stop: CancellationToken,
    /// Tripped when draining starts: every SSE follow and listen stream
    /// ends with `retry`.
    pub(crate) drain: CancellationToken,
    /// Set when draining starts (readiness fails).
    pub(crate) draining: AtomicBool,
    /// Set late in the drain: no new work is admitted, not even for
    /// existing sessions (503, the client retries elsewhere).
    pub(crate) closing: AtomicBool,
    /// Control messages being published again while the store is away.
    retrying_publishes: AtomicUsize,
    /// Session ends finishing after their answer ([`DeferredEnd`]).
    deferred_ends: AtomicUsize,
}

/// Counts one open exchange on its node while it lives.
#[derive(Debug)]
pub(crate) struct ExchangeTicket(Arc<NodeContext>);

impl ExchangeTicket {
    pub(crate) fn issue(node: &Arc<NodeContext>) -> Self {
        node.open_exchanges.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(node))
    }
}

impl Drop for ExchangeTicket {
    fn drop(&mut self) {
        self.0.open_exchanges.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a control message (or a server notification) is written
/// again while the store is away; a Redis failover takes a few seconds.
pub(crate) const BUS_PATIENCE: Duration = Duration::from_secs(10);
/// First pause between two tries.
const RETRY_MIN: Duration = Duration::from_millis(50);
/// Longest pause between two tries.
const RETRY_MAX: Duration = Duration::from_millis(500);

/// Runs `op` again while it finds the store away (`Unavailable`: a
/// failover, a restart), from [`RETRY_MIN`] doubling to [`RETRY_MAX`]
/// apart, for up to [`BUS_PATIENCE`] and as long as `may_wait` lets it
/// (asked before each pause); returns its last outcome.
pub(crate) async fn while_store_away<T, Fut>(
    mut may_wait: impl FnMut() -> bool,
    mut op: impl FnMut() -> Fut,
) -> Result<T, StoreError>
where
    Fut: Future<Output = Result<T, StoreError>>,
{
    let started = tokio::time::Instant::now();
    let mut delay = RETRY_MIN;
    loop {
        match op().await {
            Err(StoreError::Unavailable(_))
                if started.elapsed() + delay < BUS_PATIENCE && may_wait() =>
            {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
            done => return done,
        }
    }
}

/// Whether a control message went out; a failure is logged and counted.
fn went_out(published: Result<(), StoreError>, message: &ControlMessage) -> bool {
    match published {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(error = %err, kind = message.kind(), "Control message could not be published.");
            mcp_cluster_telemetry::metrics::metrics()
                .bus_dropped
                .with_label_values(&["publish_failed"])
                .inc();
            false
        }
    }
}
/// Control messages a node keeps trying at once; more are dropped at their
/// first failure (each holds its message: a client's answer may be large).
const MAX_RETRYING_PUBLISHES: usize = 1024;

/// One control message being published again, counted on its node.
struct RetryingPublish<'a>(&'a NodeContext);

impl<'a> RetryingPublish<'a> {
    fn take(node: &'a NodeContext) -> Option<Self> {
        take_slot(&node.retrying_publishes, MAX_RETRYING_PUBLISHES).then_some(Self(node))
    }
}

/// Counts one more on `count` unless it is at `max`; whether it did.
fn take_slot(count: &AtomicUsize, max: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

/// Session ends whose last work (deleting the streams, announcing the end)
/// may run on a node after their answer; one more waits for its own.
const MAX_DEFERRED_ENDS: usize = 1024;

/// One session end's last work running after its answer, counted on its
/// node while it lives; and counted as a running request, so a draining
/// node waits for it.
pub(crate) struct DeferredEnd {
    node: Arc<NodeContext>,
    _running: InFlightTicket,
}

impl DeferredEnd {
    pub(crate) fn take(node: &Arc<NodeContext>) -> Option<Self> {
        take_slot(&node.deferred_ends, MAX_DEFERRED_ENDS).then(|| Self {
            node: Arc::clone(node),
            _running: InFlightTicket::issue(node),
        })
    }
}

impl Drop for DeferredEnd {
    fn drop(&mut self) {
        self.node.deferred_ends.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for RetryingPublish<'_> {
    fn drop(&mut self) {
        self.0.retrying_publishes.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts one running request on its node while it lives.
#[derive(Debug)]
pub(crate) struct InFlightTicket(Arc<NodeContext>);

impl InFlightTicket {
    pub(crate) fn issue(node: &Arc<NodeContext>) -> Self {
        node.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(node))
    }
}

impl Drop for InFlightTicket {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl NodeContext {
    /// Publishes on the control bus once: for a message that must not
    /// arrive late (a stream's new reader ends the others when it
    /// attaches, not seconds later when a newer one may be reading). A
    /// failure is logged and counted.
    pub(crate) async fn publish_once(&self, message: ControlMessage) {
        let published = self.store.bus.publish(&message).await;
        went_out(published, &message);
    }

    /// Publishes on the control bus. While the store is away (a failover,
    /// a restart) it tries again for up to [`BUS_PATIENCE`]: a client's
    /// answer to a server request, a cancellation, a session's change or a
    /// stream's failure published during a Redis failover would otherwise
    /// be dropped, and the request waiting for it would wait until its own
    /// timeout. At most [`MAX_RETRYING_PUBLISHES`] wait at once on a node;
    /// beyond that, and after the patience, a failure is logged and
    /// counted, not returned (a missed message is caught by TTL renewal or
    /// a re-read, or its request times out). Returns whether it went out.
    pub(crate) async fn publish(&self, message: ControlMessage) -> bool {
        let mut retrying = None;
        let may_wait = || {
            if self.stop.is_cancelled() {
                return false;
            }
            if retrying.is_none() {
                retrying = RetryingPublish::take(self);
            }
            retrying.is_some()
        };
        let published = while_store_away(may_wait, || self.store.bus.publish(&message)).await;
        went_out(published, &message)
    }

    /// A node with nothing running yet.
    pub(crate) fn new(
        store: Store,
        quotas: Arc<Quotas>,
        in_flight_bytes: Arc<InFlightBytes>,
    ) -> Self {
        Self {
            id: NodeId::random(),
            store,
            attachments: Arc::new(Attachments::default()),
            in_flight: AtomicUsize::new(0),
            open_exchanges: AtomicUsize::new(0),
            membership: tokio::sync::Mutex::new(false),
            joined: AtomicBool::new(false),
            quotas,
            in_flight_bytes,
            stop: CancellationToken::new(),
            drain: CancellationToken::new(),
            draining: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            retrying_publishes: AtomicUsize::new(0),
            deferred_ends: AtomicUsize::new(0),
        }
    }

    /// Tripped when in-flight work must stop (end of the drain grace).
    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Tripped when the node starts draining.
    pub(crate) fn drain_token(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// Whether the node is draining.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Whether the node admits no more work.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Admits new work of `owner` holding `bytes` (its parameters): held
    /// until the returned [`Hold`] is dropped. Refused, before anything
    /// runs, when the owner holds its share of in-flight bytes (a quota:
    /// 429), when the node holds its in-flight budget, or when what it
    /// keeps for clients (closed streams, or, for a task, finished tasks)
    /// is over budget with nothing left to drop (503): the node takes no
    /// new work rather than drop what a client within its floor kept.
    ///
    /// # Errors
    /// [`RuntimeError::QuotaExceeded`] (`in_flight_bytes_per_client`);
    /// [`RuntimeError::NodeBudget`].
    pub(crate) fn admit_bytes(
        &self,
        owner: Option<&str>,
        bytes: u64,
        work: Work,
    ) -> Result<Hold, RuntimeError> {
        self.kept_room(work)?;
        self.in_flight_bytes
            .try_hold(owner, bytes)
            .map_err(|refused| self.refused(refused))
    }

    /// As [`Self::admit_bytes`], for bytes already held (a body counted
    /// while it was read): refused when its owner, or the node, holds more
    /// than its budget beside it.
    ///
    /// # Errors
    /// As [`Self::admit_bytes`]; the hold is dropped.
    pub(crate) fn admit_hold(&self, hold: Hold, work: Work) -> Result<Hold, RuntimeError> {
        self.kept_room(work)?;
        hold.check().map_err(|refused| self.refused(refused))?;
        Ok(hold)
    }

    /// Whether the budget that `work` will keep its outcome in has room.
    fn kept_room(&self, work: Work) -> Result<(), RuntimeError> {
        let full = match work {
            Work::Stream => self.store.events.over_budget(),
            Work::Task => self.store.tasks.over_budget(),
            Work::Direct => false,
        };
        if full {
            return Err(self.refused(HoldRefused::Node));
        }
        Ok(())
    }

    /// The refusal of new work for its bytes, counted and logged.
    pub(crate) fn refused(&self, refused: HoldRefused) -> RuntimeError {
        match refused {
            HoldRefused::Client => {
                crate::node::quota::count_refusal(Quota::InFlightBytesPerClient);
                tracing::debug!("Request refused: the client holds its in-flight share.");
                RuntimeError::QuotaExceeded {
                    quota: Quota::InFlightBytesPerClient,
                    retry_after: IN_FLIGHT_RETRY_AFTER,
                }
            }
            _ => {
                mcp_cluster_telemetry::metrics::metrics()
                    .retention_refusals
                    .with_label_values(&["node_budget"])
                    .inc();
                tracing::debug!("Request refused: the node holds its byte budget.");
                RuntimeError::NodeBudget
            }
        }
    }
}

/// What new work will keep once done, which decides the kept budget that
/// must have room for it ([`NodeContext::admit_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// A session-era request: its answer may become a stream of the
    /// event log, kept once closed.
    Stream,
    /// A stateless request that may become a task, kept once finished.
    Task,
    /// A stateless request answered directly: nothing kept once done.
    Direct,
}

/// `Retry-After` of a request refused for the client's in-flight bytes:
/// they come back as its running requests end, which is not known ahead.
const IN_FLIGHT_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use async_trait::async_trait;
    use mcp_cluster_store::memory::{MemoryBus, Retention};
    use mcp_cluster_store::{ByteBudget, ControlBus, SessionId};
    use tokio::sync::broadcast;

    use super::*;
    use crate::node::quota::QuotaConfig;

    /// The in-memory bus, away for its first `away` publishes.
    #[derive(Debug)]
    struct Away {
        inner: MemoryBus,
        away: AtomicUsize,
    }

    #[async_trait]
    impl ControlBus for Away {
        async fn publish(&self, message: &ControlMessage) -> Result<(), StoreError> {
            let failing = self
                .away
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            if failing.is_ok() {
                return Err(StoreError::Unavailable("redis: failing over".into()));
            }
            self.inner.publish(message).await
        }

        fn subscribe(&self) -> broadcast::Receiver<ControlMessage> {
            self.inner.subscribe()
        }
    }

    fn node_on(bus: Arc<Away>) -> NodeContext {
        let store = Store {
            bus,
            ..Store::memory(Retention::default())
        };
        let quotas = Arc::new(Quotas::new(
            QuotaConfig::default(),
            Arc::clone(&store.quotas),
        ));
        let budget = ByteBudget {
            per_node: u64::MAX,
            per_client: u64::MAX,
            floor: 0,
        };
        NodeContext::new(store, quotas, Arc::new(InFlightBytes::new(budget)))
    }

    fn changed() -> ControlMessage {
        ControlMessage::SessionChanged {
            session: SessionId::random(),
            origin: NodeId::random(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_published_while_the_store_is_away_goes_out_once_it_is_back() {
        let bus = Arc::new(Away {
            inner: MemoryBus::new(),
            away: AtomicUsize::new(5),
        });
        let mut heard = bus.subscribe();
        let node = node_on(Arc::clone(&bus));
        let message = changed();
        assert!(node.publish(message.clone()).await);
        assert_eq!(heard.recv().await.unwrap(), message);
        assert!(heard.try_recv().is_err(), "published once");
        assert_eq!(node.retrying_publishes.load(Ordering::Acquire), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn past_its_patience_or_its_share_a_message_is_dropped() {
        let bus = Arc::new(Away {
            inner: MemoryBus::new(),
            away: AtomicUsize::new(usize::MAX),
        });
        let node = node_on(bus);
        let started = tokio::time::Instant::now();
        assert!(!node.publish(changed()).await);
        assert!(started.elapsed() <= BUS_PATIENCE);
        // With every retry slot taken, a failure is not retried.
        node.retrying_publishes
            .store(MAX_RETRYING_PUBLISHES, Ordering::Release);
        let started = tokio::time::Instant::now();
        assert!(!node.publish(changed()).await);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn session_ends_left_to_run_after_their_answer_are_bounded_and_counted_as_running() {
        let node = Arc::new(node_on(Arc::new(Away {
            inner: MemoryBus::new(),
            away: AtomicUsize::new(0),
        })));
        let held: Vec<DeferredEnd> = (0..MAX_DEFERRED_ENDS)
            .map(|_| DeferredEnd::take(&node).expect("within the bound"))
            .collect();
        assert_eq!(node.in_flight.load(Ordering::Acquire), MAX_DEFERRED_ENDS);
        assert!(
            DeferredEnd::take(&node).is_none(),
            "one more waits for its own"
        );
        drop(held);
        assert_eq!(node.in_flight.load(Ordering::Acquire), 0);
        assert_eq!(node.deferred_ends.load(Ordering::Acquire), 0);
        assert!(DeferredEnd::take(&node).is_some());
    }
}
