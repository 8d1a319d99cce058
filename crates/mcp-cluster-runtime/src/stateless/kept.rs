//! Kept runs: the input rounds of a service whose handler cannot run twice
//! ([`crate::McpService::keeps_running_on_input`]: a hosted server's
//! child, waiting for the answer to the question it asked).
//!
//! The first question the handler asks that the request does not answer
//! makes the run *kept*: its record goes to the task store (as a task's
//! would, under an id no client can name: [`ID_PREFIX`]), the request is
//! answered `input_required` with the questions asked together
//! ([`QUESTIONS_TOGETHER`]) and a sealed `requestState` naming the run,
//! and the handler goes on waiting. The client's retry, on any node, opens
//! the state, gives the answers to the run through the store and follows
//! its record until the run ends (its outcome answers the retry) or asks
//! something new (the retry is answered `input_required` again, naming the
//! same run). The run's node renews the record's lease as a task's: when
//! that node dies, the retry is answered with an error instead of waiting.
//!
//! Both sides poll the store, at [`POLL_MIN`] and less and less often up
//! to [`POLL_MAX`]; on the run's own node they wake each other at once.
//!
//! Progress and log lines the handler reports once the request was
//! answered go into the record too (the newest progress and the newest 16
//! lines, written at most every 100 ms): a retry following the run passes
//! on what is new since its answers, the progress under its own
//! `progressToken` (increasing only, the last value before the outcome),
//! the lines at its own `_meta` log level.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_cluster_protocol::types::LoggingLevel;
use mcp_cluster_protocol::{
    ErrorObject, Message, Notification, Request, RequestId, Response, methods,
};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::node::InFlightTicket;
use crate::request::call::{Call, Inbound};
use crate::request::context::RequestOutput;
use crate::request::exchange::Exchange;
use crate::request::method_table;
use crate::stateless::mrtr::{RoundState, now_ms};
use crate::stateless::tasks::{Noted, TaskRecord, TaskRun};
use crate::stateless::{RequestGuard, Stateless, StatelessReply};

/// The start of a kept run's id in the task store; `tasks/*` refuse it.
pub(crate) const ID_PREFIX: &str = "kept-";

/// First pause between two reads of the store while waiting.
pub(crate) const POLL_MIN: Duration = Duration::from_millis(20);

/// Longest pause between two reads of the store while waiting.
pub(crate) const POLL_MAX: Duration = Duration::from_millis(500);

/// How often a retry following a run asks whether the run's node still
/// runs (its heartbeat lapses sooner than the run's lease).
const OWNER_CHECK: Duration = Duration::from_secs(1);

/// After the first question, how long a kept run waits for more before it
/// answers `input_required` (questions a server asks at once go out in one
/// round).
const QUESTIONS_TOGETHER: Duration = Duration::from_millis(50);

/// What answers a kept run's request, and what its states name.
#[derive(Debug)]
pub(crate) struct Kept {
    output: Arc<RequestOutput>,
    request_id: RequestId,
    method: String,
    params: Option<Map<String, Value>>,
    principal: String,
    /// Set once the request is answered (with its questions, or with the
    /// handler's outcome when it ended before they went out).
    replied: AtomicBool,
}

impl Kept {
    pub(crate) fn new(
        output: Arc<RequestOutput>,
        request_id: RequestId,
        method: String,
        params: Option<Map<String, Value>>,
        principal: String,
    ) -> Self {
        Self {
            output,
            request_id,
            method,
            params,
            principal,
            replied: AtomicBool::new(false),
        }
    }

    /// `true` once, for whoever answers the request.
    pub(crate) fn take_reply(&self) -> bool {
        !self.replied.swap(true, Ordering::AcqRel)
    }

    /// Whether the request was answered: what the run says from then on
    /// reaches the client through its retries.
    pub(crate) fn replied(&self) -> bool {
        self.replied.load(Ordering::Acquire)
    }
}

/// The wake-up of the run waiting for answers to `id`.
pub(crate) fn answer_key(id: &str) -> String {
    format!("answer:{id}")
}

/// The wake-up of a retry following run `id`'s record.
pub(crate) fn record_key(id: &str) -> String {
    format!("record:{id}")
}

/// Wake-ups between a kept run and its retries on one node, by key.
#[derive(Debug, Default)]
pub(crate) struct Wakers(Mutex<HashMap<String, Arc<Notify>>>);

/// Waiting on one key; forgotten when dropped.
#[derive(Debug)]
pub(crate) struct Waiting<'a> {
    wakers: &'a Wakers,
    key: String,
    notify: Arc<Notify>,
}

impl Wakers {
    pub(crate) fn wait_on(&self, key: String) -> Waiting<'_> {
        let notify = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(map.entry(key.clone()).or_default())
        };
        Waiting {
            wakers: self,
            key,
            notify,
        }
    }

    /// Wakes whoever waits on `key` here (or the next to wait, once).
    pub(crate) fn wake(&self, key: &str) {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = map.get(key) {
            notify.notify_one();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or_default()
    }
}

impl Waiting<'_> {
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut map = self.wakers.0.lock().unwrap_or_else(|e| e.into_inner());
        // The map's and this one: nobody else waits on the key.
        if Arc::strong_count(&self.notify) <= 2 {
            map.remove(&self.key);
        }
    }
}

impl TaskRun {
    /// Answers a kept run's request with the questions waiting, unless it
    /// was answered already (or none waits: the handler's end answers it).
    pub(crate) async fn reply_round(&self) {
        let Some(kept) = &self.kept else { return };
        let questions = self.pending();
        if questions.is_empty() || !kept.take_reply() {
            return;
        }
        let outcome = self
            .stateless()
            .kept_round(
                self.id(),
                &kept.method,
                kept.params.as_ref(),
                &kept.principal,
                questions,
            )
            .await;
        kept.output
            .finish(Some(Response::new(Some(kept.request_id.clone()), outcome)))
            .await;
    }

    /// Answers the request once the questions asked together are in.
    pub(crate) fn reply_soon(self: &Arc<Self>) {
        let run = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(QUESTIONS_TOGETHER).await;
            run.reply_round().await;
        });
    }
}

/// What a kept run's record says to a retry following it.
enum Seen {
    /// It ended: the retry's answer.
    Done(Result<Value, ErrorObject>),
    /// It waits for these answers: key, `{method, params}`.
    Asks(Map<String, Value>),
    /// It is working.
    Working,
}

impl Stateless {
    /// Wake-ups of kept runs and their retries on this node.
    pub(crate) fn kept_wakers(&self) -> &Wakers {
        &self.0.kept
    }

    /// The `input_required` result of a kept run's round: `questions`, and
    /// a state naming the run.
    pub(crate) async fn kept_round(
        &self,
        run: &str,
        method: &str,
        params: Option<&Map<String, Value>>,
        principal: &str,
        questions: Map<String, Value>,
    ) -> Result<Value, ErrorObject> {
        self.ensure_key_ring().await;
        let mut state = RoundState::issue(
            method,
            params,
            Some(principal),
            Map::new(),
            self.config().request_state_ttl(),
        );
        state.run = Some(run.to_owned());
        let sealed = self
            .key_ring()
            .seal(&state)
            .map_err(|_| ErrorObject::internal("request state could not be sealed"))?;
        Ok(json!({
            "resultType": "input_required",
            "inputRequests": questions,
            "requestState": sealed,
        }))
    }

    /// Serves a retry whose state names kept run `run`: gives it the
    /// answers and follows it for the retry's answer.
    pub(crate) fn resume_kept(
        &self,
        run: String,
        request: Request,
        principal: String,
        hold: mcp_cluster_store::Hold,
        inbound: &Inbound,
    ) -> StatelessReply {
        let id = request.id.clone();
        let (exchange, reply) = Exchange::direct(
            Arc::clone(self.node()),
            self.config().response_mode,
            id.clone(),
        );
        exchange.track(
            Call::new(
                self.service(),
                &request,
                None,
                mcp_cluster_protocol::ProtocolVersion::STATELESS.as_str(),
                inbound,
            )
            .holding(hold),
        );
        let output = RequestOutput::new(exchange);
        // Tripped when the transport drops it: the client went away.
        let gone = CancellationToken::new();
        let guard = RequestGuard::token(gone.clone());
        let ticket = InFlightTicket::issue(self.node());
        let stateless = self.clone();
        actix::spawn(async move {
            let _ticket = ticket;
            let outcome = stateless
                .follow(&run, &request, &principal, &gone, &output)
                .await;
            if outcome.is_none() {
                // The client went away: the run is cancelled, as a request
                // whose client closed its response is.
                if let Err(err) = stateless.store().tasks.cancel(&run).await {
                    tracing::warn!(run, error = %err, "Kept run not cancelled.");
                }
            }
            output
                .finish(outcome.map(|outcome| Response::new(Some(id), outcome)))
                .await;
        });
        StatelessReply::Running { reply, guard }
    }

    /// The retry's outcome; `None` when its client went away first.
    async fn follow(
        &self,
        run: &str,
        request: &Request,
        principal: &str,
        gone: &CancellationToken,
        output: &RequestOutput,
    ) -> Option<Result<Value, ErrorObject>> {
        let method = request.method.as_str();
        let params = request.params.as_ref();
        let round = |questions| self.kept_round(run, method, params, principal, questions);
        let (seen, noted) = match self.seen(run, method, true).await {
            Ok(read) => read,
            Err(err) => return Some(Err(err)),
        };
        // What the run reports once it has this retry's answers goes to
        // this retry's client: not what it reported before.
        let mut passed = Passed {
            progress: noted
                .progress
                .as_ref()
                .and_then(|p| p.get("progress")?.as_f64()),
            logs: noted.logs_end,
        };
        let open = match seen {
            Seen::Done(outcome) => return Some(outcome),
            Seen::Asks(open) => open,
            Seen::Working => Map::new(),
        };
        // The answers to what the run asks; what they leave open goes back
        // to the client at once.
        let responses = params
            .and_then(|p| p.get("inputResponses"))
            .and_then(Value::as_object);
        let mut inputs = Vec::new();
        let mut unanswered = Map::new();
        for (key, question) in open {
            let asked = question.get("method").and_then(Value::as_str);
            match responses.and_then(|r| r.get(&key)) {
                Some(answer) if asked.is_some_and(|m| method_table::well_formed(m, answer)) => {
                    inputs.push((key, answer.to_string()));
                }
                _ => {
                    unanswered.insert(key, question);
                }
            }
        }
        if let Err(err) = self.give_answers(run, &inputs).await {
            return Some(Err(err));
        }
        if !unanswered.is_empty() {
            return Some(round(unanswered).await);
        }
        // The wait may be long: the answer goes out as a stream from now
        // on, whose keep-alives tell when the client went away (the run is
        // then cancelled).
        output.exchange.go_live().await;
        let token = request.progress_token();
        let log_level = request.stateless_meta().and_then(|meta| {
            let level = meta.log_level.as_deref()?;
            serde_json::from_str::<LoggingLevel>(level.get()).ok()
        });
        let waiting = self.kept_wakers().wait_on(record_key(run));
        let stop = self.stop_token();
        let mut delay = POLL_MIN;
        let mut checked = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = gone.cancelled() => return None,
                () = stop.cancelled() => {
                    return Some(Err(ErrorObject::internal(
                        "request stopped: the server is shutting down",
                    )));
                }
                () = waiting.notified() => {}
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(POLL_MAX);
            // Its node's heartbeat lapses before the run's lease does.
            let check_owner = checked.elapsed() >= OWNER_CHECK;
            if check_owner {
                checked = tokio::time::Instant::now();
            }
            let (seen, noted) = match self.seen(run, method, check_owner).await {
                Ok(read) => read,
                Err(err) => return Some(Err(err)),
            };
            passed.pass(output, &noted, token, log_level).await;
            match seen {
                Seen::Done(outcome) => return Some(outcome),
                Seen::Asks(open) => return Some(round(open).await),
                Seen::Working => {}
            }
        }
    }

    /// Adds a retry's answers to the run, within the bounds a task's
    /// answers have.
    async fn give_answers(
        &self,
        run: &str,
        inputs: &[(String, String)],
    ) -> Result<(), ErrorObject> {
        if inputs.is_empty() {
            return Ok(());
        }
        self.refuse_oversized(inputs)?;
        if !self.add_answers(run, inputs, "request").await? {
            return Err(run_gone());
        }
        self.kept_wakers().wake(&answer_key(run));
        Ok(())
    }

    /// Reads the run's record, and what the run noted in it; with
    /// `check_owner`, whether the node running it still runs, too.
    async fn seen(
        &self,
        run: &str,
        method: &str,
        check_owner: bool,
    ) -> Result<(Seen, Noted), ErrorObject> {
        let unavailable = |err| crate::node::error::RuntimeError::Store(err).to_error_object();
        let task = self
            .store()
            .tasks
            .get(run)
            .await
            .map_err(unavailable)?
            .ok_or_else(run_gone)?;
        let Ok(mut record) = serde_json::from_str::<TaskRecord>(&task.record) else {
            let unreadable = ErrorObject::internal("request record unreadable");
            return Ok((Seen::Done(Err(unreadable)), Noted::default()));
        };
        if check_owner
            && !record.terminal()
            && let Ok(owner) = record.owner.parse::<mcp_cluster_store::NodeId>()
            && !self
                .store()
                .nodes
                .alive(&owner)
                .await
                .map_err(unavailable)?
        {
            return Ok((Seen::Done(Err(owner_stopped())), Noted::default()));
        }
        let noted = std::mem::take(&mut record.noted);
        Ok((self.seen_in(record, &task.answered, method), noted))
    }

    fn seen_in(&self, record: TaskRecord, answered: &[String], method: &str) -> Seen {
        if record.terminal() {
            let outcome = match record.status.as_str() {
                "completed" => Ok(record.result.unwrap_or(Value::Null)),
                "cancelled" => Err(ErrorObject::internal("request cancelled")),
                _ => Err(record.error.unwrap_or_else(|| {
                    ErrorObject::internal(
                        record
                            .status_message
                            .unwrap_or_else(|| "request failed".into()),
                    )
                })),
            };
            return Seen::Done(self.complete_outcome(method, outcome));
        }
        if record.lease_until_ms < now_ms() {
            return Seen::Done(Err(owner_stopped()));
        }
        let open: Map<String, Value> = record
            .input_requests
            .into_iter()
            .filter(|(key, _)| !answered.contains(key))
            .collect();
        if open.is_empty() {
            Seen::Working
        } else {
            Seen::Asks(open)
        }
    }
}

/// What a retry passed on of its run's notes so far.
struct Passed {
    /// The newest progress value.
    progress: Option<f64>,
    /// The number of the next log line (counting every line the run
    /// noted).
    logs: u64,
}

impl Passed {
    /// Passes on to the retry's client what is new in `noted`: the
    /// progress, under `token`, if it increased; the log lines at
    /// `log_level` or above (none without).
    async fn pass(
        &mut self,
        output: &RequestOutput,
        noted: &Noted,
        token: Option<&Value>,
        log_level: Option<LoggingLevel>,
    ) {
        // The client gone, its stream's end says so (the wait notices):
        // what could not be written is not retried.
        for line in noted.logs_from(self.logs) {
            let level = line
                .get("level")
                .and_then(|l| serde_json::from_value::<LoggingLevel>(l.clone()).ok());
            if let (Some(level), Some(min)) = (level, log_level)
                && level >= min
            {
                let n = Notification::new(methods::NOTIFICATION_MESSAGE, line.clone());
                let _ = output.emit(&Message::Notification(n), None).await;
            }
        }
        self.logs = self.logs.max(noted.logs_end);
        let (Some(token), Some(Value::Object(progress))) = (token, &noted.progress) else {
            return;
        };
        let Some(value) = progress.get("progress").and_then(Value::as_f64) else {
            return;
        };
        if self.progress.is_some_and(|p| value <= p) {
            return;
        }
        self.progress = Some(value);
        let mut params = progress.clone();
        params.insert("progressToken".into(), token.clone());
        let n = Notification::new(methods::NOTIFICATION_PROGRESS, Value::Object(params));
        let _ = output.emit(&Message::Notification(n), Some(value)).await;
    }
}

/// The error of a retry whose run's node stopped.
fn owner_stopped() -> ErrorObject {
    ErrorObject::internal(
        "the node running this request stopped before it finished; send the request again \
         without requestState",
    )
}

/// The error of a retry whose run is no more.
fn run_gone() -> ErrorObject {
    ErrorObject::internal(
        "the request waiting for these answers is gone (it waited too long, or its node \
         stopped); send the request again without requestState",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_before_the_wait_is_kept_and_keys_are_forgotten() {
        let wakers = Wakers::default();
        {
            let waiting = wakers.wait_on(answer_key("r"));
            wakers.wake(&answer_key("r"));
            wakers.wake(&record_key("r"));
            tokio::time::timeout(Duration::from_secs(1), waiting.notified())
                .await
                .expect("woken");
            assert_eq!(wakers.len(), 1);
        }
        assert_eq!(wakers.len(), 0);
    }
}
