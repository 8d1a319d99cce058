//! The session era (2024-11-05 … 2025-11-25): one actor per session on
//! this node ([`SessionHandle`] reaches it), and their side of the node
//! registry (`registry`). It runs each request in the request actor of
//! [`crate::request`] and knows nothing of the stateless era.
//!
//! The session actor: lifecycle, the in-flight table, log level,
//! subscriptions and pending server-to-client requests of one MCP session on
//! this node.
//!
//! Owner: the runtime's session registry holds its [`SessionHandle`];
//! the registry's sweep takes out handles whose actor died. Stop paths: idle expiry (the
//! record stays in the store, so the next request rehydrates it),
//! `Terminate` (DELETE: the session ends everywhere), or node shutdown.

pub(crate) mod forward;
pub(crate) mod registry;
pub(crate) mod tasks;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use futures_util::FutureExt as _;
use mcp_cluster_protocol::types::{
    CancelledParams, InitializeParams, InitializeResult, LoggingLevel, ServerCapabilities,
    SetLevelParams, UriParams, empty_result,
};
use mcp_cluster_protocol::{
    ErrorCode, ErrorObject, Message, Notification, ProtocolVersion, Request, RequestId, Response,
    methods,
};
use mcp_cluster_store::{
    ControlMessage, Ended, EventLog, NodeId, RawJson, SessionId, SessionRecord, Store, StoreError,
    StreamId, Subscribed,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::node::config::RuntimeConfig;
use crate::node::error::RuntimeError;
use crate::node::{DeferredEnd, InFlightTicket, NodeContext};
use crate::request::call::SessionLabel;
use crate::request::context::{
    AskError, AskOutcome, Caller, RegisterAsk, RequestContext, RequestOutput, SaveGuard,
    SessionShared,
};
use crate::request::exchange::Exchange;
use crate::request::executor::Executor;
use crate::request::link::{
    EndHosted, HostedAsk, HostedNotify, MAX_HELD_ASK_BYTES, MAX_SESSION_ASKS, ReaderAttached,
    SessionLink,
};
use crate::request::method_table::{self, By};
use crate::request::service::ServerEvent;
use crate::request::service::{
    MAX_HANDOVER_BYTES, McpService, OpenError, SessionAdopt, SessionOpen,
};
use crate::request::tasks::{SessionTasks, TaskStart};
use crate::request::{
    Cancel, InFlightRequest, Job, RequestFinished, SessionRecipients, handler_job, run_handler,
};
use crate::session::registry::Sessions;
/// How often a session checks whether it is idle.
pub(crate) const IDLE_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// How long a passivating session, already out of the registry, still
/// takes what was sent to it by someone who found it just before: any of
/// it keeps the actor running (see [`Session::passivate`]).
const PASSIVATE_GRACE: Duration = Duration::from_secs(1);

/// The store TTL is renewed at most every `TTL / TOUCH_FRACTION` while the
/// session is active, so a session expires between 7/8 of its TTL and its
/// TTL after its last activity.
pub(crate) const TOUCH_FRACTION: u32 = 8;

/// Handle one client request; every output goes to the exchange.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Dispatch {
    pub(crate) request: Request,
    pub(crate) exchange: Arc<Exchange>,
}

/// Handle the messages of one JSON-RPC batch together: admitted whole
/// (every request starts) or refused whole (every request gets an error and
/// nothing else in the batch is applied), so a batch is never half-run.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct DispatchBatch {
    pub(crate) messages: Vec<Message>,
    pub(crate) exchange: Arc<Exchange>,
    /// Told once the batch's notifications and answers are placed (as
    /// [`ClientAnswer::done`]), or that one of them could not be.
    pub(crate) done: Option<Done>,
}

/// Told once a client message has reached what it is for, or that it could
/// not (see [`Notify::done`], [`ClientAnswer::done`]).
pub(crate) type Done = oneshot::Sender<Result<(), StoreError>>;

/// What [`SessionHandle::notify`], [`SessionHandle::answer`] and
/// [`SessionHandle::dispatch_batch`] return: completes once the client's
/// message is placed (a dropped sender means placed: nothing waited to be
/// told), with the store's error when it could not be.
pub type Placed = oneshot::Receiver<Result<(), StoreError>>;

/// The [`Done`]s of a batch's messages, gathered into the batch's own: told
/// once every message is placed, with the first failure if any.
struct Placements {
    batch: Option<Done>,
    each: Vec<Placed>,
}

impl Placements {
    fn new(batch: Option<Done>) -> Self {
        Self {
            batch,
            each: Vec::new(),
        }
    }

    /// The sender for one more message of the batch.
    fn one(&mut self) -> Option<Done> {
        self.batch.as_ref()?;
        let (done, placed) = oneshot::channel();
        self.each.push(placed);
        Some(done)
    }
}

impl Drop for Placements {
    fn drop(&mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let each = std::mem::take(&mut self.each);
        if each.is_empty() {
            let _ = batch.send(Ok(()));
            return;
        }
        actix::spawn(async move {
            let mut outcome = Ok(());
            for placed in each {
                if let Ok(Err(err)) = placed.await {
                    outcome = outcome.and(Err(err));
                }
            }
            let _ = batch.send(outcome);
        });
    }
}

/// Handle one client notification. `remote`: it came over the control bus
/// from the node that received it, so it is not published again.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Notify {
    pub(crate) notification: Notification,
    pub(crate) remote: bool,
    /// The W3C `traceparent` of the span that received it, carried to the
    /// node that acts on it.
    pub(crate) trace: Option<String>,
    /// Told once what the notification changed is stored and announced
    /// (`notifications/initialized`), or once it is published to the node
    /// it is for (a cancellation of a request running elsewhere, a
    /// notification for the session's own server on another node), or that
    /// it could not be; dropped at once for the others.
    pub(crate) done: Option<Done>,
}

/// Route the client's answer to a server request (`remote` as for
/// [`Notify`]).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct ClientAnswer {
    pub(crate) response: Response,
    pub(crate) remote: bool,
    /// As for [`Notify`].
    pub(crate) trace: Option<String>,
    /// Told once the answer is handed to its question here or published to
    /// the other nodes (the one whose request asked), or that it could not
    /// be published; dropped at once when nothing here or elsewhere waits
    /// for it.
    pub(crate) done: Option<Done>,
}

/// Reload the state from the store: another node changed it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Reload;

/// The record as the store held it when a request for this session arrived
/// (sent just before the request, so the request sees it). Applied only if
/// no save of this actor overlapped the load (`save_events` is the value of
/// [`SessionShared::save_events`] before the load started).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Refresh {
    pub(crate) record: SessionRecord,
    pub(crate) save_events: u64,
}

/// End the session everywhere (HTTP DELETE).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Terminate;

/// This node is leaving: stop, and let the session's own server go without
/// ending it when another node can take it over (its record keeps a
/// handover, and neither the client nor the server ended the session);
/// `true` then.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(crate) struct HandOver;

/// Take the session's own server over from a host that is gone (the first
/// message of an actor [`Session::adopt`] started).
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct Adopt;

/// What a session's record keeps for another node to take its own server
/// over ([`SessionRecord::handover`]).
#[derive(Debug, Serialize, Deserialize)]
struct Handover {
    /// The server's capabilities, as its `initialize` answered them.
    capabilities: ServerCapabilities,
    /// What [`McpService::session_handover`] said.
    service: Value,
}

/// Stop the actor on this node; the session lives on in the store.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Evict;

/// How long a session whose own server ended waits for its in-flight
/// requests to write the errors that server's end gave them.
const HOSTED_END_GRACE: Duration = Duration::from_secs(5);

/// A server-side happening to forward to the client if it concerns it.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub(crate) struct Broadcast(pub(crate) ServerEvent);

/// A server request waiting for the client's answer.
#[derive(Debug)]
struct PendingAsk {
    /// The client request whose handler asked; `None` for a question of
    /// the session's own server outside any request ([`HostedAsk`]).
    from: Option<RequestId>,
    /// Completes the handler's wait.
    tx: oneshot::Sender<AskOutcome>,
}

/// What a session needs from the node.
#[derive(Debug, Clone)]
pub(crate) struct SessionDeps {
    pub(crate) service: Arc<dyn McpService>,
    pub(crate) node: Arc<NodeContext>,
    pub(crate) config: Arc<RuntimeConfig>,
    /// Where every handler runs, apart from the HTTP workers.
    pub(crate) executor: Arc<Executor>,
    /// The node's sessions: a stopping session takes itself out, so that
    /// it never counts against `max_sessions` once stopped.
    pub(crate) sessions: Sessions,
    /// The node's tasks, which a 2025-11-25 session's task-augmented calls
    /// are too (one store, one lease, one count of running tasks with the
    /// 2026-07-28 tasks extension).
    pub(crate) tasks: Arc<dyn SessionTasks>,
}

/// One MCP session on this node.
pub struct Session {
    record: SessionRecord,
    shared: Arc<SessionShared>,
    deps: SessionDeps,
    /// Child of the node's token; parent of every request's token. Tripped
    /// on stop, which cancels every in-flight handler.
    cancel: CancellationToken,
    /// In-flight requests by client id, with a serial to tell reuses apart.
    in_flight: HashMap<RequestId, (u64, Addr<InFlightRequest>)>,
    next_serial: u64,
    /// Server requests awaiting the client's answer, by their id.
    pending_asks: HashMap<RequestId, PendingAsk>,
    /// Last request, notification or open stream seen.
    last_activity: Instant,
    /// Last idle-TTL renewal in the store.
    last_touch: Instant,
    /// Set by `Terminate`: the store record is being deleted.
    terminated: bool,
    /// The store has the session: false for a Streamable HTTP session until
    /// its `initialize`, which writes it whole.
    stored: bool,
    /// The capabilities of the session's own server, when the service runs
    /// one for it ([`McpService::open_session`]); the session lives as
    /// long as that server, so it never has to find them again. Boxed:
    /// most sessions have none, and inline the field is a quarter of the
    /// actor, whose task then needs 1,152 bytes instead of 1,024 (the
    /// allocator's next size class up is 1,280).
    hosted: Option<Box<ServerCapabilities>>,
    /// Set once the session's own server ended: the reason it is ended
    /// under, once its in-flight requests are answered.
    ending: Option<&'static str>,
    /// Questions of the session's own server outside any request, held
    /// until the client first reads the standalone stream (by id, with
    /// their JSON): written before, they would precede the position its
    /// first GET starts at. Bounded by [`MAX_SESSION_ASKS`] and
    /// [`MAX_HELD_ASK_BYTES`].
    held_asks: Vec<(RequestId, Arc<str>)>,
    /// A client has read the standalone stream (on any node) since this
    /// actor started: questions go out at once.
    reader_seen: bool,
    /// Set when another node took the session's own server over while
    /// this node was away (its record names that node now): the actor
    /// stops and lets the server go without ending it.
    handed_over: bool,
    /// Out of the registry, about to stop while idle (see
    /// [`Self::passivate`]); undone by any activity.
    passivating: bool,
    /// The recipients of this actor that its requests hold, made at its
    /// first request and shared from then on (each `ctx.address()` and
    /// `recipient()` costs three allocations).
    recipients: Option<Arc<SessionRecipients>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.record.id)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl Session {
    /// Starts the actor of a stored session on the current arbiter and
    /// returns its handle.
    pub(crate) fn start_with(
        record: SessionRecord,
        deps: SessionDeps,
        node: &CancellationToken,
    ) -> SessionHandle {
        Self::start(record, deps, node, true)
    }

    /// As [`Self::start_with`], for a session this node just took over
    /// from a host that is gone (the stored record names this node now):
    /// before it handles anything, the actor has the service take the
    /// session's own server over ([`McpService::adopt_session`]), and the
    /// session ends if it cannot.
    pub(crate) fn adopt(
        record: SessionRecord,
        deps: SessionDeps,
        node: &CancellationToken,
    ) -> SessionHandle {
        let handle = Self::start(record, deps, node, true);
        handle.addr.do_send(Adopt);
        handle
    }

    /// As [`Self::start_with`]; `stored` false for a new session its
    /// `initialize` stores.
    pub(crate) fn start(
        record: SessionRecord,
        deps: SessionDeps,
        node: &CancellationToken,
        stored: bool,
    ) -> SessionHandle {
        let shared = Arc::new(SessionShared::default());
        if let Some(v) = record
            .protocol_version
            .as_deref()
            .and_then(|v| v.parse().ok())
        {
            let _ = shared.version.set(v);
        }
        if let Ok(caps) = record.client_capabilities.parse() {
            let _ = shared.client_capabilities.set(caps);
        }
        shared
            .initialized
            .store(record.initialized, Ordering::Release);
        shared.set_log_level(record.log_level.as_deref().and_then(LoggingLevel::parse));
        if let Some(owner) = record.principal.as_deref() {
            let _ = shared.owner.set(owner.into());
        }
        let id = record.id.clone();
        let standalone = record.standalone_stream.clone();
        let created_at_ms = record.created_at_ms;
        let host = host_elsewhere(&record, &deps.node.id);
        let mailbox = deps.config.session_mailbox;
        let now = Instant::now();
        // A session started from its stored record (rehydrated, perhaps
        // after passivating here) does not know when its TTL was last
        // renewed: its first activity renews it.
        let ttl = deps.config.session_idle_ttl();
        let last_touch = if stored {
            now.checked_sub(ttl / TOUCH_FRACTION).unwrap_or(now)
        } else {
            now
        };
        let session = Self {
            record,
            shared: Arc::clone(&shared),
            deps,
            cancel: node.child_token(),
            in_flight: HashMap::new(),
            next_serial: 0,
            pending_asks: HashMap::new(),
            last_activity: now,
            last_touch,
            terminated: false,
            stored,
            hosted: None,
            ending: None,
            held_asks: Vec::new(),
            reader_seen: false,
            handed_over: false,
            passivating: false,
            recipients: None,
        };
        let addr = Session::create(|ctx| {
            ctx.set_mailbox_capacity(mailbox);
            session
        });
        SessionHandle {
            id,
            addr,
            shared,
            standalone,
            created_at_ms,
            host,
        }
    }
}

impl Actor for Session {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::debug!(session_id = %self.record.id, "Session started.");
        ctx.run_interval(IDLE_CHECK_INTERVAL, |act, ctx| act.check_idle(ctx));
    }

    fn stopped(&mut self, ctx: &mut Self::Context) {
        // Cancel first, then trip the token: a request told by `Cancel`
        // sends no response, one that only sees its token (node shutdown)
        // answers with an error.
        for (_, addr) in self.in_flight.values() {
            addr.do_send(Cancel);
        }
        self.cancel.cancel();
        // Out of the registry at once, whatever stopped it (idle, evicted,
        // terminated, a panic in a handler of its own): only this actor's
        // entry, not one a rehydration already put in its place.
        let me = ctx.address();
        self.deps
            .sessions
            .remove_if(&self.record.id, |handle| handle.addr == me);
        tracing::debug!(session_id = %self.record.id, terminated = self.terminated, "Session stopped.");
        if self.hosted.is_some() && self.handed_over {
            // Another node takes the server over (it already did, or will
            // at the session's next request once this node is gone): let
            // it go, ending neither it nor the session.
            tracing::debug!(session_id = %self.record.id, "Hosted session handed over.");
            let service = Arc::clone(&self.deps.service);
            let id = self.record.id.clone();
            actix::spawn(async move { service.release_session(&id).await });
        } else if self.hosted.is_some() {
            // The session lives exactly as long as its own server: whatever
            // stopped the actor (idle expiry, eviction, a DELETE, the
            // node's end) ends both, everywhere.
            let service = Arc::clone(&self.deps.service);
            let id = self.record.id.clone();
            let deps = self.deps.clone();
            let ended = !self.terminated;
            let reason = self.ending.unwrap_or("expired");
            actix::spawn(async move {
                service.close_session(&id).await;
                if ended {
                    let transport = "tcp";
                    if let Err(err) = end_session(&deps, &id, Some((reason, transport))).await
                        && !matches!(err, RuntimeError::SessionNotFound)
                    {
                        tracing::warn!(session_id = %id, error = %err, "Hosted session could not be ended in the store.");
                    }
                }
            });
        }
    }
}

impl Handler<Dispatch> for Session {
    type Result = ();

    fn handle(&mut self, Dispatch { request, exchange }: Dispatch, ctx: &mut Self::Context) {
        self.active(ctx);
        self.dispatch(request, exchange, ctx);
    }
}

impl Handler<DispatchBatch> for Session {
    type Result = ();

    fn handle(
        &mut self,
        DispatchBatch {
            messages,
            exchange,
            done,
        }: DispatchBatch,
        ctx: &mut Self::Context,
    ) {
        self.active(ctx);
        let mut placed = Placements::new(done);
        if let Some(host) = self.host_elsewhere() {
            // Its requests run on the host, together (admitted whole or
            // refused whole there); the rest is this session's anywhere.
            let mut requests = Vec::new();
            for message in messages {
                match message {
                    Message::Request(r) => requests.push(r),
                    Message::Notification(n) => self.notify(n, false, None, placed.one()),
                    Message::Response(r) => self.client_answer(r, false, None, placed.one()),
                }
            }
            if !requests.is_empty() {
                self.forward(host, requests, exchange);
            }
            return;
        }
        let requests = messages
            .iter()
            .filter(|m| matches!(m, Message::Request(_)))
            .count();
        let free = self
            .deps
            .config
            .max_in_flight_per_session
            .saturating_sub(self.in_flight.len());
        if requests > free {
            let err = ErrorObject::internal(format!(
                "too many in-flight requests in this session: the batch has {requests} \
                 requests and {free} can start now; nothing in the batch was run"
            ));
            for message in messages {
                if let Message::Request(r) = message {
                    respond(
                        Arc::clone(&exchange),
                        Response::error(Some(r.id), err.clone()),
                    );
                }
            }
            return;
        }
        for message in messages {
            match message {
                Message::Request(r) => self.dispatch(r, Arc::clone(&exchange), ctx),
                Message::Notification(n) => self.notify(n, false, None, placed.one()),
                Message::Response(r) => self.client_answer(r, false, None, placed.one()),
            }
        }
    }
}

impl Handler<Notify> for Session {
    type Result = ();

    fn handle(
        &mut self,
        Notify {
            notification,
            remote,
            trace,
            done,
        }: Notify,
        ctx: &mut Self::Context,
    ) {
        self.active(ctx);
        self.notify(notification, remote, trace, done);
    }
}

impl Handler<ClientAnswer> for Session {
    type Result = ();

    fn handle(
        &mut self,
        ClientAnswer {
            response,
            remote,
            trace,
            done,
        }: ClientAnswer,
        ctx: &mut Self::Context,
    ) {
        self.active(ctx);
        self.client_answer(response, remote, trace, done);
    }
}

impl Handler<RegisterAsk> for Session {
    type Result = Result<(RequestId, oneshot::Receiver<AskOutcome>), AskError>;

    fn handle(&mut self, msg: RegisterAsk, _ctx: &mut Self::Context) -> Self::Result {
        if !self.record.initialized {
            return Err(AskError::NotInitialized);
        }
        let id = RequestId::String(format!("srv-{}", uuid::Uuid::new_v4().simple()));
        let (tx, rx) = oneshot::channel();
        self.pending_asks.insert(
            id.clone(),
            PendingAsk {
                from: Some(msg.from),
                tx,
            },
        );
        Ok((id, rx))
    }
}

impl Handler<RequestFinished> for Session {
    type Result = ();

    fn handle(&mut self, msg: RequestFinished, ctx: &mut Self::Context) {
        if self
            .in_flight
            .get(&msg.id)
            .is_some_and(|(serial, _)| *serial == msg.serial)
        {
            self.in_flight.remove(&msg.id);
            self.pending_asks
                .retain(|_, p| p.from.as_ref() != Some(&msg.id));
        }
        if self.ending.is_some() && self.in_flight.is_empty() {
            ctx.stop();
        }
    }
}

impl Handler<Terminate> for Session {
    type Result = ();

    fn handle(&mut self, _msg: Terminate, ctx: &mut Self::Context) {
        self.terminated = true;
        ctx.stop();
    }
}

impl Handler<Evict> for Session {
    type Result = ();

    fn handle(&mut self, _msg: Evict, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<HandOver> for Session {
    type Result = bool;

    fn handle(&mut self, _msg: HandOver, ctx: &mut Self::Context) -> bool {
        let hands_over = self.hosted.is_some()
            && self.record.handover.is_some()
            && !self.terminated
            && self.ending.is_none();
        if hands_over {
            self.handed_over = true;
            ctx.stop();
        }
        hands_over
    }
}

impl Handler<Adopt> for Session {
    type Result = ();

    fn handle(&mut self, _msg: Adopt, ctx: &mut Self::Context) {
        let id = self.record.id.clone();
        let handover = self
            .record
            .handover
            .as_ref()
            .and_then(|h| h.parse::<Handover>().ok());
        let Some(Handover {
            capabilities,
            service: handover,
        }) = handover
        else {
            self.not_adopted("its record keeps nothing to take it over with", ctx);
            return;
        };
        let adopt = SessionAdopt {
            session: id,
            principal: self.record.principal.clone(),
            protocol_version: self.record.protocol_version.clone().unwrap_or_default(),
            handover,
            link: self.link(ctx),
        };
        let service = Arc::clone(&self.deps.service);
        let adopting = async move { service.adopt_session(adopt).await };
        ctx.wait(
            adopting
                .into_actor(self)
                .map(move |adopted, act, ctx| match adopted {
                    Ok(()) => act.hosted = Some(Box::new(capabilities)),
                    Err(err) => act.not_adopted(&format!("{err:?}"), ctx),
                }),
        );
    }
}

impl Handler<EndHosted> for Session {
    type Result = ();

    fn handle(&mut self, msg: EndHosted, ctx: &mut Self::Context) {
        if self.ending.is_some() {
            return;
        }
        self.ending = Some(msg.reason);
        tracing::debug!(session_id = %self.record.id, reason = msg.reason, "The session's own server ended; ending the session.");
        if self.in_flight.is_empty() {
            ctx.stop();
        } else {
            ctx.run_later(HOSTED_END_GRACE, |_act, ctx| ctx.stop());
        }
    }
}

impl Handler<Reload> for Session {
    type Result = ();

    fn handle(&mut self, _msg: Reload, ctx: &mut Self::Context) {
        let sessions = Arc::clone(&self.deps.node.store.sessions);
        let id = self.record.id.clone();
        let load = async move { sessions.load_held(&id).await };
        // `wait`: the reload is applied before the next message is handled,
        // so a request never sees a state older than the one announced.
        ctx.wait(load.into_actor(self).map(|loaded, act, ctx| match loaded {
            Ok(Some(record)) => act.apply(record),
            Ok(None) => ctx.stop(),
            Err(err) => {
                tracing::warn!(session_id = %act.record.id, error = %err, "Session reload failed.")
            }
        }));
    }
}

impl Handler<Refresh> for Session {
    type Result = ();

    fn handle(&mut self, msg: Refresh, ctx: &mut Self::Context) {
        self.host_moved(&msg.record, ctx);
        let quiet = self.shared.saves_pending.load(Ordering::Acquire) == 0
            && self.shared.save_events.load(Ordering::Acquire) == msg.save_events;
        if quiet && !self.terminated {
            self.apply(msg.record);
        }
    }
}

impl Handler<Broadcast> for Session {
    type Result = ();

    fn handle(&mut self, Broadcast(event): Broadcast, _ctx: &mut Self::Context) {
        if hears(&self.record, &event) {
            self.to_standalone(event.notification(None));
        }
    }
}

/// Whether the client of the session `record` describes hears the server
/// event `event`: it initialized and, for a resource's update, subscribed
/// to that resource. Its session's actor asks, and the node for a session
/// passivated while its client reads its stream (`Runtime::fan_out`).
pub(crate) fn hears(record: &SessionRecord, event: &ServerEvent) -> bool {
    record.initialized
        && match event {
            ServerEvent::ResourceUpdated { uri } => record.subscriptions.contains(uri),
            _ => true,
        }
}

impl Handler<HostedAsk> for Session {
    type Result = Result<oneshot::Receiver<AskOutcome>, AskError>;

    fn handle(&mut self, msg: HostedAsk, ctx: &mut Self::Context) -> Self::Result {
        if !self.record.initialized {
            return Err(AskError::NotInitialized);
        }
        if let Some(ask) = crate::request::method_table::ask(&msg.method)
            && !self
                .shared
                .client_capabilities
                .get()
                .is_some_and(|caps| (ask.declared)(caps))
        {
            return Err(AskError::NotSupported(ask.capability));
        }
        let waiting = self.pending_asks.values().filter(|p| p.from.is_none());
        if waiting.count() >= MAX_SESSION_ASKS {
            tracing::debug!(session_id = %self.record.id, method = %msg.method, "The session's server asks too many questions at once; refused.");
            return Err(AskError::Unavailable);
        }
        let id = RequestId::String(format!("srv-{}", uuid::Uuid::new_v4().simple()));
        let data: Arc<str> = Arc::from(
            Message::Request(Request::new(id.clone(), msg.method.as_str(), msg.params)).to_json(),
        );
        let listening = self.reader_seen
            || self
                .deps
                .node
                .attachments
                .is_listening(&self.record.standalone_stream);
        if listening {
            self.append_standalone(data);
        } else {
            let held: usize = self.held_asks.iter().map(|(_, d)| d.len()).sum();
            if held + data.len() > MAX_HELD_ASK_BYTES {
                return Err(AskError::Unavailable);
            }
            self.held_asks.push((id.clone(), data));
        }
        tracing::debug!(session_id = %self.record.id, ask = %id, method = %msg.method, held = !listening, "The session's server asks the client.");
        let (tx, rx) = oneshot::channel();
        self.pending_asks
            .insert(id.clone(), PendingAsk { from: None, tx });
        // Unanswered in time: forgotten, and the asker hears of it.
        ctx.run_later(self.deps.config.ask_timeout(), move |act, _ctx| {
            act.pending_asks.remove(&id);
            act.held_asks.retain(|(held, _)| *held != id);
        });
        Ok(rx)
    }
}

impl Handler<ReaderAttached> for Session {
    type Result = ();

    fn handle(&mut self, _msg: ReaderAttached, _ctx: &mut Self::Context) {
        self.reader_seen = true;
        for (_, data) in std::mem::take(&mut self.held_asks) {
            self.append_standalone(data);
        }
    }
}

impl Handler<HostedNotify> for Session {
    type Result = ();

    fn handle(&mut self, HostedNotify(notification): HostedNotify, _ctx: &mut Self::Context) {
        if notification.method == methods::NOTIFICATION_MESSAGE {
            let level = mcp_cluster_protocol::jsonrpc::parse_params::<
                mcp_cluster_protocol::types::LoggingMessageParams,
            >(notification.params.as_ref())
            .ok()
            .map(|p| p.level);
            if !level.is_some_and(|level| self.shared.sends(level)) {
                return;
            }
        }
        self.to_standalone(notification);
    }
}

impl Session {
    /// Writes a notification that belongs to no request to the standalone
    /// stream.
    ///
    /// Written by the one node whose reader follows the standalone stream
    /// (one reader per stream, cluster-wide), so it is written once; with
    /// no reader, no client is listening and a new GET starts at the tail.
    /// A reader that ended with `retry` moments ago (a drain, a poll) still
    /// counts until its client is back, here or elsewhere: what is written
    /// meanwhile is replayed to it (twice at worst, in the moment between
    /// its new reader attaching and this node hearing of it, which an
    /// update notification tolerates).
    ///
    /// A session with its own server is the exception: only this node
    /// hears that server, and the client's reader may be on any node, so
    /// its notifications are always written (into a stream that exists
    /// once a client opened it; before, nobody listens).
    fn to_standalone(&self, notification: Notification) {
        let listening = self.hosted.is_some()
            || self
                .deps
                .node
                .attachments
                .is_listening(&self.record.standalone_stream);
        if !self.record.initialized || !listening {
            return;
        }
        self.append_standalone(Arc::from(Message::Notification(notification).to_json()));
    }

    /// Appends a message to the standalone stream, in the background.
    fn append_standalone(&self, data: Arc<str>) {
        let events = Arc::clone(&self.deps.node.store.events);
        let session = self.record.id.clone();
        let stream = self.record.standalone_stream.clone();
        actix::spawn(async move { write_standalone(&*events, &session, &stream, data).await });
    }

    /// Whether the actor stops while its client only listens to the
    /// standalone stream: the node then renews the session and writes the
    /// server's events to the stream without it (see
    /// `Attachments::listened`). Not with passivation off, nor for a session
    /// whose own server runs here.
    fn passivates_listened(&self) -> bool {
        self.deps.config.session_passivate_after().is_some() && self.hosted.is_none()
    }

    fn active(&mut self, ctx: &mut Context<Self>) {
        self.last_activity = Instant::now();
        if self.passivating {
            self.passivating = false;
            self.rejoin(ctx);
        }
        self.maybe_touch(ctx);
    }

    /// Whether stopping the actor now loses nothing: the session is stored
    /// and not ending, runs nothing, waits for no answer, holds nothing
    /// for its client, no save of it is under way, its own server (if any)
    /// does not live here, and no client listens to its standalone stream
    /// here unless a reader follows it now (the node then writes the
    /// server's events for it, `Runtime::fan_out`; a stream only awaiting
    /// its reader's return waits, as that reader may come back on another
    /// node).
    fn at_rest(&self) -> bool {
        let attachments = &self.deps.node.attachments;
        let stream = &self.record.standalone_stream;
        self.stored
            && !self.terminated
            && self.hosted.is_none()
            && self.ending.is_none()
            && self.in_flight.is_empty()
            && self.pending_asks.is_empty()
            && self.held_asks.is_empty()
            && self.shared.saves_pending.load(Ordering::Acquire) == 0
            && (attachments.is_attached(stream) || !attachments.is_listening(stream))
    }

    /// Stops the actor of a session idle for `session_passivate_secs`; its
    /// record stays in the store, and its next request (on any node)
    /// starts an actor from it. First out of the registry, so that no one
    /// finds this actor any more; then, after [`PASSIVATE_GRACE`], the stop,
    /// unless something reached it meanwhile (sent by someone who found it
    /// just before): then it runs on ([`Self::active`] puts it back).
    fn passivate(&mut self, ctx: &mut Context<Self>) {
        let Some(after) = self.deps.config.session_passivate_after() else {
            return;
        };
        if self.passivating || self.last_activity.elapsed() < after || !self.at_rest() {
            return;
        }
        self.passivating = true;
        let me = ctx.address();
        self.deps
            .sessions
            .remove_if(&self.record.id, |handle| handle.addr == me);
        ctx.run_later(PASSIVATE_GRACE, |act, ctx| {
            if !act.passivating {
                // A request or notification undid it (`Self::active`).
                return;
            }
            act.passivating = false;
            if act.at_rest() {
                tracing::debug!(session_id = %act.record.id, "Session idle; passivated.");
                mcp_cluster_telemetry::metrics::metrics()
                    .sessions_passivated
                    .inc();
                ctx.stop();
            } else {
                // A stream opened meanwhile (its reader tells the actor
                // nothing): the session stays.
                act.rejoin(ctx);
            }
        });
    }

    /// Back in the registry after a passivation that something undid,
    /// unless another actor of the session took the place meanwhile: this
    /// one then finishes what reached it, unreachable by new requests, and
    /// passivates once idle again.
    fn rejoin(&self, ctx: &mut Context<Self>) {
        let handle = SessionHandle {
            id: self.record.id.clone(),
            addr: ctx.address(),
            shared: Arc::clone(&self.shared),
            standalone: self.record.standalone_stream.clone(),
            created_at_ms: self.record.created_at_ms,
            host: host_elsewhere(&self.record, &self.deps.node.id),
        };
        self.deps
            .sessions
            .insert_if_vacant(self.record.id.clone(), handle);
    }

    /// Renews the store TTL (and the standalone stream's retention) at most
    /// every eighth of the TTL while active. A session the store no longer
    /// has (ended elsewhere, or expired) stops here too.
    fn maybe_touch(&mut self, ctx: &mut Context<Self>) {
        let ttl = self.deps.config.session_idle_ttl();
        if self.last_activity.duration_since(self.last_touch) < ttl / TOUCH_FRACTION {
            return;
        }
        self.last_touch = self.last_activity;
        let node = Arc::clone(&self.deps.node);
        let id = self.record.id.clone();
        let standalone = self.record.standalone_stream.clone();
        let addr = ctx.address();
        let owner = self.shared.owner.get().cloned();
        actix::spawn(async move {
            if !renew(&node, &id, &standalone, owner.as_deref(), ttl).await {
                tracing::debug!(session_id = %id, "Session no longer in the store; stopping.");
                addr.do_send(Evict);
            }
        });
    }

    fn check_idle(&mut self, ctx: &mut Context<Self>) {
        // A client reading the standalone stream keeps the actor running
        // only where it does not passivate: elsewhere the node renews the
        // session for the reader.
        let busy = !self.in_flight.is_empty()
            || (!self.passivates_listened()
                && self
                    .deps
                    .node
                    .attachments
                    .is_attached(&self.record.standalone_stream));
        if busy {
            self.active(ctx);
            return;
        }
        // The store record expires a TTL after its last renewal; the actor
        // goes with it, so the two never disagree about a live session.
        if self.last_touch.elapsed() < self.deps.config.session_idle_ttl() {
            self.passivate(ctx);
            return;
        }
        if self.hosted.is_some() {
            // Its client may be busy on other nodes (a GET stream there),
            // whose activity renews the record, not this actor: the session
            // ends once the store let it expire.
            self.last_touch = Instant::now();
            let sessions = Arc::clone(&self.deps.node.store.sessions);
            let id = self.record.id.clone();
            let load = async move { sessions.load(&id).await };
            ctx.spawn(load.into_actor(self).map(|loaded, act, ctx| match loaded {
                Ok(Some(record)) => act.host_moved(&record, ctx),
                Ok(None) => {
                    tracing::debug!(session_id = %act.record.id, "Hosted session expired.");
                    ctx.stop();
                }
                Err(err) => {
                    tracing::debug!(session_id = %act.record.id, error = %err, "Hosted session's expiry not checked.");
                }
            }));
            return;
        }
        tracing::debug!(session_id = %self.record.id, "Session idle; evicted from this node.");
        ctx.stop();
    }

    /// Saves the record (after a state change) in the background.
    /// Takes the state another node saved.
    fn apply(&mut self, record: SessionRecord) {
        self.shared
            .initialized
            .store(record.initialized, Ordering::Release);
        self.shared
            .set_log_level(record.log_level.as_deref().and_then(LoggingLevel::parse));
        // Set once by `initialize`; parsed only while still unset.
        if self.shared.client_capabilities.get().is_none()
            && let Ok(caps) = record.client_capabilities.parse()
        {
            let _ = self.shared.client_capabilities.set(caps);
        }
        if self.shared.version.get().is_none()
            && let Some(v) = record
                .protocol_version
                .as_deref()
                .and_then(|v| v.parse().ok())
        {
            let _ = self.shared.version.set(v);
        }
        self.record = record;
    }

    /// Saves the record and tells the other nodes holding this session to
    /// reload it, then answers the request that changed it: a client that
    /// has the answer sends its next request (perhaps to another node) only
    /// after the change is stored and announced. When the store fails the
    /// request gets -32603 instead.
    ///
    /// `done` (the 202 of `notifications/initialized`) is told once the
    /// record is stored, before the announcement when that is a step of its
    /// own: a node that serves the client's next request without this
    /// session's lease reads the record (`Runtime::locate`), so it finds the
    /// session initialized; the lease stays here until another node asks
    /// for it. The announcement only refreshes the copies of actors
    /// elsewhere (a standalone stream's), which read nothing of
    /// `initialized` to serve a request. On one Redis it goes out in the
    /// save's own script (`SessionStore::save_announcing`).
    fn persist_then(&self, answer: Option<(Arc<Exchange>, Response)>, done: Option<Done>) {
        let node = Arc::clone(&self.deps.node);
        let record = self.record.clone();
        let ttl = self.deps.config.session_idle_ttl();
        let guard = SaveGuard::begin(&self.shared);
        actix::spawn(async move {
            let changed = ControlMessage::SessionChanged {
                session: record.id.clone(),
                origin: node.id.clone(),
            };
            let saved = node
                .store
                .sessions
                .save_announcing(&record, ttl, &changed)
                .await;
            drop(guard);
            if let Some(done) = done {
                let _ = done.send(saved.as_ref().map(drop).map_err(Clone::clone));
            }
            match &saved {
                Ok(saved) if !saved.announced => {
                    node.publish(changed).await;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(session_id = %record.id, error = %err, "Session state could not be saved.")
                }
            }
            if let Some((exchange, response)) = answer {
                let response = match saved {
                    Ok(_) => response,
                    Err(_) => Response::error(
                        response.id,
                        ErrorObject::internal("session store unavailable"),
                    ),
                };
                if let Err(err) = exchange.finish(Some(response)).await {
                    tracing::warn!(error = %err, "Response could not be written.");
                }
            }
        });
    }

    /// Hands a client message this node cannot place to the other nodes.
    /// `trace`: the span that received it, so that the node acting on it
    /// stays in the caller's trace. `done` is told whether it went out: the
    /// client's 202 waits for it, so that a node that dies right after
    /// accepting a message has not yet told the client it was taken.
    fn publish_deliver(&self, message: Message, trace: Option<String>, done: Option<Done>) {
        let node = Arc::clone(&self.deps.node);
        let deliver = ControlMessage::Deliver {
            session: self.record.id.clone(),
            message: message.to_json(),
            origin: node.id.clone(),
            trace,
        };
        actix::spawn(async move {
            let published = node.publish(deliver).await;
            if let Some(done) = done {
                let _ = done.send(if published {
                    Ok(())
                } else {
                    Err(StoreError::Unavailable(
                        "the message could not be passed on to the other nodes".to_owned(),
                    ))
                });
            }
        });
    }

    /// The node running the session's own server, when that is another
    /// node.
    fn host_elsewhere(&self) -> Option<NodeId> {
        if self.hosted.is_some() {
            return None;
        }
        host_elsewhere(&self.record, &self.deps.node.id)
    }

    /// Hands `requests` to `host`, which runs the session's own server;
    /// their answers reach the client through `exchange`'s reply.
    fn forward(&self, host: NodeId, requests: Vec<Request>, exchange: Arc<Exchange>) {
        let first = requests.first().map(|r| r.id.clone());
        let principal = first
            .as_ref()
            .and_then(|id| exchange.principal_of(id))
            .map(|p| (*p).clone());
        let trace = first
            .as_ref()
            .and_then(|id| mcp_cluster_telemetry::traceparent_of(&exchange.span_of(id)));
        let node = Arc::clone(&self.deps.node);
        let session = self.record.id.clone();
        actix::spawn(forward::hand_on(
            node, session, host, requests, exchange, principal, trace,
        ));
    }

    fn dispatch(&mut self, request: Request, exchange: Arc<Exchange>, ctx: &mut Context<Self>) {
        let initialized = self.record.protocol_version.is_some();
        if self.ending.is_some() {
            let err = ErrorObject::internal("the session's server has ended; start a new session");
            return respond(exchange, Response::error(Some(request.id), err));
        }
        if request.method != methods::PING
            && let Some(host) = self.host_elsewhere()
        {
            return self.forward(host, vec![request], exchange);
        }
        match request.method.as_str() {
            methods::INITIALIZE => self.initialize(request, exchange, ctx),
            methods::PING => respond(exchange, Response::result(request.id, empty_result())),
            _ if !initialized => respond(
                exchange,
                Response::error(
                    Some(request.id),
                    ErrorObject::new(
                        ErrorCode::INVALID_REQUEST,
                        "session not initialized: send initialize first",
                    ),
                ),
            ),
            methods::LOGGING_SET_LEVEL => self.set_level(request, exchange),
            methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE => {
                self.subscription(request, exchange, ctx)
            }
            // The session's tasks, or (a session that runs none) the
            // service's answer: -32601.
            methods::TASKS_GET | methods::TASKS_RESULT | methods::TASKS_CANCEL => {
                self.start_request(request, exchange, ctx);
            }
            // What the method table gives the service, and any method it
            // does not know: the service answers or refuses it.
            method => {
                debug_assert_ne!(
                    method_table::session(method),
                    By::Era,
                    "the method table says the session answers {method}"
                );
                self.start_request(request, exchange, ctx);
            }
        }
    }

    fn notify(&mut self, n: Notification, remote: bool, trace: Option<String>, done: Option<Done>) {
        match n.method.as_str() {
            methods::NOTIFICATION_INITIALIZED => {
                if self.record.protocol_version.is_some() {
                    self.record.initialized = true;
                    self.shared.initialized.store(true, Ordering::Release);
                    // The client's 202 waits for this save: its next request
                    // may go to another node, which must find the session
                    // initialized (and may then ask the client). Saved
                    // again when repeated: a client whose first one failed
                    // (503) sends it again.
                    self.persist_then(None, done);
                    if self.hosted.is_some() {
                        // The session's own server waits for it too.
                        let service = Arc::clone(&self.deps.service);
                        let id = self.record.id.clone();
                        actix::spawn(async move { service.session_notification(&id, n).await });
                    } else if !remote && self.host_elsewhere().is_some() {
                        self.publish_deliver(Message::Notification(n), trace, None);
                    }
                }
            }
            methods::NOTIFICATION_CANCELLED | methods::CANCEL_REQUEST_ALIAS => {
                let target = mcp_cluster_protocol::jsonrpc::parse_params::<CancelledParams>(
                    n.params.as_ref(),
                )
                .ok()
                .and_then(|p| RequestId::from_value(&p.request_id));
                match target
                    .and_then(|id| self.in_flight.get(&id).map(|(_, addr)| (id, addr.clone())))
                {
                    Some((id, addr)) => {
                        tracing::debug!(session_id = %self.record.id, jsonrpc_id = %id, "Request cancelled by the client.");
                        addr.do_send(Cancel);
                    }
                    // Not running here: it may run on another node, which the
                    // bus reaches; unknown everywhere, it is ignored (spec).
                    None if !remote => {
                        self.publish_deliver(Message::Notification(n.clone()), trace, done);
                    }
                    None => {
                        tracing::debug!(session_id = %self.record.id, "Cancellation of an unknown request ignored.")
                    }
                }
            }
            // Progress for server requests: nothing waits on it.
            methods::NOTIFICATION_PROGRESS => {}
            // For the session's own server, which runs on another node.
            _ if self.host_elsewhere().is_some() => {
                if !remote {
                    self.publish_deliver(Message::Notification(n), trace, done);
                }
            }
            _ => {
                let service = Arc::clone(&self.deps.service);
                let id = self.record.id.clone();
                actix::spawn(async move { service.session_notification(&id, n).await });
            }
        }
    }

    fn client_answer(
        &mut self,
        response: Response,
        remote: bool,
        trace: Option<String>,
        done: Option<Done>,
    ) {
        let pending = response
            .id
            .as_ref()
            .and_then(|id| self.pending_asks.remove(id));
        // For the debug logs below (an answer per server request: rare).
        let id = response
            .id
            .as_ref()
            .map_or_else(|| "none".to_owned(), ToString::to_string);
        match pending {
            Some(p) => {
                tracing::debug!(session_id = %self.record.id, ask = %id, remote, "Answer handed to its question.");
                let _ = p.tx.send(response.outcome);
            }
            // Asked by a request running on another node.
            None if !remote => {
                tracing::debug!(session_id = %self.record.id, ask = %id, "Answer sent on to the other nodes.");
                self.publish_deliver(Message::Response(response), trace, done);
            }
            None => {
                tracing::debug!(session_id = %self.record.id, ask = %id, "Answer to an unknown server request ignored.")
            }
        }
    }

    fn initialize(&mut self, request: Request, exchange: Arc<Exchange>, ctx: &mut Context<Self>) {
        if self.record.protocol_version.is_some() {
            let err = ErrorObject::new(ErrorCode::INVALID_REQUEST, "session already initialized");
            return respond(exchange, Response::error(Some(request.id), err));
        }
        let params: InitializeParams = match request.parse_params() {
            Ok(p) => p,
            Err(err) => return respond(exchange, Response::error(Some(request.id), err)),
        };
        // What the session keeps for its whole life is bounded: a client
        // cannot make a node hold megabytes per session.
        let config = &self.deps.config;
        let capabilities = RawJson::of(&params.capabilities).unwrap_or_else(|_| RawJson::null());
        let client_info = RawJson::of(&params.client_info).unwrap_or_else(|_| RawJson::null());
        for (what, json, limit) in [
            (
                "capabilities",
                &capabilities,
                config.max_client_capabilities_bytes,
            ),
            ("clientInfo", &client_info, config.max_client_info_bytes),
        ] {
            if json.get().len() > limit {
                let err = ErrorObject::invalid_params(format!(
                    "{what} is {} bytes of JSON; this server accepts at most {limit}",
                    json.get().len()
                ));
                return respond(exchange, Response::error(Some(request.id), err));
            }
        }
        if !self.deps.service.runs_server_per_session() {
            return self.initialized(
                request.id,
                params,
                capabilities,
                client_info,
                None,
                exchange,
            );
        }
        // The session's own server starts now, with the client's own
        // `initialize`; its answer is the session's. `wait`: nothing else
        // of this session is handled before it has its server (or not).
        let link = self.link(ctx);
        let open = SessionOpen {
            session: self.record.id.clone(),
            principal: self.shared.owner.get().map(ToString::to_string),
            caller: exchange.caller_of(&request.id),
            params: request.params.clone().map_or(Value::Null, Value::Object),
            link,
        };
        let service = Arc::clone(&self.deps.service);
        let opening = async move { service.open_session(open).await };
        ctx.wait(opening.into_actor(self).map(move |opened, act, _ctx| {
            let id = request.id;
            let opened = opened.and_then(|result| {
                result
                    .map(|r| hosted_answer(r).map_err(OpenError::Failed))
                    .transpose()
            });
            let hosted = match opened {
                Ok(hosted) => hosted,
                Err(err) => {
                    if act.deps.service.hosts_session(&act.record.id) {
                        let service = Arc::clone(&act.deps.service);
                        let session = act.record.id.clone();
                        actix::spawn(async move { service.close_session(&session).await });
                    }
                    let err = match err.into_refusal() {
                        Err(err) => err,
                        Ok(refused) => {
                            let answer = refused.to_error_object();
                            let _ = act.shared.refused.set(refused);
                            answer
                        }
                    };
                    return respond(exchange, Response::error(Some(id), err));
                }
            };
            act.initialized(id, params, capabilities, client_info, hosted, exchange);
        }));
    }

    /// The session's way to its client outside any request, for its own
    /// server.
    fn link(&self, ctx: &mut Context<Self>) -> SessionLink {
        SessionLink::new(
            self.record.id.clone(),
            ctx.address().recipient::<HostedNotify>().downgrade(),
            ctx.address().recipient::<HostedAsk>().downgrade(),
            ctx.address().recipient::<EndHosted>().downgrade(),
        )
    }

    /// `record`, just read from the store, names another node as the one
    /// running the session's own server, which this actor ran: that node
    /// took it over while this one was away (its heartbeat lapsed). This
    /// actor stops and lets the server go.
    fn host_moved(&mut self, record: &SessionRecord, ctx: &mut Context<Self>) {
        if self.hosted.is_some()
            && record
                .host
                .as_deref()
                .is_some_and(|host| host != self.deps.node.id.as_str())
        {
            tracing::warn!(session_id = %self.record.id, host = ?record.host, "Another node took this session's server over; letting it go here.");
            self.handed_over = true;
            ctx.stop();
        }
    }

    /// The session's own server could not be taken over from its gone
    /// host: the session ends everywhere (its client starts a new one).
    fn not_adopted(&mut self, why: &str, ctx: &mut Context<Self>) {
        let id = self.record.id.clone();
        tracing::warn!(session_id = %id, why, "The session's own server could not be taken over; session ended.");
        self.terminated = true;
        let deps = self.deps.clone();
        actix::spawn(async move {
            let _ = end_session(&deps, &id, Some(("host_lost", "tcp"))).await;
        });
        ctx.stop();
    }

    /// Answers `initialize` and stores the new session: with the service's
    /// own answer, or with the answer of the session's own server
    /// (`hosted`: its version, capabilities and whole result).
    fn initialized(
        &mut self,
        id: RequestId,
        params: InitializeParams,
        capabilities: RawJson,
        client_info: RawJson,
        hosted: Option<(ProtocolVersion, ServerCapabilities, Value)>,
        exchange: Arc<Exchange>,
    ) {
        let service = &self.deps.service;
        let (version, result) = match hosted {
            Some((version, server_capabilities, result)) => {
                self.record.handover =
                    handover_of(service.as_ref(), &self.record.id, &server_capabilities);
                self.hosted = Some(Box::new(server_capabilities));
                self.record.host = Some(self.deps.node.id.to_string());
                (version, result)
            }
            None => {
                let version = ProtocolVersion::negotiate(&params.protocol_version);
                let mut capabilities = service.capabilities();
                if version.has_session_tasks() && service.runs_tasks() {
                    capabilities.tasks = Some(tasks::capabilities());
                }
                let result = InitializeResult {
                    protocol_version: version.as_str().to_owned(),
                    capabilities,
                    server_info: service.server_info(),
                    instructions: service.instructions(),
                };
                (version, serde_json::to_value(result).unwrap_or(Value::Null))
            }
        };
        self.record.protocol_version = Some(version.as_str().to_owned());
        self.record.client_capabilities = capabilities;
        self.record.client_info = client_info;
        let _ = self.shared.version.set(version);
        let _ = self.shared.client_capabilities.set(params.capabilities);
        let response = Response::result(id, result);
        tracing::debug!(session_id = %self.record.id, protocol_version = %version, "Session initialized.");
        // Saved before answering: the client's next request may reach
        // another node, which must see the negotiated version. A new
        // Streamable HTTP session is written whole here, for the first
        // time (no one knows its id before this answer).
        let store = self.deps.node.store.clone();
        let record = self.record.clone();
        let ttl = self.deps.config.session_idle_ttl();
        let guard = SaveGuard::begin(&self.shared);
        let stored = std::mem::replace(&mut self.stored, true);
        let shared = Arc::clone(&self.shared);
        actix::spawn(async move {
            let saved = if stored {
                store.sessions.save(&record, ttl).await.map(drop)
            } else {
                store_new(&store, &record, ttl).await.inspect_err(|err| {
                    let _ = shared.first_write_failed.set(err.clone());
                })
            };
            drop(guard);
            let response = match saved {
                Ok(_) => response,
                Err(err) => {
                    tracing::warn!(session_id = %record.id, error = %err, "Session state could not be saved.");
                    Response::error(
                        response.id,
                        ErrorObject::internal("session store unavailable"),
                    )
                }
            };
            let _ = exchange.finish(Some(response)).await;
        });
    }

    fn set_level(&mut self, request: Request, exchange: Arc<Exchange>) {
        let response = match request.parse_params::<SetLevelParams>() {
            Ok(p) => {
                self.record.log_level = Some(p.level.as_str().to_owned());
                self.shared.set_log_level(Some(p.level));
                if self.hosted.is_some() {
                    // The session's own server filters at its source too.
                    let service = Arc::clone(&self.deps.service);
                    let id = self.record.id.clone();
                    actix::spawn(async move { service.session_log_level(&id, p.level).await });
                }
                let response = Response::result(request.id, empty_result());
                return self.persist_then(Some((exchange, response)), None);
            }
            Err(_) => Response::error(
                Some(request.id),
                ErrorObject::invalid_params(
                    "level must be one of debug, info, notice, warning, error, critical, alert, emergency",
                ),
            ),
        };
        respond(exchange, response);
    }

    fn subscription(&mut self, request: Request, exchange: Arc<Exchange>, ctx: &mut Context<Self>) {
        let subscribable = self
            .hosted
            .as_deref()
            .cloned()
            .unwrap_or_else(|| self.deps.service.capabilities())
            .resources
            .and_then(|r| r.subscribe)
            .unwrap_or(false);
        if !subscribable {
            return respond(
                exchange,
                Response::error(
                    Some(request.id.clone()),
                    ErrorObject::method_not_found(&request.method),
                ),
            );
        }
        let uri = match request.parse_params::<UriParams>() {
            Ok(UriParams { uri }) => uri,
            Err(err) => return respond(exchange, Response::error(Some(request.id), err)),
        };
        let subscribe = request.method == methods::RESOURCES_SUBSCRIBE;
        let config = &self.deps.config;
        let refused = if let Err(err) = config.check_uri_len(&uri) {
            Some(err)
        } else if subscribe && self.hosted.is_none() && !self.deps.service.has_resource(&uri) {
            // 2025-11-25 resources, error handling: resource not found.
            Some(
                ErrorObject::new(ErrorCode::RESOURCE_NOT_FOUND, "resource not found")
                    .with_data(serde_json::json!({ "uri": uri })),
            )
        } else {
            None
        };
        if let Some(err) = refused {
            return respond(exchange, Response::error(Some(request.id), err));
        }
        // The store holds the subscriptions apart from the record and
        // enforces the limit atomically (two nodes of one session never
        // exceed it); this actor mirrors what the store accepted.
        let sessions = Arc::clone(&self.deps.node.store.sessions);
        let id = self.record.id.clone();
        let max = config.max_subscriptions_per_session;
        let guard = SaveGuard::begin(&self.shared);
        let stored_uri = uri.clone();
        let node = Arc::clone(&self.deps.node);
        // A session's own server hears of the change first, and may refuse
        // it (a resource it does not have).
        let server = self
            .hosted
            .is_some()
            .then(|| Arc::clone(&self.deps.service));
        let change = async move {
            let stored = if subscribe {
                sessions.subscribe(&id, &stored_uri, max).await
            } else {
                sessions.unsubscribe(&id, &stored_uri).await.map(|live| {
                    if live {
                        Subscribed::Added
                    } else {
                        Subscribed::SessionGone
                    }
                })
            };
            let outcome = match (stored, server) {
                (Ok(done @ (Subscribed::Added | Subscribed::AlreadySubscribed)), Some(service)) => {
                    match service
                        .session_subscription(&id, &stored_uri, subscribe)
                        .await
                    {
                        Ok(()) => Ok(done),
                        Err(refused) => {
                            // Never half-applied: what the server refused,
                            // the session does not keep either.
                            if subscribe && matches!(done, Subscribed::Added) {
                                let _ = sessions.unsubscribe(&id, &stored_uri).await;
                            }
                            Err(SubscriptionError::Refused(refused))
                        }
                    }
                }
                (stored, _) => stored.map_err(SubscriptionError::Store),
            };
            if matches!(
                outcome,
                Ok(Subscribed::Added | Subscribed::AlreadySubscribed)
            ) {
                // Announced before the client has its answer: a node
                // holding this session's standalone stream reloads it (in
                // order, on the one control channel) before any server
                // event published after the answer, so an update the
                // client causes next is not judged on the old list.
                let changed = ControlMessage::SessionChanged {
                    session: id.clone(),
                    origin: node.id.clone(),
                };
                node.publish(changed).await;
            }
            outcome
        };
        ctx.spawn(change.into_actor(self).map(move |outcome, act, _ctx| {
            drop(guard);
            let result = match outcome {
                Ok(Subscribed::Added | Subscribed::AlreadySubscribed) => {
                    if subscribe {
                        act.record.subscriptions.insert(uri);
                    } else {
                        act.record.subscriptions.remove(&uri);
                    }
                    Ok(empty_result())
                }
                Ok(Subscribed::Full) => Err(ErrorObject::invalid_params(format!(
                    "this session holds {max} resource subscriptions, the most this server \
                     allows; unsubscribe from one first"
                ))),
                Ok(Subscribed::SessionGone) => Err(ErrorObject::new(
                    ErrorCode::INVALID_REQUEST,
                    "session not found",
                )),
                Err(SubscriptionError::Refused(err)) => Err(err),
                Err(SubscriptionError::Store(err)) => {
                    tracing::warn!(session_id = %act.record.id, error = %err, "Subscription could not be saved.");
                    Err(ErrorObject::internal("session store unavailable"))
                }
            };
            let response = match result {
                Ok(value) => Response::result(request.id, value),
                Err(err) => Response::error(Some(request.id), err),
            };
            respond(exchange, response);
        }));
    }

    /// Whether this session runs tasks itself: a 2025-11-25 session whose
    /// service has tools that run as tasks (a session with its own server
    /// hands everything to that server).
    fn runs_tasks(&self) -> bool {
        self.hosted.is_none()
            && self
                .shared
                .version
                .get()
                .is_some_and(|v| v.has_session_tasks())
            && self.deps.service.runs_tasks()
    }

    fn start_request(
        &mut self,
        request: Request,
        exchange: Arc<Exchange>,
        ctx: &mut Context<Self>,
    ) {
        if self.in_flight.contains_key(&request.id) {
            let err = ErrorObject::new(
                ErrorCode::INVALID_REQUEST,
                format!("request id {} is already in flight", request.id),
            );
            return respond(exchange, Response::error(Some(request.id), err));
        }
        if self.in_flight.len() >= self.deps.config.max_in_flight_per_session {
            let err = ErrorObject::internal("too many in-flight requests in this session");
            return respond(exchange, Response::error(Some(request.id), err));
        }
        let tasks = self.runs_tasks();
        match request.method.as_str() {
            methods::TOOLS_CALL if tasks => {
                match tasks::augmentation(&*self.deps.service, &request) {
                    Err(err) => return respond(exchange, Response::error(Some(request.id), err)),
                    Ok(Some(ttl)) => return self.start_task(request, exchange, ttl, ctx),
                    Ok(None) => {}
                }
            }
            methods::TASKS_GET | methods::TASKS_RESULT | methods::TASKS_CANCEL if tasks => {
                let node_tasks = Arc::clone(&self.deps.tasks);
                let owner = tasks::owner(&self.record.id);
                let id = request.id.clone();
                let span = exchange.span_of(&id);
                let hold = exchange.take_hold(&id);
                let job: Job = span.instrument(async move {
                    let _hold = hold;
                    node_tasks.answer(&owner, &request).await
                });
                let output = Arc::new(RequestOutput::new(exchange));
                let cancel = self.cancel.child_token();
                return self.run_in_flight(id, output, cancel, job, ctx);
            }
            _ => {}
        }
        let cancel = self.cancel.child_token();
        let output = Arc::new(RequestOutput::new(exchange));
        let caller = output.exchange.caller_of(&request.id);
        let context = self.context(&request, &cancel, &output, caller, ctx);
        let id = request.id.clone();
        let job = handler_job(&self.deps.service, request, context, &output.exchange);
        self.run_in_flight(id, output, cancel, job, ctx);
    }

    /// The recipients of this actor that its requests hold, made once.
    fn recipients(&mut self, ctx: &mut Context<Self>) -> Arc<SessionRecipients> {
        let recipients = self.recipients.get_or_insert_with(|| {
            let me = ctx.address();
            Arc::new(SessionRecipients {
                asks: me.clone().recipient(),
                finished: me.recipient(),
            })
        });
        Arc::clone(recipients)
    }

    /// The handler's context of `request` in this session.
    fn context(
        &mut self,
        request: &Request,
        cancel: &CancellationToken,
        output: &Arc<RequestOutput>,
        caller: Caller,
        ctx: &mut Context<Self>,
    ) -> RequestContext {
        RequestContext::new(
            request,
            self.record.id.clone(),
            cancel.clone(),
            Arc::clone(output),
            self.recipients(ctx),
            Arc::clone(&self.shared),
            self.deps.config.ask_timeout(),
            caller,
        )
    }

    /// Runs `job` as in-flight request `id`, writing to `output`.
    fn run_in_flight(
        &mut self,
        id: RequestId,
        output: Arc<RequestOutput>,
        cancel: CancellationToken,
        job: Job,
        ctx: &mut Context<Self>,
    ) {
        let serial = self.next_serial;
        self.next_serial += 1;
        let actor = InFlightRequest::new(
            id.clone(),
            serial,
            cancel,
            output,
            self.recipients(ctx),
            job,
            self.deps.config.request_timeout(),
            Arc::clone(&self.deps.executor),
            InFlightTicket::issue(&self.deps.node),
        );
        self.in_flight.insert(id, (serial, actor.start()));
    }

    /// A task-augmented `tools/call` (`ttl`: the TTL its client asked
    /// for): its task is stored, the client answered with it, and its
    /// handler runs on as an in-flight request of the session (under the
    /// call's id) whose output goes to the session's own stream and whose
    /// answer ends the task. A task that could not be stored is refused
    /// (-32603, the store is away), or (the node runs its most tasks) as
    /// [`RuntimeError::NodeFull`].
    fn start_task(
        &mut self,
        request: Request,
        exchange: Arc<Exchange>,
        ttl: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        if self.deps.tasks.running() >= self.deps.config.max_running_tasks {
            let err = RuntimeError::NodeFull(crate::node::error::NodeFull::Tasks);
            return respond(
                exchange,
                Response::error(Some(request.id), err.to_error_object()),
            );
        }
        let cancel = self.cancel.child_token();
        let span = exchange.span_of(&request.id);
        let hold = exchange.take_hold(&request.id);
        let caller = exchange.caller_of(&request.id);
        let client = hold
            .as_ref()
            .and_then(|h| h.owner())
            .map_or(mcp_cluster_store::UNKNOWN_OWNER, |o| &**o)
            .to_owned();
        let start = TaskStart {
            owner: tasks::owner(&self.record.id),
            client,
            job: cancel.clone(),
            ttl_ms: ttl,
        };
        let node_tasks = Arc::clone(&self.deps.tasks);
        // The client's share of the running tasks (both eras), taken when
        // the call was admitted, held while the handler runs.
        let slot = exchange.take_task_slot(&request.id);
        let id = request.id.clone();
        let create = async move {
            let started = node_tasks.start(start).await.map(|task| (task, slot));
            let (response, run) = match started {
                Ok(((run, created), slot)) => (
                    Response::result(id, created),
                    Some((tasks::Unstarted::new(run), slot)),
                ),
                Err(err) => (Response::error(Some(id), err), None),
            };
            // Stored before the client hears of it; its handler starts
            // once the client was answered.
            RequestOutput::new(exchange).finish(Some(response)).await;
            run
        };
        ctx.spawn(create.into_actor(self).map(move |run, act, ctx| {
            let Some((run, slot)) = run else { return };
            let Some(run) = run.start() else { return };
            let stream = Exchange::attached(
                act.record.id.clone(),
                Arc::clone(&act.deps.node),
                act.record.standalone_stream.clone(),
            );
            let output = Arc::new(RequestOutput::of_task(stream, run));
            let context = act.context(&request, &cancel, &output, caller, ctx);
            let id = request.id.clone();
            let handler = run_handler(&act.deps.service, request, context, span, hold);
            let job: Job = Box::pin(async move {
                let _slot = slot;
                handler.await
            });
            act.run_in_flight(id, output, cancel, job, ctx);
        }));
    }
}

/// Why a subscription change failed.
enum SubscriptionError {
    /// The store failed.
    Store(StoreError),
    /// The session's own server refused it.
    Refused(ErrorObject),
}

/// Reads the `initialize` answer of a session's own server: the revision it
/// chose (one this runtime speaks in the session era, which the client gets
/// as the session's), its capabilities, and the answer itself, relayed as
/// it is.
fn hosted_answer(
    result: Value,
) -> Result<(ProtocolVersion, ServerCapabilities, Value), ErrorObject> {
    let chosen = result.get("protocolVersion").and_then(Value::as_str);
    let version = chosen
        .and_then(|v| v.parse::<ProtocolVersion>().ok())
        .filter(|v| ProtocolVersion::ALL.contains(v))
        .ok_or_else(|| {
            ErrorObject::internal(format!(
                "the hosted server answered initialize with protocolVersion {}, which this node does not speak in a session",
                chosen.unwrap_or("(none)")
            ))
        })?;
    let capabilities = result
        .get("capabilities")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    Ok((version, capabilities, result))
}

/// Writes a response the session computed itself.
fn respond(exchange: Arc<Exchange>, response: Response) {
    actix::spawn(async move {
        if let Err(err) = exchange.finish(Some(response)).await {
            tracing::warn!(error = %err, "Response could not be written.");
        }
    });
}

/// A cheap, cloneable reference to a session actor.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    id: SessionId,
    addr: Addr<Session>,
    shared: Arc<SessionShared>,
    standalone: StreamId,
    /// When the session was created (ms since the epoch, any node's clock).
    created_at_ms: u64,
    /// The node running the session's own server, when that is another
    /// node: its requests run there.
    host: Option<NodeId>,
}

impl SessionHandle {
    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The negotiated revision; `None` before `initialize`.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.shared.version.get().copied()
    }

    /// The session as spans name it.
    pub(crate) fn label(&self) -> SessionLabel<'_> {
        SessionLabel {
            id: &self.id,
            version: self.protocol_version(),
        }
    }

    /// The stream of messages unrelated to any request.
    pub fn standalone_stream(&self) -> &StreamId {
        &self.standalone
    }

    /// Why its `initialize` could not write the new session, if it could
    /// not.
    pub(crate) fn first_write_failed(&self) -> Option<&mcp_cluster_store::StoreError> {
        self.shared.first_write_failed.get()
    }

    /// Why its own server was not started now (a node or client limit of a
    /// hosted upstream), if that is why its `initialize` failed.
    pub(crate) fn refused(&self) -> Option<&RuntimeError> {
        self.shared.refused.get()
    }

    /// The key of the principal that created the session, if one did.
    pub(crate) fn owner(&self) -> Option<&str> {
        self.shared.owner.get().map(|o| &**o)
    }

    /// Whether `principal` may use this session: the one that created it
    /// (both none when it was created without authorization).
    pub fn belongs_to(&self, principal: Option<&mcp_cluster_store::Principal>) -> bool {
        owned_by(self.shared.owner.get().map(|o| &**o), principal)
    }

    /// Records the end of this session in
    /// `mcp_server_session_duration_seconds` and
    /// `mcp_sessions_ended_total{reason}`.
    pub(crate) fn record_end(&self, reason: &str, transport: &str) {
        let version = self.protocol_version().map_or("", ProtocolVersion::as_str);
        record_end(reason, transport, version, self.created_at_ms);
    }

    /// The node running the session's own server, when that is another
    /// node (its requests are forwarded there).
    pub(crate) fn host_elsewhere(&self) -> Option<&NodeId> {
        self.host.as_ref()
    }

    /// Whether the actor is running.
    pub fn is_alive(&self) -> bool {
        self.addr.connected()
    }

    /// Whether both handles name the same actor.
    pub(crate) fn same_actor(&self, other: &Self) -> bool {
        self.addr == other.addr
    }

    /// Hands a request to the session; its outputs go to `exchange`.
    ///
    /// # Errors
    /// [`RuntimeError::Overloaded`] when the mailbox is full,
    /// [`RuntimeError::SessionNotFound`] when the actor stopped.
    pub fn dispatch(&self, request: Request, exchange: Arc<Exchange>) -> Result<(), RuntimeError> {
        self.addr
            .try_send(Dispatch { request, exchange })
            .map_err(mailbox_error)
    }

    /// Hands the messages of one JSON-RPC batch to the session as one
    /// mailbox message: admitted whole or refused whole (see
    /// [`RuntimeConfig::max_in_flight_per_session`]); request outputs go to
    /// `exchange`. The transport decodes and answers invalid members itself
    /// and bounds the batch length ([`RuntimeConfig::max_batch_items`]).
    /// The receiver completes as [`Self::notify`]'s and [`Self::answer`]'s
    /// do, once for all the batch's notifications and answers.
    ///
    /// # Errors
    /// As [`Self::dispatch`]: nothing in the batch ran.
    pub fn dispatch_batch(
        &self,
        messages: Vec<Message>,
        exchange: Arc<Exchange>,
    ) -> Result<Placed, RuntimeError> {
        self.send_placed(|done| DispatchBatch {
            messages,
            exchange,
            done,
        })
    }

    /// Hands a notification to the session. The receiver completes once
    /// what the notification changed is stored and announced to the other
    /// nodes (`notifications/initialized`: the client's next request,
    /// wherever it goes, sees it), or once it is published to the node it
    /// is for (a cancellation of a request running on another node), or at
    /// once when it needs neither; with an error when it could not be.
    ///
    /// # Errors
    /// As [`Self::dispatch`].
    pub fn notify(
        &self,
        notification: Notification,
        trace: Option<String>,
    ) -> Result<Placed, RuntimeError> {
        self.send_placed(|done| Notify {
            notification,
            remote: false,
            trace,
            done,
        })
    }

    /// Hands the client's answer to a server request to the session. The
    /// receiver completes once the answer is handed to its question, on
    /// this node or published to the others (the one whose request asked),
    /// with an error when it could not be published.
    ///
    /// # Errors
    /// As [`Self::dispatch`].
    pub fn answer(
        &self,
        response: Response,
        trace: Option<String>,
    ) -> Result<Placed, RuntimeError> {
        self.send_placed(|done| ClientAnswer {
            response,
            remote: false,
            trace,
            done,
        })
    }

    /// Sends the message `message` makes of a [`Done`], and returns what
    /// that `Done` will tell.
    fn send_placed<M>(
        &self,
        message: impl FnOnce(Option<Done>) -> M,
    ) -> Result<Placed, RuntimeError>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        Session: Handler<M>,
    {
        let (done, placed) = oneshot::channel();
        self.addr
            .try_send(message(Some(done)))
            .map_err(mailbox_error)?;
        Ok(placed)
    }

    /// Delivers a client message that another node received.
    pub(crate) fn deliver_remote(&self, message: Message) {
        match message {
            Message::Notification(notification) => self.addr.do_send(Notify {
                notification,
                remote: true,
                trace: None,
                done: None,
            }),
            Message::Response(response) => self.addr.do_send(ClientAnswer {
                response,
                remote: true,
                trace: None,
                done: None,
            }),
            Message::Request(_) => {}
        }
    }

    /// How many saves of the record started or ended so far (read before
    /// loading the record for [`Self::refresh`]).
    pub(crate) fn save_events(&self) -> u64 {
        self.shared.save_events.load(Ordering::Acquire)
    }

    /// Hands the actor the record just loaded from the store, ahead of the
    /// request that follows.
    pub(crate) fn refresh(&self, record: SessionRecord, save_events: u64) {
        self.addr.do_send(Refresh {
            record,
            save_events,
        });
    }

    /// Reloads the state another node changed.
    pub(crate) fn reload(&self) {
        self.addr.do_send(Reload);
    }

    /// A client started reading the session's standalone stream (here, or
    /// on the node that published the takeover).
    pub(crate) fn reader_attached(&self) {
        self.addr.do_send(ReaderAttached);
    }

    /// This node is leaving: whether the session's own server is let go
    /// for another node to take over (the actor then stops).
    pub(crate) async fn hand_over(&self) -> bool {
        self.addr.send(HandOver).await.unwrap_or(false)
    }

    /// Stops the actor as part of ending the session.
    pub(crate) fn terminate(&self) {
        self.addr.do_send(Terminate);
    }

    pub(crate) fn evict(&self) {
        self.addr.do_send(Evict);
    }

    pub(crate) fn broadcast(&self, event: ServerEvent) {
        // do_send: a broadcast to a busy session must not be lost to a full
        // mailbox; broadcasts are rare and bounded by the registry's rate.
        self.addr.do_send(Broadcast(event));
    }
}

/// Renews session `id`'s idle TTL in the store, its standalone stream's
/// retention and its principal's quota slot for it (which lives exactly as
/// long as its record); `false` when the store no longer has the session
/// (ended elsewhere, or expired). A failure to renew is logged and counts
/// as still there: the next renewal tries again.
pub(crate) async fn renew(
    node: &NodeContext,
    id: &SessionId,
    standalone: &StreamId,
    owner: Option<&str>,
    ttl: Duration,
) -> bool {
    let store = &node.store;
    match store.sessions.touch(id, ttl).await {
        Ok(true) => {
            // A standalone stream no client opened yet may not exist (see
            // `SessionStore::open_standalone`).
            match store.events.touch(id, standalone).await {
                Ok(()) | Err(StoreError::StreamNotFound) => {}
                Err(err) => {
                    tracing::warn!(session_id = %id, error = %err, "Stream retention renewal failed.");
                }
            }
            if let Some(owner) = owner {
                node.quotas.renew_session(owner, id, ttl).await;
            }
            true
        }
        Ok(false) => false,
        Err(err) => {
            tracing::warn!(session_id = %id, error = %err, "Session TTL renewal failed.");
            true
        }
    }
}

/// Appends a message that answers no request to session `session`'s
/// standalone stream `stream`.
pub(crate) async fn write_standalone(
    events: &dyn EventLog,
    session: &SessionId,
    stream: &StreamId,
    data: Arc<str>,
) {
    mcp_cluster_telemetry::metrics::metrics()
        .event_appends
        .inc();
    // Tried again while the store is away (a failover of the session's
    // shard): written twice at worst, which an update notification
    // tolerates.
    let written = crate::node::while_store_away(
        || true,
        || events.append(session, stream, Arc::clone(&data)),
    )
    .await;
    match written {
        Ok(_) => {}
        // No client opened the GET stream yet.
        Err(StoreError::StreamNotFound) => {}
        Err(err) => {
            tracing::warn!(session_id = %session, error = %err, "Notification could not be written.");
        }
    }
}

/// What the record of session `id` keeps for another node to take over its
/// own server, whose capabilities are `capabilities`; `None` when its
/// service says there is nothing to take over, or too much to keep.
fn handover_of(
    service: &dyn McpService,
    id: &SessionId,
    capabilities: &ServerCapabilities,
) -> Option<RawJson> {
    let handover = Handover {
        capabilities: capabilities.clone(),
        service: service.session_handover(id)?,
    };
    let json = RawJson::of(&handover).ok()?;
    if json.get().len() > MAX_HANDOVER_BYTES {
        tracing::warn!(session_id = %id, bytes = json.get().len(), limit = MAX_HANDOVER_BYTES, "The session's handover is too long to keep; it ends with its host.");
        return None;
    }
    Some(json)
}

/// The node running `record`'s own server, when that is not `here`.
fn host_elsewhere(record: &SessionRecord, here: &NodeId) -> Option<NodeId> {
    let host = record.host.as_deref()?;
    if host == here.as_str() {
        return None;
    }
    host.parse().ok()
}

/// Whether a session created by `owner` (a principal's key) may be used by
/// `principal`.
pub(crate) fn owned_by(
    owner: Option<&str>,
    principal: Option<&mcp_cluster_store::Principal>,
) -> bool {
    match (owner, principal) {
        (None, None) => true,
        (Some(owner), Some(principal)) => {
            // The key without allocating it: `<issuer>#<subject>`.
            owner.len() == principal.issuer.len() + 1 + principal.subject.len()
                && owner.starts_with(principal.issuer.as_str())
                && owner[principal.issuer.len()..].starts_with('#')
                && owner.ends_with(principal.subject.as_str())
        }
        _ => false,
    }
}

/// Records the end of a session created at `created_at_ms` in
/// `mcp_server_session_duration_seconds` and `mcp_sessions_ended_total`.
pub(crate) fn record_end(reason: &str, transport: &str, version: &str, created_at_ms: u64) {
    let m = mcp_cluster_telemetry::metrics::metrics();
    m.sessions_ended.with_label_values(&[reason]).inc();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    // Milliseconds of a session's life fit an f64 exactly.
    #[allow(clippy::cast_precision_loss)]
    let seconds = now.saturating_sub(created_at_ms) as f64 / 1000.0;
    m.session_duration
        .with_label_values(&[version, transport])
        .observe(seconds);
}

/// Ends a session everywhere: deletes its state and streams, releases its
/// quota slot, stops its actor here and tells the other nodes to stop
/// theirs. `measured`: the reason and network transport it is counted under
/// (`None`: a session that never started, not counted).
///
/// # Errors
/// [`RuntimeError::SessionNotFound`] when it was already gone; a store
/// failure.
pub(crate) async fn end_session(
    deps: &SessionDeps,
    id: &SessionId,
    measured: Option<(&str, &str)>,
) -> Result<(), RuntimeError> {
    let node = &deps.node;
    let store = &node.store;
    let local = deps.sessions.get(id);
    // The session's age is in its record; read it only when no actor
    // here has it (DELETE is rare).
    let record = match (&local, measured) {
        (None, Some(_)) => store.sessions.load(id).await.ok().flatten(),
        _ => None,
    };
    // Whose session slot it held: its actor knows, or its record.
    let owner: Option<String> = local
        .as_ref()
        .and_then(|h| h.owner().map(str::to_owned))
        .or_else(|| record.as_ref().and_then(|r| r.principal.clone()));
    // The record's deletion is the commit: a session whose record could
    // not be deleted keeps everything. What follows is independent work,
    // which the store may have done in the same step (on Redis its streams
    // and, on one Redis, the announcement go in the deletion's script).
    let ended = ControlMessage::SessionEnded {
        session: id.clone(),
        origin: node.id.clone(),
    };
    let done = store.sessions.end(id, &*store.events, &ended).await?;
    let existed = done.existed;
    // Its streams go and every other node stops its actor of this session:
    // nothing the answer depends on (no node serves a session without its
    // record), so unless it is done at once it goes on after the answer,
    // on up to `MAX_DEFERRED_ENDS` sessions at once.
    let mut last = Box::pin(end_everywhere(Arc::clone(node), id.clone(), ended, done));
    if (&mut last).now_or_never().is_none() {
        match DeferredEnd::take(node) {
            Some(deferred) => {
                actix::spawn(async move {
                    last.await;
                    drop(deferred);
                });
            }
            None => last.await,
        }
    }
    // The session slot is free when the answer says the session is gone.
    if let Some(owner) = owner {
        node.quotas.release_session(&owner, id).await;
    }
    let local = deps.sessions.remove(id);
    if let Some(handle) = &local {
        handle.terminate();
    }
    if let Some((reason, transport)) = measured {
        match (&local, record) {
            (Some(handle), _) => handle.record_end(reason, transport),
            (None, Some(record)) if existed => record_end(
                reason,
                transport,
                record.protocol_version.as_deref().unwrap_or(""),
                record.created_at_ms,
            ),
            _ => {}
        }
    }
    if existed || local.is_some() {
        Ok(())
    } else {
        Err(RuntimeError::SessionNotFound)
    }
}

/// What ends a session beyond its record and the store did not do with it
/// (`done`), side by side (one store round trip of waiting): its streams
/// are deleted, and the other nodes told (`ended`).
async fn end_everywhere(node: Arc<NodeContext>, id: SessionId, ended: ControlMessage, done: Ended) {
    let streams = async {
        if done.streams_deleted {
            return Ok(());
        }
        node.store.events.delete_session(&id).await
    };
    let told = async {
        if !done.announced {
            node.publish(ended).await;
        }
    };
    let (streams, ()) = tokio::join!(streams, told);
    // The session is gone; streams left behind by a store that failed
    // here expire with their TTL.
    if let Err(err) = streams {
        tracing::warn!(session_id = %id, error = %err, "Ended session's streams could not be deleted.");
    }
}

fn mailbox_error<M>(err: SendError<M>) -> RuntimeError {
    match err {
        SendError::Full(_) => RuntimeError::Overloaded,
        SendError::Closed(_) => RuntimeError::SessionNotFound,
    }
}

/// Writes a new session: its record, and its standalone stream now or at
/// its first use (on Redis, the record alone, in one round trip).
///
/// # Errors
/// The store's.
pub(crate) async fn store_new(
    store: &Store,
    record: &SessionRecord,
    idle_ttl: std::time::Duration,
) -> Result<(), StoreError> {
    store
        .sessions
        .create_with_stream(record, idle_ttl, &*store.events)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every live session's actor runs in a task of its own, which tokio
    /// rounds up to a multiple of 128 bytes: with up to about 580 bytes of
    /// actor (and actix's 336 of context) the task is one 1,024-byte block,
    /// above that a 1,280-byte one (1,152 rounded up to the allocator's
    /// next size class). 512 leaves room for a small field; a field that
    /// most sessions do not use belongs in a box.
    #[test]
    fn the_session_actor_stays_within_half_a_kilobyte() {
        assert!(
            std::mem::size_of::<Session>() <= 512,
            "Session is {} bytes",
            std::mem::size_of::<Session>()
        );
    }
}
