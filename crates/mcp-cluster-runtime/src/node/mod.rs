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

use mcp_cluster_store::{ControlMessage, NodeId, Store};
use tokio_util::sync::CancellationToken;

use crate::node::follow::Attachments;
use crate::node::quota::Quotas;

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
    pub(crate) fn new(store: Store, quotas: Arc<Quotas>) -> Self {
        Self {
            id: NodeId::random(),
            store,
            attachments: Arc::new(Attachments::default()),
            in_flight: AtomicUsize::new(0),
            open_exchanges: AtomicUsize::new(0),
            membership: tokio::sync::Mutex::new(false),
            quotas,
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
}
