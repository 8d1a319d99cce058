//! The top of the runtime: [`Runtime`], joining the session era and the
//! stateless era over the node; the inbound [`pipeline`] every transport
//! hands decoded bodies to; and the node's [`cluster`] duties.
//!
//! The facade transports call: create, find and end sessions, open
//! exchanges, follow streams, broadcast server events, drain.

pub mod cluster;
pub(crate) mod forward;
pub mod pipeline;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use futures_util::{StreamExt as _, stream};
use mcp_cluster_protocol::{Request, RequestId, Response};
use mcp_cluster_store::{
    ControlMessage, NodeId, Position, Principal, SessionId, SessionRecord, Store, StoreError,
    StreamId,
};
use tokio::sync::oneshot;

use crate::node::NodeContext;
use crate::node::config::RuntimeConfig;
use crate::node::error::RuntimeError;
use crate::node::follow::{Follow, Listened};
use crate::node::quota::Quotas;
use crate::node::registry::{Registry, Sweeper};
use crate::request::call::{BodyBytes, Inbound};
use crate::request::exchange::{Exchange, ExchangeReply};
use crate::request::executor::Executor;
use crate::request::service::McpService;
use crate::request::service::ServerEvent;
use crate::session::SessionHandle;
use crate::session::registry::Sessions;
use crate::session::{
    IDLE_CHECK_INTERVAL, Session, SessionDeps, TOUCH_FRACTION, hears, renew, write_standalone,
};
use crate::stateless::{RequestMeta, Stateless, StatelessReply};

/// Store round trips at once when the node works through many sessions
/// itself (a server event for the sessions listened to without an actor,
/// their renewals).
const STORE_FAN_OUT: usize = 32;
/// Between two attempts of [`Runtime::join`].
const JOIN_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// One node's runtime. Cheap to clone; create it once, inside the actix
/// system, outside the HTTP worker factory.
#[derive(Debug, Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sessions: Sessions,
    /// Sweeps both eras' registries, the backstop for members that could
    /// not leave; held so that it lives as long as the runtime.
    _sweeper: Addr<Sweeper>,
    deps: SessionDeps,
    /// The 2026-07-28 requests, listen streams and tasks of this node.
    stateless: Stateless,
    /// Held while this node takes a session over from a host that is gone
    /// (or finds that another node did): one at a time, so that no request
    /// meets a session between its record naming this node and its actor
    /// here running its server.
    adopting: tokio::sync::Mutex<()>,
}

impl Runtime {
    /// A runtime over a service and a store. Must run inside an actix system.
    pub fn new(service: Arc<dyn McpService>, store: Store, config: RuntimeConfig) -> Self {
        let sessions: Sessions = Arc::new(Registry::new("sessions", config.max_sessions));
        let quotas = Arc::new(Quotas::new(
            config.quotas.clone(),
            Arc::clone(&store.quotas),
        ));
        // expect: only when the process cannot start threads at all, at
        // startup, before anything is served.
        #[allow(clippy::expect_used)]
        let executor = Arc::new(
            Executor::new(config.executor_threads, config.blocking_threads)
                .expect("the request executor's threads could not be started"),
        );
        let in_flight = mcp_cluster_store::InFlightBytes::new(mcp_cluster_store::ByteBudget {
            per_node: config.max_in_flight_bytes,
            per_client: match config.quotas.in_flight_bytes_per_client {
                0 => u64::MAX,
                share => share,
            },
            floor: 0,
        })
        .reporting();
        let node = Arc::new(NodeContext::new(store, quotas, Arc::new(in_flight)));
        let config = Arc::new(config);
        let stateless = Stateless::new(
            Arc::clone(&service),
            Arc::clone(&config),
            Arc::clone(&node),
            Arc::clone(&executor),
        );
        let deps = SessionDeps {
            service,
            node,
            config,
            executor,
            sessions: Arc::clone(&sessions),
            tasks: Arc::new(stateless.clone()),
        };
        let sweeper = Sweeper::new(vec![
            Arc::clone(&sessions) as _,
            Arc::clone(stateless.listeners()) as _,
        ])
        .start();
        let runtime = Self {
            inner: Arc::new(Inner {
                sessions,
                _sweeper: sweeper,
                deps,
                stateless,
                adopting: tokio::sync::Mutex::new(()),
            }),
        };
        crate::runtime::cluster::start(&runtime);
        let rt = runtime.clone();
        actix::spawn(async move {
            let mut renew = tokio::time::interval(IDLE_CHECK_INTERVAL);
            loop {
                renew.tick().await;
                rt.renew_listened().await;
            }
        });
        runtime
    }

    /// This node's id in the cluster.
    pub fn node_id(&self) -> &NodeId {
        &self.inner.deps.node.id
    }

    pub(crate) fn node(&self) -> &Arc<NodeContext> {
        &self.inner.deps.node
    }

    pub(crate) fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// Leaves the cluster after a clean stop: the node registry forgets
    /// this node (its streams are closed by then), so no survivor finalizes
    /// it. Heartbeats stop first (a later one would register the node
    /// again, and survivors would claim it as dead once it exits).
    pub async fn leave(&self) {
        let mut left = self.node().membership.lock().await;
        *left = true;
        if let Err(err) = self.store().nodes.leave(self.node_id()).await {
            tracing::warn!(error = %err, "Leaving the cluster failed; survivors will finalize this node.");
        }
    }

    /// Joins the cluster before this node serves: its first heartbeat puts
    /// it in the node set, so that from then on the others send it what
    /// concerns the copies of their sessions it may hold (through one
    /// Redis, a node alone sends none). Tries for up to `HEARTBEAT_TTL`; a
    /// node that could not (logged) joins at a later heartbeat.
    pub async fn join(&self) {
        let deadline = tokio::time::Instant::now() + crate::runtime::cluster::HEARTBEAT_TTL;
        while !self.heartbeat().await {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("Serving before this node could join the cluster.");
                return;
            }
            tokio::time::sleep(JOIN_RETRY).await;
        }
    }

    /// Renews this node's liveness, unless it left the cluster; whether it
    /// did.
    pub(crate) async fn heartbeat(&self) -> bool {
        // Held across the heartbeat: `leave` waits for one in progress.
        let left = self.node().membership.lock().await;
        if *left {
            return false;
        }
        let beat = self
            .store()
            .nodes
            .heartbeat(self.node_id(), crate::runtime::cluster::HEARTBEAT_TTL)
            .await;
        mcp_cluster_telemetry::metrics::metrics()
            .heartbeats
            .with_label_values(&[if beat.is_ok() { "ok" } else { "failed" }])
            .inc();
        match beat {
            Ok(added) => {
                let rejoined = self.node().joined.swap(true, Ordering::AcqRel) && added;
                if rejoined {
                    self.rejoined();
                }
                true
            }
            Err(err) => {
                tracing::warn!(error = %err, "Heartbeat failed.");
                false
            }
        }
    }

    /// This node was counted out of the cluster (declared dead and claimed,
    /// or a Redis failover lost its membership) and is a member again: what
    /// the others did not send it meanwhile (a node alone sends nothing
    /// only for the others) its session actors catch up on from their
    /// records, `STORE_FAN_OUT` reads at a time. A record that is not there
    /// (the session ended meanwhile, or Redis lost it) changes nothing here:
    /// the session's next request finds it gone, as it would have anyway,
    /// and its requests running now end as they would have.
    fn rejoined(&self) {
        let actors = self.sessions().all();
        tracing::warn!(
            actors = actors.len(),
            "This node was counted out of the cluster and joined it again; its session actors read their records again."
        );
        let sessions = Arc::clone(&self.store().sessions);
        actix::spawn(async move {
            let sessions = &sessions;
            stream::iter(actors)
                .for_each_concurrent(STORE_FAN_OUT, |handle| async move {
                    let save_events = handle.save_events();
                    if let Ok(Some(record)) = sessions.load(handle.id()).await {
                        handle.refresh(record, save_events);
                    }
                })
                .await;
        });
    }

    /// The key ring sealing input-required request states.
    pub fn key_ring(&self) -> &crate::stateless::mrtr::KeyRing {
        self.inner.stateless.key_ring()
    }

    /// Reads the cluster's key ring from the store (adding a fresh key
    /// when it is due for rotation); configured keys are never replaced.
    pub async fn refresh_key_ring(&self) {
        self.inner.stateless.refresh_key_ring().await;
    }

    /// Serves one stateless (2026-07-28) request whose `_meta` the
    /// transport read ([`RequestMeta::read`]) and whose headers it checked,
    /// without any session. The transport awaits
    /// [`McpService::prepare_stateless`] first, before those checks (they
    /// read what it learns).
    pub async fn stateless(
        &self,
        request: Request,
        meta: RequestMeta,
        inbound: &Inbound,
    ) -> StatelessReply {
        self.inner.stateless.serve(request, meta, inbound).await
    }

    /// The result of `server/discover`.
    pub fn discover_result(&self) -> serde_json::Value {
        self.inner.stateless.discover_result()
    }

    /// A count of the bytes of a body about to be read from the client of
    /// `inbound`, in this node's in-flight account: the transport adds
    /// what arrives and stops at a refusal; see [`BodyBytes`].
    pub fn body_bytes(&self, inbound: &Inbound) -> BodyBytes {
        BodyBytes::new(Arc::clone(self.node()), inbound.owner().as_deref())
    }

    /// The settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.deps.config
    }

    /// The service.
    pub fn service(&self) -> &Arc<dyn McpService> {
        &self.inner.deps.service
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.deps.node.store
    }

    /// Sessions held by this node.
    pub fn session_count(&self) -> usize {
        self.inner.sessions.len()
    }

    /// Sessions without an actor here (passivated) whose client reads their
    /// standalone stream on this node: those the node renews and writes
    /// server events for itself.
    pub fn listened_passivated(&self) -> usize {
        let sessions = self.sessions();
        self.node()
            .attachments
            .listened(|id| sessions.holds_live(id))
            .len()
    }

    /// Whether the node is draining.
    pub fn is_draining(&self) -> bool {
        self.node().is_draining()
    }

    /// Creates a new, not yet initialized session and starts its actor on
    /// the current arbiter. A session of a principal (`principal`: its key)
    /// takes one of its `sessions_per_principal` slots until it ends.
    ///
    /// # Errors
    /// [`RuntimeError::TooManySessions`], [`RuntimeError::ShuttingDown`],
    /// [`RuntimeError::QuotaExceeded`], or a store failure.
    pub async fn create_session(
        &self,
        principal: Option<String>,
    ) -> Result<SessionHandle, RuntimeError> {
        self.new_session(principal, true).await
    }

    /// As [`Self::create_session`]; with `store_now` false, the session is
    /// written to the store by its `initialize` instead, with the
    /// negotiated state, in one step (Streamable HTTP: no one can name the
    /// session before that answer gives out its id).
    pub(crate) async fn new_session(
        &self,
        principal: Option<String>,
        store_now: bool,
    ) -> Result<SessionHandle, RuntimeError> {
        // A draining node still serves new sessions until it closes: a load
        // balancer that has not caught up yet sends them here, and the
        // session lives on in the store (the client's next requests go
        // anywhere).
        if self.is_closing() {
            return Err(RuntimeError::ShuttingDown);
        }
        // A place among the node's sessions, held while the session is
        // stored: concurrent `initialize`s cannot overshoot the maximum.
        let place = self
            .inner
            .sessions
            .reserve()
            .ok_or(RuntimeError::TooManySessions)?;
        let id = SessionId::random();
        let idle_ttl = self.config().session_idle_ttl();
        let quotas = &self.node().quotas;
        if let Some(owner) = &principal {
            quotas.acquire_session(owner, &id, idle_ttl).await?;
        }
        let record = SessionRecord {
            id: id.clone(),
            protocol_version: None,
            client_capabilities: mcp_cluster_store::RawJson::null(),
            client_info: mcp_cluster_store::RawJson::null(),
            initialized: false,
            log_level: None,
            subscriptions: Default::default(),
            standalone_stream: StreamId::random(),
            principal: principal.clone(),
            created_at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            host: None,
            handover: None,
        };
        if store_now
            && let Err(err) = crate::session::store_new(self.store(), &record, idle_ttl).await
        {
            if let Some(owner) = &principal {
                quotas.release_session(owner, &id).await;
            }
            return Err(err.into());
        }
        let handle = Session::start(
            record,
            self.inner.deps.clone(),
            &self.node().stop,
            store_now,
        );
        place.fill(id, handle.clone());
        Ok(handle)
    }

    /// Finds a session: on this node, or rehydrated from the store.
    ///
    /// Either way the record is read from the store first: another node may
    /// have changed or ended the session a moment ago, and its control
    /// message may not have arrived here yet. A session held here gets the
    /// record ahead of the caller's message, so a client that saw one node
    /// answer a change (or a DELETE) never meets the old state on another.
    ///
    /// # Errors
    /// [`RuntimeError::SessionNotFound`] when it never existed, ended or
    /// expired; a store failure.
    pub async fn session(&self, id: &SessionId) -> Result<SessionHandle, RuntimeError> {
        self.session_as(id, None).await
    }

    /// As [`Self::session`], for `principal`: a session another principal
    /// created is unknown to it ([`RuntimeError::SessionNotFound`], as if it
    /// did not exist).
    ///
    /// # Errors
    /// As [`Self::session`].
    pub async fn session_as(
        &self,
        id: &SessionId,
        principal: Option<&Principal>,
    ) -> Result<SessionHandle, RuntimeError> {
        self.locate_as(id, principal)
            .await
            .map(|(handle, _)| handle)
    }

    /// As [`Self::session`], and whether this node started serving the
    /// session just now (rehydrated: created elsewhere, or evicted here).
    ///
    /// # Errors
    /// As [`Self::session`].
    pub async fn locate(&self, id: &SessionId) -> Result<(SessionHandle, bool), RuntimeError> {
        self.locate_as(id, None).await
    }

    /// As [`Self::locate`], for `principal` (see [`Self::session_as`]). A
    /// session of another principal is neither rehydrated nor refreshed.
    ///
    /// # Errors
    /// As [`Self::session`].
    pub async fn locate_as(
        &self,
        id: &SessionId,
        principal: Option<&Principal>,
    ) -> Result<(SessionHandle, bool), RuntimeError> {
        let located = self.locate_any(id, principal).await?;
        if !located.0.belongs_to(principal) {
            return Err(RuntimeError::SessionNotFound);
        }
        if let Some(host) = located.0.host_elsewhere()
            && !self.store().nodes.alive(host).await?
        {
            return self.host_gone(&located.0, host).await;
        }
        Ok(located)
    }

    async fn locate_any(
        &self,
        id: &SessionId,
        principal: Option<&Principal>,
    ) -> Result<(SessionHandle, bool), RuntimeError> {
        let local = self.inner.sessions.get(id).filter(SessionHandle::is_alive);
        // Alone on the embedded store, this node is the only writer; on a
        // shared store, while it holds the session's lease, no other node
        // writes without asking it first. Either way the local actor is
        // the truth: no read needed.
        // `leased` marks a held lease used: asked only with an actor here.
        let trusted = local.is_some() && (!self.store().shared || self.store().sessions.leased(id));
        if trusted && let Some(handle) = local {
            if self.is_closing() {
                return Err(RuntimeError::ShuttingDown);
            }
            // The registry's copy itself, not a clone of it: every clone
            // of an actix address allocates state of its own.
            return Ok((handle, false));
        }
        let save_events = local.as_ref().map(SessionHandle::save_events);
        let loaded = self.inner.deps.node.store.sessions.load_held(id).await?;
        // Checked after the last await: a caller admitted here opens its
        // exchange before the drain can look at the open exchanges again.
        if self.is_closing() {
            return Err(RuntimeError::ShuttingDown);
        }
        if let (Some(handle), Some(save_events)) = (local, save_events) {
            let Some(record) = loaded else {
                // Ended (or expired) elsewhere: end it here too.
                self.inner.sessions.remove_if(id, |h| h.same_actor(&handle));
                handle.terminate();
                return Err(RuntimeError::SessionNotFound);
            };
            let moved = handle.host_elsewhere().is_none()
                && record
                    .host
                    .as_deref()
                    .is_some_and(|host| host != self.node_id().as_str());
            if moved {
                // Another node took this session's server over while this
                // one was away (its heartbeat lapsed): the actor here lets
                // the server go (the record tells it), and a new one
                // forwards to that node.
                handle.refresh(record.clone(), save_events);
                let fresh = Session::start_with(record, self.inner.deps.clone(), &self.node().stop);
                self.replace_actor(id, &fresh);
                return Ok((fresh, true));
            }
            handle.refresh(record, save_events);
            return Ok((handle, false));
        }
        let record = loaded
            .filter(|r| crate::session::owned_by(r.principal.as_deref(), principal))
            .ok_or(RuntimeError::SessionNotFound)?;
        if record.host.as_deref() == Some(self.node_id().as_str()) {
            // A session with its own server (a hosted MCP server's child)
            // lives only with that server, and its actor here never left
            // while the server ran: left behind by this node, it is over
            // (never served with a server that was not initialized). Held
            // by another node, this node forwards its requests there. One
            // this node took over a moment ago has its actor once the
            // takeover is done.
            let _adopting = self.inner.adopting.lock().await;
            if let Some(handle) = self.inner.sessions.get(id).filter(SessionHandle::is_alive) {
                return Ok((handle, false));
            }
            let _ = self.end_session(id, Some(("expired", "tcp"))).await;
            return Err(RuntimeError::SessionNotFound);
        }
        // Held here by an actor that died, or not held here: started.
        let (handle, started) = self.inner.sessions.get_or_replace(id.clone(), || {
            Session::start_with(record, self.inner.deps.clone(), &self.node().stop)
        });
        if started {
            mcp_cluster_telemetry::metrics::metrics()
                .sessions_rehydrated
                .inc();
        }
        tracing::debug!(session_id = %id, "Session rehydrated.");
        Ok((handle, started))
    }

    /// `session`'s host, the node running its own server, is gone. A
    /// server that lives on without it (an HTTP server's session, with
    /// what its service kept in the record: [`McpService::session_handover`])
    /// is taken over: by this node, if the store names the gone host still
    /// (of several nodes, the store lets one), or by the node it names now,
    /// which this node then forwards to. A server that died with its host
    /// ends the session everywhere, and the client starts a new one (404):
    /// never served by a server that was not initialized with its
    /// `initialize`.
    ///
    /// [`McpService::session_handover`]: crate::request::service::McpService::session_handover
    async fn host_gone(
        &self,
        session: &SessionHandle,
        host: &NodeId,
    ) -> Result<(SessionHandle, bool), RuntimeError> {
        let id = session.id();
        let _adopting = self.inner.adopting.lock().await;
        // Taken over here while this request waited.
        if let Some(handle) = self.inner.sessions.get(id).filter(SessionHandle::is_alive)
            && !handle.same_actor(session)
            && handle.host_elsewhere() != Some(host)
        {
            return Ok((handle, false));
        }
        let mut record = self
            .store()
            .sessions
            .load(id)
            .await?
            .ok_or(RuntimeError::SessionNotFound)?;
        if record.host.as_deref() == Some(host.as_str()) {
            if record.handover.is_none() || !self.inner.deps.service.runs_server_per_session() {
                tracing::info!(session_id = %id, %host, "The node running this session's server is gone; session ended.");
                let _ = self.end_session(id, Some(("host_lost", "tcp"))).await;
                return Err(RuntimeError::SessionNotFound);
            }
            record.host = Some(self.node_id().to_string());
            let ttl = self.inner.deps.config.session_idle_ttl();
            if self
                .store()
                .sessions
                .rehost(&record, host.as_str(), ttl)
                .await?
            {
                tracing::info!(session_id = %id, %host, "The node running this session's server is gone; this node takes the server over.");
                let handle = Session::adopt(record, self.inner.deps.clone(), &self.node().stop);
                self.replace_actor(id, &handle);
                mcp_cluster_telemetry::metrics::metrics()
                    .sessions_adopted
                    .inc();
                return Ok((handle, true));
            }
            // Another node was first: read again.
            record = self
                .store()
                .sessions
                .load(id)
                .await?
                .ok_or(RuntimeError::SessionNotFound)?;
        }
        // Another node runs the server now (or the session ended there).
        let Some(new_host) = record.host.clone() else {
            return Err(RuntimeError::SessionNotFound);
        };
        if new_host == self.node_id().as_str() || new_host == host.as_str() {
            return Err(RuntimeError::SessionNotFound);
        }
        let handle = Session::start_with(record, self.inner.deps.clone(), &self.node().stop);
        self.replace_actor(id, &handle);
        Ok((handle, true))
    }

    /// Puts `handle` in place of this node's actor of session `id`, which
    /// stops.
    fn replace_actor(&self, id: &SessionId, handle: &SessionHandle) {
        if let Some(old) = self.inner.sessions.replace(id.clone(), handle.clone())
            && !old.same_actor(handle)
        {
            old.evict();
        }
    }

    /// The node is leaving a cluster: the sessions whose own server another
    /// node can take over (an HTTP server's sessions, kept at their
    /// replicas) are let go without ending them, before the service ends
    /// the rest ([`McpService::shutdown`]); the next request of each, on
    /// any node, has that node take it over. How many.
    ///
    /// [`McpService::shutdown`]: crate::request::service::McpService::shutdown
    pub async fn hand_over_sessions(&self) -> usize {
        if !self.store().shared || !self.inner.deps.service.runs_server_per_session() {
            return 0;
        }
        let mut handed = 0;
        for handle in self.inner.sessions.all() {
            if handle.hand_over().await {
                self.inner.deps.service.release_session(handle.id()).await;
                handed += 1;
            }
        }
        if handed > 0 {
            tracing::info!(
                sessions = handed,
                "Hosted sessions left to the cluster to take over."
            );
        }
        handed
    }

    /// Evicts a session from this node only: its actor stops, its state
    /// stays in the store, and the next request rehydrates it (here or on
    /// another node). `false` when it was not held here.
    pub fn evict(&self, id: &SessionId) -> bool {
        match self.inner.sessions.remove(id) {
            Some(handle) => {
                handle.evict();
                true
            }
            None => false,
        }
    }

    /// Ends a session everywhere: deletes its state and streams, cancels its
    /// requests, stops its actor.
    ///
    /// # Errors
    /// [`RuntimeError::SessionNotFound`] when it was already gone; a store
    /// failure.
    pub async fn terminate(&self, id: &SessionId) -> Result<(), RuntimeError> {
        self.terminate_as(id, None).await
    }

    /// As [`Self::terminate`], for `principal`: a session another principal
    /// created is unknown to it and stays.
    ///
    /// # Errors
    /// As [`Self::terminate`].
    pub async fn terminate_as(
        &self,
        id: &SessionId,
        principal: Option<&Principal>,
    ) -> Result<(), RuntimeError> {
        let local = self.inner.sessions.get(id);
        let owned = match local {
            Some(handle) => handle.belongs_to(principal),
            // Not held here: the record says who owns it (none: already
            // gone, which `end_session` reports).
            None => match self.store().sessions.load(id).await? {
                Some(record) => crate::session::owned_by(record.principal.as_deref(), principal),
                None => true,
            },
        };
        if !owned {
            return Err(RuntimeError::SessionNotFound);
        }
        self.end_session(id, Some(("deleted", "tcp"))).await
    }

    /// Ends a session whose connection ended (legacy HTTP+SSE: the SSE
    /// stream; stdio: stdin), as [`Self::terminate`].
    ///
    /// # Errors
    /// As [`Self::terminate`].
    pub async fn end_disconnected(
        &self,
        id: &SessionId,
        transport: crate::request::call::Transport,
    ) -> Result<(), RuntimeError> {
        self.end_session(id, Some(("disconnected", transport.network())))
            .await
    }

    /// Ends a session; `measured`: the reason and network transport it is
    /// counted under (`None`: a session that never started, not counted).
    pub(crate) async fn end_session(
        &self,
        id: &SessionId,
        measured: Option<(&str, &str)>,
    ) -> Result<(), RuntimeError> {
        crate::session::end_session(&self.inner.deps, id, measured).await
    }

    /// Opens the exchange of a POST carrying `requests` (their ids).
    pub fn exchange(
        &self,
        session: &SessionHandle,
        requests: Vec<RequestId>,
    ) -> (Arc<Exchange>, oneshot::Receiver<ExchangeReply>) {
        self.exchange_with_mode(session, requests, self.config().response_mode)
    }

    /// Opens an exchange with a given answer mode (`initialize` is always
    /// answered as JSON: its session id travels in the HTTP headers).
    pub fn exchange_with_mode(
        &self,
        session: &SessionHandle,
        requests: Vec<RequestId>,
        mode: crate::node::config::ResponseMode,
    ) -> (Arc<Exchange>, oneshot::Receiver<ExchangeReply>) {
        Exchange::pending(
            session.id().clone(),
            Arc::clone(self.node()),
            mode,
            requests,
            Vec::new(),
        )
    }

    /// Opens the exchange of a JSON-RPC batch: the responses of `requests`
    /// plus `answered`, the errors for its invalid members.
    pub fn batch_exchange(
        &self,
        session: &SessionHandle,
        requests: Vec<RequestId>,
        answered: Vec<Response>,
    ) -> (Arc<Exchange>, oneshot::Receiver<ExchangeReply>) {
        let mode = self.config().response_mode;
        Exchange::pending(
            session.id().clone(),
            Arc::clone(self.node()),
            mode,
            requests,
            answered,
        )
    }

    /// An exchange writing into the session's standalone stream (legacy
    /// HTTP+SSE and stdio: every answer travels on one stream).
    pub fn attached_exchange(&self, session: &SessionHandle) -> Arc<Exchange> {
        Exchange::attached(
            session.id().clone(),
            Arc::clone(self.node()),
            session.standalone_stream().clone(),
        )
    }

    /// Follows a stream of the session after `after`, taking it over from
    /// its reader anywhere in the cluster (resumption, standalone GET), for
    /// a reader with no address (stdio, a test). A principal's session
    /// counts it against `streams_per_principal` while the follow lives.
    ///
    /// # Errors
    /// [`RuntimeError::UnknownEvent`] when the stream or position is not in
    /// this session; [`RuntimeError::EventsExpired`];
    /// [`RuntimeError::QuotaExceeded`]; a store failure.
    pub async fn follow(
        &self,
        session: &SessionHandle,
        stream: &StreamId,
        after: Position,
    ) -> Result<Follow, RuntimeError> {
        self.follow_for(session, stream, after, None, None).await
    }

    /// As [`Self::follow`], for the reader that sent `reader`: the node
    /// whose reader it takes over links its trace, and a session without a
    /// principal counts the stream against the reader's address
    /// (`streams_per_address`) while the follow lives.
    ///
    /// # Errors
    /// As [`Self::follow`].
    pub async fn follow_as(
        &self,
        session: &SessionHandle,
        stream: &StreamId,
        after: Position,
        reader: &Inbound,
    ) -> Result<Follow, RuntimeError> {
        self.follow_for(
            session,
            stream,
            after,
            Some(&reader.trace),
            reader.client_ip,
        )
        .await
    }

    async fn follow_for(
        &self,
        session: &SessionHandle,
        stream: &StreamId,
        after: Position,
        trace: Option<&mcp_cluster_telemetry::TraceContext>,
        client: Option<IpAddr>,
    ) -> Result<Follow, RuntimeError> {
        // A request stream names the requests it answers, so that this
        // follow can answer them should the stream's data be lost.
        let requests = if stream == session.standalone_stream() {
            Vec::new()
        } else {
            self.store()
                .events
                .stream_requests(session.id(), stream)
                .await?
        };
        // A principal's stream holds one of its slots while it is read,
        // else one of its reader's address; a reconnection to the same
        // stream takes that stream's slot over.
        let quotas = &self.node().quotas;
        let lease = match (session.owner(), client) {
            (Some(owner), _) => quotas.acquire_stream(owner, stream).await?,
            (None, Some(ip)) => quotas.acquire_address_stream(ip, stream).await?,
            (None, None) => None,
        };
        let mut follow = self.follow_here(session, stream, after, requests).await?;
        follow.hold(lease);
        if stream == session.standalone_stream() {
            session.reader_attached();
        }
        // One reader per stream in the whole cluster: readers elsewhere end.
        let kick = ControlMessage::Kick {
            session: session.id().clone(),
            stream: stream.clone(),
            origin: self.node_id().clone(),
            // The reader's node links the trace of the request that took
            // its stream over (the client's, from its HTTP headers).
            trace: trace.and_then(mcp_cluster_telemetry::traceparent_of_context),
        };
        let node = Arc::clone(self.node());
        actix::spawn(async move { node.publish_once(kick).await });
        Ok(follow)
    }

    /// Follows a stream this node just created for its own connection (the
    /// SSE answer of a POST, with the ids of the requests it answers; the
    /// stdio output, with none): no reader can exist elsewhere yet, so no
    /// takeover is announced to the cluster.
    ///
    /// # Errors
    /// As [`Self::follow`].
    pub async fn follow_new(
        &self,
        session: &SessionHandle,
        stream: &StreamId,
        requests: Vec<RequestId>,
    ) -> Result<Follow, RuntimeError> {
        self.follow_here(session, stream, Position::START, requests)
            .await
    }

    async fn follow_here(
        &self,
        session: &SessionHandle,
        stream: &StreamId,
        after: Position,
        requests: Vec<RequestId>,
    ) -> Result<Follow, RuntimeError> {
        let listened = (stream == session.standalone_stream())
            .then(|| Listened::new(session.id().clone(), session.owner()));
        Follow::start(
            Arc::clone(&self.inner.deps.node.store.events),
            Arc::clone(&self.inner.deps.node.store.sessions),
            &self.inner.deps.node.attachments,
            session.id().clone(),
            stream.clone(),
            after,
            self.node().drain_token(),
            self.config().sse_keep_alive(),
            requests,
            listened,
        )
        .await
        .map_err(RuntimeError::from)
    }

    /// Follows the session's standalone stream from now on, opening it
    /// first (a store may make it only now), for a reader with no address
    /// (stdio, a test).
    ///
    /// # Errors
    /// As [`Self::follow`].
    pub async fn follow_standalone(
        &self,
        session: &SessionHandle,
    ) -> Result<(Position, Follow), RuntimeError> {
        let tail = self.open_standalone(session).await?;
        let follow = self
            .follow(session, session.standalone_stream(), tail)
            .await?;
        Ok((tail, follow))
    }

    /// As [`Self::follow_standalone`], for the reader that sent `reader`
    /// (as [`Self::follow_as`]: a GET, a legacy `/sse` connection).
    ///
    /// # Errors
    /// As [`Self::follow`].
    pub async fn follow_standalone_as(
        &self,
        session: &SessionHandle,
        reader: &Inbound,
    ) -> Result<(Position, Follow), RuntimeError> {
        let tail = self.open_standalone(session).await?;
        let follow = self
            .follow_as(session, session.standalone_stream(), tail, reader)
            .await?;
        Ok((tail, follow))
    }

    /// Makes sure the session's standalone stream exists in the store
    /// (see [`mcp_cluster_store::SessionStore::open_standalone`]) and
    /// returns its tail: every first use of it (a GET, the legacy HTTP+SSE
    /// stream, stdio) calls this.
    ///
    /// # Errors
    /// [`RuntimeError::SessionNotFound`] when the session is gone; a store
    /// failure.
    pub async fn open_standalone(&self, session: &SessionHandle) -> Result<Position, RuntimeError> {
        let store = self.store();
        store
            .sessions
            .open_standalone(session.id(), session.standalone_stream(), &*store.events)
            .await
            .map_err(gone_session)
    }

    /// Tells every session on this node about a server event.
    pub fn broadcast(&self, event: ServerEvent) {
        let (name, uri) = event.wire();
        let message = ControlMessage::ServerEvent {
            name: name.to_owned(),
            uri,
            origin: self.node_id().clone(),
        };
        let runtime = self.clone();
        // Every node (this one included, through the bus) fans it out to its
        // sessions and listen streams; if the bus stays down, at least this
        // node's hear.
        actix::spawn(async move {
            if !runtime.node().publish(message).await {
                tracing::warn!("Server event not published; delivered on this node only.");
                runtime.fan_out(&event);
            }
        });
    }

    /// Hands a server event to everyone on this node who hears it, in both
    /// eras: the sessions (each by its subscriptions) and the
    /// `subscriptions/listen` streams (each by its filter).
    pub(crate) fn fan_out(&self, event: &ServerEvent) {
        // The sessions listened to here without an actor first, then the
        // actors: a session whose actor starts in between hears the event
        // twice at worst (which an update notification tolerates), never
        // not at all.
        self.fan_out_listened(event);
        self.inner.sessions.fan_out(event);
        self.inner.stateless.listeners().fan_out(event);
    }

    /// Writes a server event to the standalone stream of each session whose
    /// client reads it here while no actor of the session runs here (it
    /// passivated, see `Session::at_rest`), as that actor would have: when
    /// the stored record says the client initialized and, for a resource's
    /// update, subscribed to it.
    fn fan_out_listened(&self, event: &ServerEvent) {
        let sessions = self.sessions();
        let listened = self
            .node()
            .attachments
            .listened(|id| sessions.holds_live(id));
        if listened.is_empty() {
            return;
        }
        let data: Arc<str> = Arc::from(
            mcp_cluster_protocol::Message::Notification(event.notification(None)).to_json(),
        );
        let event = event.clone();
        let store = self.store().clone();
        actix::spawn(async move {
            let (store, data, event) = (&store, &data, &event);
            stream::iter(listened)
                .for_each_concurrent(STORE_FAN_OUT, |(id, standalone)| async move {
                    match store.sessions.load(&id).await {
                        Ok(Some(record)) if hears(&record, event) => {
                            write_standalone(&*store.events, &id, &standalone, Arc::clone(data))
                                .await;
                        }
                        Ok(_) => {}
                        Err(err) => {
                            tracing::warn!(session_id = %id, error = %err, "Server event not written: the session's record could not be read.");
                        }
                    }
                })
                .await;
        });
    }

    /// Renews the sessions whose standalone stream a client reads here, each
    /// once per renewal interval of the idle TTL (as an active session's
    /// actor renews its own): a listening client keeps its session whether
    /// or not an actor of it runs.
    async fn renew_listened(&self) {
        let ttl = self.config().session_idle_ttl();
        let due = self.node().attachments.due_renewals(ttl / TOUCH_FRACTION);
        let node = self.node();
        stream::iter(due)
            .for_each_concurrent(STORE_FAN_OUT, |due| async move {
                if !renew(node, &due.session, &due.stream, due.owner.as_deref(), ttl).await {
                    tracing::debug!(session_id = %due.session, "A listened session is no longer in the store.");
                }
            })
            .await;
    }

    /// Starts draining: readiness fails; everything is still served.
    pub fn start_drain(&self) {
        self.node().draining.store(true, Ordering::Release);
    }

    /// Stops admitting work for existing sessions too: every request,
    /// notification or stream naming a session is refused with
    /// [`RuntimeError::ShuttingDown`] (503; the client retries, elsewhere
    /// behind a load balancer). Work admitted before goes on.
    pub fn start_closing(&self) {
        self.start_drain();
        self.node().closing.store(true, Ordering::Release);
    }

    /// Where the node is in its drain, as an index into
    /// [`mcp_cluster_telemetry::metrics::DRAIN_PHASES`]: serving, draining
    /// (readiness fails), closed (no new work), left (the cluster).
    pub fn drain_phase(&self) -> usize {
        let left = self
            .node()
            .membership
            .try_lock()
            .map(|left| *left)
            .unwrap_or(false);
        if left {
            3
        } else if self.is_closing() {
            2
        } else {
            usize::from(self.is_draining())
        }
    }

    /// Whether the node admits no more work ([`Self::start_closing`]).
    pub fn is_closing(&self) -> bool {
        self.node().is_closing()
    }

    /// Standalone streams whose reader here ended telling its client to
    /// reconnect, whose client has not reconnected anywhere yet (for at
    /// most 5 s each): a draining node waits for them, writing
    /// their notifications into the log meanwhile, so that none is lost
    /// between its streams closing and their clients resuming elsewhere.
    pub fn streams_awaiting_resume(&self) -> usize {
        self.node().attachments.awaiting_resume()
    }

    /// POSTs whose requests are not all answered yet: their exchanges are
    /// open until the last response is in the log (or in the JSON answer).
    pub fn open_exchanges(&self) -> usize {
        self.node().open_exchanges.load(Ordering::Acquire)
    }

    /// Ends every SSE connection of this node with `retry`, so clients
    /// reconnect (to another node) and resume from the log. Events already
    /// in the log are sent first, so a stream whose response is written
    /// ends complete.
    pub fn close_streams(&self) {
        self.node().drain.cancel();
        // After the cancel: a reader that saw the token whole is waiting
        // on its signal by now.
        self.node().attachments.wake_all();
    }

    /// Requests running on this node.
    pub fn in_flight(&self) -> usize {
        self.node().in_flight.load(Ordering::Acquire)
    }

    /// Cancels every in-flight request (end of the drain grace period).
    pub fn stop_requests(&self) {
        self.node().stop.cancel();
    }
}

/// A standalone stream the store does not have: its session is gone.
fn gone_session(err: StoreError) -> RuntimeError {
    match err {
        StoreError::StreamNotFound => RuntimeError::SessionNotFound,
        other => RuntimeError::from(other),
    }
}
