//! What a handler gets: cancellation, progress, logging to the client and
//! asking the client, all scoped to one in-flight request.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::{Message as ActixMessage, Recipient};
use mcp_cluster_protocol::types::{
    ClientCapabilities, CreateMessageParams, CreateMessageResult, ElicitParams, ElicitResult,
    ElicitUrlParams, ElicitationCompleteParams, ListRootsResult, LoggingLevel,
    LoggingMessageParams, ProgressParams,
};
use mcp_cluster_protocol::{
    ErrorObject, Message, Notification, ProtocolVersion, Request, RequestId, Response, methods,
};
use mcp_cluster_store::{Principal, SessionId, StoreError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::request::SessionRecipients;
use crate::request::call::CallerToken;
use crate::request::exchange::Exchange;
use crate::request::method_table;
use crate::request::tasks::TaskOutput;

/// Session state that handlers read without a mailbox round trip. Written by
/// the session actor only.
#[derive(Debug, Default)]
pub(crate) struct SessionShared {
    /// The negotiated revision, set once by `initialize`.
    pub(crate) version: OnceLock<ProtocolVersion>,
    /// Client capabilities, set once by `initialize`.
    pub(crate) client_capabilities: OnceLock<ClientCapabilities>,
    /// `notifications/initialized` has arrived.
    pub(crate) initialized: AtomicBool,
    /// Minimum level of `notifications/message`; [`LEVEL_UNSET`] until
    /// `logging/setLevel` (then everything is sent).
    pub(crate) log_level: AtomicU8,
    /// Bumped when a save of the session record starts and again when it
    /// ends: a record loaded while this stayed put (and no save was
    /// pending) is not older than the actor's own state.
    pub(crate) save_events: AtomicU64,
    /// Saves of the session record in progress.
    pub(crate) saves_pending: AtomicUsize,
    /// The key of the principal that created the session
    /// ([`mcp_cluster_store::Principal::key`]); unset when it was created without
    /// authorization. Set once, when the actor starts.
    pub(crate) owner: OnceLock<Box<str>>,
    /// Why the first write of a new Streamable HTTP session (by its
    /// `initialize`) failed: the caller answers 503, as for a session that
    /// could not be created.
    pub(crate) first_write_failed: OnceLock<mcp_cluster_store::StoreError>,
    /// Why the session's own server was not started now
    /// ([`OpenError::Busy`](crate::request::service::OpenError::Busy) or `ClientLimit`):
    /// the caller refuses the request (503 or 429) rather than answer its
    /// `initialize`.
    pub(crate) refused: OnceLock<crate::node::error::RuntimeError>,
}

/// One save of the session record in progress; counted in
/// [`SessionShared`] from creation to drop.
#[derive(Debug)]
pub(crate) struct SaveGuard(Arc<SessionShared>);

impl SaveGuard {
    pub(crate) fn begin(shared: &Arc<SessionShared>) -> Self {
        shared.saves_pending.fetch_add(1, Ordering::AcqRel);
        shared.save_events.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(shared))
    }
}

impl Drop for SaveGuard {
    fn drop(&mut self) {
        self.0.save_events.fetch_add(1, Ordering::AcqRel);
        self.0.saves_pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `log_level` before the client sets one.
pub(crate) const LEVEL_UNSET: u8 = u8::MAX;

impl SessionShared {
    pub(crate) fn set_log_level(&self, level: Option<LoggingLevel>) {
        let raw = level.map_or(LEVEL_UNSET, |l| l as u8);
        self.log_level.store(raw, Ordering::Relaxed);
    }

    pub(crate) fn sends(&self, level: LoggingLevel) -> bool {
        let min = self.log_level.load(Ordering::Relaxed);
        min == LEVEL_UNSET || level as u8 >= min
    }
}

/// The output side of one request: ordered emits, then exactly one final
/// response (or none, when cancelled); nothing after it.
#[derive(Debug)]
pub(crate) struct RequestOutput {
    pub(crate) exchange: Arc<Exchange>,
    /// Held across the append, so emits and the response keep their order.
    state: tokio::sync::Mutex<OutputState>,
    /// Set for a 2025-11-25 session's task: every message it emits names
    /// the task (`_meta` `io.modelcontextprotocol/related-task`), and its
    /// answer ends the task instead of being written.
    task: Option<Arc<dyn TaskOutput>>,
}

#[derive(Debug, Default)]
struct OutputState {
    finished: bool,
    last_progress: Option<f64>,
}

impl RequestOutput {
    pub(crate) fn new(exchange: Arc<Exchange>) -> Self {
        Self {
            exchange,
            state: tokio::sync::Mutex::new(OutputState::default()),
            task: None,
        }
    }

    /// The output of a 2025-11-25 session's task `run`, whose messages go
    /// to `exchange` (the session's own stream).
    pub(crate) fn of_task(exchange: Arc<Exchange>, run: Arc<dyn TaskOutput>) -> Self {
        Self {
            task: Some(run),
            ..Self::new(exchange)
        }
    }

    /// The session's task this is the output of.
    pub(crate) fn task(&self) -> Option<&Arc<dyn TaskOutput>> {
        self.task.as_ref()
    }

    pub(crate) async fn emit(
        &self,
        message: &Message,
        progress: Option<f64>,
    ) -> Result<(), EmitError> {
        let mut state = self.state.lock().await;
        if state.finished {
            return Err(EmitError::Finished);
        }
        if let Some(p) = progress {
            // 2025-03-26 utilities/progress: the value MUST increase with
            // each notification.
            if state.last_progress.is_some_and(|last| p <= last) {
                return Err(EmitError::ProgressNotIncreasing);
            }
            state.last_progress = Some(p);
        }
        let written = match &self.task {
            Some(run) => {
                let tagged = related_to(message.clone(), run.id());
                self.exchange.emit(&tagged).await
            }
            None => self.exchange.emit(message).await,
        };
        written.map_err(EmitError::Store)
    }

    /// Writes the final response (`None` when cancelled). Idempotent: only
    /// the first call writes.
    pub(crate) async fn finish(&self, response: Option<Response>) {
        let mut state = self.state.lock().await;
        if state.finished {
            return;
        }
        state.finished = true;
        if let Some(run) = &self.task {
            run.finish(response.map(|r| r.outcome)).await;
            return;
        }
        if let Err(err) = self.exchange.finish(response).await {
            tracing::warn!(error = %err, "Response could not be written to the event log.");
        }
    }
}

/// `message` naming task `id` in its `_meta`
/// (`io.modelcontextprotocol/related-task`).
pub(crate) fn related_to(mut message: Message, id: &str) -> Message {
    let params = match &mut message {
        Message::Request(r) => &mut r.params,
        Message::Notification(n) => &mut n.params,
        Message::Response(_) => return message,
    };
    let meta = params
        .get_or_insert_with(serde_json::Map::new)
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(
            mcp_cluster_protocol::methods::meta::RELATED_TASK.into(),
            serde_json::json!({ "taskId": id }),
        );
    }
    message
}

/// Why a notification from a handler was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// The request already has its response; nothing may follow it.
    #[error("the request has already completed")]
    Finished,
    /// Progress must increase with every notification.
    #[error("progress must increase")]
    ProgressNotIncreasing,
    /// The event log failed.
    #[error("event log unavailable")]
    Store(#[source] StoreError),
}

/// Why asking the client failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// The client did not declare the capability this request needs.
    #[error("the client does not support {0}")]
    NotSupported(&'static str),
    /// The session is not initialized yet (the server must not send
    /// requests before `notifications/initialized`).
    #[error("the session is not initialized")]
    NotInitialized,
    /// The request was cancelled while waiting.
    #[error("cancelled")]
    Cancelled,
    /// The client did not answer in time.
    #[error("the client did not answer in time")]
    Timeout,
    /// The client answered with an error.
    #[error("the client answered with an error: {0}")]
    Rejected(ErrorObject),
    /// The answer does not have the expected shape.
    #[error("invalid answer from the client: {0}")]
    InvalidAnswer(String),
    /// The request could not be sent (session gone, log failed).
    #[error("the request could not be sent")]
    Unavailable,
    /// Stateless (2026-07-28): the question goes to the client in this
    /// request's `input_required` result, and the client's retry brings the
    /// answer. The handler's own result is discarded; it runs again on the
    /// retry and gets the answer there.
    #[error("input required from the client")]
    InputRequired,
}

/// The client's answer to a server request.
pub(crate) type AskOutcome = Result<Value, ErrorObject>;

/// Allocate an id for a server-to-client request and await its answer:
/// what a session-era handler sends its session actor to ask the client.
#[derive(ActixMessage, Debug)]
#[rtype(result = "Result<(RequestId, oneshot::Receiver<AskOutcome>), AskError>")]
pub(crate) struct RegisterAsk {
    pub(crate) from: RequestId,
}

/// Counts a question asked of a client by how it ended
/// (`mcp_server_to_client_requests_total`).
pub(crate) fn count_ask(method: &str, outcome: &Result<Value, AskError>) {
    let label = match outcome {
        Ok(_) => "answered",
        Err(AskError::Rejected(_)) => "rejected",
        Err(AskError::Cancelled) => "cancelled",
        Err(AskError::Timeout) => "timeout",
        Err(AskError::InputRequired) => "input_required",
        Err(_) => "unavailable",
    };
    let method =
        method_table::ask(method).map_or(mcp_cluster_telemetry::metrics::OTHER, |a| a.name);
    mcp_cluster_telemetry::metrics::metrics()
        .client_requests
        .with_label_values(&[method, label])
        .inc();
}

/// What a stateless (2026-07-28) request carries instead of a session:
/// the client's capabilities and log level from its `_meta`, the answers
/// of its input round, and whether it became a task. The stateless era
/// implements it.
#[async_trait::async_trait]
pub(crate) trait Carried: std::fmt::Debug + Send + Sync {
    /// The capabilities the request's `_meta` declares.
    fn capabilities(&self) -> &ClientCapabilities;
    /// The request's `_meta` log level, if any.
    fn log_level(&self) -> Option<LoggingLevel>;
    /// Turns the request into a task; `true` when it is one.
    async fn start_task(&self) -> bool;
    /// A question from the handler (an input round, or inside a task a
    /// wait for `tasks/update`).
    async fn ask(&self, key: Option<&str>, method: &str, params: Value) -> Result<Value, AskError>;
    /// The handler asked for what the client did not declare.
    fn missing_capability(&self, what: &'static str);
    /// The kept run of a request that was answered (its first round went
    /// out): what the handler reports from then on goes to the run's
    /// retries, not to the request's output. `None` while the output
    /// carries it.
    async fn answered_run(&self) -> Option<Arc<dyn AnsweredRun>>;
}

/// A run kept waiting for its client's answers whose request was answered
/// (the stateless era implements it): it keeps what the handler reports
/// for the retries that follow it.
pub(crate) trait AnsweredRun: std::fmt::Debug + Send + Sync {
    /// The handler's progress; as on a request's stream, it must increase.
    fn progress(
        self: Arc<Self>,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), EmitError>;
    /// A log line of the handler's.
    fn log(self: Arc<Self>, line: &LoggingMessageParams) -> Result<(), EmitError>;
}

/// Everything a handler may do besides computing its result. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RequestContext {
    inner: Arc<ContextInner>,
}

#[derive(Debug)]
struct ContextInner {
    request_id: RequestId,
    progress_token: Option<Value>,
    /// Tripped by `notifications/cancelled`, DELETE or shutdown (and, for
    /// a stateless request, by its client closing the response stream).
    cancel: CancellationToken,
    output: Arc<RequestOutput>,
    scope: Scope,
    ask_timeout: Duration,
    principal: Option<Arc<Principal>>,
    caller_token: Option<CallerToken>,
}

/// Who a request acts for, as its transport told: the principal of its
/// access token, and the token (for an exchange, never passed on). Both
/// `None` without authorization.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The principal of the request's access token.
    pub principal: Option<Arc<Principal>>,
    /// The token itself ([`RequestContext::caller_token`]).
    pub token: Option<CallerToken>,
}

impl Caller {
    /// Who `inbound` acts for.
    pub fn of(inbound: &crate::request::call::Inbound) -> Self {
        Self {
            principal: inbound.principal.clone(),
            token: inbound.caller_token.clone(),
        }
    }
}

/// What a request belongs to.
#[derive(Debug)]
enum Scope {
    /// A session (2024-11-05 … 2025-11-25).
    Session {
        id: SessionId,
        /// The session actor's recipients: its `asks` allocates the ids
        /// of questions.
        recipients: Arc<SessionRecipients>,
        shared: Arc<SessionShared>,
    },
    /// Nothing but itself (2026-07-28): what a session would hold comes with
    /// the request.
    Stateless(Arc<dyn Carried>),
}

impl RequestContext {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        request: &Request,
        session_id: SessionId,
        cancel: CancellationToken,
        output: Arc<RequestOutput>,
        recipients: Arc<SessionRecipients>,
        shared: Arc<SessionShared>,
        ask_timeout: Duration,
        caller: Caller,
    ) -> Self {
        let scope = Scope::Session {
            id: session_id,
            recipients,
            shared,
        };
        Self::with_scope(request, cancel, output, scope, ask_timeout, caller)
    }

    /// The context of a stateless (2026-07-28) request.
    pub(crate) fn stateless(
        request: &Request,
        cancel: CancellationToken,
        output: Arc<RequestOutput>,
        scope: Arc<dyn Carried>,
        caller: Caller,
    ) -> Self {
        // No wait for answers: a question becomes an input round.
        let scope = Scope::Stateless(scope);
        Self::with_scope(request, cancel, output, scope, Duration::ZERO, caller)
    }

    fn with_scope(
        request: &Request,
        cancel: CancellationToken,
        output: Arc<RequestOutput>,
        scope: Scope,
        ask_timeout: Duration,
        caller: Caller,
    ) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                request_id: request.id.clone(),
                progress_token: request.progress_token().cloned(),
                cancel,
                output,
                scope,
                ask_timeout,
                principal: caller.principal,
                caller_token: caller.token,
            }),
        }
    }

    /// The id of the request being handled.
    pub fn request_id(&self) -> &RequestId {
        &self.inner.request_id
    }

    /// The session; `None` for a stateless (2026-07-28) request.
    pub fn session_id(&self) -> Option<&SessionId> {
        match &self.inner.scope {
            Scope::Session { id, .. } => Some(id),
            Scope::Stateless(_) => None,
        }
    }

    /// Who the request acts for: the principal of its validated access
    /// token, with the scopes that token grants. `None` when authorization
    /// is off (and on stdio). The token itself is never handed to
    /// handlers but as [`Self::caller_token`]: a server must not pass it on
    /// (no token passthrough).
    pub fn principal(&self) -> Option<&Principal> {
        self.inner.principal.as_deref()
    }

    /// The access token the request came with, to be exchanged at an
    /// authorization server for a token of another resource (RFC 8693),
    /// never sent to that resource itself. `None` without authorization,
    /// and for a request another node received and handed to this one
    /// (the token stays on the node that received it).
    pub fn caller_token(&self) -> Option<&CallerToken> {
        self.inner.caller_token.as_ref()
    }

    /// The negotiated protocol revision.
    pub fn protocol_version(&self) -> ProtocolVersion {
        match &self.inner.scope {
            Scope::Session { shared, .. } => shared
                .version
                .get()
                .copied()
                .unwrap_or(ProtocolVersion::LATEST),
            Scope::Stateless(_) => ProtocolVersion::STATELESS,
        }
    }

    /// What the client declared: in `initialize` (session era) or in this
    /// request's `_meta` (2026-07-28).
    pub fn client_capabilities(&self) -> Option<&ClientCapabilities> {
        match &self.inner.scope {
            Scope::Session { shared, .. } => shared.client_capabilities.get(),
            Scope::Stateless(scope) => Some(scope.capabilities()),
        }
    }

    /// Turns this request into a task (the 2026-07-28 tasks extension) from
    /// here on: the client gets the task's handle now, and the rest of the
    /// handler runs as the task, its questions waiting for `tasks/update`.
    /// Only for tools that start their task in the handler
    /// ([`crate::request::service::McpService::task_starts_in_handler`]) and clients that
    /// declared the extension; `false` otherwise (the request goes on as
    /// it was, which the session era does too). A task-augmented call of a
    /// 2025-11-25 session is a task from its start: `true` there.
    pub async fn become_task(&self) -> bool {
        match &self.inner.scope {
            Scope::Stateless(scope) => scope.start_task().await,
            // A 2025-11-25 session's task-augmented call is one from its
            // start.
            Scope::Session { .. } => self.inner.output.task().is_some(),
        }
    }

    /// The cancellation token of this request. Handlers that spawn work tie
    /// it to this token.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Resolves when the request is cancelled. Cancel safe.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await;
    }

    /// Whether the client asked for progress (`_meta.progressToken`).
    pub fn wants_progress(&self) -> bool {
        self.inner.progress_token.is_some()
    }

    /// Sends `notifications/progress` when the client asked for it; a no-op
    /// otherwise. Progress must increase with every call.
    ///
    /// # Errors
    /// [`EmitError`] when the value does not increase, the request already
    /// completed, or the log failed.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> Result<(), EmitError> {
        let Some(token) = &self.inner.progress_token else {
            return Ok(());
        };
        if let Some(run) = self.answered_run().await {
            return run.progress(progress, total, message.as_deref());
        }
        let params = ProgressParams {
            progress_token: token.clone(),
            progress,
            total,
            message,
        };
        let n = Notification::new(methods::NOTIFICATION_PROGRESS, params);
        self.inner
            .output
            .emit(&Message::Notification(n), Some(progress))
            .await
    }

    /// Sends `notifications/message` on this request's stream when `level`
    /// passes the session's `logging/setLevel` (2026-07-28: the request's
    /// `_meta` log level; none set, nothing is sent).
    ///
    /// # Errors
    /// [`EmitError`] when the request already completed or the log failed.
    pub async fn log(
        &self,
        level: LoggingLevel,
        logger: Option<&str>,
        data: Value,
    ) -> Result<(), EmitError> {
        let sends = match &self.inner.scope {
            Scope::Session { shared, .. } => shared.sends(level),
            Scope::Stateless(scope) => scope.log_level().is_some_and(|min| level >= min),
        };
        if !sends {
            return Ok(());
        }
        let params = LoggingMessageParams {
            level,
            logger: logger.map(str::to_owned),
            data,
        };
        if let Some(run) = self.answered_run().await {
            return run.log(&params);
        }
        let n = Notification::new(methods::NOTIFICATION_MESSAGE, params);
        self.inner
            .output
            .emit(&Message::Notification(n), None)
            .await
    }

    /// A stateless request's kept run, once the request was answered.
    async fn answered_run(&self) -> Option<Arc<dyn AnsweredRun>> {
        match &self.inner.scope {
            Scope::Stateless(scope) => scope.answered_run().await,
            Scope::Session { .. } => None,
        }
    }

    /// Sends any notification related to this request.
    ///
    /// # Errors
    /// [`EmitError`] when the request already completed or the log failed.
    pub async fn notify(&self, notification: Notification) -> Result<(), EmitError> {
        self.inner
            .output
            .emit(&Message::Notification(notification), None)
            .await
    }

    /// Closes the client's connection to this request's SSE stream without
    /// ending the stream (SEP-1699 polling); the client reconnects with
    /// `Last-Event-ID` after `retry` and receives the rest. A no-op before
    /// 2025-11-25: those streams have no priming event, so a client might
    /// hold no event ID to resume from, and those revisions say the server
    /// should not close a stream before its response.
    ///
    /// # Errors
    /// The event log failed.
    pub async fn close_sse_stream(&self) -> Result<(), EmitError> {
        if !self.protocol_version().primes_sse() {
            return Ok(());
        }
        self.inner
            .output
            .exchange
            .disconnect_client()
            .await
            .map_err(EmitError::Store)
    }

    /// Sends a request to the client on this request's stream and waits for
    /// the answer the client POSTs back.
    ///
    /// # Errors
    /// [`AskError`]: not initialized, cancelled, timed out, rejected;
    /// [`AskError::NotSupported`] for a question whose capability
    /// (`elicitation`, `sampling`, `roots`) the client did not declare.
    pub async fn ask(&self, method: &str, params: impl Serialize) -> Result<Value, AskError> {
        self.ask_keyed(None, method, params).await
    }

    /// Names the next question this handler asks. In the stateless era
    /// (2026-07-28) the question travels in an `input_required` result under
    /// this key, and the client answers under it; without a name the n-th
    /// question of a kind is `<kind>-<n>` (`elicitation-1`, `sampling-2`).
    /// The session era ignores the name.
    pub fn input<'a>(&'a self, key: &'a str) -> NamedInput<'a> {
        NamedInput { ctx: self, key }
    }

    async fn ask_keyed(
        &self,
        key: Option<&str>,
        method: &str,
        params: impl Serialize,
    ) -> Result<Value, AskError> {
        // Never a question the client did not declare it can answer.
        self.require(method)?;
        let outcome = match &self.inner.scope {
            Scope::Session { shared, .. } if !shared.initialized.load(Ordering::Acquire) => {
                return Err(AskError::NotInitialized);
            }
            // A sender of its own for the question: the mailbox keeps
            // room for one message per sender, and one that waits for
            // room must not make the session's other requests wait.
            Scope::Session { recipients, .. } => {
                self.ask_sent(&recipients.asks.clone(), method, params)
                    .await
            }
            Scope::Stateless(scope) => {
                let params = serde_json::to_value(params)
                    .map_err(|err| AskError::InvalidAnswer(err.to_string()))?;
                scope.ask(key, method, params).await
            }
        };
        count_ask(method, &outcome);
        outcome
    }

    async fn ask_sent(
        &self,
        asks: &Recipient<RegisterAsk>,
        method: &str,
        params: impl Serialize,
    ) -> Result<Value, AskError> {
        let from = self.inner.request_id.clone();
        let (id, answer) = asks
            .send(RegisterAsk { from: from.clone() })
            .await
            .map_err(|_| AskError::Unavailable)??;
        tracing::debug!(ask = %id, request = %from, %method, "Asking the client.");
        // A session's task waits for input meanwhile (`input_required`),
        // said before the question goes out.
        let task = self.inner.output.task();
        let key = id.to_string();
        if let Some(run) = task {
            run.question_out(key.clone(), method).await;
        }
        let request = Request::new(id, method, params);
        let asked = match self
            .inner
            .output
            .emit(&Message::Request(request), None)
            .await
        {
            Ok(()) => tokio::select! {
                answer = answer => match answer {
                    Ok(Ok(value)) => Ok(value),
                    Ok(Err(error)) => Err(AskError::Rejected(error)),
                    Err(_) => Err(AskError::Unavailable),
                },
                () = self.inner.cancel.cancelled() => Err(AskError::Cancelled),
                () = tokio::time::sleep(self.inner.ask_timeout) => Err(AskError::Timeout),
            },
            Err(err) => {
                tracing::debug!(request = %from, error = %err, "The question did not go out.");
                Err(AskError::Unavailable)
            }
        };
        if let Some(run) = task {
            run.question_answered(&key).await;
        }
        asked
    }

    /// `sampling/createMessage`: asks the client's LLM.
    ///
    /// # Errors
    /// [`AskError::NotSupported`] without the client's `sampling` capability,
    /// and the errors of [`Self::ask`].
    pub async fn create_message(
        &self,
        params: CreateMessageParams,
    ) -> Result<CreateMessageResult, AskError> {
        self.create_message_keyed(None, params).await
    }

    async fn create_message_keyed(
        &self,
        key: Option<&str>,
        params: CreateMessageParams,
    ) -> Result<CreateMessageResult, AskError> {
        if params.uses_tools() {
            self.require_feature("sampling.tools", ClientCapabilities::samples_with_tools)?;
        }
        typed(
            self.ask_keyed(key, methods::SAMPLING_CREATE_MESSAGE, params)
                .await?,
        )
    }

    /// `roots/list`: the client's roots.
    ///
    /// # Errors
    /// [`AskError::NotSupported`] without the client's `roots` capability,
    /// and the errors of [`Self::ask`].
    pub async fn list_roots(&self) -> Result<ListRootsResult, AskError> {
        self.list_roots_keyed(None).await
    }

    async fn list_roots_keyed(&self, key: Option<&str>) -> Result<ListRootsResult, AskError> {
        typed(
            self.ask_keyed(key, methods::ROOTS_LIST, serde_json::json!({}))
                .await?,
        )
    }

    /// `elicitation/create`: asks the user for input (2025-06-18 and later).
    ///
    /// # Errors
    /// [`AskError::NotSupported`] without the client's `elicitation`
    /// capability or before 2025-06-18, and the errors of [`Self::ask`].
    pub async fn elicit(&self, params: ElicitParams) -> Result<ElicitResult, AskError> {
        self.elicit_keyed(None, params).await
    }

    async fn elicit_keyed(
        &self,
        key: Option<&str>,
        params: ElicitParams,
    ) -> Result<ElicitResult, AskError> {
        if !self.protocol_version().has_elicitation() {
            return Err(AskError::NotSupported("elicitation"));
        }
        typed(
            self.ask_keyed(key, methods::ELICITATION_CREATE, params)
                .await?,
        )
    }

    /// `elicitation/create` in URL mode (2025-11-25 and later): asks the user
    /// to open `params.url`, for what must not pass through the client
    /// (signing in elsewhere, a payment, a secret). `accept` says only that
    /// the user agreed to go; tell the client when the interaction there
    /// has finished with [`Self::elicitation_complete`].
    ///
    /// # Errors
    /// [`AskError::NotSupported`] without the client's `elicitation.url`
    /// capability or before 2025-11-25, and the errors of [`Self::ask`].
    pub async fn elicit_url(&self, params: ElicitUrlParams) -> Result<ElicitResult, AskError> {
        self.elicit_url_keyed(None, params).await
    }

    async fn elicit_url_keyed(
        &self,
        key: Option<&str>,
        params: ElicitUrlParams,
    ) -> Result<ElicitResult, AskError> {
        self.require_feature("elicitation.url", ClientCapabilities::elicits_by_url)?;
        let answer = match &self.inner.scope {
            // 2026-07-28 dropped the ID with the completion notification.
            Scope::Stateless(_) => {
                let params = serde_json::json!({
                    "mode": params.mode,
                    "message": params.message,
                    "url": params.url,
                });
                self.ask_keyed(key, methods::ELICITATION_CREATE, params)
                    .await?
            }
            Scope::Session { .. } => {
                self.ask_keyed(key, methods::ELICITATION_CREATE, params)
                    .await?
            }
        };
        typed(answer)
    }

    /// `notifications/elicitation/complete`: the URL-mode elicitation
    /// `elicitation_id` has finished, so the client may retry what waited
    /// on it. Sent on this request's stream; a no-op in the 2026-07-28 era,
    /// which has no such notification (nor elicitation IDs).
    ///
    /// # Errors
    /// [`EmitError`] when the request already completed or the log failed.
    pub async fn elicitation_complete(&self, elicitation_id: &str) -> Result<(), EmitError> {
        if matches!(self.inner.scope, Scope::Stateless(_)) {
            return Ok(());
        }
        let params = ElicitationCompleteParams {
            elicitation_id: elicitation_id.to_owned(),
        };
        self.notify(Notification::new(
            methods::NOTIFICATION_ELICITATION_COMPLETE,
            params,
        ))
        .await
    }

    /// `ping` to the client, answered with `{}` (session era: the
    /// 2026-07-28 revision has no ping). Tells a handler that the client is
    /// still there and reading this request's stream.
    ///
    /// # Errors
    /// [`AskError::NotSupported`] in the 2026-07-28 era, and the errors of
    /// [`Self::ask`].
    pub async fn ping(&self) -> Result<(), AskError> {
        if !self.protocol_version().has_server_ping() {
            return Err(AskError::NotSupported("ping"));
        }
        self.ask_keyed(None, methods::PING, serde_json::json!({}))
            .await
            .map(drop)
    }

    /// A feature of 2025-11-25 (`elicitation.url`, `sampling.tools`) that
    /// the client must have declared.
    fn require_feature(
        &self,
        feature: &'static str,
        declared: fn(&ClientCapabilities) -> bool,
    ) -> Result<(), AskError> {
        let declared = self.protocol_version().has_2025_11_25_features()
            && self.client_capabilities().is_some_and(declared);
        if declared {
            Ok(())
        } else {
            Err(AskError::NotSupported(feature))
        }
    }

    /// Whether the client declared the capability the question `method`
    /// needs ([`method_table::ASKS`]).
    fn require(&self, method: &str) -> Result<(), AskError> {
        let Some(ask) = method_table::ask(method) else {
            return Ok(());
        };
        match (self.client_capabilities(), &self.inner.scope) {
            (Some(caps), _) if (ask.declared)(caps) => Ok(()),
            (_, Scope::Stateless(scope)) => {
                scope.missing_capability(ask.capability);
                Err(AskError::NotSupported(ask.capability))
            }
            _ => Err(AskError::NotSupported(ask.capability)),
        }
    }
}

/// A question with a name ([`RequestContext::input`]).
#[derive(Debug, Clone, Copy)]
pub struct NamedInput<'a> {
    ctx: &'a RequestContext,
    key: &'a str,
}

impl NamedInput<'_> {
    /// [`RequestContext::elicit`] under this name.
    ///
    /// # Errors
    /// As [`RequestContext::elicit`].
    pub async fn elicit(self, params: ElicitParams) -> Result<ElicitResult, AskError> {
        self.ctx.elicit_keyed(Some(self.key), params).await
    }

    /// [`RequestContext::create_message`] under this name.
    ///
    /// # Errors
    /// As [`RequestContext::create_message`].
    pub async fn create_message(
        self,
        params: CreateMessageParams,
    ) -> Result<CreateMessageResult, AskError> {
        self.ctx.create_message_keyed(Some(self.key), params).await
    }

    /// [`RequestContext::elicit_url`] under this name.
    ///
    /// # Errors
    /// As [`RequestContext::elicit_url`].
    pub async fn elicit_url(self, params: ElicitUrlParams) -> Result<ElicitResult, AskError> {
        self.ctx.elicit_url_keyed(Some(self.key), params).await
    }

    /// [`RequestContext::list_roots`] under this name.
    ///
    /// # Errors
    /// As [`RequestContext::list_roots`].
    pub async fn list_roots(self) -> Result<ListRootsResult, AskError> {
        self.ctx.list_roots_keyed(Some(self.key)).await
    }
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T, AskError> {
    serde_json::from_value(value).map_err(|err| AskError::InvalidAnswer(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_names_itself_in_every_message_it_sends_but_keeps_their_meta() {
        let progress = Notification::new(
            methods::NOTIFICATION_PROGRESS,
            serde_json::json!({"progressToken": "p", "progress": 1, "_meta": {"x": 1}}),
        );
        let Message::Notification(n) = related_to(Message::Notification(progress), "t1") else {
            panic!("a notification stays one");
        };
        let meta = &n.params.unwrap()["_meta"];
        assert_eq!(meta["x"], 1);
        assert_eq!(
            meta[methods::meta::RELATED_TASK],
            serde_json::json!({"taskId": "t1"})
        );
        let ask = Request::new(
            RequestId::Number(7),
            methods::ROOTS_LIST,
            serde_json::json!({}),
        );
        let Message::Request(r) = related_to(Message::Request(ask), "t2") else {
            panic!("a request stays one");
        };
        assert_eq!(
            r.params.unwrap()["_meta"][methods::meta::RELATED_TASK]["taskId"],
            "t2"
        );
    }
}
