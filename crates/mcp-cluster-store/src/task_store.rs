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

/// What the store holds of a task, without its answers' contents (read
/// one with [`TaskStore::answer`]): polling a task costs its record, not
/// every answer given to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTask {
    /// The status, as last written.
    pub status: String,
    /// The record (JSON), as last written.
    pub record: String,
    /// Input keys answered by `tasks/update`.
    pub answered: Vec<String>,
    /// `tasks/cancel` was called.
    pub cancelled: bool,
}

/// Bounds of the answers a task holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// Most input keys; extra new keys are dropped.
    pub max_keys: usize,
    /// Most bytes of answers in all; an update that would go beyond is
    /// refused whole.
    pub max_bytes: u64,
}

/// What [`TaskStore::add_inputs`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddedInputs {
    /// The answers are held.
    Added,
    /// The task is gone; nothing written.
    Gone,
    /// The task's answers would exceed [`InputLimits::max_bytes`]; nothing
    /// written.
    TooLarge,
}

/// Tasks, shared by the cluster.
#[async_trait]
pub trait TaskStore: Send + Sync + Debug + 'static {
    /// Creates task `id` for `client` (whose share of the finished-task
    /// byte budget it counts against: a principal's key, or an address)
    /// with its first status and record; `false` when a task of that id
    /// exists already.
    async fn create(
        &self,
        id: &str,
        client: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// The task, or `None` when there is none (never created, expired, or
    /// dropped to hold the finished-task byte budget).
    async fn get(&self, id: &str) -> Result<Option<StoredTask>, StoreError>;

    /// The answer (JSON) given for input `key`, if any (and `None` when
    /// the task is gone).
    async fn answer(&self, id: &str, key: &str) -> Result<Option<String>, StoreError>;

    /// Replaces status and record and renews the TTL; `false` (and nothing
    /// written) when the task is gone or already terminal
    /// ([`TERMINAL`]). A terminal write makes the task count against the
    /// finished-task byte budget, which may drop older finished tasks.
    async fn put(
        &self,
        id: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Adds answers (key, JSON), replacing those of the same key, within
    /// `limits`.
    async fn add_inputs(
        &self,
        id: &str,
        inputs: &[(String, String)],
        limits: InputLimits,
    ) -> Result<AddedInputs, StoreError>;

    /// Sets the cancel flag; `false` when the task is gone.
    async fn cancel(&self, id: &str) -> Result<bool, StoreError>;

    /// Whether the finished tasks kept are over the store's budget with
    /// nothing left to drop (every client at or under its floor, see
    /// [`crate::Ledger::over_budget`]): new tasks should be refused until
    /// it is not. `false` for stores that keep no budget.
    fn over_budget(&self) -> bool {
        false
    }
}
