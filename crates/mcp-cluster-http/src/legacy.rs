//! The HTTP+SSE transport of 2024-11-05: GET `/sse` opens a session and its
//! one SSE stream (first event `endpoint`), the client POSTs every message
//! to that endpoint, and every answer travels on the stream.

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use futures_util::StreamExt;
use mcp_cluster_protocol::jsonrpc::decode_body_with_limit;
use mcp_cluster_runtime::{Answers, Runtime, Transport};
use mcp_cluster_store::SessionId;
use serde::Deserialize;

use crate::HttpState;
use crate::error::HttpError;
use crate::headers;
use crate::sse::{self, Framing, StreamKind};
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
            let _ = runtime
                .end_disconnected(&session, Transport::LegacySse)
                .await;
        });
    }
}

/// GET `/sse`.
pub async fn connect(
    req: HttpRequest,
    state: web::Data<HttpState>,
) -> Result<HttpResponse, HttpError> {
    headers::check_host_and_origin(&req, &state.config)?;
    let principal = crate::auth::authorize(&req, &state).await?;
    headers::check_get_accept(req.headers())?;
    state.stream_room()?;
    let runtime = &state.runtime;
    let inbound = crate::streamable::inbound(&req, Transport::LegacySse, principal);
    let session = runtime.open_session(&inbound).await?;
    // From here the session ends with its stream, or without it (a stream
    // refused by its quota leaves no session behind).
    let guard = EndOnDrop {
        runtime: runtime.clone(),
        session: session.id().clone(),
    };
    let (_, follow) = runtime.follow_standalone_as(&session, &inbound).await?;
    let endpoint = format!("{MESSAGES_PATH}?sessionId={}", session.id());
    let framing = Framing {
        preamble: Some(sse::named("endpoint", &endpoint)),
        retry_ms: runtime.config().sse_retry_ms,
        legacy: true,
        kind: StreamKind::Legacy,
        ..Framing::default()
    };
    let body = sse::body(follow, framing).map(move |chunk| {
        let _keep = &guard;
        chunk
    });
    Ok(sse::watched_response(
        &req,
        &state,
        StreamKind::Legacy,
        body,
    ))
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
    let principal = crate::auth::authorize(&req, &state).await?;
    headers::check_content_type(req.headers())?;
    let id: SessionId = query
        .session_id
        .as_deref()
        .ok_or(HttpError::MissingSession)?
        .parse()
        .map_err(|_| HttpError::MalformedSession)?;
    let runtime = &state.runtime;
    // Answers travel on the SSE stream, errors for the body's members too.
    let mut inbound = crate::streamable::inbound(&req, Transport::LegacySse, principal);
    let mut counted = runtime.body_bytes(&inbound);
    let bytes = read_body(&req, payload, &state.config, &mut counted).await?;
    let body = decode_body_with_limit(&bytes, runtime.config().max_batch_items)
        .map_err(HttpError::Decode)?;
    drop(bytes);
    inbound.held_body(counted);
    if let mcp_cluster_protocol::jsonrpc::Body::Single(message) = &body {
        crate::observe::note_method(
            &req,
            message
                .method()
                .map_or("response", crate::observe::method_label),
        );
    }
    crate::auth::check_tool_scopes(&state, inbound.principal.as_deref(), &body)?;
    let session = runtime
        .session_as(&id, inbound.principal.as_deref())
        .await?;
    crate::address_quota::mark_counted(&req);
    runtime
        .submit(&session, body, Answers::SessionStream, &inbound)
        .await?;
    Ok(HttpResponse::Accepted().body(Bytes::from_static(b"Accepted")))
}
