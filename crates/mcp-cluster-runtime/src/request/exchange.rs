//! The output of one POST: the responses to its requests and everything
//! related that the handlers emit (progress, log messages, server requests).
//!
//! An exchange starts *pending*: if every response is ready before any other
//! message, the POST is answered as JSON. The first notification or server
//! request (or [`ResponseMode::Sse`]) turns it into a stream in the event
//! log; the transport follows that stream as SSE, and a client that drops it
//! can resume from any event. The stream closes after the last response.
//! Legacy HTTP+SSE and stdio exchanges are *attached* to the session's
//! standalone stream from the start and never close it. Stateless
//! (2026-07-28) exchanges are *direct*: their stream is not resumable, so it
//! goes straight to the transport through a bounded channel, never through
//! the event log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, PoisonError};

use mcp_cluster_protocol::{ErrorObject, Message, RequestId, Response};
use mcp_cluster_store::{Hold, OpenStream, Position, SessionId, StoreError, StreamId};
use tokio::sync::{Mutex, oneshot};

use crate::node::config::ResponseMode;
use crate::node::{ExchangeTicket, NodeContext};
use crate::request::call::Call;
use crate::request::context::Caller;

/// How the transport answers the POST.
#[derive(Debug)]
pub enum ExchangeReply {
    /// All responses, ready before anything else was emitted (one per
    /// request, in completion order).
    Json(Vec<Response>),
    /// Follow this stream of the event log from its start; it answers
    /// these requests.
    Stream(StreamId, Vec<RequestId>),
    /// Every request was cancelled before emitting anything: no response
    /// will come (an empty SSE stream closes the POST).
    Empty,
    /// The event log failed while switching to SSE.
    Failed(StoreError),
    /// A direct exchange's stream: each message as JSON, in order; the
    /// channel closes after the last response. Bounded: a client that
    /// does not read holds up its handlers, not the node's memory.
    Live(tokio::sync::mpsc::Receiver<Arc<str>>),
}

/// What [`Exchange::hand_on`] gives to the node that sends its requests
/// on.
#[derive(Debug)]
pub(crate) enum HandedOn {
    /// The responses known so far, and the transport's reply.
    Reply(Vec<Response>, oneshot::Sender<ExchangeReply>),
    /// The session's own stream, which the answers go into.
    Attached(StreamId),
}

/// Messages a direct exchange's channel holds before a slow client holds up
/// its handlers.
const LIVE_BUFFER: usize = 64;

#[derive(Debug)]
enum State {
    Pending {
        remaining: usize,
        responses: Vec<Response>,
        reply: Option<oneshot::Sender<ExchangeReply>>,
        /// Counts the exchange as open on the node until it is done.
        open: Option<ExchangeTicket>,
    },
    Streaming {
        stream: StreamId,
        remaining: usize,
        /// Dropped with the state when the exchange is done.
        _open: Option<ExchangeTicket>,
    },
    Attached {
        stream: StreamId,
    },
    Live {
        tx: tokio::sync::mpsc::Sender<Arc<str>>,
        remaining: usize,
        /// Dropped with the state when the exchange is done.
        _open: Option<ExchangeTicket>,
    },
    Done,
}

/// The output of one POST (or the attached output of a legacy / stdio
/// session). Shared by the session actor and the request actors of the POST;
/// the transport holds the reply receiver.
#[derive(Debug)]
pub struct Exchange {
    /// The session whose event log holds the stream; `None` for a direct
    /// exchange.
    session: Option<SessionId>,
    node: Arc<NodeContext>,
    /// The requests answered here, registered with the node registry while
    /// the stream is open so that a survivor can answer them if this node
    /// dies.
    requests: Vec<RequestId>,
    mode: ResponseMode,
    /// A tokio mutex: appends to the log happen under it so that messages
    /// keep the order in which they were emitted.
    state: Mutex<State>,
    /// The requests answered here, measured until their response is
    /// written; those left when the exchange goes end unanswered.
    calls: std::sync::Mutex<Vec<Call>>,
    /// Where this exchange's own stream ended at its last append (only it
    /// writes that stream), so that a store that lost the event refuses the
    /// next append instead of taking it after a gap, and a retried append
    /// that went in the first time is not written twice. `None` once that
    /// is not known (a write failed without saying whether it went in, or
    /// the store lost events): the next append follows the stream's tail
    /// as the store holds it then. Written under `state`.
    appended: std::sync::Mutex<Option<Position>>,
    /// Set once this exchange's own stream has a gap: a message could not
    /// be written (the store failed), or the store lost written ones (a
    /// Redis failover before the replica had them). Its readers cannot see
    /// a gap, so the responses written after it are errors that say so.
    lost: AtomicBool,
    /// Who its stream is charged to: the owner of the first request
    /// tracked here (every request of a POST has the same).
    owner: OnceLock<Option<Arc<str>>>,
    /// The bytes of its own stream's events while the stream is open, in
    /// the node's in-flight account (made by the first append, grown by
    /// each): given back once the stream is closed (its events are then
    /// kept in the store's closed-stream budget) or the exchange dropped.
    stream_bytes: std::sync::Mutex<Option<Hold>>,
}

/// How long a response waits for a store that is away (a Redis failover
/// or restart) before it is given up: about what a Sentinel failover takes
/// with common settings, beside readers' own patience.
const RESPONSE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);
/// First pause before a response is tried again.
const RETRY_MIN_DELAY: std::time::Duration = std::time::Duration::from_millis(100);
/// Longest pause between two tries.
const RETRY_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// The error a response becomes when messages before it were lost.
const EVENTS_LOST: &str = "messages of this request were lost (the store failed while it ran); \
                           its outcome is unknown: retry it";

impl Exchange {
    /// A pending exchange expecting the responses of `requests`, with
    /// `answered` already known (errors for the invalid members of a batch).
    pub(crate) fn pending(
        session: SessionId,
        node: Arc<NodeContext>,
        mode: ResponseMode,
        requests: Vec<RequestId>,
        answered: Vec<Response>,
    ) -> (Arc<Self>, oneshot::Receiver<ExchangeReply>) {
        let (tx, rx) = oneshot::channel();
        let state = if requests.is_empty() {
            let _ = tx.send(ExchangeReply::Json(answered));
            State::Done
        } else {
            State::Pending {
                remaining: requests.len(),
                responses: answered,
                reply: Some(tx),
                open: Some(ExchangeTicket::issue(&node)),
            }
        };
        let exchange = Self::with_state(Some(session), node, requests, mode, state);
        (Arc::new(exchange), rx)
    }

    /// An exchange in `state`, nothing written or measured yet. Its first
    /// append to a stream of its own follows that stream's tail as the
    /// store holds it then (`appended` unknown).
    fn with_state(
        session: Option<SessionId>,
        node: Arc<NodeContext>,
        requests: Vec<RequestId>,
        mode: ResponseMode,
        state: State,
    ) -> Self {
        Self {
            session,
            node,
            requests,
            mode,
            state: Mutex::new(state),
            calls: std::sync::Mutex::default(),
            appended: std::sync::Mutex::default(),
            lost: AtomicBool::new(false),
            owner: OnceLock::new(),
            stream_bytes: std::sync::Mutex::default(),
        }
    }

    /// An exchange writing into an existing stream that it never closes.
    pub(crate) fn attached(
        session: SessionId,
        node: Arc<NodeContext>,
        stream: StreamId,
    ) -> Arc<Self> {
        Arc::new(Self::with_state(
            Some(session),
            node,
            Vec::new(),
            ResponseMode::Sse,
            State::Attached { stream },
        ))
    }

    /// An exchange writing the answers to `requests` into `stream`, which
    /// another node created for them, registered under this node and
    /// follows for the client (a hosted session's requests, forwarded
    /// here: see `runtime::forward`). Closes it after the last answer, as
    /// its own.
    pub(crate) fn streaming_into(
        session: SessionId,
        node: Arc<NodeContext>,
        stream: StreamId,
        requests: Vec<RequestId>,
    ) -> Arc<Self> {
        let state = State::Streaming {
            stream,
            remaining: requests.len(),
            _open: Some(ExchangeTicket::issue(&node)),
        };
        // Whatever the other node wrote before handing the stream on is
        // read as its tail at the first append.
        Arc::new(Self::with_state(
            Some(session),
            node,
            requests,
            ResponseMode::Sse,
            state,
        ))
    }

    /// Takes the answers out of this exchange: another node runs its
    /// requests and writes them, and measures them too. A pending exchange
    /// gives the responses known so far and the transport's reply, and is
    /// done; an attached one names its stream, which it goes on writing.
    /// `None` once done.
    pub(crate) async fn hand_on(&self) -> Option<HandedOn> {
        let mut state = self.state.lock().await;
        let handed = match &mut *state {
            State::Pending {
                responses, reply, ..
            } => {
                let reply = reply.take()?;
                let handed = HandedOn::Reply(std::mem::take(responses), reply);
                *state = State::Done;
                handed
            }
            State::Attached { stream } => HandedOn::Attached(stream.clone()),
            _ => return None,
        };
        for call in std::mem::take(&mut *self.calls.lock().unwrap_or_else(PoisonError::into_inner))
        {
            call.handed_on();
        }
        Some(handed)
    }

    /// A direct exchange answering one stateless request: JSON when the
    /// response is ready before anything else, otherwise a live stream.
    pub(crate) fn direct(
        node: Arc<NodeContext>,
        mode: ResponseMode,
        request: RequestId,
    ) -> (Arc<Self>, oneshot::Receiver<ExchangeReply>) {
        let (tx, rx) = oneshot::channel();
        let state = State::Pending {
            remaining: 1,
            responses: Vec::new(),
            reply: Some(tx),
            open: Some(ExchangeTicket::issue(&node)),
        };
        let exchange = Self::with_state(None, node, vec![request], mode, state);
        (Arc::new(exchange), rx)
    }

    /// Emits a message related to a request that is not its response.
    ///
    /// # Errors
    /// The event log failed; the message is lost and the caller is told.
    pub async fn emit(&self, message: &Message) -> Result<(), StoreError> {
        let mut state = self.state.lock().await;
        if self.session.is_none() {
            let tx = self.ensure_live(&mut state)?;
            return send_live(&tx, message).await;
        }
        let stream = self.ensure_stream(&mut state).await?;
        let own = matches!(*state, State::Streaming { .. });
        let written = match self.append(&stream, message, own).await {
            // The loss is recorded: the message goes on after the gap, and
            // the response will say so.
            Err(StoreError::EventsLost) => self.append(&stream, message, false).await,
            written => written,
        };
        if own && written.is_err() {
            // A gap in the stream (or a message that went in after all: the
            // store failed before it said so): the response will say so,
            // after whatever the stream holds.
            self.lost.store(true, Ordering::Release);
            self.forget_tail();
        }
        written
    }

    /// Writes one request's response (`None`: the request was cancelled and
    /// gets none). The last one closes the SSE stream.
    ///
    /// # Errors
    /// The event log failed while writing it.
    pub async fn finish(&self, response: Option<Response>) -> Result<(), StoreError> {
        if let Some(r) = &response {
            self.complete_call(r);
        }
        let mut state = self.state.lock().await;
        if self.mode == ResponseMode::Sse && response.is_some() {
            if self.session.is_some() {
                self.ensure_stream(&mut state).await?;
            } else {
                self.ensure_live(&mut state)?;
            }
        }
        match &mut *state {
            State::Pending {
                remaining,
                responses,
                reply,
                ..
            } => {
                *remaining = remaining.saturating_sub(1);
                responses.extend(response);
                if *remaining == 0 {
                    let out = if responses.is_empty() {
                        ExchangeReply::Empty
                    } else {
                        ExchangeReply::Json(std::mem::take(responses))
                    };
                    if let Some(tx) = reply.take() {
                        // The transport may have gone (client disconnected).
                        let _ = tx.send(out);
                    }
                    *state = State::Done;
                }
                Ok(())
            }
            State::Streaming {
                stream, remaining, ..
            } => {
                let stream = stream.clone();
                *remaining = remaining.saturating_sub(1);
                let last = *remaining == 0;
                // Held (with its open-exchange ticket) until the response is
                // written and the stream closed.
                let _finished = last.then(|| std::mem::replace(&mut *state, State::Done));
                let written = match &response {
                    Some(r) => self.append_response(&stream, r).await,
                    None => Ok(()),
                };
                if written.is_err() {
                    // The reader here, or on the node the client resumed
                    // on, would wait for it for ever.
                    self.fail_readers(&stream);
                }
                if let (true, Some(session)) = (last, &self.session) {
                    self.node.attachments.forget(&stream);
                    let owner = self.owner_key();
                    let closed = patiently(&self.node, session, &stream, || {
                        self.node.store.events.close_stream(session, &stream, owner)
                    });
                    let closed = closed.await;
                    // Kept by the store's closed-stream budget from now on
                    // (or gone with the store's failure).
                    drop(
                        self.stream_bytes
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .take(),
                    );
                    if let Err(err) = closed {
                        self.fail_readers(&stream);
                        return Err(err);
                    }
                    if let Err(err) = self
                        .node
                        .store
                        .nodes
                        .close_stream(&self.node.id, &stream)
                        .await
                    {
                        tracing::warn!(%stream, error = %err, "Open stream could not be unregistered.");
                    }
                }
                written
            }
            State::Attached { stream } => {
                let stream = stream.clone();
                match response {
                    Some(r) => self.append(&stream, &Message::Response(r), false).await,
                    None => Ok(()),
                }
            }
            State::Live { tx, remaining, .. } => {
                let tx = tx.clone();
                *remaining = remaining.saturating_sub(1);
                if *remaining == 0 {
                    // The state's sender goes now; the channel closes once
                    // this last message is in.
                    *state = State::Done;
                }
                drop(state);
                match response {
                    Some(r) => send_live(&tx, &Message::Response(r)).await,
                    None => Ok(()),
                }
            }
            State::Done => Ok(()),
        }
    }

    /// Tells the readers of `stream`, here and on every other node, that
    /// its response will not come: each answers its requests with an error
    /// and ends.
    fn fail_readers(&self, stream: &StreamId) {
        self.node.attachments.fail(stream);
        if let Some(session) = &self.session {
            let failed = mcp_cluster_store::ControlMessage::StreamFailed {
                session: session.clone(),
                stream: stream.clone(),
                origin: self.node.id.clone(),
            };
            let node = Arc::clone(&self.node);
            tokio::spawn(async move { node.publish(failed).await });
        }
    }

    /// Measures a request answered here; the first one tracked names the
    /// owner its stream is charged to.
    pub(crate) fn track(&self, call: Call) {
        let _ = self.owner.set(call.owner.clone());
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(call);
        }
    }

    /// The bytes request `id`'s parameters hold in the node's in-flight
    /// account, taken by its handler (which holds them while it runs).
    pub(crate) fn take_hold(&self, id: &RequestId) -> Option<Hold> {
        self.calls.lock().ok().and_then(|mut calls| {
            calls
                .iter_mut()
                .find(|c| c.id == *id)
                .and_then(|c| c.hold.take())
        })
    }

    /// The running-task slot request `id` was admitted with, taken by its
    /// task.
    pub(crate) fn take_task_slot(&self, id: &RequestId) -> Option<crate::node::quota::SlotLease> {
        self.calls.lock().ok().and_then(|mut calls| {
            calls
                .iter_mut()
                .find(|c| c.id == *id)
                .and_then(|c| c.task_slot.take())
        })
    }

    /// Who this exchange's stream is charged to, as the store's budgets
    /// name owners ([`NO_OWNER`] when unknown).
    fn owner_key(&self) -> &str {
        self.owner
            .get()
            .and_then(Option::as_deref)
            .unwrap_or(NO_OWNER)
    }

    /// Counts `bytes` more of this exchange's own stream in the node's
    /// in-flight account.
    fn count_stream_bytes(&self, bytes: u64) {
        let mut held = self
            .stream_bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.get_or_insert_with(|| {
            let owner = self.owner.get().and_then(Option::as_deref);
            self.node.in_flight_bytes.empty_hold(owner)
        })
        .grow(bytes);
    }

    /// The span of request `id` answered here (a disabled span if none).
    pub(crate) fn span_of(&self, id: &RequestId) -> mcp_cluster_telemetry::TracedSpan {
        self.calls
            .lock()
            .ok()
            .and_then(|calls| calls.iter().find(|c| c.id == *id).map(|c| c.span.clone()))
            .unwrap_or_else(mcp_cluster_telemetry::TracedSpan::none)
    }

    /// Who request `id` answered here acts for.
    pub(crate) fn principal_of(&self, id: &RequestId) -> Option<Arc<mcp_cluster_store::Principal>> {
        self.caller_of(id).principal
    }

    /// Who request `id` answered here acts for, and the token it came with.
    pub(crate) fn caller_of(&self, id: &RequestId) -> Caller {
        self.calls
            .lock()
            .ok()
            .and_then(|calls| {
                calls.iter().find(|c| c.id == *id).map(|c| Caller {
                    principal: c.principal.clone(),
                    token: c.caller_token.clone(),
                })
            })
            .unwrap_or_default()
    }

    fn complete_call(&self, response: &Response) {
        let Some(id) = &response.id else { return };
        let call = self.calls.lock().ok().and_then(|mut calls| {
            let at = calls.iter().position(|c| c.id == *id)?;
            Some(calls.swap_remove(at))
        });
        if let Some(call) = call {
            call.complete(response);
        }
    }

    /// Ends the client's current connection to this exchange's stream
    /// without ending the stream (SEP-1699 polling): the client reconnects
    /// with `Last-Event-ID` and goes on. Switches a pending exchange to SSE
    /// first, so the client has an event id to resume from. A no-op for
    /// attached exchanges: their stream is the session's only channel
    /// (legacy SSE, stdio), and closing it would end the legacy session or
    /// silence stdout for good.
    ///
    /// # Errors
    /// The event log failed while switching to SSE.
    pub async fn disconnect_client(&self) -> Result<(), StoreError> {
        let mut state = self.state.lock().await;
        // A direct exchange's stream cannot be resumed (2026-07-28): closing
        // it would cancel the request.
        if matches!(*state, State::Attached { .. }) || self.session.is_none() {
            return Ok(());
        }
        let stream = self.ensure_stream(&mut state).await?;
        self.node.attachments.kick(&stream);
        Ok(())
    }

    /// Starts a direct exchange's answer as a live stream now (headers,
    /// then keep-alives), before any message: a request that waits long
    /// learns when its client goes away at the next keep-alive. A no-op for
    /// any other exchange, or when the mode forbids streams.
    pub(crate) async fn go_live(&self) {
        if self.session.is_some() {
            return;
        }
        let mut state = self.state.lock().await;
        let _ = self.ensure_live(&mut state);
    }

    /// Switches a pending direct exchange to its live channel.
    fn ensure_live(
        &self,
        state: &mut State,
    ) -> Result<tokio::sync::mpsc::Sender<Arc<str>>, StoreError> {
        match state {
            State::Live { tx, .. } => Ok(tx.clone()),
            State::Pending {
                remaining,
                responses,
                reply,
                open,
            } => {
                let (tx, rx) = tokio::sync::mpsc::channel(LIVE_BUFFER);
                for r in std::mem::take(responses) {
                    let _ = tx.try_send(Arc::from(Message::Response(r).to_json()));
                }
                if let Some(reply) = reply.take() {
                    let _ = reply.send(ExchangeReply::Live(rx));
                }
                *state = State::Live {
                    tx: tx.clone(),
                    remaining: *remaining,
                    _open: open.take(),
                };
                Ok(tx)
            }
            _ => Err(StoreError::StreamNotFound),
        }
    }

    async fn ensure_stream(&self, state: &mut State) -> Result<StreamId, StoreError> {
        let Some(session) = &self.session else {
            return Err(StoreError::StreamNotFound);
        };
        match state {
            State::Streaming { stream, .. } | State::Attached { stream } => Ok(stream.clone()),
            State::Done | State::Live { .. } => Err(StoreError::StreamNotFound),
            State::Pending {
                remaining,
                responses,
                reply,
                open: ticket,
            } => {
                // The stream, registered, with the responses already made:
                // all of it or a failed reply (a stream half set up would be
                // set up again by the next message, and what went into this
                // one would be lost to the client).
                let pending = std::mem::take(responses);
                let stream = match self.start_stream(session, pending).await {
                    Ok(stream) => stream,
                    Err(err) => {
                        if let Some(tx) = reply.take() {
                            let _ = tx.send(ExchangeReply::Failed(err.clone()));
                        }
                        *state = State::Done;
                        return Err(err);
                    }
                };
                if let Some(tx) = reply.take() {
                    let _ = tx.send(ExchangeReply::Stream(stream.clone(), self.requests.clone()));
                }
                *state = State::Streaming {
                    stream: stream.clone(),
                    remaining: *remaining,
                    _open: ticket.take(),
                };
                Ok(stream)
            }
        }
    }

    /// Creates this exchange's stream, registers it with the node registry
    /// (before anything is written, so that a survivor knows which requests
    /// to answer should this node die) and writes `responses` into it.
    async fn start_stream(
        &self,
        session: &SessionId,
        responses: Vec<Response>,
    ) -> Result<StreamId, StoreError> {
        let stream = self
            .node
            .store
            .events
            .create_stream(session, &self.requests)
            .await?;
        // Its first append follows the empty stream.
        *self.appended.lock().unwrap_or_else(PoisonError::into_inner) = Some(Position::START);
        let open = OpenStream {
            session: session.clone(),
            stream: stream.clone(),
            requests: self.requests.clone(),
        };
        self.node
            .store
            .nodes
            .open_stream(&self.node.id, &open)
            .await?;
        for r in responses {
            self.append(&stream, &Message::Response(r), true).await?;
        }
        Ok(stream)
    }

    /// Appends one message. `own`: the stream is this exchange's own
    /// (no other writer), so the append must follow the last one it made.
    async fn append(
        &self,
        stream: &StreamId,
        message: &Message,
        own: bool,
    ) -> Result<(), StoreError> {
        let Some(session) = &self.session else {
            return Err(StoreError::StreamNotFound);
        };
        mcp_cluster_telemetry::metrics::metrics()
            .event_appends
            .inc();
        let data: Arc<str> = Arc::from(message.to_json());
        let bytes = data.len() as u64;
        let events = &self.node.store.events;
        let follows = if own {
            let known = *self.appended.lock().unwrap_or_else(PoisonError::into_inner);
            match known {
                Some(position) => Some(position),
                None => {
                    let tail = events.tail(session, stream).await?;
                    *self.appended.lock().unwrap_or_else(PoisonError::into_inner) = Some(tail);
                    Some(tail)
                }
            }
        } else {
            None
        };
        let appended = match follows {
            Some(follows) => {
                events
                    .append_following(session, stream, data, follows)
                    .await
            }
            None => events.append(session, stream, data).await,
        };
        match appended {
            Ok(id) => {
                if own {
                    *self.appended.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(id.position);
                    self.count_stream_bytes(bytes);
                }
                Ok(())
            }
            Err(StoreError::EventsLost) => {
                tracing::warn!(%stream, "The store lost events of this stream (a Redis failover); the responses after them become errors.");
                self.lost.store(true, Ordering::Release);
                self.forget_tail();
                Err(StoreError::EventsLost)
            }
            Err(err) => Err(err),
        }
    }

    /// The stream's tail is no longer known: the next own append reads it.
    fn forget_tail(&self) {
        *self.appended.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Appends a response to this exchange's own stream: as it is, or, when
    /// messages before it were lost, as an error that says so. A store that
    /// is away (a Redis failover, a restart) is waited for up to
    /// [`RESPONSE_PATIENCE`]: the outcome is known, and a client resuming
    /// the stream later still gets it. One that refuses (full) is not.
    async fn append_response(&self, stream: &StreamId, r: &Response) -> Result<(), StoreError> {
        let Some(session) = &self.session else {
            return Err(StoreError::StreamNotFound);
        };
        let mut tries = 0_u32;
        let written = patiently(&self.node, session, stream, || {
            tries += 1;
            let retry = tries > 1;
            async move {
                loop {
                    let message = if self.lost.load(Ordering::Acquire) {
                        Response::error(r.id.clone(), ErrorObject::internal(EVENTS_LOST))
                    } else {
                        r.clone()
                    };
                    match self.append(stream, &Message::Response(message), true).await {
                        // The gap is recorded (and the next append no longer
                        // follows): this time the error goes in.
                        Err(StoreError::EventsLost) => {}
                        // An earlier try went in, its answer lost on the way.
                        Err(StoreError::Conflict) if retry => return Ok(()),
                        written => return written,
                    }
                }
            }
        })
        .await;
        match written {
            // Refused although the store answers (a full Redis refuses the
            // large write, not a short one): a short error in its place, so
            // the request is still answered. If an earlier try went in
            // after all, the stream is ahead and nothing more is written.
            Err(err) if !matches!(err, StoreError::Conflict) => {
                let short = Response::error(r.id.clone(), ErrorObject::internal(NOT_STORED));
                match self.append(stream, &Message::Response(short), true).await {
                    Ok(()) | Err(StoreError::Conflict) => Ok(()),
                    Err(_) => Err(err),
                }
            }
            written => written,
        }
    }
}

/// The owner a stream is charged to when its requests' is not known (stdio,
/// a trusted proxy's own request, a dead node's stream finalized).
pub(crate) const NO_OWNER: &str = mcp_cluster_store::UNKNOWN_OWNER;

/// The error that answers a request whose response the store refused.
const NOT_STORED: &str = "the response could not be stored for delivery";

/// Runs `op`, on `stream`, again while the store is away for that stream
/// (reading its tail fails too: a failover, a restart, the stream's shard
/// of a Redis Cluster changing primary), up to [`RESPONSE_PATIENCE`]. A
/// store that answers the read gets one more try at once (it may have come
/// back between the failure and the read); one that answers but refuses
/// (full, say) then fails that one too, and is not waited for.
async fn patiently<T, F>(
    node: &NodeContext,
    session: &SessionId,
    stream: &StreamId,
    mut op: impl FnMut() -> F,
) -> Result<T, StoreError>
where
    F: std::future::Future<Output = Result<T, StoreError>>,
{
    let started = tokio::time::Instant::now();
    let mut delay = RETRY_MIN_DELAY;
    let mut answered = false;
    loop {
        match op().await {
            Err(StoreError::Unavailable(reason))
                if started.elapsed() + delay < RESPONSE_PATIENCE && !answered =>
            {
                let away = matches!(
                    node.store.events.tail(session, stream).await,
                    Err(StoreError::Unavailable(_))
                );
                if !away {
                    answered = true;
                    continue;
                }
                tracing::debug!(%reason, ?delay, "The store is away; trying again.");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX_DELAY);
            }
            done => return done,
        }
    }
}

/// Sends one message on a direct exchange's channel, waiting while it is
/// full; a client that went away ends the wait.
async fn send_live(
    tx: &tokio::sync::mpsc::Sender<Arc<str>>,
    message: &Message,
) -> Result<(), StoreError> {
    tx.send(Arc::from(message.to_json()))
        .await
        .map_err(|_| StoreError::StreamNotFound)
}
