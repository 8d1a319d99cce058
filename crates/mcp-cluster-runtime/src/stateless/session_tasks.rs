//! The session era's tasks (a 2025-11-25 session's task-augmented
//! `tools/call`, see `crate::session::tasks`), served by this era's task
//! machinery through the port the session era asks it by
//! ([`SessionTasks`]): the same records, leases and cancel flags as the
//! tasks extension, answered in that revision's shapes.

use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_protocol::types::JsonObject;
use mcp_cluster_protocol::{ErrorObject, Request, methods};
use serde_json::{Value, json};

use crate::request::tasks::{SessionTasks, TaskOutput, TaskStart};
use crate::stateless::Stateless;
use crate::stateless::kept;
use crate::stateless::tasks::{
    MAX_INPUTS, MAX_TASK_ID, POLLED, TaskRecord, TaskRun, TaskSpec, polled_key, task_store_away,
};

/// First pause of a `tasks/result` between two reads of its task
/// elsewhere; doubled up to [`RESULT_POLL_MAX`]. A task ending on this node
/// wakes it at once.
const RESULT_POLL_MIN: Duration = Duration::from_millis(100);
/// Longest pause between two reads.
const RESULT_POLL_MAX: Duration = Duration::from_secs(1);

#[async_trait::async_trait]
impl SessionTasks for Stateless {
    fn running(&self) -> usize {
        self.running_tasks()
    }

    async fn start(&self, start: TaskStart) -> Result<(Arc<dyn TaskOutput>, Value), ErrorObject> {
        let spec = TaskSpec {
            stateless: self.clone(),
            principal: start.owner,
            client: start.client,
            job: start.job,
            cancelled: Arc::default(),
            ttl_ms: start.ttl_ms,
            session_era: true,
        };
        let id = uuid::Uuid::new_v4().to_string();
        match spec.create(id, None).await {
            Some((run, record)) => Ok((run, json!({ "task": record.session_view() }))),
            None => Err(ErrorObject::internal(
                "the task could not be stored; try again",
            )),
        }
    }

    async fn answer(&self, owner: &str, request: &Request) -> Result<Value, ErrorObject> {
        answer(self, owner, request).await
    }
}

#[async_trait::async_trait]
impl TaskOutput for TaskRun {
    fn id(&self) -> &str {
        TaskRun::id(self)
    }

    async fn question_out(&self, key: String, method: &str) {
        TaskRun::question_out(self, key, method).await;
    }

    async fn question_answered(&self, key: &str) {
        TaskRun::question_answered(self, key).await;
    }

    async fn finish(&self, outcome: Option<Result<Value, ErrorObject>>) {
        TaskRun::finish(self, outcome).await;
    }
}

/// `tasks/get`, `tasks/result` and `tasks/cancel` of `owner`. Any
/// `params.task` or related-task `_meta` on them is ignored: the `taskId`
/// param names the task.
async fn answer(
    stateless: &Stateless,
    owner: &str,
    request: &Request,
) -> Result<Value, ErrorObject> {
    let id = request
        .params
        .as_ref()
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= MAX_TASK_ID)
        .ok_or_else(|| ErrorObject::invalid_params("taskId must be a task id (1-128 bytes)"))?;
    match request.method.as_str() {
        methods::TASKS_CANCEL => cancel(stateless, id, owner).await,
        methods::TASKS_RESULT => {
            let (record, answered) = stateless.read_task(id, owner).await?;
            polled(stateless, id, &record, &answered).await;
            result(stateless, id, owner).await
        }
        _ => {
            let (record, answered) = stateless.read_task(id, owner).await?;
            polled(stateless, id, &record, &answered).await;
            Ok(record.session_view())
        }
    }
}

/// Marks task `id` polled by its client (which then knows the task its
/// questions name: [`TaskRun::question_out`]), once, while it runs.
async fn polled(stateless: &Stateless, id: &str, record: &TaskRecord, answered: &[String]) {
    if record.terminal() || answered.iter().any(|k| k == POLLED) {
        return;
    }
    let limits = mcp_cluster_store::InputLimits {
        max_keys: MAX_INPUTS,
        max_bytes: stateless.config().max_task_answers_bytes,
    };
    let mark = [(POLLED.to_owned(), "true".to_owned())];
    match stateless.store().tasks.add_inputs(id, &mark, limits).await {
        // Its node hears at once when it is this one.
        Ok(_) => stateless.kept_wakers().wake(&polled_key(id)),
        Err(err) => tracing::debug!(task = %id, error = %err, "Task not marked polled."),
    }
}

/// `tasks/cancel`: the task is `cancelled` in the store before the answer
/// goes out, and the node running it stops its handler at its next lease
/// renewal; a task already ended is refused (-32602).
async fn cancel(stateless: &Stateless, id: &str, owner: &str) -> Result<Value, ErrorObject> {
    let store = &stateless.store().tasks;
    loop {
        let (mut record, _) = stateless.read_task(id, owner).await?;
        if record.terminal() {
            return Err(ErrorObject::invalid_params(format!(
                "task {id} is already {}; it cannot be cancelled",
                record.status
            )));
        }
        record.status = "cancelled".into();
        record.status_message = Some("cancelled by the client".into());
        record.input_requests.clear();
        record.touch();
        let json = serde_json::to_string(&record).unwrap_or_default();
        let ttl = record.ttl();
        if store
            .put(id, "cancelled", &json, ttl)
            .await
            .map_err(task_store_away)?
        {
            // Its node stops the handler once it sees the flag (a task that
            // finishes first keeps this end: a terminal record is never
            // written again).
            store.cancel(id).await.map_err(task_store_away)?;
            return Ok(record.session_view());
        }
        // It ended (or was cancelled) meanwhile: read that end.
    }
}

/// `tasks/result`: waits until the task ended, then answers as its
/// `tools/call` would have: its result (naming the task in `_meta`), or
/// its JSON-RPC error.
async fn result(stateless: &Stateless, id: &str, owner: &str) -> Result<Value, ErrorObject> {
    let waiting = stateless.kept_wakers().wait_on(kept::record_key(id));
    let mut delay = RESULT_POLL_MIN;
    loop {
        let (record, _) = stateless.read_task(id, owner).await?;
        if record.terminal() {
            if let Some(error) = record.error {
                return Err(error);
            }
            let Some(Value::Object(mut result)) = record.result else {
                return Err(ErrorObject::internal(format!(
                    "task {id} was {} before it had a result",
                    record.status
                )));
            };
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(JsonObject::new()));
            if let Value::Object(meta) = meta {
                meta.insert(methods::meta::RELATED_TASK.into(), json!({ "taskId": id }));
            }
            return Ok(Value::Object(result));
        }
        tokio::select! {
            () = waiting.notified() => {}
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(RESULT_POLL_MAX);
    }
}
