//! The stdio transport: newline-delimited JSON-RPC on standard input and
//! output, one session, the same server code and runtime as HTTP. Logs go to
//! stderr; stdout carries only protocol messages.

use std::sync::{Arc, Weak};
use std::time::Duration;

use mcp_cluster_protocol::jsonrpc::decode_body_with_limit;
use mcp_cluster_protocol::{ErrorCode, ErrorObject, Response};
use mcp_cluster_runtime::{Answers, Exchange, FollowItem, Inbound, Runtime, Submitted, Transport};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

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
    let store = crate::node::open_store(&config).await?;
    let runtime = Runtime::new(server.service(), store, config.runtime.clone());
    server.forward_events(&runtime);
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
    let writer = actix_web::rt::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(item) = follow.next().await {
            match item {
                FollowItem::Event(_, data) | FollowItem::Notice(data) => {
                    stdout.write_all(data.as_bytes()).await?;
                    stdout.write_all(b"\n").await?;
                    stdout.flush().await?;
                }
                FollowItem::KeepAlive => {}
                FollowItem::End(_) => break,
            }
        }
        Ok::<_, std::io::Error>(())
    });

    let mut inbound = Inbound::new(Transport::Stdio);
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
    let _ = tokio::time::timeout(grace, unanswered.settled()).await;
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
