//! [`RelayService`]: a hosted stdio MCP server as the service the runtime
//! calls, one child per session.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_protocol::types::{
    Implementation, LoggingLevel, LoggingMessageParams, ServerCapabilities,
};
use mcp_cluster_protocol::{ErrorCode, ErrorObject, Notification, Request, methods};
use mcp_cluster_runtime::{McpService, OpenError, RequestContext, SessionOpen};
use mcp_cluster_store::SessionId;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::config::{UpstreamConfig, UpstreamConfigError};
use crate::metrics;
use crate::upstream::{self, Event, Upstream};

/// How long a request the relay makes on its own (`logging/setLevel`)
/// waits for the child's answer.
const OWN_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// When a client refused for the node's limits (`max_children`,
/// `spawns_per_sec`) may try again.
const BUSY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// When a client at its own limit (`max_children_per_principal`) may try
/// again: once one of its sessions ended, which it decides.
const CLIENT_LIMIT_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Threads of the relay's runtime, which carries every child's pipes.
const RELAY_THREADS: usize = 2;

/// A stdio MCP server hosted on the node: each session of the node gets a
/// child process of its own, started at the session's `initialize` with
/// the client's own `initialize`, and ended with the session.
///
/// Owner: the node's runtime holds it as its service. Its children run
/// until their sessions end, or until the node stops
/// ([`McpService::shutdown`]).
pub struct RelayService {
    config: UpstreamConfig,
    /// The children's whole environment.
    env: BTreeMap<String, String>,
    children: Mutex<Children>,
    /// Carries the children's pipes and supervision, apart from the HTTP
    /// workers and the handlers' executor. Its threads start every child,
    /// and live as long as the service (a child's parent-death signal
    /// follows the thread that started it).
    runtime: RelayRuntime,
}

impl std::fmt::Debug for RelayService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayService")
            .field("upstream", &self.config.name)
            .finish_non_exhaustive()
    }
}

/// The running children, and what limits new ones.
#[derive(Debug)]
struct Children {
    by_session: HashMap<SessionId, Child>,
    per_principal: HashMap<String, usize>,
    /// Children being started: counted against the limits already.
    starting: usize,
    spawns: TokenBucket,
}

#[derive(Debug)]
struct Child {
    upstream: Arc<Upstream>,
    principal: Option<String>,
}

/// A place among the children that [`RelayService::admit`] gave; given
/// back when dropped unless a child took it.
struct Place<'a> {
    relay: &'a RelayService,
    principal: Option<String>,
    taken: bool,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let mut children = lock(&self.relay.children);
        children.starting = children.starting.saturating_sub(1);
        RelayService::release(&mut children, self.principal.as_deref());
    }
}

/// Refills `rate` tokens a second up to `rate`.
#[derive(Debug)]
struct TokenBucket {
    tokens: f64,
    rate: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: u32) -> Self {
        Self {
            tokens: f64::from(rate),
            rate: f64::from(rate),
            last: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The relay's own runtime, shut down in the background when dropped (a
/// runtime dropped inside another would panic).
struct RelayRuntime(Option<tokio::runtime::Runtime>);

impl RelayRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        // expect: the runtime is taken only by `drop`.
        #[allow(clippy::expect_used)]
        self.0
            .as_ref()
            .expect("the relay runtime lives as long as the service")
            .handle()
    }
}

impl Drop for RelayRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl RelayService {
    /// A relay for `config`. `inherited`: the values of the node's own
    /// environment for the names in `config.inherit_env` (read by the
    /// caller at start; the relay reads no environment).
    ///
    /// # Errors
    /// The configuration is invalid, or the relay's threads cannot start.
    pub fn new(
        config: UpstreamConfig,
        inherited: &BTreeMap<String, String>,
    ) -> Result<Self, UpstreamConfigError> {
        config.validate()?;
        let mut env: BTreeMap<String, String> = config
            .inherit_env
            .iter()
            .filter_map(|k| inherited.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        env.extend(config.env.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RELAY_THREADS)
            .thread_name("mcp-relay")
            .enable_all()
            .build()
            .map_err(|err| UpstreamConfigError {
                name: config.name.clone(),
                problem: format!("the relay's threads could not start: {err}"),
            })?;
        let spawns = TokenBucket::new(config.spawns_per_sec);
        metrics::register(&config.name);
        Ok(Self {
            config,
            env,
            children: Mutex::new(Children {
                by_session: HashMap::new(),
                per_principal: HashMap::new(),
                starting: 0,
                spawns,
            }),
            runtime: RelayRuntime(Some(runtime)),
        })
    }

    /// The upstream's settings.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// Children running now.
    pub fn children(&self) -> usize {
        lock(&self.children).by_session.len()
    }

    /// Ends every child (the node is stopping) and waits until they are
    /// gone, at most twice the end grace period and a second.
    async fn end_all(&self) {
        let upstreams: Vec<Arc<Upstream>> = {
            let mut children = lock(&self.children);
            children.per_principal.clear();
            children
                .by_session
                .drain()
                .map(|(_, c)| c.upstream)
                .collect()
        };
        for upstream in &upstreams {
            upstream.end();
        }
        let deadline = Instant::now() + self.config.end_grace() * 2 + Duration::from_secs(1);
        for upstream in &upstreams {
            let _ = tokio::time::timeout_at(deadline, upstream.gone_wait()).await;
        }
    }

    /// Takes a place for a new child, or says why there is none: the node's
    /// limits (503) or the principal's (429), each with when to try again.
    fn admit(&self, principal: Option<&str>) -> Result<(), OpenError> {
        let mut children = lock(&self.children);
        let name = &self.config.name;
        let running = children.by_session.len() + children.starting;
        let busy = |reason: &str, message: String| {
            metrics::refused(name, reason);
            Err(OpenError::Busy {
                message,
                retry_after: BUSY_RETRY_AFTER,
            })
        };
        if running >= self.config.max_children {
            return busy(
                "node_limit",
                format!(
                    "upstream {name} runs {running} sessions on this node, its most (max_children); try again later"
                ),
            );
        }
        let per = self.config.max_children_per_principal;
        if let Some(principal) = principal
            && per > 0
            && children.per_principal.get(principal).copied().unwrap_or(0) >= per
        {
            metrics::refused(name, "principal_limit");
            return Err(OpenError::ClientLimit {
                message: format!(
                    "you have {per} sessions of upstream {name} on this node, the most one client may (max_children_per_principal); end one first"
                ),
                retry_after: CLIENT_LIMIT_RETRY_AFTER,
            });
        }
        if !children.spawns.take() {
            return busy(
                "spawn_rate",
                format!(
                    "upstream {name} starts at most {} sessions a second; try again in a second",
                    self.config.spawns_per_sec
                ),
            );
        }
        children.starting += 1;
        if let Some(principal) = principal {
            *children
                .per_principal
                .entry(principal.to_owned())
                .or_default() += 1;
        }
        Ok(())
    }

    /// Gives back a principal's place.
    fn release(children: &mut Children, principal: Option<&str>) {
        if let Some(principal) = principal
            && let Some(count) = children.per_principal.get_mut(principal)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                children.per_principal.remove(principal);
            }
        }
    }

    fn upstream(&self, session: &SessionId) -> Option<Arc<Upstream>> {
        lock(&self.children)
            .by_session
            .get(session)
            .map(|c| Arc::clone(&c.upstream))
    }

    /// Starts a child and has it answer the client's `initialize`.
    async fn start(&self, params: Value) -> Result<(Arc<Upstream>, Value), ErrorObject> {
        let config = self.config.clone();
        let env = self.env.clone();
        let name = config.name.clone();
        let started = Instant::now();
        let timeout = config.initialize_timeout();
        // The caller (a session's `initialize`) may be dropped while the
        // child starts (the session stopped): the child is then ended, not
        // left running outside the table.
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        self.runtime.handle().spawn(async move {
            let outcome = start_child(config, env, params, timeout).await;
            if let Err(Ok((upstream, _))) = started_tx.send(outcome) {
                upstream.end();
            }
        });
        let outcome = started_rx
            .await
            .map_err(|_| ErrorObject::internal(format!("upstream {name} could not be started")))?;
        if outcome.is_ok() {
            metrics::started(&name, started.elapsed());
        }
        outcome
    }
}

/// Starts a child of `config` and has it answer `initialize` with `params`
/// within `timeout`; on the relay's runtime (its pipes are driven there,
/// and its parent-death signal follows one of its threads).
async fn start_child(
    config: UpstreamConfig,
    env: BTreeMap<String, String>,
    params: Value,
    timeout: Duration,
) -> Result<(Arc<Upstream>, Value), ErrorObject> {
    let upstream = Upstream::start(&config, &env).map_err(|err| {
        metrics::refused(&config.name, "spawn_failed");
        ErrorObject::internal(format!(
            "upstream {} could not be started: {err}",
            config.name
        ))
    })?;
    let params = match params {
        Value::Object(map) => Some(map),
        _ => None,
    };
    let answer = async {
        let call = upstream
            .call(methods::INITIALIZE, params, false, false, None)
            .await?;
        let mut call = call;
        let outcome = (&mut call.answer)
            .await
            .map_err(|_| ErrorObject::internal("upstream ended during initialize"))?;
        call.answered();
        outcome
    };
    match tokio::time::timeout(timeout, answer).await {
        Ok(Ok(result)) => Ok((upstream, result)),
        Ok(Err(err)) => {
            upstream.end();
            metrics::refused(&config.name, "initialize_failed");
            Err(err)
        }
        Err(_) => {
            upstream.end();
            metrics::refused(&config.name, "initialize_failed");
            Err(ErrorObject::internal(format!(
                "upstream {} did not answer initialize within {} s",
                config.name, config.initialize_timeout_secs
            )))
        }
    }
}

#[async_trait]
impl McpService for RelayService {
    fn server_info(&self) -> Implementation {
        Implementation {
            name: self.config.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            title: None,
        }
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        let Some(session) = ctx.session_id() else {
            return Err(ErrorObject::new(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "upstream {} is served to session clients (protocol revisions up to 2025-11-25) only",
                    self.config.name
                ),
            ));
        };
        let upstream = self.upstream(session).ok_or_else(|| {
            ErrorObject::internal(format!(
                "upstream {} no longer runs for this session; start a new session",
                self.config.name
            ))
        })?;
        let started = Instant::now();
        let mut call = upstream
            .call(
                &request.method,
                request.params,
                true,
                ctx.wants_progress(),
                mcp_cluster_telemetry::current_traceparent(),
            )
            .await?;
        loop {
            tokio::select! {
                // Events first: what the child sent before its answer goes
                // to the client before the answer.
                biased;
                Some(event) = call.events.recv() => relay_event(&upstream, &ctx, event).await,
                answer = &mut call.answer => {
                    call.answered();
                    // The reader queued every event the child wrote before
                    // its answer by the time the answer arrived.
                    while let Ok(event) = call.events.try_recv() {
                        relay_event(&upstream, &ctx, event).await;
                    }
                    metrics::answered(upstream.name(), started.elapsed());
                    return answer.unwrap_or_else(|_| Err(ErrorObject::internal(format!(
                        "upstream {} ended before answering", upstream.name()
                    ))));
                }
            }
        }
    }

    fn runs_server_per_session(&self) -> bool {
        true
    }

    async fn shutdown(&self) {
        self.end_all().await;
    }

    async fn open_session(&self, open: SessionOpen) -> Result<Option<Value>, OpenError> {
        self.admit(open.principal.as_deref())?;
        // Gives the place back however this ends, the caller dropping it
        // included.
        let mut place = Place {
            relay: self,
            principal: open.principal,
            taken: false,
        };
        let (upstream, result) = self.start(open.params).await?;
        upstream.attach(open.link);
        let mut children = lock(&self.children);
        children.starting = children.starting.saturating_sub(1);
        children.by_session.insert(
            open.session,
            Child {
                upstream,
                principal: place.principal.take(),
            },
        );
        place.taken = true;
        Ok(Some(result))
    }

    fn hosts_session(&self, session: &SessionId) -> bool {
        lock(&self.children).by_session.contains_key(session)
    }

    async fn close_session(&self, session: &SessionId) {
        let child = {
            let mut children = lock(&self.children);
            let child = children.by_session.remove(session);
            if let Some(child) = &child {
                Self::release(&mut children, child.principal.as_deref());
            }
            child
        };
        if let Some(child) = child {
            child.upstream.end();
        }
    }

    async fn session_notification(&self, session: &SessionId, notification: Notification) {
        if let Some(upstream) = self.upstream(session) {
            upstream
                .notify(&notification.method, notification.params)
                .await;
        }
    }

    async fn session_log_level(&self, session: &SessionId, level: LoggingLevel) {
        let Some(upstream) = self.upstream(session) else {
            return;
        };
        let mut params = Map::new();
        params.insert("level".into(), json!(level.as_str()));
        if let Ok(mut call) = upstream
            .call(methods::LOGGING_SET_LEVEL, Some(params), false, false, None)
            .await
            && tokio::time::timeout(OWN_REQUEST_TIMEOUT, &mut call.answer)
                .await
                .is_ok()
        {
            call.answered();
        }
    }

    async fn session_subscription(
        &self,
        session: &SessionId,
        uri: &str,
        subscribe: bool,
    ) -> Result<(), ErrorObject> {
        let upstream = self.upstream(session).ok_or_else(|| {
            ErrorObject::internal(format!(
                "upstream {} no longer runs for this session",
                self.config.name
            ))
        })?;
        let method = if subscribe {
            methods::RESOURCES_SUBSCRIBE
        } else {
            methods::RESOURCES_UNSUBSCRIBE
        };
        let mut params = Map::new();
        params.insert("uri".into(), json!(uri));
        let mut call = upstream
            .call(method, Some(params), false, false, None)
            .await?;
        let answer = tokio::time::timeout(OWN_REQUEST_TIMEOUT, &mut call.answer)
            .await
            .map_err(|_| {
                ErrorObject::internal(format!(
                    "upstream {} did not answer {method}",
                    self.config.name
                ))
            })?;
        call.answered();
        answer
            .unwrap_or_else(|_| Err(ErrorObject::internal("upstream ended")))
            .map(drop)
    }
}

/// Relays one thing the child sent during a request to the request's
/// client: a question (answered back to the child), progress, a log line.
async fn relay_event(upstream: &Upstream, ctx: &RequestContext, event: Event) {
    match event {
        Event::Ask { id, method, params } => {
            let params = params.map_or_else(|| json!({}), Value::Object);
            let answer = ctx.ask(&method, params).await.map_err(upstream::ask_error);
            upstream.answer(id, answer).await;
        }
        Event::Progress {
            progress,
            total,
            message,
        } => {
            // Progress that does not increase is the child's mistake; the
            // client never sees it.
            let _ = ctx.progress(progress, total, message).await;
        }
        Event::Notify(n) => {
            let parsed = n.params.clone().and_then(|p| {
                serde_json::from_value::<LoggingMessageParams>(Value::Object(p)).ok()
            });
            let _ = match parsed {
                Some(log) if n.method == methods::NOTIFICATION_MESSAGE => {
                    ctx.log(log.level, log.logger.as_deref(), log.data).await
                }
                _ => ctx.notify(n).await,
            };
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here is a few map operations: a panic in one
    // leaves consistent data.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
