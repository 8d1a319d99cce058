//! The port through which a 2025-11-25 session runs tasks: the session era
//! asks for a task and answers `tasks/*` through it; the stateless era's
//! task machinery implements it (one store, one lease, one count of
//! running tasks for both eras), and the runtime hands it to the sessions.
//! Neither era knows the other.

use std::sync::Arc;

use mcp_cluster_protocol::{ErrorObject, Request};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A session's task as its request's output sees it: what the handler's
/// questions and answer do to the task.
#[async_trait::async_trait]
pub(crate) trait TaskOutput: std::fmt::Debug + Send + Sync {
    /// The task's id.
    fn id(&self) -> &str;
    /// The handler asks its client (`key`: the question's id): the task
    /// waits for input (`input_required`), said before the question goes
    /// out.
    async fn question_out(&self, key: String, method: &str);
    /// Question `key` was answered, or given up: the task works again once
    /// none is open.
    async fn question_answered(&self, key: &str);
    /// The handler ended: its answer (`None`: cancelled) ends the task.
    async fn finish(&self, outcome: Option<Result<Value, ErrorObject>>);
}

/// What starting a session's task needs.
#[derive(Debug)]
pub(crate) struct TaskStart {
    /// Whose task it is: only requests of the same owner see it.
    pub(crate) owner: String,
    /// Whose byte budget the finished task counts against (the request's
    /// owner, as in-flight holds name it).
    pub(crate) client: String,
    /// The handler's token: tripped when the task is cancelled.
    pub(crate) job: CancellationToken,
    /// The TTL the client asked for (`params.task.ttl`), in ms.
    pub(crate) ttl_ms: Option<u64>,
}

/// The node's tasks, as the session era uses them.
#[async_trait::async_trait]
pub(crate) trait SessionTasks: std::fmt::Debug + Send + Sync {
    /// How many tasks (of either era) run on this node.
    fn running(&self) -> usize;
    /// Stores a new task: it, and the `CreateTaskResult` that answers its
    /// request. An error when it could not be stored.
    async fn start(&self, start: TaskStart) -> Result<(Arc<dyn TaskOutput>, Value), ErrorObject>;
    /// `tasks/get`, `tasks/result` or `tasks/cancel` of `owner`.
    async fn answer(&self, owner: &str, request: &Request) -> Result<Value, ErrorObject>;
}
