//! Tasks (the `io.modelcontextprotocol/tasks` extension of 2026-07-28):
//! a `tools/call` answered with a task handle, run on, and polled,
//! answered, cancelled and fetched from any node.
//!
//! A task's state lives in the store ([`mcp_cluster_store::TaskStore`]); the node
//! that created it runs its handler (`TaskRun`) and alone writes its
//! record. While it runs, that node renews the task's lease every
//! [`RENEW`]; a task whose lease lapsed ([`LEASE`] without renewal: its
//! node died) is ended as `failed` by whichever node next reads it, so no
//! task stays `working` for ever. Answers (`tasks/update`) and cancellation
//! (`tasks/cancel`) go to the store from any node; the running node picks
//! them up within [`INPUT_POLL`] (answers) and [`RENEW`] (cancellation).
//!
//! A handler asks (elicitation, sampling, roots) as in any era: inside a
//! task the question is published in the task (`input_required`) and the
//! handler waits for the client's `tasks/update`.
//!
//! A 2025-11-25 session's tasks (`crate::session::tasks`) are runs of the
//! same kind, records of the same store: only their answering differs
//! (their questions go to the session's stream, their views are that
//! revision's, and a tool's `isError` ends them `failed`).

use mcp_cluster_telemetry::rfc3339;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_cluster_protocol::types::ClientCapabilities;
use mcp_cluster_protocol::{ErrorCode, ErrorObject, Request, RequestId, Response};
use mcp_cluster_store::StoreError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::node::error::RuntimeError;
use crate::request::context::RequestOutput;
use crate::request::context::{AskError, EmitError};
use crate::stateless::Stateless;
use crate::stateless::kept;
use crate::stateless::mrtr::{millis, now_ms};

/// The extension's identifier, in capabilities.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// How long a task's lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often the running node renews the lease and looks for a cancel.
pub const RENEW: Duration = Duration::from_secs(2);
/// How often a task waiting for input looks for the client's answers.
pub const INPUT_POLL: Duration = Duration::from_millis(200);
/// How long a task's end is tried again while the store is away: within
/// its lease, so that no other node reads it as abandoned meanwhile.
const FINISH_PATIENCE: Duration = Duration::from_secs(8);
/// First pause before a task's end is written again.
const WRITE_RETRY_MIN_DELAY: Duration = Duration::from_millis(100);
/// Longest pause between two tries.
const WRITE_RETRY_MAX_DELAY: Duration = Duration::from_secs(1);

/// How often a kept run's progress and log lines are written to its
/// record at most (its retries poll the record, and pass on what is new).
const NOTES_WRITE_EVERY: Duration = Duration::from_millis(100);

/// The log lines a kept run's record keeps for its retries: the newest.
const MAX_KEPT_LOG_LINES: usize = 16;

/// The largest log line a kept run's record keeps (its params as JSON, in
/// bytes): a larger one is passed on as a line saying its size.
const MAX_KEPT_LOG_BYTES: usize = 2048;

/// The longest progress message a kept run's record keeps, in bytes (a
/// longer one is cut).
const MAX_PROGRESS_MESSAGE_BYTES: usize = 1024;
/// The mark a session's task gets among its inputs once its client polled
/// it (`crate::stateless::session_tasks`); never a question's key there.
pub(crate) const POLLED: &str = "polled";

/// The wake-up of a session's task waiting for its client to poll it.
pub(crate) fn polled_key(id: &str) -> String {
    format!("polled:{id}")
}

/// The shortest TTL a client's `params.task.ttl` gets, in ms: a task
/// must outlive the poll that reads its end.
const MIN_ASKED_TTL_MS: u64 = 10_000;

/// Most answers a task holds.
pub const MAX_INPUTS: usize = 64;
/// Longest task id accepted from a client.
pub const MAX_TASK_ID: usize = 128;

/// The result, or, when its JSON is over `max` bytes, the error the task
/// ends with instead: a finished task is kept for its TTL, so its size is
/// bounded like everything else a client can make a node keep.
fn within(result: Value, max: u64) -> Result<Value, ErrorObject> {
    let bytes = serde_json::to_string(&result).map_or(0, |s| s.len() as u64);
    if bytes <= max {
        return Ok(result);
    }
    mcp_cluster_telemetry::metrics::metrics()
        .retention_refusals
        .with_label_values(&["task_result"])
        .inc();
    Err(ErrorObject::internal(format!(
        "the task's result is {bytes} bytes; this server keeps at most {max} bytes of a task's result"
    )))
}

/// The `statusMessage` of a task whose tool reported an error: the text of
/// its first text content (cut to [`MAX_PROGRESS_MESSAGE_BYTES`]), or a
/// word that says so.
fn tool_error_message(result: &Value) -> String {
    let text = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|c| c["text"].as_str().filter(|_| c["type"] == "text"));
    match text {
        Some(text) => {
            let mut end = text.len().min(MAX_PROGRESS_MESSAGE_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("the tool reported an error: {}", &text[..end])
        }
        None => "the tool reported an error".into(),
    }
}

/// Whether the request's client declared the tasks extension.
pub fn declares_extension(caps: &ClientCapabilities) -> bool {
    caps.other
        .get("extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(Value::is_object)
}

/// -32021 for a request that needs the extension.
pub(crate) fn extension_required() -> ErrorObject {
    ErrorObject::new(
        ErrorCode::MISSING_CLIENT_CAPABILITY,
        format!("this request needs the client to declare the {EXTENSION} extension"),
    )
    .with_data(json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}}))
}

fn unknown_task(id: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!(
        "unknown task: {}",
        id.chars().take(64).collect::<String>()
    ))
}

/// How long a record lives after its last write: a task's TTL; a kept
/// run's record only until its client's last retry may come (its state's
/// TTL, and a minute for a retry under way), within the task's.
fn record_ttl(config: &crate::node::config::RuntimeConfig, kept: bool) -> Duration {
    let task = Duration::from_millis(config.task_ttl_ms.max(1));
    if kept {
        task.min(config.request_state_ttl() + Duration::from_secs(60))
    } else {
        task
    }
}

/// What the store keeps of a task, as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskRecord {
    task_id: String,
    pub(crate) status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status_message: Option<String>,
    created_at: String,
    last_updated_at: String,
    ttl_ms: u64,
    poll_interval_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<ErrorObject>,
    /// Questions the task waits on, by input key: `{method, params}`.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub(crate) input_requests: Map<String, Value>,
    /// The node running it.
    pub(crate) owner: String,
    /// Until when the owner vouches for it (ms since the epoch).
    pub(crate) lease_until_ms: u64,
    /// The principal's key it belongs to; empty without authorization.
    #[serde(default)]
    pub(crate) principal: String,
    /// What a kept run reported once its request was answered, for its
    /// retries to pass on.
    #[serde(flatten)]
    pub(crate) noted: Noted,
}

/// A kept run's progress and log lines since its request was answered, as
/// its record holds them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Noted {
    /// The newest progress: `{progress, total?, message?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) progress: Option<Value>,
    /// The newest log lines (`notifications/message` params), at most
    /// [`MAX_KEPT_LOG_LINES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) logs: Vec<Value>,
    /// How many log lines were ever noted: `logs` are the last of them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) logs_end: u64,
}

impl Noted {
    /// The log lines numbered `from` (counting every line noted) and later.
    pub(crate) fn logs_from(&self, from: u64) -> &[Value] {
        let first = self.logs_end.saturating_sub(self.logs.len() as u64);
        let skip = usize::try_from(from.saturating_sub(first)).unwrap_or(usize::MAX);
        self.logs.get(skip..).unwrap_or_default()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TaskRecord {
    pub(crate) fn terminal(&self) -> bool {
        mcp_cluster_store::task_store::TERMINAL.contains(&self.status.as_str())
    }

    /// Marks it updated now.
    pub(crate) fn touch(&mut self) {
        self.last_updated_at = rfc3339(now_ms());
    }

    /// How long the store keeps it after a write.
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.max(1))
    }

    /// The task as clients see it (`tasks/get`): questions still open only
    /// (answers given on any node count at once: `answered`, their keys),
    /// no owner, lease or principal.
    fn detailed(&self, answered: &[String]) -> Value {
        let open: Map<String, Value> = self
            .input_requests
            .iter()
            .filter(|(k, _)| !answered.iter().any(|key| key == *k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let status = match self.status.as_str() {
            // Every question answered: back at work.
            "input_required" if open.is_empty() => "working",
            other => other,
        };
        let mut out = json!({
            "resultType": "complete",
            "taskId": self.task_id,
            "status": status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_interval_ms,
        });
        if let Some(message) = &self.status_message {
            out["statusMessage"] = json!(message);
        }
        match status {
            "completed" => out["result"] = self.result.clone().unwrap_or(Value::Null),
            "failed" => out["error"] = json!(self.error),
            "input_required" => out["inputRequests"] = Value::Object(open),
            _ => {}
        }
        out
    }

    /// The task as a 2025-11-25 session sees it (`Task`: `tasks/get`,
    /// `tasks/cancel`, and in `CreateTaskResult`): no result, no questions.
    pub(crate) fn session_view(&self) -> Value {
        let mut out = json!({
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttl": self.ttl_ms,
            "pollInterval": self.poll_interval_ms,
        });
        if let Some(message) = &self.status_message {
            out["statusMessage"] = json!(message);
        }
        out
    }

    /// The `CreateTaskResult` answering the request.
    fn created(&self) -> Value {
        json!({
            "resultType": "task",
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_interval_ms,
        })
    }
}

/// A task running on this node.
#[derive(Debug)]
pub(crate) struct TaskRun {
    id: String,
    stateless: Stateless,
    record: tokio::sync::Mutex<TaskRecord>,
    /// Questions waiting for answers: key, `{method, params}`.
    pending: Mutex<Map<String, Value>>,
    /// The handler's token.
    job: CancellationToken,
    /// Set before `job` trips for a `tasks/cancel`: the run ends
    /// `cancelled`, not `failed`.
    cancelled: Arc<AtomicBool>,
    done: CancellationToken,
    /// Set for a run kept waiting for an input round's answers (not a
    /// task the client knows of): what answers its request.
    pub(crate) kept: Option<crate::stateless::kept::Kept>,
    /// A kept run's progress and log lines since its request was
    /// answered.
    notes: Mutex<Notes>,
    /// How long its record lives after its last write.
    ttl: Duration,
    /// A 2025-11-25 session's task: a tool result with `isError` ends it
    /// `failed`, and a `tasks/result` waiting on this node hears its end.
    session_era: bool,
    /// Its client polled it: it knows the task its questions name.
    known: AtomicBool,
}

/// A kept run's progress and log lines, written to its record at most
/// every [`NOTES_WRITE_EVERY`].
#[derive(Debug, Default)]
struct Notes {
    noted: Noted,
    /// The newest progress value: the next must exceed it.
    last: Option<f64>,
    /// A write of them is due.
    due: bool,
}

impl TaskRun {
    /// The era it runs in.
    pub(crate) fn stateless(&self) -> &Stateless {
        &self.stateless
    }

    /// The record's id in the task store.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The questions waiting for answers: key, `{method, params}`.
    pub(crate) fn pending(&self) -> Map<String, Value> {
        self.pending.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Changes the record and writes it; `false` when the store refused
    /// (the task ended, or expired) or is away.
    async fn write(&self, change: impl FnOnce(&mut TaskRecord)) -> bool {
        self.write_within(Duration::ZERO, change)
            .await
            .unwrap_or(false)
    }

    /// As [`Self::write`], trying again while the store is away (a Redis
    /// failover or restart) for up to `patience`: how a task ended is worth
    /// waiting for, else the task would read as `failed` once its lease
    /// lapsed, although it completed. `None` when the store stayed away.
    async fn write_within(
        &self,
        patience: Duration,
        change: impl FnOnce(&mut TaskRecord),
    ) -> Option<bool> {
        let mut record = self.record.lock().await;
        change(&mut record);
        let started = tokio::time::Instant::now();
        let mut delay = WRITE_RETRY_MIN_DELAY;
        loop {
            record.last_updated_at = rfc3339(now_ms());
            record.lease_until_ms = now_ms() + millis(LEASE);
            let json = serde_json::to_string(&*record).unwrap_or_default();
            match self
                .stateless
                .store()
                .tasks
                .put(&self.id, &record.status, &json, self.ttl)
                .await
            {
                Ok(written) => return Some(written),
                Err(StoreError::Unavailable(_)) if started.elapsed() + delay < patience => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(WRITE_RETRY_MAX_DELAY);
                }
                Err(err) => {
                    tracing::warn!(task = %self.id, error = %err, "Task state not written.");
                    return match err {
                        StoreError::Unavailable(_) => None,
                        _ => Some(false),
                    };
                }
            }
        }
    }

    /// Publishes the open questions (`input_required`) or, with none left,
    /// goes back to `working`.
    async fn publish_questions(&self) {
        let open = self.pending.lock().map(|p| p.clone()).unwrap_or_default();
        self.write(|r| {
            r.status = if open.is_empty() {
                "working"
            } else {
                "input_required"
            }
            .into();
            r.input_requests = open;
        })
        .await;
        self.written();
    }

    /// Tells a follower of a kept run on this node (or a `tasks/result`
    /// of a session's task) that its record changed (followers elsewhere
    /// read it on their next poll).
    fn written(&self) {
        if self.kept.is_some() || self.session_era {
            self.stateless
                .kept_wakers()
                .wake(&kept::record_key(&self.id));
        }
    }

    /// A question from the handler: answered by the client's `tasks/update`
    /// (on any node), waited for.
    pub(crate) async fn ask(
        &self,
        key: String,
        method: &str,
        params: Value,
    ) -> Result<Value, AskError> {
        let store = &self.stateless.store().tasks;
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(key.clone(), json!({"method": method, "params": params}));
        }
        self.publish_questions().await;
        // A kept run waits for its client as long as a session's server
        // request would, polling the store less and less often (a retry
        // on this node wakes it at once).
        let kept = self.kept.is_some();
        let deadline = tokio::time::Instant::now() + self.stateless.config().ask_timeout();
        let waiting = kept.then(|| {
            self.stateless
                .kept_wakers()
                .wait_on(kept::answer_key(&self.id))
        });
        let mut delay = if kept { kept::POLL_MIN } else { INPUT_POLL };
        // Only this question's answer is read, not every answer the task
        // holds; a task that goes away trips `job` (`watch`).
        loop {
            match store.answer(&self.id, &key).await {
                Ok(answer) => {
                    let answer = answer
                        .and_then(|a| serde_json::from_str::<Value>(&a).ok())
                        .filter(|a| crate::request::method_table::well_formed(method, a));
                    if let Some(answer) = answer {
                        if let Ok(mut pending) = self.pending.lock() {
                            pending.remove(&key);
                        }
                        self.publish_questions().await;
                        return Ok(answer);
                    }
                }
                Err(err) => {
                    tracing::debug!(task = %self.id, error = %err, "Task inputs not read; trying again.")
                }
            }
            if kept && tokio::time::Instant::now() >= deadline {
                if let Ok(mut pending) = self.pending.lock() {
                    pending.remove(&key);
                }
                self.publish_questions().await;
                return Err(AskError::Timeout);
            }
            let woken = async {
                match &waiting {
                    Some(waiting) => waiting.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.job.cancelled() => return Err(AskError::Cancelled),
                () = tokio::time::sleep_until((tokio::time::Instant::now() + delay).min(deadline)) => {}
                () = woken => {}
            }
            if kept {
                delay = (delay * 2).min(kept::POLL_MAX);
            }
        }
    }

    /// A 2025-11-25 session's task asks its client (on the session's
    /// stream): `input_required` until [`Self::question_answered`]. Not
    /// before its client knows the task: a client matches the question to
    /// the task it names, which it learns from the `CreateTaskResult`, and
    /// may read a question that follows that answer on the same stream
    /// first. A client that polled the task (`tasks/get`, `tasks/result`)
    /// knows it; one that does not poll within the ask timeout is asked
    /// anyway.
    pub(crate) async fn question_out(&self, key: String, method: &str) {
        self.known_to_client().await;
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(key, json!({ "method": method }));
        }
        self.publish_questions().await;
    }

    /// Waits until the task's client polled it (on any node), at most the
    /// ask timeout, or until the task ends.
    async fn known_to_client(&self) {
        if self.known.load(Ordering::Acquire) {
            return;
        }
        let key = polled_key(&self.id);
        let waiting = self.stateless.kept_wakers().wait_on(key);
        let deadline = tokio::time::Instant::now() + self.stateless.config().ask_timeout();
        loop {
            match self.stateless.store().tasks.get(&self.id).await {
                Ok(Some(task)) if !task.answered.iter().any(|k| k == POLLED) => {}
                Ok(_) => break,
                Err(err) => {
                    tracing::debug!(task = %self.id, error = %err, "Task not read; trying again.")
                }
            }
            tokio::select! {
                () = waiting.notified() => {}
                () = tokio::time::sleep(INPUT_POLL) => {}
                () = self.done.cancelled() => return,
                () = self.job.cancelled() => return,
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        self.known.store(true, Ordering::Release);
    }

    /// The question `key` of [`Self::question_out`] was answered (or given
    /// up): back to `working` once none is open.
    pub(crate) async fn question_answered(&self, key: &str) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(key);
        }
        if !self.done.is_cancelled() {
            self.publish_questions().await;
        }
    }

    /// Progress of a kept run whose request was answered: kept in its
    /// record (the newest), where its retries read it. As on a request's
    /// stream, it must increase.
    pub(crate) fn note_progress(
        self: &Arc<Self>,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), EmitError> {
        if self.done.is_cancelled() {
            return Err(EmitError::Finished);
        }
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if notes.last.is_some_and(|last| progress <= last) {
            return Err(EmitError::ProgressNotIncreasing);
        }
        let mut value = Map::new();
        value.insert("progress".into(), json!(progress));
        if let Some(total) = total {
            value.insert("total".into(), json!(total));
        }
        if let Some(message) = message {
            let mut end = message.len().min(MAX_PROGRESS_MESSAGE_BYTES);
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            value.insert("message".into(), json!(&message[..end]));
        }
        notes.noted.progress = Some(Value::Object(value));
        notes.last = Some(progress);
        self.write_notes_soon(&mut notes);
        Ok(())
    }

    /// A log line of a kept run whose request was answered: kept in its
    /// record (the newest [`MAX_KEPT_LOG_LINES`]), where its retries read
    /// it.
    pub(crate) fn note_log(
        self: &Arc<Self>,
        line: &mcp_cluster_protocol::types::LoggingMessageParams,
    ) -> Result<(), EmitError> {
        if self.done.is_cancelled() {
            return Err(EmitError::Finished);
        }
        let mut value = serde_json::to_value(line).unwrap_or_default();
        let bytes = value.to_string().len();
        if bytes > MAX_KEPT_LOG_BYTES {
            value["data"] = json!(format!(
                "(a log line of {bytes} bytes, too long to pass on)"
            ));
        }
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        let logs = &mut notes.noted.logs;
        if logs.len() == MAX_KEPT_LOG_LINES {
            logs.remove(0);
        }
        logs.push(value);
        notes.noted.logs_end += 1;
        self.write_notes_soon(&mut notes);
        Ok(())
    }

    /// Writes the notes to the record after [`NOTES_WRITE_EVERY`], unless
    /// a write is due already (it writes the newest then).
    fn write_notes_soon(self: &Arc<Self>, notes: &mut Notes) {
        if notes.due {
            return;
        }
        notes.due = true;
        let run = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(NOTES_WRITE_EVERY).await;
            let noted = {
                let mut notes = run.notes.lock().unwrap_or_else(|e| e.into_inner());
                notes.due = false;
                notes.noted.clone()
            };
            if !run.done.is_cancelled() {
                run.write(|r| r.noted = noted).await;
                run.written();
            }
        });
    }

    /// The progress and log lines noted (the record may not hold the
    /// newest yet).
    fn noted(&self) -> Noted {
        self.notes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .noted
            .clone()
    }

    /// Writes how the handler ended. `None`: cancelled.
    pub(crate) async fn finish(&self, outcome: Option<Result<Value, ErrorObject>>) {
        self.done.cancel();
        // No longer waiting, before the end is written (and read).
        if self.kept.is_some() {
            mcp_cluster_telemetry::metrics::metrics()
                .input_rounds_waiting
                .dec();
        }
        let cancelled = self.cancelled.load(Ordering::Acquire);
        let max = self.stateless.config().max_task_result_bytes;
        let outcome = outcome.map(|o| o.and_then(|result| within(result, max)));
        let noted = self.noted();
        let session_era = self.session_era;
        self.write_within(FINISH_PATIENCE, |r| {
            r.input_requests.clear();
            // The last progress and log lines too, which its retry passes
            // on before the outcome.
            r.noted = noted;
            match outcome {
                None => {
                    r.status = "cancelled".into();
                    r.status_message = Some("cancelled by the client".into());
                }
                Some(_) if cancelled => {
                    r.status = "cancelled".into();
                    r.status_message = Some("cancelled by the client".into());
                }
                // 2025-11-25: a tool that reports an error fails its task,
                // whose result is still that answer.
                Some(Ok(result)) if session_era && result["isError"] == json!(true) => {
                    r.status = "failed".into();
                    r.status_message = Some(tool_error_message(&result));
                    r.result = Some(result);
                }
                Some(Ok(result)) => {
                    r.status = "completed".into();
                    r.result = Some(result);
                }
                Some(Err(error)) => {
                    r.status = "failed".into();
                    r.status_message = Some(error.message.clone());
                    r.error = Some(error);
                }
            }
        })
        .await;
        self.written();
        self.stateless
            .0
            .running_tasks
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// Renews the lease and watches for a cancel until the task ends.
    async fn watch(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = self.done.cancelled() => return,
                () = tokio::time::sleep(RENEW) => {}
            }
            match self.stateless.store().tasks.get(&self.id).await {
                Ok(Some(task)) if task.cancelled => {
                    self.cancelled.store(true, Ordering::Release);
                    self.job.cancel();
                    return;
                }
                Ok(Some(_)) => {
                    // Refused: the task ended elsewhere (cancelled a moment
                    // before its flag is set, or ended for a lapsed lease)
                    // or expired: its handler's end could not be written,
                    // so it stops. A store that is away is tried again at
                    // the next renewal.
                    if self.write_within(Duration::ZERO, |_| {}).await == Some(false) {
                        self.cancelled.store(true, Ordering::Release);
                        self.job.cancel();
                        return;
                    }
                }
                Ok(None) => {
                    // Expired or gone: nobody can read its end.
                    self.cancelled.store(true, Ordering::Release);
                    self.job.cancel();
                    return;
                }
                Err(err) => {
                    tracing::debug!(task = %self.id, error = %err, "Task lease not renewed; trying again.")
                }
            }
        }
    }
}

/// What a stateless `tools/call` may become.
#[derive(Debug)]
pub(crate) enum TaskSlot {
    /// Never a task.
    None,
    /// May become one ([`crate::request::context::RequestContext::become_task`]).
    Eligible(Box<Eligible>),
    /// Is one.
    Running(Arc<TaskRun>),
}

/// What starting a task of a stateless request needs.
#[derive(Debug)]
pub(crate) struct Eligible {
    pub(crate) spec: TaskSpec,
    pub(crate) output: Arc<RequestOutput>,
    pub(crate) request_id: RequestId,
    /// The request may become a task (its client declared the extension,
    /// and the tool allows it); otherwise only a kept run.
    pub(crate) may_be_task: bool,
}

/// What creating a run needs, in either era.
#[derive(Debug)]
pub(crate) struct TaskSpec {
    pub(crate) stateless: Stateless,
    /// Whose it is: the principal's key (empty without authorization), or
    /// a session's (`crate::request::tasks::TaskStart::owner`).
    pub(crate) principal: String,
    /// Whose byte budget the finished task counts against: the
    /// principal's key, or the client's address without one.
    pub(crate) client: String,
    pub(crate) job: CancellationToken,
    pub(crate) cancelled: Arc<AtomicBool>,
    /// The TTL the client asked for, in ms (a 2025-11-25 session's
    /// `params.task.ttl`): granted up to the node's `task_ttl_ms`.
    pub(crate) ttl_ms: Option<u64>,
    /// A 2025-11-25 session's task (see [`TaskRun`]).
    pub(crate) session_era: bool,
}

impl Eligible {
    /// Creates the task in the store; returns it with the
    /// `CreateTaskResult` that answers the request. `None` when it could
    /// not be stored (the request goes on synchronously).
    pub(crate) async fn start(&self) -> Option<(Arc<TaskRun>, Value)> {
        if !self.may_be_task {
            return None;
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (run, record) = self.spec.create(id, None).await?;
        Some((run, record.created()))
    }

    /// Answers the request with the task's handle.
    pub(crate) async fn answer(&self, created: Value) {
        self.output
            .finish(Some(Response::result(self.request_id.clone(), created)))
            .await;
    }
}

impl TaskSpec {
    /// Stores the run's record as `id` and starts renewing its lease.
    /// `None` when it could not be stored.
    pub(crate) async fn create(
        &self,
        id: String,
        kept: Option<crate::stateless::kept::Kept>,
    ) -> Option<(Arc<TaskRun>, TaskRecord)> {
        let config = self.stateless.config();
        let now = rfc3339(now_ms());
        let mut ttl = record_ttl(config, kept.is_some());
        if let Some(asked) = self.ttl_ms {
            ttl = ttl.min(Duration::from_millis(asked.max(MIN_ASKED_TTL_MS)));
        }
        let record = TaskRecord {
            task_id: id.clone(),
            status: "working".into(),
            status_message: None,
            created_at: now.clone(),
            last_updated_at: now,
            ttl_ms: millis(ttl),
            poll_interval_ms: config.task_poll_interval_ms,
            result: None,
            error: None,
            input_requests: Map::new(),
            owner: self.stateless.node_id().to_string(),
            lease_until_ms: now_ms() + millis(LEASE),
            principal: self.principal.clone(),
            noted: Noted::default(),
        };
        let json = serde_json::to_string(&record).ok()?;
        match self
            .stateless
            .store()
            .tasks
            .create(&id, &self.client, "working", &json, ttl)
            .await
        {
            Ok(true) => {}
            Ok(false) => return None,
            Err(err) => {
                tracing::warn!(error = %err, "Task not created; answering synchronously.");
                return None;
            }
        }
        self.stateless
            .0
            .running_tasks
            .fetch_add(1, Ordering::AcqRel);
        if kept.is_some() {
            mcp_cluster_telemetry::metrics::metrics()
                .input_rounds_waiting
                .inc();
        }
        let run = Arc::new(TaskRun {
            id,
            stateless: self.stateless.clone(),
            record: tokio::sync::Mutex::new(record.clone()),
            pending: Mutex::default(),
            job: self.job.clone(),
            cancelled: Arc::clone(&self.cancelled),
            done: CancellationToken::new(),
            kept,
            notes: Mutex::default(),
            ttl,
            session_era: self.session_era,
            known: AtomicBool::new(false),
        });
        // tokio's spawn, not actix's: a handler starts its task from the
        // request executor, where there is no actix arbiter.
        tokio::spawn(Arc::clone(&run).watch());
        Some((run, record))
    }
}

impl Stateless {
    /// `tasks/get`, `tasks/update`, `tasks/cancel` of a stateless request
    /// whose client declared the extension (checked by the caller).
    pub(crate) async fn task_method(
        &self,
        request: &Request,
        principal: Option<&str>,
    ) -> Result<Value, ErrorObject> {
        let params = request.params.as_ref();
        let id = params
            .and_then(|p| p.get("taskId"))
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty() && id.len() <= MAX_TASK_ID)
            .ok_or_else(|| ErrorObject::invalid_params("taskId must be a task id (1-128 bytes)"))?;
        // A kept run's record is no task of the client's.
        if id.starts_with(kept::ID_PREFIX) {
            return Err(unknown_task(id));
        }
        let principal = principal.unwrap_or_default();
        let ack = json!({"resultType": "complete"});
        match request.method.as_str() {
            mcp_cluster_protocol::methods::TASKS_UPDATE => {
                let (record, _) = self.load_task(id, principal).await?;
                let Some(Value::Object(responses)) = params.and_then(|p| p.get("inputResponses"))
                else {
                    return Err(ErrorObject::invalid_params(
                        "inputResponses must be an object of results by input key",
                    ));
                };
                let inputs: Vec<(String, String)> = responses
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect();
                self.refuse_oversized(&inputs)?;
                if record.terminal() {
                    return Ok(ack);
                }
                if self.add_answers(id, &inputs, "task").await? {
                    Ok(ack)
                } else {
                    Err(unknown_task(id))
                }
            }
            mcp_cluster_protocol::methods::TASKS_CANCEL => {
                let (record, _) = self.load_task(id, principal).await?;
                if !record.terminal()
                    && !self
                        .store()
                        .tasks
                        .cancel(id)
                        .await
                        .map_err(task_store_away)?
                {
                    return Err(unknown_task(id));
                }
                Ok(ack)
            }
            _ => {
                let (record, answered) = self.read_task(id, principal).await?;
                Ok(record.detailed(&answered))
            }
        }
    }

    /// Task `id` of `principal` as the store holds it, with its answers'
    /// keys: -32602 for a task that is not there, or is another
    /// principal's (as unknown as a task that never was).
    pub(crate) async fn load_task(
        &self,
        id: &str,
        principal: &str,
    ) -> Result<(TaskRecord, Vec<String>), ErrorObject> {
        let task = self
            .store()
            .tasks
            .get(id)
            .await
            .map_err(task_store_away)?
            .ok_or_else(|| unknown_task(id))?;
        let record: TaskRecord = serde_json::from_str(&task.record)
            .map_err(|_| ErrorObject::internal("task record unreadable"))?;
        if record.principal != principal {
            return Err(unknown_task(id));
        }
        Ok((record, task.answered))
    }

    /// As [`Self::load_task`], a task whose node stopped renewing its lease
    /// ended `failed` first: it will never finish.
    pub(crate) async fn read_task(
        &self,
        id: &str,
        principal: &str,
    ) -> Result<(TaskRecord, Vec<String>), ErrorObject> {
        let (mut record, answered) = self.load_task(id, principal).await?;
        if record.terminal() || record.lease_until_ms >= now_ms() {
            return Ok((record, answered));
        }
        record.status = "failed".into();
        record.input_requests.clear();
        let error = ErrorObject::internal("the node running this task stopped before it finished");
        record.status_message = Some(error.message.clone());
        record.error = Some(error);
        record.touch();
        let json = serde_json::to_string(&record).unwrap_or_default();
        if self
            .store()
            .tasks
            .put(id, "failed", &json, record.ttl())
            .await
            .map_err(task_store_away)?
        {
            Ok((record, answered))
        } else {
            // It ended meanwhile: read that end.
            self.load_task(id, principal).await
        }
    }
}

/// The error of a task method while the store is away.
pub(crate) fn task_store_away(err: StoreError) -> ErrorObject {
    tracing::warn!(error = %err, "Task store unavailable.");
    RuntimeError::Store(err).to_error_object()
}

impl Stateless {
    /// Refuses answers of which one is over `max_task_answer_bytes`
    /// (-32602, counted as a retention refusal).
    pub(crate) fn refuse_oversized(&self, inputs: &[(String, String)]) -> Result<(), ErrorObject> {
        let max = self.config().max_task_answer_bytes;
        match inputs.iter().find(|(_, a)| a.len() as u64 > max) {
            Some((key, answer)) => Err(answer_refused(format!(
                "the answer to input {:?} is {} bytes; this server accepts at most {max} bytes per answer",
                key.chars().take(64).collect::<String>(),
                answer.len(),
            ))),
            None => Ok(()),
        }
    }

    /// Adds answers (key, JSON) to the task or kept run `id`, whose answers
    /// stay within `MAX_INPUTS` keys and `max_task_answers_bytes` (past it
    /// nothing is added, -32602 naming `whose` answers). `false`: it is
    /// gone.
    pub(crate) async fn add_answers(
        &self,
        id: &str,
        inputs: &[(String, String)],
        whose: &str,
    ) -> Result<bool, ErrorObject> {
        let max_bytes = self.config().max_task_answers_bytes;
        let limits = mcp_cluster_store::InputLimits {
            max_keys: MAX_INPUTS,
            max_bytes,
        };
        match self.store().tasks.add_inputs(id, inputs, limits).await {
            Ok(mcp_cluster_store::AddedInputs::Added) => Ok(true),
            Ok(mcp_cluster_store::AddedInputs::Gone) => Ok(false),
            Ok(mcp_cluster_store::AddedInputs::TooLarge) => Err(answer_refused(format!(
                "these answers would take the {whose}'s answers past {max_bytes} bytes; nothing of them was kept"
            ))),
            Err(err) => {
                tracing::warn!(error = %err, "Task store unavailable.");
                Err(RuntimeError::Store(err).to_error_object())
            }
        }
    }
}

/// -32602 for answers past a bound, counted
/// (`mcp_retention_refusals_total{kind="task_answer"}`).
fn answer_refused(message: String) -> ErrorObject {
    mcp_cluster_telemetry::metrics::metrics()
        .retention_refusals
        .with_label_values(&["task_answer"])
        .inc();
    ErrorObject::invalid_params(message)
}

impl crate::request::context::AnsweredRun for TaskRun {
    fn progress(
        self: Arc<Self>,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), EmitError> {
        self.note_progress(progress, total, message)
    }

    fn log(
        self: Arc<Self>,
        line: &mcp_cluster_protocol::types::LoggingMessageParams,
    ) -> Result<(), EmitError> {
        self.note_log(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_798_761_599_999), "2026-12-31T23:59:59.999Z");
    }

    #[test]
    fn answered_questions_leave_the_detailed_view_at_once() {
        let record = TaskRecord {
            task_id: "t".into(),
            status: "input_required".into(),
            status_message: None,
            created_at: rfc3339(0),
            last_updated_at: rfc3339(0),
            ttl_ms: 1,
            poll_interval_ms: 1,
            result: None,
            error: None,
            input_requests: serde_json::from_value(json!({"a": {"method": "elicitation/create"}, "b": {"method": "elicitation/create"}})).unwrap(),
            owner: "n".into(),
            lease_until_ms: 0,
            principal: String::new(),
            noted: Noted::default(),
        };
        let view = record.detailed(&["a".into()]);
        assert_eq!(view["status"], "input_required");
        assert!(view["inputRequests"].get("a").is_none());
        assert!(view["inputRequests"].get("b").is_some());
        let view = record.detailed(&["a".into(), "b".into()]);
        assert_eq!(view["status"], "working");
        assert!(view.get("owner").is_none() && view.get("principal").is_none());
    }

    #[test]
    fn a_retry_reads_the_log_lines_it_has_not_passed_on_of_those_kept() {
        // Lines 0..5 noted, the last three kept.
        let noted = Noted {
            progress: None,
            logs: vec![json!(2), json!(3), json!(4)],
            logs_end: 5,
        };
        assert_eq!(noted.logs_from(0), [json!(2), json!(3), json!(4)]);
        assert_eq!(noted.logs_from(3), [json!(3), json!(4)]);
        assert!(noted.logs_from(5).is_empty());
        assert!(noted.logs_from(9).is_empty());
        // Nothing noted yet: not written into the record at all.
        let empty = serde_json::to_value(Noted::default()).unwrap();
        assert_eq!(empty, json!({}));
        let read: Noted = serde_json::from_value(json!({"logs": [1], "logs_end": 1})).unwrap();
        assert_eq!(read.logs_from(0), [json!(1)]);
    }
}
