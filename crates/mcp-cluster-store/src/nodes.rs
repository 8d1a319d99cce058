//! The node registry port: heartbeats, the streams each node is writing,
//! and the claim a survivor makes on a dead node's streams.
//!
//! A node registers every SSE stream it writes responses into while the
//! stream is open. When a node stops heartbeating, one surviving node claims
//! its open streams and finalizes them (a JSON-RPC error for each request
//! still unanswered), so no client waits forever.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_protocol::RequestId;
use serde::{Deserialize, Serialize};

use crate::{NodeId, SessionId, StoreError, StreamId};

/// An open stream a node writes responses into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenStream {
    /// Its session.
    pub session: SessionId,
    /// The stream.
    pub stream: StreamId,
    /// The requests whose responses go into it.
    pub requests: Vec<RequestId>,
}

/// Node liveness and the streams each node writes.
#[async_trait]
pub trait NodeRegistry: Send + Sync + Debug + 'static {
    /// Marks the node alive for `ttl` (and known to the cluster): `true`
    /// when it was not known before, so that it joined (or joined again,
    /// after the cluster counted it out: declared dead and claimed, or a
    /// Redis failover lost its membership).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn heartbeat(&self, node: &NodeId, ttl: Duration) -> Result<bool, StoreError>;

    /// Forgets a node that stopped cleanly (after finalizing its streams).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn leave(&self, node: &NodeId) -> Result<(), StoreError>;

    /// Records that `node` writes responses into `stream`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn open_stream(&self, node: &NodeId, stream: &OpenStream) -> Result<(), StoreError>;

    /// Forgets a stream once its responses are written.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn close_stream(&self, node: &NodeId, stream: &StreamId) -> Result<(), StoreError>;

    /// Whether `node` is heartbeating (its heartbeat has not expired and it
    /// has not left). A stream registered for a node ([`Self::open_stream`])
    /// and then found alive here is one its claimer will see, should it die.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn alive(&self, node: &NodeId) -> Result<bool, StoreError>;

    /// Known nodes whose heartbeat has expired.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn dead_nodes(&self) -> Result<Vec<NodeId>, StoreError>;

    /// Takes a dead node's open streams and forgets the node, atomically:
    /// of several claimers exactly one gets the streams, the others none.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn claim_orphans(&self, dead: &NodeId) -> Result<Vec<OpenStream>, StoreError>;

    /// The cluster's request-state key ring (2026-07-28 input-required
    /// round trips), newest first, each `<id>:<base64 secret>`. Adds
    /// `fresh` when the newest key is `rotate` old or there is none, and
    /// drops keys older than `rotate + keep` (the newest always stays), in
    /// one atomic step: nodes calling at once agree on one ring.
    async fn state_keys(
        &self,
        fresh: &str,
        rotate: Duration,
        keep: Duration,
    ) -> Result<Vec<String>, StoreError>;
}
