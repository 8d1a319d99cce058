//! The one request path of both eras: everything a request is, whichever
//! era it belongs to.
//!
//! - `executor`: the runtime every handler runs on, never the HTTP
//!   workers.
//! - `run_job` (here): runs a handler there under the request timeout,
//!   turning a panic or timeout into -32603 and stopping it on
//!   cancellation; the session era's request actor and the stateless
//!   era's request task both await it.
//! - `InFlightRequest` (here): the request actor of the session era, which
//!   owns its request's cancellation and answer.
//! - [`context`]: the [`RequestContext`] handed to
//!   handlers; [`exchange`]: where a request writes (JSON, SSE, direct);
//!   [`call`]: the transport a request came on, its span and its measuring;
//!   `method_table`: every request method, who answers it in each era;
//!   [`service`]: what a provider implements.
//!
//! The in-flight request actor: runs one handler future under the request
//! timeout, turns a panic or timeout into -32603 for this request only, and
//! stops the handler on cancellation.
//!
//! Owner: the session actor that started it keeps its address in the
//! in-flight table and hears `RequestFinished` when it stops. Stop paths:
//! the handler completes (response written), `Cancel` (no response), or the
//! session stops (token tripped).

pub mod call;
pub mod context;
pub mod exchange;
pub(crate) mod executor;
pub mod link;
pub(crate) mod method_table;
pub mod service;
pub(crate) mod tasks;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use mcp_cluster_protocol::{ErrorObject, Request, RequestId, Response};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::node::InFlightTicket;
use crate::request::context::{RegisterAsk, RequestContext, RequestOutput};
use crate::request::exchange::Exchange;
use crate::request::executor::Executor;
use crate::request::service::McpService;

/// The handler's future.
pub(crate) type Job = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

/// The service's handler of `request`, in either era, run in the request's
/// span (made where the request was admitted, [`Exchange::span_of`]).
pub(crate) fn handler_job(
    service: &Arc<dyn McpService>,
    request: Request,
    context: RequestContext,
    exchange: &Exchange,
) -> Job {
    let span = exchange.span_of(&request.id);
    // The parameters' bytes stay counted while the handler holds them.
    let hold = exchange.take_hold(&request.id);
    run_handler(service, request, context, span, hold)
}

/// As [`handler_job`], with the request's span and the hold of its
/// parameters' bytes taken from its exchange already.
pub(crate) fn run_handler(
    service: &Arc<dyn McpService>,
    request: Request,
    context: RequestContext,
    span: mcp_cluster_telemetry::TracedSpan,
    hold: Option<mcp_cluster_store::Hold>,
) -> Job {
    let service = Arc::clone(service);
    // The audit trail's record ([audit]): written when the handler ends,
    // or as cancelled when this future is dropped before (a cancellation,
    // the timeout).
    let audit = mcp_cluster_telemetry::audit::Audit::start(|| {
        mcp_cluster_telemetry::audit::AuditedRequest {
            method: &request.method,
            params: request.params.as_ref(),
            id: serde_json::to_value(&request.id).unwrap_or_default(),
            principal: context.principal().map(mcp_cluster_store::Principal::key),
            session: context.session_id().map(ToString::to_string),
            upstream: service.upstream_of(&request),
        }
    });
    span.instrument(async move {
        let _hold = hold;
        let outcome = service.handle(request, context).await;
        if let Some(audit) = audit {
            audit.finish(outcome.as_ref().map_err(|err| err.code.0));
        }
        outcome
    })
}

/// An in-flight request actor stopped: told to whoever started it (the
/// session actor), which frees the request's slot.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct RequestFinished {
    pub(crate) id: RequestId,
    pub(crate) serial: u64,
}

/// Stop the handler: `notifications/cancelled` arrived.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Cancel;

/// A session actor's recipients that its in-flight requests hold, one
/// `Arc` of them per session (made by the session).
#[derive(Debug)]
pub(crate) struct SessionRecipients {
    /// Where a request registers a question to the client. A request
    /// clones it when it asks (a sender of its own keeps the mailbox's
    /// per-sender room), never just to hold it.
    pub(crate) asks: Recipient<RegisterAsk>,
    /// Where a request says it finished: `do_send` only, which never
    /// waits for room, so all requests share the one sender.
    pub(crate) finished: Recipient<RequestFinished>,
}

/// One in-flight request.
pub(crate) struct InFlightRequest {
    id: RequestId,
    /// Distinguishes this request from a later one reusing its id.
    serial: u64,
    /// Tripped on cancel and on stop; the handler's context holds it.
    cancel: CancellationToken,
    output: Arc<RequestOutput>,
    /// Its session's recipients: `finished` is told when this actor
    /// stops, to free the in-flight slot.
    session: Arc<SessionRecipients>,
    /// Taken in `started`.
    job: Option<Job>,
    timeout: Duration,
    /// Where the handler runs.
    executor: Arc<Executor>,
    task: Option<SpawnHandle>,
    /// Set by [`Cancel`] before the token trips: the client cancelled, so
    /// no response is sent. A token tripped without it (node shutdown)
    /// answers with an error instead.
    client_cancelled: Arc<AtomicBool>,
    /// Set once the handler's outcome is being written: a cancellation
    /// arriving then is too late, and must not cut the write short (the
    /// stream would be left unclosed).
    answering: Arc<AtomicBool>,
    /// Counts this request on the node until the actor is dropped.
    _ticket: InFlightTicket,
}

impl std::fmt::Debug for InFlightRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightRequest")
            .field("id", &self.id)
            .field("serial", &self.serial)
            .finish()
    }
}

impl InFlightRequest {
    // Each argument is a distinct part the actor owns; a builder would only
    // move them around.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: RequestId,
        serial: u64,
        cancel: CancellationToken,
        output: Arc<RequestOutput>,
        session: Arc<SessionRecipients>,
        job: Job,
        timeout: Duration,
        executor: Arc<Executor>,
        ticket: InFlightTicket,
    ) -> Self {
        Self {
            id,
            serial,
            cancel,
            output,
            session,
            job: Some(job),
            timeout,
            executor,
            task: None,
            client_cancelled: Arc::new(AtomicBool::new(false)),
            answering: Arc::new(AtomicBool::new(false)),
            _ticket: ticket,
        }
    }
}

/// Runs a handler's future on the executor and waits for it here, under the
/// request timeout, turning a panic or a timeout into -32603 for this
/// request only. `None`: the client cancelled it (`client_cancelled` set
/// before `cancel` tripped), and no response is due; a token tripped
/// without it (node shutdown) answers with an error. The timeout and the
/// cancellation act from here, so they hold even for a handler that blocks
/// its executor thread: its answer goes out on time, and the handler is
/// stopped at its next await.
pub(crate) async fn run_job(
    executor: &Executor,
    job: Job,
    timeout: Duration,
    cancel: &CancellationToken,
    client_cancelled: &AtomicBool,
    id: &RequestId,
) -> Option<Result<Value, ErrorObject>> {
    let running = executor.spawn(job);
    Some(tokio::select! {
        // A stopped request answers as stopped even if its handler,
        // seeing the same token, returned at the same moment.
        biased;
        () = cancel.cancelled() => {
            if client_cancelled.load(Ordering::Acquire) {
                return None;
            }
            tracing::info!(jsonrpc_id = %call::log_id(id), "Request stopped by the server.");
            Err(ErrorObject::internal("request stopped: the server is shutting down"))
        }
        finished = tokio::time::timeout(timeout, running) => match finished {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(err)) if err.is_panic() => {
                tracing::error!(jsonrpc_id = %call::log_id(id), "Handler panicked.");
                Err(ErrorObject::internal("internal error: the handler failed"))
            }
            Ok(Err(_)) => {
                tracing::info!(jsonrpc_id = %call::log_id(id), "Handler stopped with the executor.");
                Err(ErrorObject::internal("request stopped: the server is shutting down"))
            }
            Err(_) => {
                tracing::warn!(jsonrpc_id = %call::log_id(id), "Handler timed out.");
                Err(ErrorObject::internal("request timed out"))
            }
        },
    })
}

impl Actor for InFlightRequest {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let Some(job) = self.job.take() else {
            ctx.stop();
            return;
        };
        let id = self.id.clone();
        let output = Arc::clone(&self.output);
        let timeout = self.timeout;
        let cancel = self.cancel.clone();
        let client_cancelled = Arc::clone(&self.client_cancelled);
        let executor = Arc::clone(&self.executor);
        let answering = Arc::clone(&self.answering);
        let run = async move {
            let Some(outcome) =
                run_job(&executor, job, timeout, &cancel, &client_cancelled, &id).await
            else {
                return;
            };
            // From here on `Cancel` leaves this future alone.
            answering.store(true, Ordering::Release);
            output.finish(Some(Response::new(Some(id), outcome))).await;
        };
        self.task = Some(ctx.spawn(run.into_actor(self).map(|(), _, ctx| ctx.stop())));
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.cancel.cancel();
        self.session.finished.do_send(RequestFinished {
            id: self.id.clone(),
            serial: self.serial,
        });
    }
}

impl Handler<Cancel> for InFlightRequest {
    type Result = ();

    fn handle(&mut self, _msg: Cancel, ctx: &mut Self::Context) {
        if self.answering.load(Ordering::Acquire) {
            // Answered already (the cancellation and the answer crossed):
            // the write finishes, then the actor stops.
            return;
        }
        self.client_cancelled.store(true, Ordering::Release);
        if let Some(task) = self.task.take() {
            // Dropping the handler future frees what it held.
            ctx.cancel_future(task);
        }
        self.cancel.cancel();
        let output = Arc::clone(&self.output);
        // No response for a cancelled request; the exchange may close.
        actix::spawn(async move { output.finish(None).await });
        ctx.stop();
    }
}
