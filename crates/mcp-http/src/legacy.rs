//! The HTTP+SSE transport of 2024-11-05: GET `/sse` opens a session and its
//! one SSE stream (first event `endpoint`), the client POSTs every message
//! to that endpoint, and every answer travels on the stream.

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use futures_util::StreamExt;
use mcp_protocol::jsonrpc::{Body, decode_body_with_limit};
use mcp_protocol::{Message, ProtocolVersion};
use mcp_runtime::{Runtime, SessionHandle};
use mcp_store::SessionId;
use serde::Deserialize;

use crate::HttpState;
use crate::error::HttpError;
use crate::headers;
use crate::sse::{self, Framing};
use crate::streamable::read_body;

/// Path of the SSE stream.
pub const SSE_PATH: &str = "/sse";
/// Path messages are POSTed to.
pub const MESSAGES_PATH: &str = "/messages";

/// Ends the legacy session when its SSE connection goes: in this transport
/// the session lives as long as its stream.
struct EndOnDrop {
    runtime: Runtime,
    session: SessionId,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        let runtime = self.runtime.clone();
        let session = self.session.clone();
        actix_web::rt::spawn(async move {
            let _ = runtime.terminate(&session).await;
        });
    }
}

/// GET `/sse`.
pub async fn connect(
    req: HttpRequest,
    state: web::Data<HttpState>,
) -> Result<HttpResponse, HttpError> {
    headers::check_host_and_origin(&req, &state.config)?;
    headers::check_get_accept(req.headers())?;
    let runtime = &state.runtime;
    let session = runtime.create_session(None).await?;
    let (_, follow) = runtime.follow_standalone(&session).await?;
    let endpoint = format!("{MESSAGES_PATH}?sessionId={}", session.id());
    let framing = Framing {
        preamble: Some(sse::named("endpoint", &endpoint)),
        retry_ms: runtime.config().sse_retry_ms,
        legacy: true,
        ..Framing::default()
    };
    let guard = EndOnDrop {
        runtime: runtime.clone(),
        session: session.id().clone(),
    };
    let body = sse::body(follow, framing).map(move |chunk| {
        let _keep = &guard;
        chunk
    });
    Ok(sse::response(body))
}

/// Query of the message endpoint.
#[derive(Debug, Deserialize)]
pub struct MessageQuery {
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
}

/// POST `/messages?sessionId=…`: 202; answers go on the SSE stream.
pub async fn message(
    req: HttpRequest,
    query: web::Query<MessageQuery>,
    payload: web::Payload,
    state: web::Data<HttpState>,
) -> Result<HttpResponse, HttpError> {
    headers::check_host_and_origin(&req, &state.config)?;
    headers::check_content_type(req.headers())?;
    let id: SessionId = query
        .session_id
        .as_deref()
        .ok_or(HttpError::MissingSession)?
        .parse()
        .map_err(|_| HttpError::MalformedSession)?;
    let bytes = read_body(&req, payload, &state.config).await?;
    let runtime = &state.runtime;
    let body = decode_body_with_limit(&bytes, runtime.config().max_batch_items)
        .map_err(HttpError::Decode)?;
    let session = runtime.session(&id).await?;
    match body {
        Body::Single(message) => route(runtime, &session, Ok(message))?,
        // Batches exist in 2025-03-26 only, whatever the transport.
        Body::Batch(items)
            if session
                .protocol_version()
                .is_some_and(ProtocolVersion::allows_batches) =>
        {
            let (messages, invalid): (Vec<_>, Vec<_>) = items.into_iter().partition(Result::is_ok);
            let messages = messages.into_iter().filter_map(Result::ok).collect();
            // One mailbox message: the batch runs whole or not at all; the
            // errors for its invalid members follow only when it ran.
            session.dispatch_batch(messages, runtime.attached_exchange(&session))?;
            for err in invalid.into_iter().filter_map(Result::err) {
                route(runtime, &session, Err(err))?;
            }
        }
        Body::Batch(_) => {
            return Err(HttpError::InvalidRequest {
                message: "JSON-RPC batches are not supported in this session's protocol version"
                    .into(),
                id: None,
            });
        }
    }
    Ok(HttpResponse::Accepted().body(Bytes::from_static(b"Accepted")))
}

fn route(
    runtime: &Runtime,
    session: &SessionHandle,
    message: Result<Message, mcp_protocol::DecodeError>,
) -> Result<(), HttpError> {
    match message {
        Ok(Message::Request(r)) => session.dispatch(r, runtime.attached_exchange(session))?,
        Ok(Message::Notification(n)) => session.notify(n)?,
        Ok(Message::Response(r)) => session.answer(r)?,
        Err(err) => {
            // The error travels on the stream like any answer.
            let exchange = runtime.attached_exchange(session);
            let response = mcp_protocol::Response::error(err.id.clone(), err.to_error_object());
            actix_web::rt::spawn(async move {
                let _ = exchange.finish(Some(response)).await;
            });
        }
    }
    Ok(())
}
