//! Stateless requests (2026-07-28): no session, no `initialize`. Each
//! request carries its protocol version, client capabilities, client info
//! and log level in `params._meta`, runs on whichever node receives it, and
//! answers on its own response (JSON, or a stream that is not resumable and
//! whose closing cancels the request).
//!
//! What a session held comes with the request (`StatelessScope`); what a
//! server-to-client request did becomes an input-required round trip
//! ([`mrtr`]): the handler's question goes back in the result, and the
//! client's retry brings the answer to any node. Change notifications
//! reach `subscriptions/listen` streams ([`listen`]); a `tools/call` may
//! run as a task ([`tasks`]).
//!
//! The era's state on this node is `Stateless`; its handlers run through
//! [`crate::request`] as the session era's do, and it knows nothing of
//! sessions.

mod followed;
pub(crate) mod kept;
pub mod listen;
pub mod mrtr;
mod session_tasks;
pub mod tasks;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use mcp_cluster_protocol::jsonrpc::StatelessMeta;
use mcp_cluster_protocol::types::{ClientCapabilities, LoggingLevel};
use mcp_cluster_protocol::{
    ErrorCode, ErrorObject, ProtocolVersion, Request, RequestId, Response, methods,
};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::node::config::RuntimeConfig;
use crate::node::error::RuntimeError;
use crate::node::{InFlightTicket, NodeContext};
use crate::request::call::{Call, Inbound};
use crate::request::context::{AskError, Carried, RequestContext, RequestOutput};
use crate::request::exchange::{Exchange, ExchangeReply};
use crate::request::executor::Executor;
use crate::request::method_table::{self, By};
use crate::request::service::McpService;
use crate::request::service::TaskSupport;
use crate::request::{handler_job, run_job};
use crate::stateless::listen::Listeners;
use crate::stateless::mrtr::KeyRing;
use crate::stateless::mrtr::{RoundState, StateError};
use crate::stateless::tasks::{Eligible, TaskRun, TaskSlot, TaskSpec};

/// `_meta` keys of a stateless request.
use mcp_cluster_protocol::methods::meta;

/// The `_meta` of a stateless request, read and checked.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/protocolVersion` as sent.
    pub requested: String,
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub capabilities: ClientCapabilities,
    /// `io.modelcontextprotocol/logLevel`: the lowest level of
    /// `notifications/message` the client wants; none, none are sent.
    pub log_level: Option<LoggingLevel>,
}

impl RequestMeta {
    /// Whether a message's `_meta` names a protocol version (the
    /// stateless era's mark).
    pub fn present(meta: Option<&StatelessMeta>) -> bool {
        meta.is_some_and(|m| m.protocol_version.is_some())
    }

    /// Reads the `_meta` fields of a request ([`Request::stateless_meta`]):
    /// those a stateless request must carry, each of the right type.
    /// Whether the version is served is [`Self::version`]'s question: a
    /// transport compares it with its own header first.
    ///
    /// # Errors
    /// -32602 naming a missing or malformed field.
    pub fn read(meta: Option<&StatelessMeta>) -> Result<Self, ErrorObject> {
        let field = |get: fn(&StatelessMeta) -> &Option<Box<RawValue>>| {
            meta.and_then(|m| get(m).as_deref()).map(RawValue::get)
        };
        let requested = match field(|m| &m.protocol_version) {
            Some(text) => serde_json::from_str::<String>(text)
                .map_err(|_| invalid_meta(meta::PROTOCOL_VERSION, "must be a string"))?,
            None => return Err(invalid_meta(meta::PROTOCOL_VERSION, "is required")),
        };
        let capabilities = match field(|m| &m.client_capabilities) {
            Some(text) if text.starts_with('{') => serde_json::from_str(text)
                .map_err(|_| invalid_meta(meta::CLIENT_CAPABILITIES, "is malformed"))?,
            Some(_) => {
                return Err(invalid_meta(meta::CLIENT_CAPABILITIES, "must be an object"));
            }
            None => return Err(invalid_meta(meta::CLIENT_CAPABILITIES, "is required")),
        };
        if let Some(info) = field(|m| &m.client_info)
            && !info.starts_with('{')
        {
            return Err(invalid_meta(meta::CLIENT_INFO, "must be an object"));
        }
        let log_level = match field(|m| &m.log_level) {
            None | Some("null") => None,
            Some(text) => {
                let level = serde_json::from_str::<String>(text)
                    .map_err(|_| invalid_meta(meta::LOG_LEVEL, "must be a string"))?;
                Some(LoggingLevel::parse(&level).ok_or_else(|| {
                    invalid_meta(
                        meta::LOG_LEVEL,
                        "must be one of debug, info, notice, warning, error, critical, alert, emergency",
                    )
                })?)
            }
        };
        Ok(Self {
            requested,
            capabilities,
            log_level,
        })
    }

    /// The requested version, when this server serves it statelessly.
    ///
    /// # Errors
    /// -32022 with the supported and the requested versions.
    pub fn version(&self) -> Result<ProtocolVersion, ErrorObject> {
        match self.requested.parse::<ProtocolVersion>() {
            Ok(v) if v.is_stateless() => Ok(v),
            _ => Err(unsupported_version(&self.requested)),
        }
    }
}

fn invalid_meta(field: &str, what: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("params._meta[\"{field}\"] {what}"))
        .with_data(json!({ "field": field }))
}

/// -32022 `UnsupportedProtocolVersionError`.
pub fn unsupported_version(requested: &str) -> ErrorObject {
    let requested: String = requested.chars().take(64).collect();
    ErrorObject::new(
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
        format!("Unsupported protocol version: {requested}"),
    )
    .with_data(json!({
        "supported": supported_versions(),
        "requested": requested,
    }))
}

/// Every version served, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    ProtocolVersion::SUPPORTED
        .iter()
        .map(|v| v.as_str())
        .collect()
}

/// What a stateless request's handler reads instead of a session.
#[derive(Debug)]
pub(crate) struct StatelessScope {
    pub(crate) capabilities: ClientCapabilities,
    pub(crate) log_level: Option<LoggingLevel>,
    pub(crate) inputs: InputRound,
    /// Whether (and as what) the request runs as a task.
    pub(crate) task: tokio::sync::Mutex<TaskSlot>,
    /// Set once it is a task (or a kept run): closing the response stream
    /// no longer cancels it.
    pub(crate) is_task: AtomicBool,
    /// The request's method and params, when a question the request does
    /// not answer keeps the handler running (a kept run) rather than
    /// ending the run.
    pub(crate) keep: Option<(String, Option<Map<String, Value>>)>,
}

impl StatelessScope {
    /// Turns an eligible request into a task; `true` when it is one.
    pub(crate) async fn start_task(&self) -> bool {
        let mut slot = self.task.lock().await;
        match &*slot {
            TaskSlot::Running(_) => true,
            TaskSlot::None => false,
            TaskSlot::Eligible(eligible) => match eligible.start().await {
                Some((run, created)) => {
                    // A task before the handle goes out: the client's
                    // closing that response no longer cancels anything.
                    self.is_task.store(true, Ordering::Release);
                    let TaskSlot::Eligible(eligible) =
                        std::mem::replace(&mut *slot, TaskSlot::Running(run))
                    else {
                        unreachable!("matched above")
                    };
                    // Durably created before the answer goes out.
                    eligible.answer(created).await;
                    true
                }
                None => false,
            },
        }
    }

    /// The task this request became, if it did.
    pub(crate) async fn running_task(&self) -> Option<Arc<TaskRun>> {
        match &*self.task.lock().await {
            TaskSlot::Running(run) => Some(Arc::clone(run)),
            _ => None,
        }
    }

    /// A question from the handler: inside a task it waits for the
    /// client's `tasks/update`; otherwise it becomes an input-required
    /// round trip.
    pub(crate) async fn ask(
        &self,
        key: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, crate::request::context::AskError> {
        let key = self.inputs.key(key, method)?;
        if let Some(run) = self.running_task().await {
            return run.ask(key, method, params).await;
        }
        if self.keep.is_none() {
            return self.inputs.ask(key, method, params);
        }
        // Answered by the request itself, or the run is kept until the
        // client answers.
        match self.inputs.ask(key.clone(), method, params.clone()) {
            Err(AskError::InputRequired) => {
                self.inputs.take_open();
                match self.kept_run().await {
                    Some(run) => run.ask(key, method, params).await,
                    None => self.inputs.ask(key, method, params),
                }
            }
            answered => answered,
        }
    }

    /// The kept run of this request, made at its first question; `None`
    /// when it could not be stored (the question ends the run, as for a
    /// service that does not keep them).
    async fn kept_run(&self) -> Option<Arc<TaskRun>> {
        let (method, params) = self.keep.as_ref()?;
        let mut slot = self.task.lock().await;
        let eligible = match &*slot {
            TaskSlot::Running(run) => return Some(Arc::clone(run)),
            TaskSlot::None => return None,
            TaskSlot::Eligible(eligible) => eligible,
        };
        let kept = kept::Kept::new(
            Arc::clone(&eligible.output),
            eligible.request_id.clone(),
            method.clone(),
            params.clone(),
            eligible.spec.principal.clone(),
        );
        let id = format!("{}{}", kept::ID_PREFIX, uuid::Uuid::new_v4().simple());
        // Kept before the question goes out: the client's closing that
        // response no longer cancels the run.
        self.is_task.store(true, Ordering::Release);
        let Some((run, _)) = eligible.spec.create(id, Some(kept)).await else {
            self.is_task.store(false, Ordering::Release);
            return None;
        };
        *slot = TaskSlot::Running(Arc::clone(&run));
        run.reply_soon();
        Some(run)
    }
}

#[async_trait::async_trait]
impl Carried for StatelessScope {
    fn capabilities(&self) -> &ClientCapabilities {
        &self.capabilities
    }

    fn log_level(&self) -> Option<LoggingLevel> {
        self.log_level
    }

    async fn start_task(&self) -> bool {
        StatelessScope::start_task(self).await
    }

    async fn ask(&self, key: Option<&str>, method: &str, params: Value) -> Result<Value, AskError> {
        StatelessScope::ask(self, key, method, params).await
    }

    fn missing_capability(&self, what: &'static str) {
        self.inputs.missing_capability(what);
    }

    async fn answered_run(&self) -> Option<Arc<dyn crate::request::context::AnsweredRun>> {
        let run = self.running_task().await?;
        if run.kept.as_ref().is_some_and(kept::Kept::replied) {
            Some(run)
        } else {
            None
        }
    }
}

/// The questions and answers of one round of an input-required request.
#[derive(Debug, Default)]
pub(crate) struct InputRound {
    /// Answers known (earlier rounds, and this retry's `inputResponses`).
    answers: Map<String, Value>,
    /// Unnamed asks made so far in this run: the n-th of a kind is keyed
    /// `<kind>-<n>`, the same on every run of the same handler.
    counts: Mutex<std::collections::HashMap<&'static str, usize>>,
    /// Questions without an answer yet: key, `{method, params}`.
    open: Mutex<Vec<(String, Value)>>,
    /// A client capability the handler needed and the request lacked.
    missing: Mutex<Option<&'static str>>,
}

impl InputRound {
    fn new(answers: Map<String, Value>) -> Self {
        Self {
            answers,
            ..Self::default()
        }
    }

    /// The key of a question: the handler's name for it, or the n-th of
    /// its kind (`<kind>-<n>`, the same on every run of the handler).
    pub(crate) fn key(
        &self,
        key: Option<&str>,
        method: &str,
    ) -> Result<String, crate::request::context::AskError> {
        let Some(kind) = method_table::ask(method).map(|a| a.capability) else {
            return Err(crate::request::context::AskError::NotSupported(
                "this request in 2026-07-28",
            ));
        };
        if let Some(key) = key {
            return Ok(key.to_owned());
        }
        let Ok(mut counts) = self.counts.lock() else {
            return Err(crate::request::context::AskError::Unavailable);
        };
        let n = counts.entry(kind).or_default();
        *n += 1;
        Ok(format!("{kind}-{n}"))
    }

    /// The answer when the retry brought a well-formed one, else the
    /// question is noted for the `input_required` result (a malformed
    /// answer is asked again).
    pub(crate) fn ask(
        &self,
        key: String,
        method: &str,
        params: Value,
    ) -> Result<Value, crate::request::context::AskError> {
        if let Some(answer) = self
            .answers
            .get(&key)
            .filter(|a| method_table::well_formed(method, a))
        {
            return Ok(answer.clone());
        }
        if let Ok(mut open) = self.open.lock() {
            open.push((key, json!({ "method": method, "params": params })));
        }
        Err(crate::request::context::AskError::InputRequired)
    }

    pub(crate) fn missing_capability(&self, what: &'static str) {
        if let Ok(mut missing) = self.missing.lock() {
            missing.get_or_insert(what);
        }
    }

    fn take_open(&self) -> Vec<(String, Value)> {
        self.open
            .lock()
            .map(|mut open| std::mem::take(&mut *open))
            .unwrap_or_default()
    }

    fn missing(&self) -> Option<&'static str> {
        self.missing.lock().ok().and_then(|m| *m)
    }
}

/// How a stateless request is answered.
#[derive(Debug)]
pub enum StatelessReply {
    /// At once (discovery, and errors of the request itself).
    Now(Response),
    /// Refused by the runtime (quota, overload, shutdown) before anything
    /// ran: the transport answers with its status (429, 503) and this
    /// request's id.
    Refused(RuntimeError, mcp_cluster_protocol::RequestId),
    /// By a running handler (or a listen stream): JSON or a live stream.
    /// Dropping `guard` (the client went away) cancels the request.
    Running {
        /// Resolves with the JSON answer or the live stream.
        reply: oneshot::Receiver<ExchangeReply>,
        /// Cancels the request when dropped.
        guard: RequestGuard,
    },
}

/// Held by the transport while its client is there: dropping it (the
/// client closed the response) cancels the request, unless it became a
/// task (which outlives its response) or a listen stream's own token.
#[derive(Debug)]
pub struct RequestGuard(Guarded);

#[derive(Debug)]
enum Guarded {
    /// A handler's run.
    Run {
        scope: Arc<StatelessScope>,
        job: CancellationToken,
        client_gone: Arc<AtomicBool>,
    },
    /// Anything cancelled by its token alone (held, tripped on drop).
    Token { _held: DropGuard },
}

impl RequestGuard {
    pub(crate) fn token(token: CancellationToken) -> Self {
        Self(Guarded::Token {
            _held: token.drop_guard(),
        })
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if let Guarded::Run {
            scope,
            job,
            client_gone,
        } = &self.0
            && !scope.is_task.load(Ordering::Acquire)
        {
            client_gone.store(true, Ordering::Release);
            job.cancel();
        }
    }
}

/// The stateless era on this node: what its requests, listen streams,
/// input rounds and tasks share. Cheap to clone.
///
/// Owner: the [`crate::runtime::Runtime`] makes it once. Stop path:
/// dropped with the runtime; its requests stop with the node's stop token.
#[derive(Debug, Clone)]
pub(crate) struct Stateless(Arc<Era>);

/// What [`Stateless`] shares between its clones.
#[derive(Debug)]
pub(crate) struct Era {
    service: Arc<dyn McpService>,
    config: Arc<RuntimeConfig>,
    node: Arc<NodeContext>,
    /// Where every handler runs, apart from the HTTP workers.
    executor: Arc<Executor>,
    /// The `subscriptions/listen` streams open on this node.
    listeners: Arc<Listeners>,
    /// The keys that seal input-required request states.
    key_ring: KeyRing,
    /// When the key ring was last read from the store (`None`: not yet).
    ring_read: tokio::sync::Mutex<Option<tokio::time::Instant>>,
    /// Tasks running on this node.
    running_tasks: AtomicUsize,
    /// What completes a result, made on first use.
    completions: std::sync::OnceLock<Completions>,
    /// Wake-ups between kept runs and their retries on this node.
    kept: kept::Wakers,
    /// The tasks this node's listen streams follow.
    followed: followed::Followed,
}

impl Stateless {
    pub(crate) fn new(
        service: Arc<dyn McpService>,
        config: Arc<RuntimeConfig>,
        node: Arc<NodeContext>,
        executor: Arc<Executor>,
    ) -> Self {
        let configured = mrtr::configured_keys(&config).unwrap_or_else(|err| {
            tracing::error!(error = %err, "Request-state keys ignored; this node makes its own.");
            Vec::new()
        });
        let listeners = Arc::new(Listeners::new("listen streams", config.max_listen_streams));
        Self(Arc::new(Era {
            service,
            config,
            node,
            executor,
            listeners,
            key_ring: KeyRing::new(&configured),
            ring_read: tokio::sync::Mutex::new(None),
            running_tasks: AtomicUsize::new(0),
            completions: std::sync::OnceLock::new(),
            kept: kept::Wakers::default(),
            followed: followed::Followed::default(),
        }))
    }

    /// The tasks this node's listen streams follow.
    pub(crate) fn followed(&self) -> &followed::Followed {
        &self.0.followed
    }

    /// How many tasks (of either era) run on this node.
    pub(crate) fn running_tasks(&self) -> usize {
        self.0.running_tasks.load(Ordering::Acquire)
    }

    pub(crate) fn config(&self) -> &RuntimeConfig {
        &self.0.config
    }

    pub(crate) fn service(&self) -> &Arc<dyn McpService> {
        &self.0.service
    }

    pub(crate) fn node(&self) -> &Arc<NodeContext> {
        &self.0.node
    }

    pub(crate) fn node_id(&self) -> &mcp_cluster_store::NodeId {
        &self.0.node.id
    }

    pub(crate) fn store(&self) -> &mcp_cluster_store::Store {
        &self.0.node.store
    }

    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.0.node.stop_token()
    }

    pub(crate) fn drain_token(&self) -> CancellationToken {
        self.0.node.drain_token()
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.0.node.is_closing()
    }

    /// The key ring sealing input-required request states.
    pub(crate) fn key_ring(&self) -> &KeyRing {
        &self.0.key_ring
    }

    /// The listen streams open on this node.
    pub(crate) fn listeners(&self) -> &Arc<Listeners> {
        &self.0.listeners
    }

    /// What completes a result, made once (every stateless result
    /// carries it).
    fn completions(&self) -> &Completions {
        self.0.completions.get_or_init(|| {
            let server_info =
                serde_json::to_value(self.service().server_info()).unwrap_or(Value::Null);
            Completions::new(server_info, self.config().cache_ttl_ms)
        })
    }
}

/// The members a complete stateless result carries beside its own:
/// `resultType`, the server's identity in `_meta`, and on a cacheable
/// method's result the caching hints. Made once per node and shared by the
/// responses ([`Response::shared`]) rather than copied into every result.
#[derive(Debug)]
struct Completions {
    /// Every result's.
    plain: Arc<Map<String, Value>>,
    /// A cacheable result's that any client may share (`cacheScope`
    /// `public`).
    public: Arc<Map<String, Value>>,
    /// `resources/read`'s: cacheable for its client only.
    private: Arc<Map<String, Value>>,
}

impl Completions {
    fn new(server_info: Value, ttl_ms: u64) -> Self {
        let mut plain = Map::new();
        plain.insert("resultType".into(), json!("complete"));
        plain.insert("_meta".into(), json!({ meta::SERVER_INFO: server_info }));
        let cacheable = |scope: &str| {
            let mut members = plain.clone();
            members.insert("ttlMs".into(), json!(ttl_ms));
            members.insert("cacheScope".into(), json!(scope));
            Arc::new(members)
        };
        Self {
            public: cacheable("public"),
            private: cacheable("private"),
            plain: Arc::new(plain),
        }
    }

    /// The members that complete a result of `method`.
    fn of(&self, method: &str) -> &Arc<Map<String, Value>> {
        if !method_table::is_cacheable(method) {
            &self.plain
        } else if method == methods::RESOURCES_READ {
            &self.private
        } else {
            &self.public
        }
    }

    /// Puts the members that complete a result of `method` into the result
    /// itself: `resultType` (a result that says `input_required` is left as
    /// it is), the server's identity into its `_meta`, and the caching
    /// hints, each unless the handler set its own.
    fn complete(&self, method: &str, result: &mut Value) {
        let Value::Object(map) = result else { return };
        // A service that runs its own input rounds says `input_required`.
        if map.get("resultType").and_then(Value::as_str) == Some("input_required") {
            return;
        }
        for (key, value) in self.of(method).iter() {
            match (map.get_mut(key), value) {
                (Some(own), _) if key == "resultType" => own.clone_from(value),
                (Some(Value::Object(own)), Value::Object(added)) => {
                    for (key, value) in added {
                        own.entry(key.as_str()).or_insert_with(|| value.clone());
                    }
                }
                (Some(_), _) => {}
                (None, _) => {
                    map.insert(key.clone(), value.clone());
                }
            }
        }
    }

    /// Whether a result can be answered as it is with the members shared
    /// ([`Response::shared`]): it has neither `resultType` (which completing
    /// sets, or leaves when `input_required`) nor `_meta` (which completing
    /// adds to).
    fn can_share(result: &Map<String, Value>) -> bool {
        !result.contains_key("resultType") && !result.contains_key("_meta")
    }
}

impl Stateless {
    /// Serves one stateless (2026-07-28) request whose `_meta` the
    /// transport read ([`RequestMeta::read`]) and whose headers it checked,
    /// without any session.
    pub(crate) async fn serve(
        &self,
        request: Request,
        meta: RequestMeta,
        inbound: &Inbound,
    ) -> StatelessReply {
        // Measured here when answered at once; a handler's run measures
        // itself until its response is written.
        let long_lived = request.method == methods::SUBSCRIPTIONS_LISTEN;
        let call =
            (method_table::stateless(&request.method) != By::Service && !long_lived).then(|| {
                Call::new(
                    self.service(),
                    &request,
                    None,
                    ProtocolVersion::STATELESS.as_str(),
                    inbound,
                )
            });
        let reply = self.stateless_reply(request, meta, inbound).await;
        match (call, &reply) {
            (Some(call), StatelessReply::Now(response)) => call.complete(response),
            (Some(call), StatelessReply::Refused(err, id)) => {
                call.complete(&Response::error(Some(id.clone()), err.to_error_object()));
            }
            _ => {}
        }
        reply
    }

    async fn stateless_reply(
        &self,
        request: Request,
        meta: RequestMeta,
        inbound: &Inbound,
    ) -> StatelessReply {
        let id = request.id.clone();
        let refuse =
            |error: ErrorObject| StatelessReply::Now(Response::error(Some(id.clone()), error));
        if self.is_closing() {
            return StatelessReply::Refused(RuntimeError::ShuttingDown, id);
        }
        if let Err(err) = self
            .node()
            .quotas
            .admit_requests(inbound.principal.as_deref(), inbound.client_ip, 1)
            .await
        {
            return StatelessReply::Refused(err, id);
        }
        match request.method.as_str() {
            methods::SERVER_DISCOVER => {
                let result = self.discover_result();
                StatelessReply::Now(Response::result(id, result))
            }
            methods::SUBSCRIPTIONS_LISTEN => self.listen(request, &meta, inbound).await,
            methods::TASKS_GET | methods::TASKS_UPDATE | methods::TASKS_CANCEL => {
                // The capability first: without it, no task is looked up.
                if !crate::stateless::tasks::declares_extension(&meta.capabilities) {
                    return refuse(crate::stateless::tasks::extension_required());
                }
                let principal = inbound
                    .principal
                    .as_deref()
                    .map(mcp_cluster_store::Principal::key);
                let outcome = self.task_method(&request, principal.as_deref()).await;
                StatelessReply::Now(Response::new(Some(id), outcome))
            }
            method if method_table::stateless(method) == By::Service => {
                self.run_stateless(request, meta, inbound).await
            }
            method => refuse(ErrorObject::method_not_found(method)),
        }
    }

    /// The `server/discover` result.
    pub(crate) fn discover_result(&self) -> Value {
        let service = self.service();
        let mut result = Map::new();
        result.insert("resultType".into(), json!("complete"));
        let mut versions = supported_versions();
        if let Some(served) = service.supported_versions() {
            versions.retain(|v| served.iter().any(|s| s == v));
        }
        result.insert("supportedVersions".into(), json!(versions));
        let mut capabilities =
            serde_json::to_value(service.capabilities()).unwrap_or_else(|_| json!({}));
        // The service's extensions (skills), and the era's own (tasks).
        if !capabilities["extensions"].is_object() {
            capabilities["extensions"] = json!({});
        }
        capabilities["extensions"][crate::stateless::tasks::EXTENSION] = json!({});
        result.insert("capabilities".into(), capabilities);
        if let Some(text) = service.instructions() {
            result.insert("instructions".into(), json!(text));
        }
        let mut value = Value::Object(result);
        self.complete_result(methods::SERVER_DISCOVER, &mut value);
        value
    }

    /// Adds what every complete stateless result carries ([`Completions`])
    /// into the result itself: `resultType`, the server's identity in
    /// `_meta`, and caching hints where the method is cacheable (unless
    /// the handler set its own).
    pub(crate) fn complete_result(&self, method: &str, result: &mut Value) {
        self.completions().complete(method, result);
    }

    /// The response to `id` that answers a handler's `outcome` as the
    /// stateless era does ([`Self::complete_outcome`]). A result object
    /// with neither `resultType` nor `_meta` of its own, the common case,
    /// is not touched: the response shares the node's [`Completions`],
    /// written with it.
    pub(crate) fn respond(
        &self,
        id: RequestId,
        method: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Response {
        match outcome {
            Ok(Value::Object(result)) if Completions::can_share(&result) => {
                let mut response = Response::result(id, Value::Object(result));
                response.shared = Some(Arc::clone(self.completions().of(method)));
                response
            }
            outcome => Response::new(Some(id), self.complete_outcome(method, outcome)),
        }
    }

    async fn run_stateless(
        &self,
        request: Request,
        meta: RequestMeta,
        inbound: &Inbound,
    ) -> StatelessReply {
        let id = request.id.clone();
        let principal_key = inbound
            .principal
            .as_deref()
            .map(mcp_cluster_store::Principal::key);
        let method = request.method.clone();
        // A tool that runs as a task for clients of the extension.
        let (task_support, task_in_handler) = match (method.as_str(), request.params.as_ref()) {
            (methods::TOOLS_CALL, Some(params)) => {
                let tool = params
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let service = self.service();
                (
                    service.task_support(tool),
                    service.task_starts_in_handler(tool),
                )
            }
            _ => (TaskSupport::Forbidden, false),
        };
        let extension = crate::stateless::tasks::declares_extension(&meta.capabilities);
        let may_be_asked =
            method_table::asks_client(&method) && method_table::may_be_asked(&meta.capabilities);
        if task_support == TaskSupport::Required && !extension {
            return StatelessReply::Now(Response::error(
                Some(id),
                crate::stateless::tasks::extension_required(),
            ));
        }
        let task_eligible = task_support != TaskSupport::Forbidden && extension;
        if task_eligible
            && self.0.running_tasks.load(Ordering::Acquire) >= self.config().max_running_tasks
        {
            return StatelessReply::Refused(
                RuntimeError::NodeFull(crate::node::error::NodeFull::Tasks),
                id,
            );
        }
        // The parameters' bytes, held by the handler while it runs (a
        // task's whole life).
        let work = if task_eligible {
            crate::node::Work::Task
        } else {
            crate::node::Work::Direct
        };
        let hold = match inbound.admit(self.node(), inbound.body_bytes, work) {
            Ok(hold) => hold,
            Err(err) => return StatelessReply::Refused(err, id),
        };
        // The client's share of the running tasks, held while the handler
        // runs (a task's whole life).
        let task_slot = if task_eligible {
            match self
                .node()
                .quotas
                .acquire_task(inbound.principal.as_deref(), inbound.client_ip)
                .await
            {
                Ok(slot) => slot,
                Err(err) => return StatelessReply::Refused(err, id),
            }
        } else {
            None
        };
        // The round so far: the state's answers, then the retry's; or the
        // kept run the state names, which the retry's answers go to.
        let own_rounds = self.service().answers_input_rounds();
        let round = if own_rounds {
            Ok(Round::Answers(Map::new()))
        } else {
            self.round_answers(&request, principal_key.as_deref()).await
        };
        let answers = match round {
            Ok(Round::Answers(found)) => found,
            Ok(Round::Kept(run)) => {
                drop(task_slot);
                return self.resume_kept(
                    run,
                    request,
                    principal_key.unwrap_or_default(),
                    hold,
                    inbound,
                );
            }
            Err(err) => return StatelessReply::Now(Response::error(Some(id), err)),
        };
        // A service whose handler cannot run twice keeps it running while
        // the client answers its questions.
        let keeps = may_be_asked && !own_rounds && self.service().keeps_running_on_input();
        // Only a handler that may ask the client, of a client that declared
        // it can be asked, can end in an input round, whose state names the
        // request.
        let params = if may_be_asked {
            mrtr::identity(request.params.as_ref())
        } else {
            None
        };
        // The handler's token: tripped when the node stops, when the client
        // closes the response stream (unless the request became a task,
        // which outlives it) and by `tasks/cancel`. `client_gone` says
        // which: set, no answer is due.
        let job = self.stop_token().child_token();
        let client_gone = Arc::new(AtomicBool::new(false));
        let (exchange, reply) = Exchange::direct(
            Arc::clone(self.node()),
            self.config().response_mode,
            id.clone(),
        );
        // Whose budget a finished task counts against: the request's owner.
        let client = (task_eligible || keeps).then(|| {
            hold.owner()
                .map_or(mcp_cluster_store::UNKNOWN_OWNER, |o| &**o)
                .to_owned()
        });
        exchange.track(
            Call::new(
                self.service(),
                &request,
                None,
                ProtocolVersion::STATELESS.as_str(),
                inbound,
            )
            .holding(hold),
        );
        let output = Arc::new(RequestOutput::new(Arc::clone(&exchange)));
        let task = if task_eligible || keeps {
            TaskSlot::Eligible(Box::new(Eligible {
                spec: TaskSpec {
                    stateless: self.clone(),
                    principal: principal_key.clone().unwrap_or_default(),
                    client: client.unwrap_or_default(),
                    job: job.clone(),
                    cancelled: Arc::clone(&client_gone),
                    ttl_ms: None,
                    session_era: false,
                },
                output: Arc::clone(&output),
                request_id: id.clone(),
                may_be_task: task_eligible,
            }))
        } else {
            TaskSlot::None
        };
        let scope = Arc::new(StatelessScope {
            capabilities: meta.capabilities,
            log_level: meta.log_level,
            inputs: InputRound::new(answers),
            task: tokio::sync::Mutex::new(task),
            is_task: AtomicBool::new(false),
            keep: keeps.then(|| (method.clone(), params.clone())),
        });
        if task_eligible && !task_in_handler {
            scope.start_task().await;
        }
        let guard = RequestGuard(Guarded::Run {
            scope: Arc::clone(&scope),
            job: job.clone(),
            client_gone: Arc::clone(&client_gone),
        });
        let context = RequestContext::stateless(
            &request,
            job.clone(),
            Arc::clone(&output),
            Arc::clone(&scope) as Arc<dyn Carried>,
            crate::request::context::Caller::of(inbound),
        );
        let handler = handler_job(self.service(), request, context, &exchange);
        let stateless = self.clone();
        let timeout = self.config().request_timeout();
        let ticket = InFlightTicket::issue(self.node());
        let executor = Arc::clone(&self.0.executor);
        actix::spawn(async move {
            let _ticket = ticket;
            let _task_slot = task_slot;
            let outcome = run_job(&executor, handler, timeout, &job, &client_gone, &id).await;
            if let Some(run) = scope.running_task().await {
                // A kept run that ended before its questions went out
                // answers as a run that asked nothing.
                if run.kept.as_ref().is_some_and(kept::Kept::take_reply) {
                    let response = outcome
                        .clone()
                        .map(|outcome| stateless.respond(id, &method, outcome));
                    output.finish(response).await;
                }
                run.finish(outcome).await;
                return;
            }
            // A client that closed its stream cancelled the request: no
            // answer, nothing after.
            let Some(outcome) = outcome else {
                tracing::debug!(jsonrpc_id = %id, "Stateless request cancelled by its client.");
                output.finish(None).await;
                return;
            };
            let outcome = stateless
                .finish_round(
                    &method,
                    params.as_ref(),
                    &scope,
                    principal_key.as_deref(),
                    outcome,
                )
                .await;
            output
                .finish(Some(stateless.respond(id, &method, outcome)))
                .await;
        });
        StatelessReply::Running { reply, guard }
    }

    /// The answers a retry brings: those its `requestState` sealed (the
    /// state claimed, so the handler never runs twice on one state), then
    /// its `inputResponses`.
    async fn round_answers(
        &self,
        request: &Request,
        principal: Option<&str>,
    ) -> Result<Round, ErrorObject> {
        let params = request.params.as_ref();
        let mut answers = Map::new();
        if let Some(state) = params.and_then(|p| p.get("requestState")) {
            let text = state.as_str().ok_or(state_refused(StateError::Malformed))?;
            let opened = self.open_state(text).await.map_err(state_refused)?;
            opened
                .check(&request.method, params, principal)
                .map_err(state_refused)?;
            if !self.claim_state(&opened.id).await {
                return Err(state_refused(StateError::Replayed));
            }
            if let Some(run) = opened.run {
                return Ok(Round::Kept(run));
            }
            answers = opened.answers;
        }
        if let Some(responses) = params.and_then(|p| p.get("inputResponses")) {
            let Value::Object(responses) = responses else {
                return Err(ErrorObject::invalid_params(
                    "inputResponses must be an object of results by input key",
                ));
            };
            for (key, value) in responses {
                answers.insert(key.clone(), value.clone());
            }
        }
        Ok(Round::Answers(answers))
    }

    /// The outcome of a finished run: `input_required` when the handler
    /// asked what the client has not answered yet, -32021 when it needed a
    /// capability the request did not declare, otherwise the handler's own
    /// outcome (which [`Self::respond`] completes).
    async fn finish_round(
        &self,
        method: &str,
        params: Option<&Map<String, Value>>,
        scope: &StatelessScope,
        principal: Option<&str>,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<Value, ErrorObject> {
        let open = scope.inputs.take_open();
        if !open.is_empty() && method_table::asks_client(method) {
            self.ensure_key_ring().await;
            let state = RoundState::issue(
                method,
                params,
                principal,
                scope.inputs.answers.clone(),
                self.config().request_state_ttl(),
            );
            let sealed = self
                .key_ring()
                .seal(&state)
                .map_err(|_| ErrorObject::internal("request state could not be sealed"))?;
            let requests: Map<String, Value> = open.into_iter().collect();
            return Ok(json!({
                "resultType": "input_required",
                "inputRequests": requests,
                "requestState": sealed,
            }));
        }
        // A handler that needed a capability the request lacks and failed
        // for it: the client learns which (one that fell back to something
        // else keeps its result).
        let failed = match &outcome {
            Err(_) => true,
            Ok(value) => value.get("isError").and_then(Value::as_bool) == Some(true),
        };
        if let (Some(what), true) = (scope.inputs.missing(), failed) {
            return Err(ErrorObject::new(
                ErrorCode::MISSING_CLIENT_CAPABILITY,
                format!(
                    "this request needs the client capability {what}, which the \
                     request's _meta does not declare"
                ),
            )
            .with_data(json!({ "requiredCapabilities": { what: {} } })));
        }
        outcome
    }

    /// A handler's outcome as the stateless era answers it.
    pub(crate) fn complete_outcome(
        &self,
        method: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<Value, ErrorObject> {
        match outcome {
            Ok(mut value) => {
                self.complete_result(method, &mut value);
                Ok(value)
            }
            // 2026-07-28: resource not found is invalid params.
            Err(mut err) if err.code == ErrorCode::RESOURCE_NOT_FOUND => {
                err.code = ErrorCode::INVALID_PARAMS;
                Err(err)
            }
            Err(err) => Err(err),
        }
    }

    /// Marks a request state used; `false` when it already was (replay).
    /// A store failure lets the retry through: refusing it would fail every
    /// input-required request while the store is away.
    async fn claim_state(&self, id: &str) -> bool {
        let ttl = self.config().request_state_ttl() + Duration::from_secs(60);
        let key = mcp_cluster_store::QuotaKey::new("request_state", id);
        match self.store().quotas.claim_once(&key, ttl).await {
            Ok(first) => first,
            Err(err) => {
                tracing::warn!(error = %err, "Request state could not be marked used; accepting it.");
                true
            }
        }
    }
}

/// What a retry's `requestState` and `inputResponses` bring.
enum Round {
    /// Answers for the handler's run (none without a state).
    Answers(Map<String, Value>),
    /// The kept run that waits for the retry's answers.
    Kept(String),
}

/// The -32602 of a refused request state, its reason in `data`.
fn state_refused(err: StateError) -> ErrorObject {
    ErrorObject::invalid_params(err.to_string()).with_data(json!({ "reason": state_reason(err) }))
}

/// The `data.reason` of a refused request state.
fn state_reason(err: StateError) -> &'static str {
    match err {
        StateError::Malformed => "malformed",
        StateError::UnknownKey => "unknown_key",
        StateError::Tampered => "tampered",
        StateError::Expired => "expired",
        StateError::Foreign => "foreign",
        StateError::OtherRequest => "other_request",
        StateError::Replayed => "replayed",
    }
}

#[cfg(test)]
mod tests {
    use mcp_cluster_protocol::Message;
    use mcp_cluster_protocol::jsonrpc::decode_message;

    use super::*;

    /// `RequestMeta::read` of a decoded request with this `_meta`.
    fn read(meta: Value) -> Result<RequestMeta, ErrorObject> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"_meta": meta}});
        let Ok(Message::Request(request)) = decode_message(body.to_string().as_bytes()) else {
            panic!("not a request: {body}");
        };
        RequestMeta::read(request.stateless_meta().as_deref())
    }

    /// A response as a client reads it.
    fn written(response: Response) -> Value {
        serde_json::from_str(&Message::Response(response).to_json()).unwrap()
    }

    #[test]
    fn a_shared_completion_writes_what_completing_in_place_makes() {
        let completions = Completions::new(json!({"name": "n", "version": "1"}), 60_000);
        let info = json!({"name": "n", "version": "1"});
        for (method, result) in [
            (
                methods::TOOLS_CALL,
                json!({"content": [{"type": "text", "text": "x"}]}),
            ),
            (methods::TOOLS_CALL, json!({})),
            (methods::TOOLS_LIST, json!({"tools": []})),
            (methods::TOOLS_LIST, json!({"tools": [], "ttlMs": 5})),
            (
                methods::RESOURCES_READ,
                json!({"contents": [], "cacheScope": "public"}),
            ),
        ] {
            let map = result.as_object().unwrap();
            assert!(Completions::can_share(map), "{result}");
            let mut shared = Response::result(RequestId::Number(1), result.clone());
            shared.shared = Some(Arc::clone(completions.of(method)));
            let mut in_place = result.clone();
            completions.complete(method, &mut in_place);
            let in_place = Response::result(RequestId::Number(1), in_place);
            let wrote = written(shared);
            assert_eq!(wrote, written(in_place), "{method} {result}");
            let result = &wrote["result"];
            assert_eq!(result["resultType"], "complete", "{result}");
            assert_eq!(result["_meta"][meta::SERVER_INFO], info, "{result}");
            let cacheable = method_table::is_cacheable(method);
            assert_eq!(result.get("ttlMs").is_some(), cacheable, "{method}");
        }
        let ttl = |method: &str, result: Value| {
            let mut result = result;
            completions.complete(method, &mut result);
            (result["ttlMs"].clone(), result["cacheScope"].clone())
        };
        assert_eq!(
            ttl(methods::TOOLS_LIST, json!({})),
            (json!(60_000), json!("public"))
        );
        assert_eq!(
            ttl(methods::RESOURCES_READ, json!({})),
            (json!(60_000), json!("private"))
        );
        assert_eq!(ttl(methods::TOOLS_LIST, json!({"ttlMs": 5})).0, json!(5));
        // What a result brings of its own is never shared, and completed
        // in place: `_meta` gets the server's identity beside the
        // handler's members, `resultType` is set unless `input_required`.
        let own_meta = json!({"content": [], "_meta": {"mine": 1}});
        assert!(!Completions::can_share(own_meta.as_object().unwrap()));
        let mut completed = own_meta;
        completions.complete(methods::TOOLS_CALL, &mut completed);
        assert_eq!(completed["_meta"]["mine"], 1);
        assert_eq!(completed["_meta"][meta::SERVER_INFO], info);
        assert_eq!(completed["resultType"], "complete");
        let mut asking = json!({"resultType": "input_required", "inputRequests": {}});
        let before = asking.clone();
        completions.complete(methods::TOOLS_CALL, &mut asking);
        assert_eq!(asking, before);
        let mut not_an_object = json!([1]);
        completions.complete(methods::TOOLS_CALL, &mut not_an_object);
        assert_eq!(not_an_object, json!([1]));
    }

    #[test]
    fn each_malformed_field_is_named_and_the_rest_read() {
        let v = meta::PROTOCOL_VERSION;
        let caps = meta::CLIENT_CAPABILITIES;
        let read_ok = read(json!({v: "2026-07-28", caps: {"elicitation": {}},
            meta::CLIENT_INFO: {"name": "c"}, meta::LOG_LEVEL: "warning"}))
        .unwrap();
        assert_eq!(read_ok.requested, "2026-07-28");
        assert!(read_ok.capabilities.elicitation.is_some());
        assert_eq!(read_ok.log_level, Some(LoggingLevel::Warning));
        let null_level = read(json!({v: "x", caps: {}, meta::LOG_LEVEL: null})).unwrap();
        assert_eq!(null_level.log_level, None);
        let cases = [
            (json!({caps: {}}), v, "is required"),
            (json!({v: 7, caps: {}}), v, "must be a string"),
            (json!({v: "x"}), caps, "is required"),
            (json!({v: "x", caps: []}), caps, "must be an object"),
            (
                json!({v: "x", caps: {}, meta::CLIENT_INFO: "c"}),
                meta::CLIENT_INFO,
                "must be an object",
            ),
            (
                json!({v: "x", caps: {}, meta::LOG_LEVEL: 2}),
                meta::LOG_LEVEL,
                "must be a string",
            ),
            (
                json!({v: "x", caps: {}, meta::LOG_LEVEL: "loud"}),
                meta::LOG_LEVEL,
                "must be one of",
            ),
        ];
        for (meta, field, what) in cases {
            let err = read(meta.clone()).unwrap_err();
            assert_eq!(err.code, ErrorCode::INVALID_PARAMS, "{meta}");
            assert!(
                err.message.contains(field) && err.message.contains(what),
                "{meta}: {err:?}"
            );
            assert_eq!(err.data.as_ref().unwrap()["field"], field, "{meta}");
        }
    }
}
