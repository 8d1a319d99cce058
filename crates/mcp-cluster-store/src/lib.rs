//! Storage ports of an MCP node and their embedded in-memory implementation.
//!
//! The runtime reaches storage only through these traits: [`EventLog`] (the
//! SSE event log that makes streams resumable) and [`SessionStore`] (session
//! state that lets any node rehydrate a session). Embedded mode uses
//! [`memory`]; the Redis implementation lives in `mcp-cluster-redis` and passes the
//! same [`suite`].
//!
//! # Layout
//! - [`budget`]: [`ByteBudget`], the [`Ledger`] that holds kept data to it,
//!   and [`InFlightBytes`], what running work holds.
//! - [`ids`]: [`SessionId`], [`StreamId`], [`Position`], [`EventId`].
//! - [`event_log`]: the [`EventLog`] port, [`ReadBatch`], [`Wakeup`] and its
//!   [`WakeSender`].
//! - [`session_store`]: the [`SessionStore`] port and [`SessionRecord`].
//! - [`bus`]: the [`ControlBus`] port (cluster-wide messages).
//! - [`nodes`]: the [`NodeRegistry`] port (heartbeats, open streams, orphans).
//! - [`principal`]: [`Principal`], who a request acts for.
//! - [`quota`]: the [`QuotaStore`] port (rate counters, lease sets).
//! - [`memory`]: in-memory implementations with bounded retention.
//! - [`suite`]: one behavioural test suite every implementation must pass.

pub mod budget;
pub mod bus;
pub mod error;
pub mod event_log;
pub mod ids;
pub mod memory;
pub mod nodes;
pub mod principal;
pub mod quota;
pub mod session_store;
pub mod suite;
pub mod task_store;

use std::sync::Arc;

pub use budget::{ByteBudget, Hold, HoldRefused, InFlightBytes, Ledger, UNKNOWN_OWNER};
pub use bus::{ControlBus, ControlMessage};
pub use error::StoreError;
pub use event_log::{EventLog, ReadBatch, StoredEvent, WakeSender, Wakeup};
pub use ids::{EventId, IdError, NodeId, Position, SessionId, StreamId};
/// Request ids, as the ports carry them (streams and open requests name them).
pub use mcp_cluster_protocol::RequestId;
pub use nodes::{NodeRegistry, OpenStream};
pub use principal::Principal;
pub use quota::{QuotaKey, QuotaStore, Rate, Verdict};
pub use session_store::{
    ENDED_MEMORY, Ended, RawJson, Saved, SessionRecord, SessionStore, Subscribed,
};
pub use task_store::{AddedInputs, InputLimits, StoredTask, TaskStore};

/// The storage a node runs on, shared by every node of a cluster.
#[derive(Debug, Clone)]
pub struct Store {
    /// Session state.
    pub sessions: Arc<dyn SessionStore>,
    /// SSE event log.
    pub events: Arc<dyn EventLog>,
    /// Cluster-wide messages.
    pub bus: Arc<dyn ControlBus>,
    /// Node liveness and the streams each node writes.
    pub nodes: Arc<dyn NodeRegistry>,
    /// Quota counters and leases, shared by every node.
    pub quotas: Arc<dyn QuotaStore>,
    /// Tasks (the 2026-07-28 tasks extension).
    pub tasks: Arc<dyn TaskStore>,
    /// Other nodes share this store (Redis): session state may change
    /// elsewhere, so it is re-read per request unless this node holds the
    /// session's lease ([`SessionStore::leased`]). `false` for the
    /// embedded store, where this node is the only writer.
    pub shared: bool,
}

impl Store {
    /// The embedded in-memory store, without a maximum of sessions.
    pub fn memory(retention: memory::Retention) -> Self {
        Self::memory_holding(retention, usize::MAX)
    }

    /// The embedded in-memory store, holding at most `max_sessions` live
    /// sessions (a node's `max_sessions`: its sessions live here, whether
    /// or not their actors run).
    pub fn memory_holding(retention: memory::Retention, max_sessions: usize) -> Self {
        Self {
            sessions: Arc::new(memory::MemorySessionStore::with_max_sessions(max_sessions)),
            events: Arc::new(memory::MemoryEventLog::new(retention)),
            bus: Arc::new(memory::MemoryBus::new()),
            nodes: Arc::new(memory::MemoryNodes::default()),
            quotas: Arc::new(memory::MemoryQuotas::new()),
            tasks: Arc::new(memory::MemoryTasks::new(retention.finished_tasks)),
            shared: false,
        }
    }
}
