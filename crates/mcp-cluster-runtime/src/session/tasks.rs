//! Tasks in a 2025-11-25 session: a task-augmented `tools/call`
//! (`params.task`) is answered at once with a `CreateTaskResult` and runs
//! on as one of the session's in-flight requests on the node that took it.
//! What it emits (progress, log lines, questions to the client) goes to the
//! session's own stream (the GET stream; legacy HTTP+SSE and stdio: their
//! one stream), naming the task in `_meta`
//! (`io.modelcontextprotocol/related-task`); while it waits for an answer
//! it is `input_required`.
//!
//! Its state is a record of the node's task store, bound to the session
//! (the same records, leases and cancel flags as the 2026-07-28 tasks
//! extension, reached through [`SessionTasks`]): `tasks/get`,
//! `tasks/result` and `tasks/cancel` are answered on any node, and a task
//! whose node died is read as `failed` once its lease lapsed.
//!
//! Not served: `tasks/list` (not declared; the store keeps no index of a
//! session's tasks), `notifications/tasks/status` (optional; clients poll),
//! and task-augmented requests other than `tools/call`.

use std::sync::Arc;

use mcp_cluster_protocol::types::{JsonObject, TaskSupport};
use mcp_cluster_protocol::{ErrorCode, ErrorObject, Request};
use mcp_cluster_store::SessionId;
use serde_json::{Value, json};

use crate::request::service::McpService;
#[cfg(doc)]
use crate::request::tasks::SessionTasks;
use crate::request::tasks::TaskOutput;

/// A session's task stored and answered, not yet running: ended `failed`
/// if dropped so (its session stopped meanwhile), as no handler will end
/// it.
#[derive(Debug)]
pub(crate) struct Unstarted(Option<Arc<dyn TaskOutput>>);

impl Unstarted {
    pub(crate) fn new(run: Arc<dyn TaskOutput>) -> Self {
        Self(Some(run))
    }

    /// The run, to start its handler.
    pub(crate) fn start(mut self) -> Option<Arc<dyn TaskOutput>> {
        self.0.take()
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        let Some(run) = self.0.take() else {
            return;
        };
        // Dropped outside any runtime (the process ending), nothing can
        // finish it: its lease lapses and the task fails as any orphan.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let err = ErrorObject::internal("the session stopped before the task started");
            run.finish(Some(Err(err))).await;
        });
    }
}

/// `capabilities.tasks` of a 2025-11-25 session whose service runs tasks:
/// task-augmented `tools/call` and `tasks/cancel` (no `tasks/list`).
pub(crate) fn capabilities() -> JsonObject {
    let tasks = json!({"cancel": {}, "requests": {"tools": {"call": {}}}});
    match tasks {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// The task owner of session `id`'s tasks in the store, beside principals'
/// keys (`<issuer>#<subject>`, never without `#`) and the empty owner of
/// stateless tasks without authorization.
pub(crate) fn owner(id: &SessionId) -> String {
    format!("session {id}")
}

/// Whether a `tools/call` runs as a task: `Ok(Some(ttl))` when it is
/// task-augmented (`params.task`, with the TTL it asks for, if any) and its
/// tool allows it; `Ok(None)` when it runs as an ordinary call; -32601 for
/// a task asked of a tool that forbids it, or an ordinary call of a tool
/// that requires one (2025-11-25, tool-level negotiation); -32602 for a
/// `params.task` that is not an object.
pub(crate) fn augmentation(
    service: &dyn McpService,
    request: &Request,
) -> Result<Option<Option<u64>>, ErrorObject> {
    let params = request.params.as_ref();
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let task = match params.and_then(|p| p.get("task")) {
        None | Some(Value::Null) => None,
        Some(Value::Object(task)) => Some(task),
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "params.task must be an object ({\"ttl\": milliseconds} or {})",
            ));
        }
    };
    let shown: String = name.chars().take(128).collect();
    match (task, service.task_support(name)) {
        (Some(_), TaskSupport::Forbidden) => Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("tool {shown:?} cannot run as a task (its execution.taskSupport is forbidden)"),
        )),
        (None, TaskSupport::Required) => Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("tool {shown:?} runs only as a task: call it with params.task"),
        )),
        (Some(task), _) => Ok(Some(task.get("ttl").and_then(Value::as_u64))),
        (None, _) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declares_cancel_and_task_augmented_tool_calls_only() {
        let caps = Value::Object(capabilities());
        assert_eq!(
            caps,
            json!({"cancel": {}, "requests": {"tools": {"call": {}}}})
        );
        assert!(caps.get("list").is_none());
    }

    #[test]
    fn a_session_owner_is_never_a_principal_key() {
        let id = SessionId::random();
        assert!(!owner(&id).contains('#'));
        assert!(!owner(&id).is_empty());
    }
}
