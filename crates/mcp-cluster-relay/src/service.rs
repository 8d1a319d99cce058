//! [`RelayService`]: a hosted stdio MCP server as the service the runtime
//! calls: one child per session (protocol revisions up to 2025-11-25), and
//! for 2026-07-28 requests, which have no session, initialized children
//! kept per principal and client capabilities (the `pool` module).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::stream::{FuturesOrdered, FuturesUnordered};
use mcp_cluster_protocol::ProtocolVersion;
use mcp_cluster_protocol::types::{
    Implementation, LoggingLevel, LoggingMessageParams, ServerCapabilities,
};
use mcp_cluster_protocol::{ErrorObject, Notification, Request, methods};
use mcp_cluster_runtime::{
    AskError, Caller, McpService, MirroredParam, OpenError, RequestContext, ResourceWatch,
    ServerEvent, SessionAdopt, SessionLink, SessionOpen, TaskSupport, Watching,
};
use mcp_cluster_store::SessionId;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::config::{UpstreamConfig, UpstreamConfigError};
use crate::http::{Attached, Who};
use crate::metrics;
use crate::naming::Naming;
use crate::pool::{Pool, PoolKey};
use crate::upstream::{self, Event, Reach, Upstream};

mod watch;

/// How long a request the relay makes on its own (`logging/setLevel`)
/// waits for the child's answer.
const OWN_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// When a client refused for the node's limits (`max_children`,
/// `spawns_per_sec`) may try again.
const BUSY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// When a client at its own limit (`max_children_per_principal`) may try
/// again: once one of its sessions ended, which it decides.
const CLIENT_LIMIT_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Tools of the hosted server the relay keeps what it learnt of (their
/// mirrored arguments); past it, new names are not kept (and their headers
/// not checked before they run).
const MAX_KNOWN_TOOLS: usize = 4096;

/// The longest tool name the relay keeps, in bytes.
const MAX_TOOL_NAME_BYTES: usize = 256;

/// 2026-07-28: after a child's first question in a call, how long the
/// relay waits for more before it answers `input_required` (questions a
/// server asks at once, `join`ed, go out in one round; the child sends them
/// back to back, well within this).
const QUESTIONS_TOGETHER: Duration = Duration::from_millis(50);

/// List changes of pooled children waiting for the node to forward them.
const CHANGES_QUEUE: usize = 64;

/// How often idle pooled children are looked over (and those idle for
/// `pool_idle_secs` ended).
const REAP_INTERVAL: Duration = Duration::from_secs(10);

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
    children: Arc<Mutex<Children>>,
    /// What the hosted server says of itself in its `initialize` answer,
    /// learnt from its first child: the 2026-07-28 era answers
    /// `server/discover` with it.
    known: OnceLock<Known>,
    /// One probe at a time learns [`Self::known`].
    probe: tokio::sync::Mutex<()>,
    /// The tools the hosted server listed (in any era, to any client), with
    /// the arguments each mirrors into `Mcp-Param-*` headers: the
    /// 2026-07-28 transport checks those headers before the request runs.
    tools: crate::http::Mirrors,
    /// The list changes pooled children announce, for the node to pass to
    /// every `subscriptions/listen` stream ([`Self::events`]).
    changes: tokio::sync::broadcast::Sender<ServerEvent>,
    /// Per principal, one listen stream at a time joins its watcher
    /// (`watch`).
    watch_gates: watch::Gates,
    /// An HTTP server's replicas (`urls`): their connection pool, the one
    /// the next session opens at, those that are up.
    replicas: Option<Arc<crate::http::Replicas>>,
    /// Set for a member of a federation: its names as clients see them
    /// (its sessions' notifications carry them), and its sessions' servers
    /// end only their part of a session.
    naming: Option<Arc<Naming>>,
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
    /// Children of 2026-07-28 requests, serving one or idle in `pool`.
    pooled: usize,
    pool: Pool<Arc<Upstream>>,
    /// Per principal, the child watching resources for its 2026-07-28
    /// listen streams on this node.
    watchers: HashMap<Option<String>, Arc<watch::Watcher>>,
    spawns: TokenBucket,
}

impl Children {
    /// Children running, started or starting.
    fn running(&self) -> usize {
        self.by_session.len() + self.starting + self.pooled + self.watchers.len()
    }

    /// A pooled child is gone or ended: its places are given back.
    fn retire(&mut self, principal: Option<&str>) {
        self.pooled = self.pooled.saturating_sub(1);
        RelayService::release(self, principal);
    }
}

/// The hosted server's own `initialize` answer, in parts.
#[derive(Debug, Clone)]
struct Known {
    capabilities: ServerCapabilities,
    server_info: Implementation,
    instructions: Option<String>,
    /// `supportedVersions` of a `server/discover` answer.
    versions: Option<Vec<String>>,
}

impl Known {
    /// From an `initialize` answer, or a `server/discover` one (whose
    /// `serverInfo` is in its `_meta`).
    fn of(result: &Value) -> Option<Self> {
        let info = result.get("serverInfo").or_else(|| {
            result
                .get("_meta")
                .and_then(|m| m.get(methods::meta::SERVER_INFO))
        })?;
        Some(Self {
            capabilities: serde_json::from_value(result.get("capabilities")?.clone()).ok()?,
            server_info: serde_json::from_value(info.clone()).ok()?,
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
            versions: result
                .get("supportedVersions")
                .and_then(|v| serde_json::from_value(v.clone()).ok()),
        })
    }
}

/// A pooled child serving one 2026-07-28 request: back to the pool when
/// dropped (answered or cancelled), or ended if the pool is full or the
/// child gone.
struct Lease {
    children: Arc<Mutex<Children>>,
    key: PoolKey,
    upstream: Arc<Upstream>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let upstream = Arc::clone(&self.upstream);
        let mut children = lock(&self.children);
        let surplus = if upstream.is_gone() {
            Some(upstream)
        } else {
            children
                .pool
                .put(self.key.clone(), upstream, Instant::now())
        };
        if let Some(upstream) = surplus {
            children.retire(self.key.principal.as_deref());
            drop(children);
            upstream.end();
        }
    }
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
        // Read before the relay's threads start: a refusal then drops no
        // runtime inside the node's own.
        let connect_timeout = Duration::from_secs(config.connect_timeout_secs);
        let refused = |problem| UpstreamConfigError {
            name: config.name.clone(),
            problem,
        };
        let credential = match (&config.bearer_token_file, &config.client_credentials) {
            (Some(path), _) => crate::http::TokenFile::open(path)
                .map(crate::http::Credential::File)
                .map(Some)
                .map_err(|why| format!("bearer_token_file {why}")),
            (None, Some(client)) => {
                metrics::register_grant(&config.name, "client_credentials");
                crate::http::ClientCredentials::new(client, &config.name, connect_timeout)
                    .map(|client| crate::http::Credential::Client(Box::new(client)))
                    .map(Some)
            }
            (None, None) => Ok(None),
        }
        .map_err(refused)?;
        let exchanger = config
            .token_exchange
            .as_ref()
            .map(|exchange| {
                metrics::register_grant(&config.name, "token_exchange");
                crate::http::TokenExchanger::new(exchange, &config.name, connect_timeout)
            })
            .transpose()
            .map_err(refused)?;
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
        let children = Arc::new(Mutex::new(Children {
            by_session: HashMap::new(),
            per_principal: HashMap::new(),
            starting: 0,
            pooled: 0,
            pool: Pool::new(config.pool_idle_per_key, config.pool_idle()),
            watchers: HashMap::new(),
            spawns,
        }));
        runtime.spawn(reap(Arc::downgrade(&children)));
        let tools = crate::http::Mirrors::default();
        let replicas = config.is_http().then(|| {
            Arc::new(crate::http::Replicas::new(
                &config.name,
                &config.urls,
                connect_timeout,
                credential,
                exchanger,
                Arc::clone(&tools),
            ))
        });
        Ok(Self {
            config,
            env,
            children,
            known: OnceLock::new(),
            probe: tokio::sync::Mutex::new(()),
            tools,
            changes: tokio::sync::broadcast::Sender::new(CHANGES_QUEUE),
            watch_gates: watch::Gates::default(),
            replicas,
            naming: None,
            runtime: RelayRuntime(Some(runtime)),
        })
    }

    /// This relay as a member of a federation, its names as `naming` says.
    pub(crate) fn member_of_federation(mut self, naming: Arc<Naming>) -> Self {
        self.naming = Some(naming);
        self
    }

    /// The names the hosted server lists (its tools, prompts and
    /// resources, each with its list method), read from a server started
    /// for that alone, at most `max_pages` pages of each list; counted
    /// against the node's limits while it runs.
    ///
    /// # Errors
    /// The server could not be started, or refused its tools' list.
    pub(crate) async fn names(
        &self,
        max_pages: usize,
    ) -> Result<Vec<(String, String)>, ErrorObject> {
        let (upstream, result, _place) = self.probe_child(&Who::default()).await?;
        let declared = result.get("capabilities").cloned().unwrap_or_default();
        let mut names = Vec::new();
        let lists = [
            (methods::TOOLS_LIST, "tools", "tools", "name"),
            (methods::PROMPTS_LIST, "prompts", "prompts", "name"),
            (methods::RESOURCES_LIST, "resources", "resources", "uri"),
        ];
        let mut outcome = Ok(());
        'lists: for (method, capability, items, key) in lists {
            if declared.get(capability).is_none() {
                continue;
            }
            let mut cursor: Option<String> = None;
            for _ in 0..max_pages {
                let mut params = if self.config.stateless {
                    own_meta(json!({})).as_object().cloned().unwrap_or_default()
                } else {
                    Map::new()
                };
                if let Some(cursor) = cursor.take() {
                    params.insert("cursor".into(), json!(cursor));
                }
                let page = match own_request(&upstream, method, params).await {
                    Ok(page) => page,
                    // Tools are what a federation is for: without their
                    // list, nothing is checked.
                    Err(err) if method == methods::TOOLS_LIST => {
                        outcome = Err(err);
                        break 'lists;
                    }
                    Err(_) => break,
                };
                if method == methods::TOOLS_LIST {
                    self.learn_tools(&page);
                }
                let listed = page.get(items).and_then(Value::as_array);
                names.extend(
                    listed
                        .into_iter()
                        .flatten()
                        .filter_map(|i| i.get(key)?.as_str())
                        .map(|n| (method.to_owned(), n.to_owned())),
                );
                match page.get("nextCursor").and_then(Value::as_str) {
                    Some(next) => cursor = Some(next.to_owned()),
                    None => break,
                }
            }
        }
        upstream.end();
        outcome.map(|()| names)
    }

    /// Where the list changes (`notifications/*/list_changed`) that
    /// 2026-07-28 clients hear of come from: those the pooled children
    /// announce outside any request. The node forwards them to its listen
    /// streams (and sessions, whose own children tell them anyway: a
    /// list change heard twice only means one more listing).
    pub fn events(&self) -> tokio::sync::broadcast::Sender<ServerEvent> {
        self.changes.clone()
    }

    /// The upstream's settings.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// Children running now: those of sessions, those of 2026-07-28
    /// requests (serving one, or idle), and those watching resources for
    /// listen streams.
    pub fn children(&self) -> usize {
        let children = lock(&self.children);
        children.running() - children.starting
    }

    /// Ends every child (the node is stopping) and waits until they are
    /// gone, at most twice the end grace period and a second.
    async fn end_all(&self) {
        let upstreams: Vec<Arc<Upstream>> = {
            let mut children = lock(&self.children);
            children.per_principal.clear();
            let mut all = children.pool.drain();
            children.pooled = 0;
            all.extend(children.by_session.drain().map(|(_, c)| c.upstream));
            all.extend(children.watchers.drain().map(|(_, w)| w.upstream()));
            all
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
        self.admit_as(principal, true)
    }

    /// As [`Self::admit`]; `spawn` false for a session taken over from a
    /// gone node (nothing is started: `spawns_per_sec` does not apply).
    fn admit_as(&self, principal: Option<&str>, spawn: bool) -> Result<(), OpenError> {
        let mut children = lock(&self.children);
        let name = &self.config.name;
        let running = children.running();
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
        if spawn && !children.spawns.take() {
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

    /// Takes the server of `session` out of the table, its place given
    /// back.
    fn unseat(&self, session: &SessionId) -> Option<Arc<Upstream>> {
        let mut children = lock(&self.children);
        let child = children.by_session.remove(session)?;
        Self::release(&mut children, child.principal.as_deref());
        Some(child.upstream)
    }

    /// `upstream` is the server of `session` from now on, telling it
    /// through `link`, in the place `place` took.
    fn seat(
        &self,
        session: SessionId,
        upstream: Arc<Upstream>,
        link: SessionLink,
        place: &mut Place<'_>,
    ) {
        if let Some(naming) = &self.naming {
            upstream.federated(Arc::clone(naming));
        }
        upstream.attach(link);
        let mut children = lock(&self.children);
        children.starting = children.starting.saturating_sub(1);
        children.by_session.insert(
            session,
            Child {
                upstream,
                principal: place.principal.take(),
            },
        );
        place.taken = true;
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

    /// Keeps the tools of a `tools/list` result the child gave, each with
    /// its mirrored arguments (a tool whose annotations break the
    /// transport's rules is kept without any: its headers go unchecked).
    fn learn_tools(&self, result: &Value) {
        let Some(listed) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut tools = lock(&self.tools);
        for tool in listed {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            if name.len() > MAX_TOOL_NAME_BYTES
                || (tools.len() >= MAX_KNOWN_TOOLS && !tools.contains_key(name))
            {
                continue;
            }
            let mirrored = tool
                .get("inputSchema")
                .map(MirroredParam::from_input_schema)
                .unwrap_or(Ok(Vec::new()))
                .unwrap_or_else(|reason| {
                    tracing::debug!(upstream = %self.config.name, tool = name, %reason, "A hosted tool's x-mcp-header is ignored.");
                    Vec::new()
                });
            tools.insert(name.to_owned(), mirrored);
        }
    }

    /// Keeps what the hosted server says of itself, from its first child's
    /// `initialize` answer.
    fn remember(&self, result: &Value) {
        if self.known.get().is_none()
            && let Some(known) = Known::of(result)
        {
            let _ = self.known.set(known);
        }
    }

    /// A child started for the relay's own look at the server (no
    /// client's), initialized, its answer kept ([`Self::known`]); counted
    /// against the node's limits until the place returned is dropped.
    async fn probe_child(
        &self,
        who: &Who,
    ) -> Result<(Arc<Upstream>, Value, Place<'_>), ErrorObject> {
        self.admit(None).map_err(limit_error)?;
        let place = Place {
            relay: self,
            principal: None,
            taken: false,
        };
        let (upstream, result) = self.start_own(json!({}), false, who).await?;
        self.remember(&result);
        Ok((upstream, result, place))
    }

    /// Learns [`Self::known`] from a child started for that alone (a
    /// 2026-07-28 `server/discover` before any child ran), counted against
    /// the node's limits while it runs.
    async fn learn(&self, who: &Who) -> Result<(), ErrorObject> {
        let _one = self.probe.lock().await;
        if self.known.get().is_some() {
            return Ok(());
        }
        let (upstream, _, _place) = self.probe_child(who).await?;
        // Its first page of tools too: a 2026-07-28 client may call one
        // before it lists them, with headers to check.
        let listing = self
            .config
            .stateless
            .then(|| own_meta(json!({})).as_object().cloned())
            .flatten();
        if let Ok(listed) =
            own_request(&upstream, methods::TOOLS_LIST, listing.unwrap_or_default()).await
        {
            self.learn_tools(&listed);
        }
        upstream.end();
        if self.known.get().is_none() {
            return Err(ErrorObject::internal(format!(
                "upstream {} answered initialize without capabilities or serverInfo",
                self.config.name
            )));
        }
        Ok(())
    }

    /// A child for one 2026-07-28 request of `ctx`'s principal and client
    /// capabilities: an idle one of the pool, or one started and
    /// initialized now (with those capabilities, as a client of the latest
    /// session revision).
    async fn lease(&self, ctx: &RequestContext) -> Result<Lease, ErrorObject> {
        let principal = ctx.principal().map(mcp_cluster_store::Principal::key);
        let capabilities = ctx
            .client_capabilities()
            .and_then(|c| serde_json::to_value(c).ok())
            .unwrap_or_else(|| json!({}));
        // A server of 2026-07-28 reads the capabilities of each request:
        // one child serves them all.
        let key = PoolKey {
            principal: principal.clone(),
            capabilities: if self.config.stateless {
                String::new()
            } else {
                capabilities.to_string()
            },
        };
        let idle = {
            let mut children = lock(&self.children);
            let mut dead = Vec::new();
            let idle = children.pool.take(&key, |u| !u.is_gone(), &mut dead);
            for _ in dead {
                children.retire(principal.as_deref());
            }
            idle
        };
        if let Some(upstream) = idle {
            return Ok(Lease {
                children: Arc::clone(&self.children),
                key,
                upstream,
            });
        }
        self.admit(principal.as_deref()).map_err(limit_error)?;
        let who = Who::of_request(ctx);
        let mut place = Place {
            relay: self,
            principal,
            taken: false,
        };
        let (upstream, result) = self.start_own(capabilities, true, &who).await?;
        self.remember(&result);
        let mut children = lock(&self.children);
        children.starting = children.starting.saturating_sub(1);
        children.pooled += 1;
        place.taken = true;
        Ok(Lease {
            children: Arc::clone(&self.children),
            key,
            upstream,
        })
    }

    /// Starts a child for the relay's own use (a probe, a pooled child),
    /// as a client declaring `capabilities`: initialized, and told so; or,
    /// for a server of 2026-07-28, asked `server/discover`. With
    /// `announce`, the list changes it makes outside requests go to
    /// [`Self::events`] from before it is told it is initialized.
    async fn start_own(
        &self,
        capabilities: Value,
        announce: bool,
        who: &Who,
    ) -> Result<(Arc<Upstream>, Value), ErrorObject> {
        let (upstream, result) = if self.config.stateless {
            self.start_with(methods::SERVER_DISCOVER, own_meta(capabilities), who)
                .await?
        } else {
            self.start(own_initialize(capabilities), who).await?
        };
        if announce {
            upstream.announce_to(self.changes.clone());
        }
        if !self.config.stateless {
            upstream
                .notify(methods::NOTIFICATION_INITIALIZED, None)
                .await;
        }
        Ok((upstream, result))
    }

    /// How the next session reaches the server: a child of the program, or
    /// a session at one of its replicas.
    fn reach(&self, who: &Who) -> Reach {
        match &self.replicas {
            Some(replicas) => Reach::Http(Arc::clone(replicas), replicas.credential_for(who)),
            None => Reach::Spawn(self.env.clone()),
        }
    }

    /// Starts a child and has it answer the client's `initialize`.
    async fn start(&self, params: Value, who: &Who) -> Result<(Arc<Upstream>, Value), ErrorObject> {
        self.start_with(methods::INITIALIZE, params, who).await
    }

    /// Starts a child and has it answer `method` (`initialize`, or
    /// `server/discover` for a server that speaks 2026-07-28 itself).
    async fn start_with(
        &self,
        method: &'static str,
        params: Value,
        who: &Who,
    ) -> Result<(Arc<Upstream>, Value), ErrorObject> {
        let config = self.config.clone();
        let reach = self.reach(who);
        let name = config.name.clone();
        let started = Instant::now();
        let timeout = config.initialize_timeout();
        // The caller (a session's `initialize`) may be dropped while the
        // child starts (the session stopped): the child is then ended, not
        // left running outside the table.
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        self.runtime.handle().spawn(async move {
            let outcome = start_child(config, reach, method, params, timeout).await;
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

/// Starts a child of `config` and has it answer `method` (`initialize`)
/// with `params` within `timeout`; on the relay's runtime (its pipes are
/// driven there, and its parent-death signal follows one of its threads).
async fn start_child(
    config: UpstreamConfig,
    reach: Reach,
    method: &'static str,
    params: Value,
    timeout: Duration,
) -> Result<(Arc<Upstream>, Value), ErrorObject> {
    let upstream = Upstream::start(&config, reach).map_err(|err| {
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
        let call = upstream.call(method, params, false, false, None).await?;
        let mut call = call;
        let outcome = (&mut call.answer)
            .await
            .map_err(|_| ErrorObject::internal(format!("upstream ended during {method}")))?;
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
                "upstream {} did not answer {method} within {} s",
                config.name, config.initialize_timeout_secs
            )))
        }
    }
}

#[async_trait]
impl McpService for RelayService {
    fn server_info(&self) -> Implementation {
        if let Some(known) = self.known.get() {
            return known.server_info.clone();
        }
        Implementation {
            name: self.config.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            title: None,
            ..Default::default()
        }
    }

    fn capabilities(&self) -> ServerCapabilities {
        self.known
            .get()
            .map(|k| k.capabilities.clone())
            .unwrap_or_default()
    }

    fn instructions(&self) -> Option<String> {
        self.known.get().and_then(|k| k.instructions.clone())
    }

    /// A server of 2026-07-28 serves the revisions its own
    /// `server/discover` names; one spoken to in the session era serves
    /// every revision the node speaks (the node speaks its era to it).
    fn supported_versions(&self) -> Option<Vec<String>> {
        if !self.config.stateless {
            return None;
        }
        self.known.get().and_then(|k| k.versions.clone())
    }

    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        let listing = request.method == methods::TOOLS_LIST;
        let outcome = match ctx.session_id() {
            None => {
                let lease = self.lease(&ctx).await?;
                // A server of 2026-07-28 reads the request's `_meta` itself.
                let request = if self.config.stateless {
                    Request {
                        params: request.params_as_sent(),
                        ..request
                    }
                } else {
                    request
                };
                relay_call(&lease.upstream, request, &ctx).await
            }
            Some(session) => {
                let upstream = self.upstream(session).ok_or_else(|| {
                    ErrorObject::internal(format!(
                        "upstream {} no longer runs for this session; start a new session",
                        self.config.name
                    ))
                })?;
                relay_call(&upstream, request, &ctx).await
            }
        };
        if let (true, Ok(result)) = (listing, &outcome) {
            self.learn_tools(result);
        }
        outcome
    }

    fn upstream_of(&self, _request: &Request) -> Option<String> {
        Some(self.config.name.clone())
    }

    fn has_tool(&self, name: &str) -> bool {
        lock(&self.tools).contains_key(name)
    }

    fn task_support(&self, name: &str) -> TaskSupport {
        if self.has_tool(name) {
            self.config.tasks_of(name)
        } else {
            TaskSupport::Forbidden
        }
    }

    fn mirrored_params(&self, tool: &str) -> Vec<MirroredParam> {
        lock(&self.tools).get(tool).cloned().unwrap_or_default()
    }

    async fn prepare_stateless(&self, caller: &Caller) -> Result<(), ErrorObject> {
        if self.known.get().is_some() {
            return Ok(());
        }
        self.learn(&Who::of(caller)).await
    }

    /// A child's question waits for its answer: a call cannot be run
    /// again on a child (it may have acted already).
    fn keeps_running_on_input(&self) -> bool {
        true
    }

    /// A server of 2026-07-28 runs its input rounds itself: its
    /// `input_required` results and `requestState` pass through.
    fn answers_input_rounds(&self) -> bool {
        self.config.stateless
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
        let who = Who::of(&open.caller);
        let (upstream, result) = self.start(open.params, &who).await?;
        self.remember(&result);
        self.seat(open.session, upstream, open.link, &mut place);
        Ok(Some(result))
    }

    fn session_handover(&self, session: &SessionId) -> Option<Value> {
        let attached = self.upstream(session)?.attached()?.clone();
        serde_json::to_value(attached).ok()
    }

    async fn adopt_session(&self, adopt: SessionAdopt) -> Result<(), OpenError> {
        let name = &self.config.name;
        let Some(replicas) = &self.replicas else {
            return Err(ErrorObject::internal(format!(
                "upstream {name} has no replicas: its sessions cannot be taken over"
            ))
            .into());
        };
        let attached: Attached = serde_json::from_value(adopt.handover).map_err(|err| {
            ErrorObject::internal(format!(
                "upstream {name}: the session's handover cannot be read ({err})"
            ))
        })?;
        self.admit_as(adopt.principal.as_deref(), false)?;
        let mut place = Place {
            relay: self,
            principal: adopt.principal,
            taken: false,
        };
        // The caller's token comes with the session's next request
        // (`token_exchange`); the node's own credential is at hand.
        let who = Who {
            principal: place.principal.clone(),
            ..Who::default()
        };
        let upstream = {
            let _relay = self.runtime.handle().enter();
            Upstream::rejoin(
                &self.config,
                Arc::clone(replicas),
                replicas.credential_for(&who),
                attached,
            )
            .map_err(|why| ErrorObject::internal(format!("upstream {name} {why}")))?
        };
        self.seat(adopt.session, upstream, adopt.link, &mut place);
        Ok(())
    }

    fn hosts_session(&self, session: &SessionId) -> bool {
        lock(&self.children).by_session.contains_key(session)
    }

    /// The conversation ends here without a DELETE: the upstream session
    /// lives on at its replica for the node that takes it over.
    async fn release_session(&self, session: &SessionId) {
        if let Some(upstream) = self.unseat(session) {
            upstream.release();
        }
    }

    async fn close_session(&self, session: &SessionId) {
        if let Some(upstream) = self.unseat(session) {
            upstream.end();
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
        let _ = own_request(&upstream, methods::LOGGING_SET_LEVEL, params).await;
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
        subscription(&upstream, uri, subscribe).await
    }

    async fn watch_resources(&self, watch: ResourceWatch) -> Result<Option<Watching>, OpenError> {
        self.watch(watch).await
    }
}

/// A request the relay makes of a child on its own (not a client's): its
/// answer within [`OWN_REQUEST_TIMEOUT`].
async fn own_request(
    upstream: &Arc<Upstream>,
    method: &str,
    params: Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let mut call = upstream
        .call(method, Some(params), false, false, None)
        .await?;
    let name = upstream.name();
    let answer = tokio::time::timeout(OWN_REQUEST_TIMEOUT, &mut call.answer)
        .await
        .map_err(|_| ErrorObject::internal(format!("upstream {name} did not answer {method}")))?;
    call.answered();
    answer.unwrap_or_else(|_| Err(ErrorObject::internal(format!("upstream {name} ended"))))
}

/// Subscribes the child to `uri` (`resources/subscribe`), or unsubscribes
/// it.
async fn subscription(
    upstream: &Arc<Upstream>,
    uri: &str,
    subscribe: bool,
) -> Result<(), ErrorObject> {
    let method = if subscribe {
        methods::RESOURCES_SUBSCRIBE
    } else {
        methods::RESOURCES_UNSUBSCRIBE
    };
    let mut params = Map::new();
    params.insert("uri".into(), json!(uri));
    own_request(upstream, method, params).await.map(drop)
}

/// Carries one client request to `upstream` and its answer back, with
/// what the child sends meanwhile (its questions, progress, logs). The
/// child's questions are asked of the client side by side: a server that
/// asks several at once (`join`) gets them all out in one round.
async fn relay_call(
    upstream: &Arc<Upstream>,
    request: Request,
    ctx: &RequestContext,
) -> Result<Value, ErrorObject> {
    let started = Instant::now();
    upstream.offer_caller(ctx);
    let mut call = upstream
        .call(
            &request.method,
            request.params,
            true,
            ctx.wants_progress(),
            mcp_cluster_telemetry::current_traceparent(),
        )
        .await?;
    // The child's questions, and the notices it sends meanwhile, each on
    // its way to the client side by side: a question's write and a
    // notice's share the request's output, so neither may wait on the
    // other inside this loop (a notice awaited here while a question held
    // the output would never get it).
    let mut asking = FuturesUnordered::new();
    let mut relaying = FuturesOrdered::new();
    // Set once a question must go back in an `input_required` result (the
    // node could not keep the run waiting): when this run ends.
    let mut ending: Option<Instant> = None;
    loop {
        tokio::select! {
            // Events first: what the child sent before its answer goes to
            // the client before the answer.
            biased;
            Some(event) = call.events.recv() => match event {
                Event::Ask { id, method, params } => {
                    asking.push(ask_client(upstream, ctx, id, method, params));
                }
                event => relaying.push_back(relay_event(ctx, event)),
            },
            Some(()) = relaying.next(), if !relaying.is_empty() => {}
            Some(flow) = asking.next(), if !asking.is_empty() => {
                if let (Flow::InputRequired, None) = (flow, ending) {
                    // 2026-07-28, when the node could not keep the run
                    // waiting for the answer (its store refused the run's
                    // record): the question goes out in the request's
                    // `input_required` result, with the others the child
                    // asks at the same time; the client's retry runs the
                    // request again, and the child's questions then find
                    // their answers. This run is over (the child hears a
                    // cancellation).
                    ending = Some(Instant::now() + QUESTIONS_TOGETHER);
                }
            }
            () = tokio::time::sleep_until(ending.unwrap_or_else(Instant::now)), if ending.is_some() => {
                return Err(ErrorObject::internal("input required from the client"));
            }
            answer = &mut call.answer => {
                call.answered();
                // The reader queued every event the child wrote before its
                // answer by the time the answer arrived: they reach the
                // client before the answer, and the child's questions are
                // answered before it (as a child asking during its call
                // waits for them).
                while let Ok(event) = call.events.try_recv() {
                    match event {
                        Event::Ask { id, method, params } => {
                            asking.push(ask_client(upstream, ctx, id, method, params));
                        }
                        event => relaying.push_back(relay_event(ctx, event)),
                    }
                }
                futures_util::future::join(
                    async { while asking.next().await.is_some() {} },
                    async { while relaying.next().await.is_some() {} },
                )
                .await;
                metrics::answered(upstream.name(), started.elapsed());
                return answer.unwrap_or_else(|_| Err(ErrorObject::internal(format!(
                    "upstream {} ended before answering", upstream.name()
                ))));
            }
        }
    }
}

/// The `initialize` params of a child the relay starts on its own (no
/// client's `initialize` to pass on): the latest session revision, the node
/// as the client, declaring `capabilities`.
fn own_initialize(capabilities: Value) -> Value {
    json!({
        "protocolVersion": ProtocolVersion::LATEST.as_str(),
        "capabilities": capabilities,
        "clientInfo": { "name": "mcp-node", "version": env!("CARGO_PKG_VERSION") },
    })
}

/// The params of a 2026-07-28 request the relay makes of its own
/// (`server/discover`, a first `tools/list`): only the `_meta` that era
/// requires, declaring `capabilities`.
fn own_meta(capabilities: Value) -> Value {
    json!({ "_meta": {
        methods::meta::PROTOCOL_VERSION: ProtocolVersion::STATELESS.as_str(),
        methods::meta::CLIENT_CAPABILITIES: capabilities,
        methods::meta::CLIENT_INFO: { "name": "mcp-node", "version": env!("CARGO_PKG_VERSION") },
    }})
}

/// Whether a request's relay goes on after an event.
enum Flow {
    Continue,
    /// A question the client answers by retrying the request (2026-07-28).
    InputRequired,
}

/// What a 2026-07-28 request refused a child is told (the session era
/// refuses the HTTP request itself).
fn limit_error(err: OpenError) -> ErrorObject {
    err.into_refusal()
        .map_or_else(|err| err, |refused| refused.to_error_object())
}

/// Ends pooled children idle too long, every [`REAP_INTERVAL`], until the
/// service is gone.
async fn reap(children: Weak<Mutex<Children>>) {
    let mut tick = tokio::time::interval(REAP_INTERVAL);
    loop {
        tick.tick().await;
        let Some(children) = children.upgrade() else {
            return;
        };
        let expired = {
            let mut children = lock(&children);
            let expired = children.pool.expired(Instant::now(), |u| !u.is_gone());
            for (key, _) in &expired {
                children.retire(key.principal.as_deref());
            }
            expired
        };
        for (_, upstream) in expired {
            upstream.end();
        }
    }
}

/// Asks the request's client a question of the child's and gives the
/// child the answer.
async fn ask_client(
    upstream: &Upstream,
    ctx: &RequestContext,
    id: Value,
    method: String,
    params: Option<Map<String, Value>>,
) -> Flow {
    let params = params.map_or_else(|| json!({}), Value::Object);
    let answer = ctx.ask(&method, params).await;
    if let Err(AskError::InputRequired) = answer {
        return Flow::InputRequired;
    }
    upstream
        .answer(id, answer.map_err(upstream::ask_error))
        .await;
    Flow::Continue
}

/// Relays one notice the child sent during a request to the request's
/// client: progress, a log line, another notification.
async fn relay_event(ctx: &RequestContext, event: Event) {
    match event {
        Event::Ask { .. } => {}
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

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here is a few map operations: a panic in one
    // leaves consistent data.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> RelayService {
        let config: UpstreamConfig = toml::from_str("name = \"t\"\ncommand = [\"true\"]\n")
            .unwrap_or_else(|err| panic!("{err}"));
        RelayService::new(config, &BTreeMap::new()).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn the_tools_kept_are_bounded_in_number_and_name_length() {
        let relay = relay();
        let header = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}});
        let many: Vec<Value> = (0..MAX_KNOWN_TOOLS + 10)
            .map(|i| json!({"name": format!("tool-{i}"), "inputSchema": header}))
            .collect();
        relay.learn_tools(&json!({ "tools": many }));
        assert_eq!(lock(&relay.tools).len(), MAX_KNOWN_TOOLS);
        assert!(relay.has_tool("tool-0"));
        assert_eq!(relay.mirrored_params("tool-0").len(), 1);
        assert!(!relay.has_tool(&format!("tool-{MAX_KNOWN_TOOLS}")));
        // A tool already known is still learnt again when the list is full
        // (its arguments may have changed).
        relay.learn_tools(&json!({ "tools": [{"name": "tool-0", "inputSchema": {}}] }));
        assert!(relay.mirrored_params("tool-0").is_empty());
        assert_eq!(lock(&relay.tools).len(), MAX_KNOWN_TOOLS);

        let fresh = super::tests::relay();
        let long = "n".repeat(MAX_TOOL_NAME_BYTES + 1);
        let fitting = "n".repeat(MAX_TOOL_NAME_BYTES);
        fresh.learn_tools(&json!({ "tools": [{"name": long}, {"name": fitting}] }));
        assert!(!fresh.has_tool(&long));
        assert!(fresh.has_tool(&fitting));
    }
}
