//! The stdio transport: newline-delimited JSON-RPC on standard input and
//! output, the same server code and runtime as HTTP. Logs go to stderr;
//! stdout carries only protocol messages.
//!
//! Both eras share the pipe, as they share `/mcp`: a request whose `_meta`
//! names the 2026-07-28 revision is served statelessly (its progress and
//! result lines written as they come, `notifications/cancelled` naming it
//! cancels it); everything else belongs to the one session the process
//! serves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mcp_cluster_protocol::jsonrpc::{Body, decode_body_with_limit};
use mcp_cluster_protocol::types::CancelledParams;
use mcp_cluster_protocol::{
    ErrorCode, ErrorObject, Message, Notification, Request, RequestId, Response, methods,
};
use mcp_cluster_runtime::{
    Answers, Exchange, ExchangeReply, FollowItem, Inbound, RequestMeta, Runtime, StatelessReply,
    Submitted, Transport,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::{NodeConfig, Served};

/// How often, after stdin closed, the transport checks whether the requests
/// already read have been answered.
const SETTLE_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Exchanges of the requests read so far; the runtime drops an exchange once
/// its request has been answered (or cancelled).
#[derive(Debug, Default)]
struct Unanswered(Vec<Weak<Exchange>>);

impl Unanswered {
    fn track(&mut self, exchange: &Arc<Exchange>) {
        self.0.retain(|e| e.strong_count() > 0);
        self.0.push(Arc::downgrade(exchange));
    }

    /// Resolves when every tracked request has been answered. Cancel safe.
    async fn settled(&self) {
        while self.0.iter().any(|e| e.strong_count() > 0) {
            tokio::time::sleep(SETTLE_POLL_INTERVAL).await;
        }
    }
}

/// Lines of 2026-07-28 answers waiting for stdout; a client that does not
/// read holds up the handlers writing them, not the node's memory.
const STATELESS_OUTPUT_LINES: usize = 64;

/// The 2026-07-28 requests in flight on the pipe: each runs in a task of its
/// own, and a `notifications/cancelled` naming it drops its runtime guard
/// (what closing its response does on HTTP).
struct Stateless {
    runtime: Runtime,
    inbound: Inbound,
    lines: mpsc::Sender<Arc<str>>,
    cancels: Arc<Mutex<HashMap<RequestId, oneshot::Sender<()>>>>,
    /// Requests: answered before the process ends, for up to the grace.
    running: JoinSet<()>,
    /// Listen streams: they end with the process.
    listens: JoinSet<()>,
}

impl Stateless {
    /// Whether a message read from stdin belongs to the 2026-07-28 era: it
    /// says so in its `_meta`, or it cancels one of this era's requests.
    fn claims(&self, body: &Body) -> bool {
        match body {
            Body::Single(Message::Request(r)) => {
                RequestMeta::present(r.stateless_meta().as_deref())
            }
            Body::Single(Message::Notification(n)) => {
                RequestMeta::present(n.stateless_meta().as_deref())
                    || cancelled_id(n)
                        .is_some_and(|id| self.cancels.lock().is_ok_and(|c| c.contains_key(&id)))
            }
            Body::Single(Message::Response(_)) | Body::Batch(_) => false,
        }
    }

    async fn send(&self, response: Response) {
        let line: Arc<str> = Message::Response(response).to_json().into();
        let _ = self.lines.send(line).await;
    }

    async fn handle(&mut self, body: Body) {
        match body {
            Body::Single(Message::Request(request)) => self.request(request).await,
            Body::Single(Message::Notification(n)) => self.notification(&n),
            Body::Single(Message::Response(_)) | Body::Batch(_) => {}
        }
    }

    /// `notifications/cancelled` stops the request it names; other
    /// notifications need nothing.
    fn notification(&self, n: &Notification) {
        let Some(id) = cancelled_id(n) else {
            return;
        };
        let cancel = self.cancels.lock().ok().and_then(|mut c| c.remove(&id));
        if let Some(cancel) = cancel {
            let _ = cancel.send(());
        }
    }

    async fn request(&mut self, request: Request) {
        let id = request.id.clone();
        let listen = request.method == methods::SUBSCRIPTIONS_LISTEN;
        let meta = match RequestMeta::read(request.stateless_meta().as_deref())
            .and_then(|meta| meta.version().map(|_| meta))
        {
            Ok(meta) => meta,
            Err(error) => return self.send(Response::error(Some(id), error)).await,
        };
        if let Err(error) = self
            .runtime
            .service()
            .prepare_stateless(&Default::default())
            .await
        {
            return self.send(Response::error(Some(id), error)).await;
        }
        let (reply, guard) = match self.runtime.stateless(request, meta, &self.inbound).await {
            StatelessReply::Now(response) => return self.send(response).await,
            StatelessReply::Refused(err, id) => {
                return self
                    .send(Response::error(Some(id), err.to_error_object()))
                    .await;
            }
            StatelessReply::Running { reply, guard } => (reply, guard),
        };
        let (cancel, cancelled) = oneshot::channel();
        if let Ok(mut cancels) = self.cancels.lock() {
            cancels.insert(id.clone(), cancel);
        }
        let lines = self.lines.clone();
        let cancels = Arc::clone(&self.cancels);
        // A set keeps each ended run until it is joined.
        let set = if listen {
            &mut self.listens
        } else {
            &mut self.running
        };
        while set.try_join_next().is_some() {}
        set.spawn(async move {
            tokio::select! {
                () = forward(reply, &lines, &id) => {}
                _ = cancelled => {}
            }
            // Dropping the guard here cancels a request still running.
            drop(guard);
            if let Ok(mut cancels) = cancels.lock() {
                cancels.remove(&id);
            }
        });
    }
}

/// The request a `notifications/cancelled` names.
fn cancelled_id(n: &Notification) -> Option<RequestId> {
    if n.method != methods::NOTIFICATION_CANCELLED {
        return None;
    }
    let params = serde_json::from_value::<CancelledParams>(n.params.clone()?.into()).ok()?;
    serde_json::from_value(params.request_id).ok()
}

/// Writes a stateless request's answer (its live messages, then its
/// result) to the output lines.
async fn forward(
    reply: oneshot::Receiver<ExchangeReply>,
    lines: &mpsc::Sender<Arc<str>>,
    id: &RequestId,
) {
    match reply.await {
        Ok(ExchangeReply::Json(responses)) => {
            for response in responses {
                let _ = lines
                    .send(Message::Response(response).to_json().into())
                    .await;
            }
        }
        Ok(ExchangeReply::Live(mut messages)) => {
            while let Some(message) = messages.recv().await {
                if lines.send(message).await.is_err() {
                    return;
                }
            }
        }
        Ok(ExchangeReply::Empty) => {}
        Ok(ExchangeReply::Stream(..) | ExchangeReply::Failed(_)) | Err(_) => {
            let error = ErrorObject::internal("the request stopped before its answer, retry");
            let line = Message::Response(Response::error(Some(id.clone()), error)).to_json();
            let _ = lines.send(line.into()).await;
        }
    }
}

/// Longest accepted input line, in bytes (the HTTP body limit).
fn max_line(config: &NodeConfig) -> usize {
    config.http.max_body_bytes
}

/// Serves one session over stdin/stdout until stdin closes. Must run inside
/// an actix system.
///
/// # Errors
/// Reading stdin or writing stdout failed, or the session could not start.
pub async fn run(server: impl Into<Served>, config: NodeConfig) -> std::io::Result<()> {
    let server = server.into();
    if config.audit.as_ref().is_some_and(|a| a.to_stdout()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "audit.output = \"stdout\" would mix audit records into the protocol on stdout; give a file",
        ));
    }
    let store = crate::node::open_store(&config).await?;
    let runtime = Runtime::new(server.service(), store, config.runtime.clone());
    server.forward_events(&runtime);
    crate::node::start_audit(&config, &runtime)?;
    let session = runtime
        .open_session(&Inbound::new(Transport::Stdio))
        .await
        .map_err(std::io::Error::other)?;
    runtime
        .open_standalone(&session)
        .await
        .map_err(std::io::Error::other)?;
    let mut follow = runtime
        .follow_new(&session, session.standalone_stream(), Vec::new())
        .await
        .map_err(std::io::Error::other)?;
    let (lines, mut stateless_lines) = mpsc::channel::<Arc<str>>(STATELESS_OUTPUT_LINES);
    let writer = actix_web::rt::spawn(async move {
        let mut stdout = tokio::io::stdout();
        let mut stateless_open = true;
        loop {
            let line = tokio::select! {
                item = follow.next() => match item {
                    Some(FollowItem::Event(_, data) | FollowItem::Notice(data)) => data,
                    Some(FollowItem::KeepAlive) => continue,
                    Some(FollowItem::End(_)) | None => break,
                },
                line = stateless_lines.recv(), if stateless_open => match line {
                    Some(line) => line,
                    None => {
                        stateless_open = false;
                        continue;
                    }
                },
            };
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await?;
        }
        // The session's stream ended last (see below): what the stateless
        // requests still write goes out before the process ends.
        while let Some(line) = stateless_lines.recv().await {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });

    let mut inbound = Inbound::new(Transport::Stdio);
    let mut stateless = Stateless {
        runtime: runtime.clone(),
        inbound: inbound.clone(),
        lines,
        cancels: Arc::default(),
        running: JoinSet::new(),
        listens: JoinSet::new(),
    };
    let limit = max_line(&config);
    let mut unanswered = Unanswered::default();
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = AsyncReadExt::take(&mut stdin, limit as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            break;
        }
        if line.len() > limit {
            // Skip the rest of the oversized line.
            let error = ErrorObject::new(ErrorCode::INVALID_REQUEST, "message too large");
            unanswered
                .track(&runtime.reply_on_stream(&session, vec![Response::error(None, error)]));
            let mut rest = Vec::new();
            stdin.read_until(b'\n', &mut rest).await?;
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        inbound.body_bytes = line.len();
        match decode_body_with_limit(&line, runtime.config().max_batch_items) {
            Ok(body) if stateless.claims(&body) => stateless.handle(body).await,
            Ok(body) => match runtime
                .submit(&session, body, Answers::SessionStream, &inbound)
                .await
            {
                Ok(Submitted::Stream(exchange)) => unanswered.track(&exchange),
                Ok(Submitted::Accepted | Submitted::Reply { .. }) => {}
                Err(refusal) => {
                    unanswered.track(&runtime.reply_on_stream(&session, refusal.responses()));
                }
            },
            Err(err) => unanswered.track(&runtime.reply_on_stream(
                &session,
                vec![Response::error(err.id.clone(), err.to_error_object())],
            )),
        }
    }
    // stdin closed: the client is done (stdio shutdown). A piped client
    // writes everything, then closes: the requests already read still get
    // their answers, for up to the drain grace period. Closing the stream
    // then lets the writer flush all that was written before it ends; the
    // session (and whatever still runs) ends after that.
    let grace = Duration::from_secs(config.drain_grace_secs);
    let _ = tokio::time::timeout(grace, async {
        unanswered.settled().await;
        while stateless.running.join_next().await.is_some() {}
    })
    .await;
    // What still runs stops (listen streams, and requests past the grace);
    // their lines close with them.
    stateless.running.abort_all();
    stateless.listens.abort_all();
    drop(stateless);
    let events = &runtime.store().events;
    if events
        .close_stream(
            session.id(),
            session.standalone_stream(),
            mcp_cluster_store::UNKNOWN_OWNER,
        )
        .await
        .is_err()
    {
        let _ = runtime
            .end_disconnected(session.id(), Transport::Stdio)
            .await;
    }
    let _ = writer.await;
    let _ = runtime
        .end_disconnected(session.id(), Transport::Stdio)
        .await;
    runtime.service().shutdown().await;
    Ok(())
}
