//! The stdio transport: newline-delimited JSON-RPC on standard input and
//! output, one session, the same server code and runtime as HTTP. Logs go to
//! stderr; stdout carries only protocol messages.

use std::sync::Arc;

use mcp_protocol::jsonrpc::{Body, decode_body};
use mcp_protocol::{ErrorObject, Message, Response};
use mcp_runtime::{FollowItem, Runtime, RuntimeError};
use mcp_store::{Position, Store};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::{McpServer, NodeConfig};

/// Longest accepted input line, in bytes (the HTTP body limit).
fn max_line(config: &NodeConfig) -> usize {
    config.http.max_body_bytes
}

/// Serves one session over stdin/stdout until stdin closes. Must run inside
/// an actix system.
///
/// # Errors
/// Reading stdin or writing stdout failed, or the session could not start.
pub async fn run(server: McpServer, config: NodeConfig) -> std::io::Result<()> {
    let store = Store::memory(config.retention.to_retention());
    let runtime = Runtime::new(Arc::new(server), store, config.runtime.clone());
    let session = runtime
        .create_session(None)
        .await
        .map_err(std::io::Error::other)?;
    let mut follow = runtime
        .follow(&session, session.standalone_stream(), Position::START)
        .await
        .map_err(std::io::Error::other)?;
    let writer = actix_web::rt::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(item) = follow.next().await {
            match item {
                FollowItem::Event(_, data) => {
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

    let limit = max_line(&config);
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
            reply_error(
                &runtime,
                &session,
                None,
                ErrorObject::new(
                    mcp_protocol::ErrorCode::INVALID_REQUEST,
                    "message too large",
                ),
            );
            let mut rest = Vec::new();
            stdin.read_until(b'\n', &mut rest).await?;
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let messages = match decode_body(&line) {
            Ok(Body::Single(m)) => vec![Ok(m)],
            Ok(Body::Batch(items)) => items,
            Err(err) => vec![Err(err)],
        };
        for message in messages {
            let outcome = match message {
                Ok(Message::Request(r)) => {
                    let id = r.id.clone();
                    session
                        .dispatch(r, runtime.attached_exchange(&session))
                        .map_err(|e| (Some(id), e))
                }
                Ok(Message::Notification(n)) => session.notify(n).map_err(|e| (None, e)),
                Ok(Message::Response(r)) => session.answer(r).map_err(|e| (None, e)),
                Err(err) => {
                    reply_error(&runtime, &session, err.id.clone(), err.to_error_object());
                    Ok(())
                }
            };
            if let Err((id, err)) = outcome {
                let message = match err {
                    RuntimeError::Overloaded => "server overloaded",
                    _ => "session unavailable",
                };
                reply_error(&runtime, &session, id, ErrorObject::internal(message));
            }
        }
    }
    // stdin closed: the client is done (stdio shutdown).
    let _ = runtime.terminate(session.id()).await;
    let _ = writer.await;
    Ok(())
}

fn reply_error(
    runtime: &Runtime,
    session: &mcp_runtime::SessionHandle,
    id: Option<mcp_protocol::RequestId>,
    error: ErrorObject,
) {
    let exchange = runtime.attached_exchange(session);
    actix_web::rt::spawn(async move {
        let _ = exchange.finish(Some(Response::error(id, error))).await;
    });
}
