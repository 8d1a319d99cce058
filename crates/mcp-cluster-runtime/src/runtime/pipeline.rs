//! The one inbound pipeline: every transport (Streamable HTTP, legacy
//! HTTP+SSE, stdio) decodes its framing and hands each body here.
//!
//! The pipeline owns what is the same on every transport: opening sessions
//! (and counting them), the era rules for batches, splitting a batch into
//! what runs and what is answered with an error, handing messages to the
//! session actor (admission: whole or nothing), the wording of every
//! refusal, and the measuring of every request
//! (`mcp_server_operation_duration_seconds`). A transport keeps only what is
//! its own: framing, HTTP status codes, SSE streams, and where answers go
//! ([`Answers`]).

use std::net::IpAddr;
use std::sync::Arc;

use mcp_cluster_protocol::jsonrpc::Body;
use mcp_cluster_protocol::{
    DecodeError, ErrorCode, ErrorObject, Message, ProtocolVersion, Request, RequestId, Response,
    methods,
};
use mcp_cluster_store::Hold;
use mcp_cluster_telemetry::metrics;
use tokio::sync::oneshot;

use crate::node::config::ResponseMode;
use crate::node::error::RuntimeError;
use crate::request::call::{Call, Inbound, notification_label};
use crate::request::exchange::{Exchange, ExchangeReply};
use crate::runtime::Runtime;
use crate::session::{Placed, SessionHandle};

/// Where the answers to a body go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// On the transport's reply to this body (a Streamable HTTP POST: JSON,
    /// or an SSE stream of its own).
    Reply,
    /// On the session's one stream (legacy HTTP+SSE, stdio).
    SessionStream,
}

/// What the transport does next.
#[derive(Debug)]
pub enum Submitted {
    /// Nothing will be answered (notifications and responses only).
    Accepted,
    /// The answers arrive on this reply ([`Answers::Reply`]); `batch`: the
    /// body was a batch, answered as an array.
    Reply {
        /// Resolves once the answers are ready or turned into a stream.
        reply: oneshot::Receiver<ExchangeReply>,
        /// Answer with an array.
        batch: bool,
    },
    /// The answers go to the session's stream through this exchange
    /// ([`Answers::SessionStream`]); it is dropped once they are written.
    Stream(Arc<Exchange>),
}

/// Why the pipeline refused a body before anything in it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not valid here (HTTP 400, JSON-RPC -32600).
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
        /// The request refused, when the body was one request.
        id: Option<RequestId>,
    },
    /// The runtime could not take it (overloaded, session gone…).
    #[error("{error}")]
    Runtime {
        /// Why.
        error: RuntimeError,
        /// The request refused, when the body was one request.
        id: Option<RequestId>,
        /// The requests of a refused batch (none of them ran).
        batch: Vec<RequestId>,
    },
}

impl Refusal {
    /// The request refused, when known.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Self::Invalid { id, .. } | Self::Runtime { id, .. } => id.as_ref(),
        }
    }

    /// The JSON-RPC error of the refusal.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            Self::Invalid { message, .. } => ErrorObject::new(ErrorCode::INVALID_REQUEST, message),
            Self::Runtime { error, batch, .. } if !batch.is_empty() => {
                let mut object = error.to_error_object();
                object.message.push_str("; nothing in the batch was run");
                object
            }
            Self::Runtime { error, .. } => error.to_error_object(),
        }
    }

    /// The answers of the refusal, for transports that answer on a stream:
    /// one per request of a refused batch, else one.
    pub fn responses(&self) -> Vec<Response> {
        let error = self.to_error_object();
        match self {
            Self::Runtime { batch, .. } if !batch.is_empty() => batch
                .iter()
                .map(|id| Response::error(Some(id.clone()), error.clone()))
                .collect(),
            _ => vec![Response::error(self.id().cloned(), error)],
        }
    }

    /// The refusal of a whole batch: every request of it is answered with
    /// `error` (none of them ran).
    fn of_batch(error: RuntimeError, items: &[Result<Message, DecodeError>]) -> Self {
        Self::Runtime {
            error,
            id: None,
            batch: items
                .iter()
                .filter_map(|item| match item {
                    Ok(Message::Request(r)) => Some(r.id.clone()),
                    _ => None,
                })
                .collect(),
        }
    }

    /// The refusal of everything in `body` (none of it ran).
    fn of_body(error: RuntimeError, body: &Body) -> Self {
        match body {
            Body::Single(Message::Request(r)) => Self::runtime(error, Some(r.id.clone())),
            Body::Batch(items) => Self::of_batch(error, items),
            Body::Single(_) => Self::runtime(error, None),
        }
    }

    fn runtime(error: RuntimeError, id: Option<RequestId>) -> Self {
        Self::Runtime {
            error,
            id,
            batch: Vec::new(),
        }
    }
}

fn version_label(session: &SessionHandle) -> &'static str {
    session
        .protocol_version()
        .map_or("", ProtocolVersion::as_str)
}

fn rejection_reason(err: &RuntimeError) -> &'static str {
    match err {
        RuntimeError::TooManySessions => "too_many_sessions",
        RuntimeError::ShuttingDown => "shutting_down",
        RuntimeError::Store(_) => "store_unavailable",
        RuntimeError::QuotaExceeded { .. } => "quota",
        _ => "other",
    }
}

impl Runtime {
    /// Opens a session for a transport that opens one without `initialize`
    /// (legacy HTTP+SSE, stdio): the client's `initialize` follows on it.
    /// Counted against `initialize_per_address` (no principal) or
    /// `sessions_per_principal`.
    ///
    /// # Errors
    /// As [`Runtime::create_session`], and [`RuntimeError::QuotaExceeded`].
    pub async fn open_session(&self, inbound: &Inbound) -> Result<SessionHandle, RuntimeError> {
        self.open_session_as(inbound, true).await
    }

    /// Whether the node counts requests per client address
    /// (`quotas.requests_per_address` is on): a transport that sees every
    /// request then counts those the pipeline does not
    /// ([`Self::admit_request_from`]).
    pub fn counts_address_requests(&self) -> bool {
        self.node().quotas.counts_address_requests()
    }

    /// Counts one request of `client`, a request without a principal that
    /// no body of reaches [`Self::submit`], [`Self::initialize`] or
    /// [`Runtime::stateless`] (which count their own): a GET, a DELETE, a
    /// request refused before its body was handed over. Against
    /// `requests_per_address`, cluster-wide.
    ///
    /// # Errors
    /// [`RuntimeError::QuotaExceeded`]; a store failure.
    pub async fn admit_request_from(&self, client: IpAddr) -> Result<(), RuntimeError> {
        self.node().quotas.admit_address_requests(client, 1).await
    }

    /// The refusal due to a request of `client` (without a principal)
    /// while this node knows its address to be over `requests_per_address`
    /// (the store refused it, and the wait it named has not passed), at no
    /// store call; `None` otherwise. Counted in
    /// `mcp_quota_rejections_total` when it refuses.
    pub fn over_request_rate(&self, client: IpAddr) -> Option<RuntimeError> {
        self.node().quotas.address_over_rate(client)
    }

    /// Whether this node knows `client` to be over `requests_per_address`
    /// ([`Self::over_request_rate`], refusing and counting nothing).
    pub fn is_over_request_rate(&self, client: IpAddr) -> bool {
        self.node().quotas.address_wait(client).is_some()
    }

    /// As [`Self::open_session`]; `store_now` as for
    /// [`Runtime::new_session`].
    async fn open_session_as(
        &self,
        inbound: &Inbound,
        store_now: bool,
    ) -> Result<SessionHandle, RuntimeError> {
        let transport = inbound.transport;
        let m = metrics::metrics();
        let owner = inbound
            .principal
            .as_deref()
            .map(mcp_cluster_store::Principal::key);
        let admitted = self
            .node()
            .quotas
            .admit_new_session(inbound.client_ip, inbound.principal.as_deref())
            .await;
        let created = match admitted {
            Ok(()) => self.new_session(owner, store_now).await,
            Err(err) => Err(err),
        };
        match created {
            Ok(session) => {
                m.sessions_created
                    .with_label_values(&[transport.label()])
                    .inc();
                Ok(session)
            }
            Err(err) => {
                m.sessions_rejected
                    .with_label_values(&[rejection_reason(&err)])
                    .inc();
                Err(err)
            }
        }
    }

    /// Streamable HTTP `initialize`: creates the session, runs the request
    /// and waits for its answer (always JSON: the session id travels in the
    /// HTTP headers). A failed `initialize` leaves no session.
    ///
    /// Returns the session, the reply, and whether it succeeded.
    ///
    /// # Errors
    /// The session could not be created or the request not dispatched.
    pub async fn initialize(
        &self,
        request: Request,
        inbound: &Inbound,
    ) -> Result<
        (
            SessionHandle,
            Result<ExchangeReply, oneshot::error::RecvError>,
            bool,
        ),
        Refusal,
    > {
        let id = request.id.clone();
        // The client's request quota first: a refused `initialize` opens
        // nothing.
        if let Err(err) = self
            .node()
            .quotas
            .admit_requests(inbound.principal.as_deref(), inbound.client_ip, 1)
            .await
        {
            metrics::metrics()
                .sessions_rejected
                .with_label_values(&[rejection_reason(&err)])
                .inc();
            return Err(Refusal::runtime(err, Some(id)));
        }
        // Stored by the `initialize` itself, with what it negotiated.
        let session = self
            .open_session_as(inbound, false)
            .await
            .map_err(|err| Refusal::runtime(err, Some(id.clone())))?;
        let hold = match self.hold_params(inbound, inbound.body_bytes) {
            Ok(hold) => hold,
            Err(err) => {
                let _ = self.end_session(session.id(), None).await;
                return Err(Refusal::runtime(err, Some(id)));
            }
        };
        let (exchange, reply) =
            self.exchange_with_mode(&session, vec![request.id.clone()], ResponseMode::Auto);
        exchange.track(
            Call::new(self.service(), &request, Some(session.label()), "", inbound).holding(hold),
        );
        session
            .dispatch(request, exchange)
            .map_err(|err| Refusal::runtime(err, Some(id.clone())))?;
        let reply = reply.await;
        // The store was away: answered as a session that could not be
        // created (503), not as a failed `initialize`.
        if let Some(err) = session.first_write_failed().cloned() {
            let _ = self.end_session(session.id(), None).await;
            metrics::metrics()
                .sessions_rejected
                .with_label_values(&["store_unavailable"])
                .inc();
            return Err(Refusal::runtime(RuntimeError::Store(err), Some(id)));
        }
        // The hosted server's limits: refused as the HTTP request it is
        // (503 or 429 with `Retry-After`), not as a failed `initialize`.
        if let Some(err) = session.refused().cloned() {
            let _ = self.end_session(session.id(), None).await;
            metrics::metrics()
                .sessions_rejected
                .with_label_values(&["upstream_busy"])
                .inc();
            return Err(Refusal::runtime(err, Some(id)));
        }
        let succeeded = matches!(&reply, Ok(ExchangeReply::Json(responses))
            if responses.iter().all(|r| r.outcome.is_ok()));
        if !succeeded {
            let _ = self.end_session(session.id(), None).await;
            metrics::metrics()
                .sessions_rejected
                .with_label_values(&["initialize_failed"])
                .inc();
        }
        Ok((session, reply, succeeded))
    }

    /// Hands a decoded body to `session`: one message, or a batch (2025-03-26
    /// sessions only) admitted whole or refused whole. Its requests and
    /// notifications (but cancellations) count against the principal's
    /// `requests_per_principal` first, or without one the client
    /// address's `requests_per_address` (a batch all or nothing).
    ///
    /// Cancel safety: cancelled before it returns, nothing of the body ran
    /// (its quota units may have been counted).
    ///
    /// # Errors
    /// A [`Refusal`]: nothing in the body ran.
    pub async fn submit(
        &self,
        session: &SessionHandle,
        body: Body,
        answers: Answers,
        inbound: &Inbound,
    ) -> Result<Submitted, Refusal> {
        self.admit_body(&body, inbound).await?;
        // The session's actor stopped while the body waited for its quota
        // (it passivated: idle, it left the registry a grace before): the
        // session lives on in its record, and a new actor takes the body.
        let relocated;
        let session = if session.is_alive() {
            session
        } else {
            relocated = self
                .session_as(session.id(), inbound.principal.as_deref())
                .await
                .map_err(|err| Refusal::of_body(err, &body))?;
            &relocated
        };
        match body {
            Body::Single(Message::Request(request)) => {
                let slot = self
                    .admit_session_task(session, &request, inbound)
                    .await
                    .map_err(|err| Refusal::runtime(err, Some(request.id.clone())))?;
                let exchange = match answers {
                    Answers::Reply => {
                        let (exchange, reply) = self.exchange(session, vec![request.id.clone()]);
                        self.dispatch_one(session, request, &exchange, inbound, slot)?;
                        return Ok(Submitted::Reply {
                            reply,
                            batch: false,
                        });
                    }
                    Answers::SessionStream => self.attached_exchange(session),
                };
                self.dispatch_one(session, request, &exchange, inbound, slot)?;
                Ok(Submitted::Stream(exchange))
            }
            Body::Single(Message::Notification(n)) => {
                let method = notification_label(&n.method);
                let span =
                    inbound.span(method, None, Some(session.label()), None, n.params.as_ref());
                let trace = mcp_cluster_telemetry::traceparent_of(&span);
                // The 202 goes out once the notification is placed. For
                // `initialized`, once it is stored: the client's next
                // request may reach another node, which must not find the
                // session uninitialized (it would refuse to ask the client
                // anything). For a cancellation of a request running on
                // another node, once it is published to that node: a node
                // that died right after its 202 would leave the request
                // running. A failure is the client's 503: it sends the
                // notification again rather than go on believing it in.
                let placed = session
                    .notify(n, trace)
                    .map_err(|err| Refusal::runtime(err, None))?;
                placed_or_refused(placed).await?;
                Ok(Submitted::Accepted)
            }
            Body::Single(Message::Response(r)) => {
                // The node whose request asked links the client's trace.
                let trace = mcp_cluster_telemetry::traceparent_of_context(&inbound.trace);
                // As for a cancellation: the 202 says the answer reached
                // its question here or was published to the node whose
                // request asked, never that it is still on its way (the
                // request would wait for it to its timeout).
                let placed = session
                    .answer(r, trace)
                    .map_err(|err| Refusal::runtime(err, None))?;
                placed_or_refused(placed).await?;
                Ok(Submitted::Accepted)
            }
            Body::Batch(items) => self.submit_batch(session, items, answers, inbound).await,
        }
    }

    /// Counts the body's requests and notifications against the request
    /// quota of its principal, or of its address without one; a refusal
    /// names the request of a single-request body, or every request of a
    /// batch (none of them runs).
    async fn admit_body(&self, body: &Body, inbound: &Inbound) -> Result<(), Refusal> {
        let principal = inbound.principal.as_deref();
        if principal.is_none() && inbound.client_ip.is_none() {
            return Ok(());
        }
        // A cancellation is never counted: it frees what the client holds,
        // and a client over its quota must still be able to stop its work.
        let initiated = |m: &Message| match m {
            Message::Request(_) => true,
            Message::Notification(n) => {
                n.method != methods::NOTIFICATION_CANCELLED
                    && n.method != methods::CANCEL_REQUEST_ALIAS
            }
            Message::Response(_) => false,
        };
        let count = match body {
            Body::Single(message) => usize::from(initiated(message)),
            Body::Batch(items) => items
                .iter()
                .filter(|item| item.as_ref().is_ok_and(initiated))
                .count(),
        };
        let Err(error) = self
            .node()
            .quotas
            .admit_requests(principal, inbound.client_ip, count)
            .await
        else {
            return Ok(());
        };
        Err(Refusal::of_body(error, body))
    }

    /// A 2025-11-25 session's task-augmented `tools/call` of a tool that
    /// runs as a task is admitted as a task first, as a request the
    /// transport refuses (nothing of it runs): on a node that runs its
    /// most tasks ([`RuntimeError::NodeFull`], 503), or over the client's
    /// share of the running tasks ([`RuntimeError::QuotaExceeded`], 429).
    /// Returns the client's slot, which the task holds while it runs;
    /// `None` for any other request (or without a principal or an
    /// address: stdio).
    async fn admit_session_task(
        &self,
        session: &SessionHandle,
        request: &Request,
        inbound: &Inbound,
    ) -> Result<Option<crate::node::quota::SlotLease>, RuntimeError> {
        // A call the session runs as a task, by the session's own rule
        // (one it refuses takes no slot: it never runs).
        let task = request.method == methods::TOOLS_CALL
            && session
                .protocol_version()
                .is_some_and(ProtocolVersion::has_session_tasks)
            && self.service().runs_tasks()
            && matches!(
                crate::session::tasks::augmentation(&**self.service(), request),
                Ok(Some(_))
            );
        if !task {
            return Ok(None);
        }
        if self.inner.stateless.running_tasks() >= self.config().max_running_tasks {
            return Err(RuntimeError::NodeFull(crate::node::error::NodeFull::Tasks));
        }
        self.node()
            .quotas
            .acquire_task(inbound.principal.as_deref(), inbound.client_ip)
            .await
    }

    fn dispatch_one(
        &self,
        session: &SessionHandle,
        request: Request,
        exchange: &Arc<Exchange>,
        inbound: &Inbound,
        task_slot: Option<crate::node::quota::SlotLease>,
    ) -> Result<(), Refusal> {
        let id = request.id.clone();
        let hold = self
            .hold_params(inbound, inbound.body_bytes)
            .map_err(|err| Refusal::runtime(err, Some(id.clone())))?;
        exchange.track(
            Call::new(
                self.service(),
                &request,
                Some(session.label()),
                version_label(session),
                inbound,
            )
            .holding(hold)
            .with_task_slot(task_slot),
        );
        session
            .dispatch(request, Arc::clone(exchange))
            .map_err(|err| Refusal::runtime(err, Some(id)))
    }

    /// Admits a session-era request's parameters (`bytes` of its body)
    /// into the node's in-flight bytes, charged to its owner, until its
    /// handler ends (`NodeContext::admit_bytes`: refused past the owner's
    /// share, the node's budget, or a full closed-stream budget).
    fn hold_params(&self, inbound: &Inbound, bytes: usize) -> Result<Hold, RuntimeError> {
        inbound.admit(self.node(), bytes, crate::node::Work::Stream)
    }

    async fn submit_batch(
        &self,
        session: &SessionHandle,
        items: Vec<Result<Message, DecodeError>>,
        answers: Answers,
        inbound: &Inbound,
    ) -> Result<Submitted, Refusal> {
        let version = session
            .protocol_version()
            .unwrap_or(ProtocolVersion::HTTP_DEFAULT);
        if !version.allows_batches() {
            return Err(Refusal::Invalid {
                message: format!(
                    "JSON-RPC batches are not supported in protocol version {version}"
                ),
                id: None,
            });
        }
        let mut messages = Vec::new();
        let mut ids = Vec::new();
        let mut errors = Vec::new();
        let mut calls = Vec::new();
        // The body's bytes, shared out among the requests that will run,
        // each admitted before any runs: a batch runs whole or not at all,
        // and one refusal refuses it (the holds taken so far go with it).
        let runs = |item: &Result<Message, DecodeError>| matches!(item, Ok(Message::Request(r)) if r.method != methods::INITIALIZE);
        let share = inbound
            .body_bytes
            .div_ceil(items.iter().filter(|item| runs(item)).count().max(1));
        let mut holds = Vec::new();
        for _ in items.iter().filter(|item| runs(item)) {
            match self.hold_params(inbound, share) {
                Ok(hold) => holds.push(hold),
                Err(error) => return Err(Refusal::of_batch(error, &items)),
            }
        }
        let mut holds = holds.into_iter();
        for item in items {
            match item {
                // 2025-03-26, lifecycle: initialize is never part of a batch.
                Ok(Message::Request(r)) if r.method == methods::INITIALIZE => {
                    errors.push(Response::error(
                        Some(r.id),
                        ErrorObject::new(
                            ErrorCode::INVALID_REQUEST,
                            "initialize must not be part of a batch",
                        ),
                    ));
                }
                Ok(Message::Request(r)) => {
                    ids.push(r.id.clone());
                    let call = Call::new(
                        self.service(),
                        &r,
                        Some(session.label()),
                        version.as_str(),
                        inbound,
                    );
                    calls.push(match holds.next() {
                        Some(hold) => call.holding(hold),
                        None => call,
                    });
                    messages.push(Message::Request(r));
                }
                Ok(message) => messages.push(message),
                Err(err) => errors.push(Response::error(err.id.clone(), err.to_error_object())),
            }
        }
        let answered = !ids.is_empty() || !errors.is_empty();
        let (exchange, reply, late_errors) = match answers {
            Answers::Reply => {
                let (exchange, reply) = self.batch_exchange(session, ids.clone(), errors);
                (exchange, Some(reply), Vec::new())
            }
            Answers::SessionStream => (self.attached_exchange(session), None, errors),
        };
        for call in calls {
            exchange.track(call);
        }
        // One mailbox message: the batch runs whole or not at all.
        let placed = match session.dispatch_batch(messages, Arc::clone(&exchange)) {
            Ok(placed) => placed,
            Err(error) => {
                return Err(Refusal::Runtime {
                    error,
                    id: None,
                    batch: ids,
                });
            }
        };
        // As for one notification or answer: the answer waits until the
        // batch's are placed, and a batch none of whose requests run is
        // refused when one could not be (sent again whole, its invalid
        // members get their errors then). A batch whose requests run is
        // answered whatever happened to the rest: they cannot be taken
        // back.
        if ids.is_empty() {
            placed_or_refused(placed).await?;
        } else if let Ok(Err(err)) = placed.await {
            tracing::warn!(error = %err, "A batch's notification or answer could not be passed on.");
        }
        // On a session's stream, the errors for the invalid members follow
        // only when the batch ran.
        write_later(&exchange, late_errors);
        Ok(match reply {
            Some(reply) if answered => Submitted::Reply { reply, batch: true },
            Some(_) => Submitted::Accepted,
            None => Submitted::Stream(exchange),
        })
    }

    /// Writes answers the pipeline or the transport computed on the
    /// session's stream (transports that answer on it: legacy HTTP+SSE,
    /// stdio). The exchange is dropped once they are written.
    pub fn reply_on_stream(
        &self,
        session: &SessionHandle,
        responses: Vec<Response>,
    ) -> Arc<Exchange> {
        let exchange = self.attached_exchange(session);
        write_later(&exchange, responses);
        exchange
    }
}

/// Waits until a client's notification or answer is placed; one that could
/// not be is refused (503), so that the client sends it again.
async fn placed_or_refused(placed: Placed) -> Result<(), Refusal> {
    match placed.await {
        Ok(Err(err)) => Err(Refusal::runtime(RuntimeError::Store(err), None)),
        // Dropped unanswered: nothing needed waiting for.
        Ok(Ok(())) | Err(_) => Ok(()),
    }
}

/// Writes `responses` to `exchange` in order, in the background.
fn write_later(exchange: &Arc<Exchange>, responses: Vec<Response>) {
    if responses.is_empty() {
        return;
    }
    let writing = Arc::clone(exchange);
    actix::spawn(async move {
        for response in responses {
            let _ = writing.finish(Some(response)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_word_the_same_on_every_transport() {
        let r = Refusal::runtime(RuntimeError::Overloaded, Some(RequestId::Number(1)));
        let e = r.to_error_object();
        assert_eq!(e.code, ErrorCode::INTERNAL_ERROR);
        assert_eq!(e.message, RuntimeError::Overloaded.client_message());
        assert_eq!(r.id(), Some(&RequestId::Number(1)));
        let batch = Refusal::Runtime {
            error: RuntimeError::Overloaded,
            id: None,
            batch: vec![RequestId::Number(1), RequestId::Number(2)],
        };
        let answers = batch.responses();
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[1].id, Some(RequestId::Number(2)));
    }
}
