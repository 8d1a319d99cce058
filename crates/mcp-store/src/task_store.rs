//! The task port (the `io.modelcontextprotocol/tasks` extension of
//! 2026-07-28): a task's state, the answers clients give it and its
//! cancellation, shared by every node, so a task created on one node is
//! polled, answered, cancelled and fetched on any other.
//!
//! A task has three parts, each written by whom it belongs to:
//! - its **record** (status, timestamps, result or error, the questions it
//!   waits on, its owner's lease), opaque JSON the runtime writes; only the
//!   node running the task writes it, except that anyone may end a task
//!   whose owner stopped renewing its lease ([`TaskStore::put`] refuses to
//!   change a task that already reached a terminal status, so a late write
//!   never undoes an end);
//! - its **inputs**: answers by input key, added by `tasks/update` on any
//!   node ([`TaskStore::add_inputs`]);
//! - its **cancel flag**, set by `tasks/cancel` on any node.
//!
//! Everything of a task expires together, `ttl` after its last write.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::StoreError;

/// Statuses after which a task never changes.
pub const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// What the store holds of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTask {
    /// The status, as last written.
    pub status: String,
    /// The record (JSON), as last written.
    pub record: String,
    /// Answers added by `tasks/update`: input key, answer (JSON).
    pub inputs: Vec<(String, String)>,
    /// `tasks/cancel` was called.
    pub cancelled: bool,
}

/// Tasks, shared by the cluster.
#[async_trait]
pub trait TaskStore: Send + Sync + Debug + 'static {
    /// Creates task `id` with its first status and record; `false` when a
    /// task of that id exists already.
    async fn create(
        &self,
        id: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// The task, or `None` when there is none (never created, or expired).
    async fn get(&self, id: &str) -> Result<Option<StoredTask>, StoreError>;

    /// Replaces status and record and renews the TTL; `false` (and nothing
    /// written) when the task is gone or already terminal
    /// ([`TERMINAL`]).
    async fn put(
        &self,
        id: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Adds answers (key, JSON), replacing those of the same key, at most
    /// `max` keys held in all (extra new keys are dropped); `false` when
    /// the task is gone.
    async fn add_inputs(
        &self,
        id: &str,
        inputs: &[(String, String)],
        max: usize,
    ) -> Result<bool, StoreError>;

    /// Sets the cancel flag; `false` when the task is gone.
    async fn cancel(&self, id: &str) -> Result<bool, StoreError>;
}
