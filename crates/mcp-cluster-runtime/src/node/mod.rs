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

use mcp_cluster_store::{ControlMessage, Hold, HoldRefused, InFlightBytes, NodeId, Store};
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
    /// Publishes on the control bus; a failure is logged, not returned: the
    /// messages are best effort (a missed one is caught by TTL renewal or a
    /// re-read).
    pub(crate) async fn publish(&self, message: ControlMessage) {
        if let Err(err) = self.store.bus.publish(&message).await {
            tracing::warn!(error = %err, "Control message could not be published.");
        }
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
            quotas,
            in_flight_bytes,
            stop: CancellationToken::new(),
            drain: CancellationToken::new(),
            draining: AtomicBool::new(false),
            closing: AtomicBool::new(false),
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
