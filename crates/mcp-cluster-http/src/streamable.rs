//! The Streamable HTTP endpoint: POST (messages), GET (standalone stream or
//! resumption), DELETE (end the session).

use actix_web::http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderName};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use mcp_cluster_protocol::jsonrpc::{Body, decode_body_with_limit};
use mcp_cluster_protocol::{Message, ProtocolVersion, Request, methods};
use mcp_cluster_runtime::{
    Answers, BodyBytes, ExchangeReply, Inbound, RuntimeError, SessionHandle, Submitted, Transport,
};
use mcp_cluster_store::{EventId, Position};

use crate::auth;
use crate::error::HttpError;
use crate::headers::{self, LAST_EVENT_ID, SESSION_ID};
use crate::observe;
use crate::sse::{self, Framing, StreamKind};
use crate::{HttpConfig, HttpState};

/// `Allow` for the endpoint.
const ALLOW: &str = "GET, POST, DELETE";

/// Reads the body within the body timeout (408 after it), refusing more
/// than the body limit (413) before buffering it.
pub(crate) async fn read_body(
    req: &HttpRequest,
    payload: web::Payload,
    config: &HttpConfig,
    counted: &mut BodyBytes,
) -> Result<Bytes, HttpError> {
    let timeout = config.request_body_timeout();
    tokio::time::timeout(
        timeout,
        read_limited(req, payload, config.max_body_bytes, counted),
    )
    .await
    .map_err(|_| HttpError::BodyTimeout(timeout.as_secs()))?
}

/// Reads the body within `limit`, counting it in the node's in-flight
/// bytes as it comes: its declared length before any of it is read, or
/// each chunk of a body without one. A client whose running requests hold
/// its share is refused before its body is read.
async fn read_limited(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
    counted: &mut BodyBytes,
) -> Result<Bytes, HttpError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(HttpError::PayloadTooLarge(limit));
    }
    if let Some(declared) = declared
        // unwrap_or: within `limit`, a usize.
        && let Err(refused) = counted.add(usize::try_from(declared).unwrap_or(limit))
    {
        return Err(discard(payload, limit, refused.into()).await);
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| HttpError::BodyRead)?;
        if body.len() + chunk.len() > limit {
            return Err(HttpError::PayloadTooLarge(limit));
        }
        if declared.is_none()
            && let Err(refused) = counted.add(chunk.len())
        {
            drop(body);
            return Err(discard(payload, limit, refused.into()).await);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Reads the rest of a refused body without keeping it (within `limit`,
/// under the body timeout of the caller), then gives `refusal` back: the
/// client has sent its whole request when it reads the answer, so it sees
/// the refusal (429 or 503 with `Retry-After`) rather than a connection
/// reset mid-upload, and the connection stays usable.
async fn discard(mut payload: web::Payload, limit: usize, refusal: HttpError) -> HttpError {
    let mut read = 0;
    while let Some(chunk) = payload.next().await {
        let Ok(chunk) = chunk else {
            return HttpError::BodyRead;
        };
        read += chunk.len();
        if read > limit {
            return HttpError::PayloadTooLarge(limit);
        }
    }
    refusal
}

/// POST: one JSON-RPC message (or a 2025-03-26 batch).
pub async fn post(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<HttpState>,
) -> Result<HttpResponse, HttpError> {
    headers::check_host_and_origin(&req, &state.config)?;
    let principal = auth::authorize(&req, &state).await?;
    headers::check_content_type(req.headers())?;
    headers::check_post_accept(req.headers())?;
    let mut inbound = inbound(&req, Transport::StreamableHttp, principal);
    let mut counted = state.runtime.body_bytes(&inbound);
    let bytes = read_body(&req, payload, &state.config, &mut counted).await?;
    let body = decode_body_with_limit(&bytes, state.runtime.config().max_batch_items)
        .map_err(HttpError::Decode)?;
    // The decoded body is what the requests hold from here on.
    drop(bytes);
    inbound.held_body(counted);
    // Every error answering a single request carries its id.
    let id = match &body {
        Body::Single(Message::Request(request)) => Some(request.id.clone()),
        _ => None,
    };
    let stateless = crate::stateless::is_stateless(&req, &body);
    if !stateless {
        headers::protocol_version(req.headers()).map_err(|err| err.for_request(id.clone()))?;
    }
    observe::note_method(
        &req,
        match &body {
            Body::Single(Message::Request(r)) => observe::method_label(&r.method),
            Body::Single(Message::Notification(n)) => observe::method_label(&n.method),
            Body::Single(Message::Response(_)) => "response",
            Body::Batch(_) => "batch",
        },
    );
    auth::check_tool_scopes(&state, inbound.principal.as_deref(), &body)?;
    let answered = if stateless {
        crate::stateless::post(&req, body, &state, inbound).await
    } else {
        post_body(&req, body, &state, inbound).await
    };
    answered.map_err(|err| err.for_request(id))
}

/// Routes a decoded POST body through the runtime's pipeline.
async fn post_body(
    req: &HttpRequest,
    body: Body,
    state: &HttpState,
    inbound: Inbound,
) -> Result<HttpResponse, HttpError> {
    if let Body::Single(Message::Request(request)) = &body
        && request.method == methods::INITIALIZE
    {
        let Body::Single(Message::Request(request)) = body else {
            unreachable!("matched above")
        };
        return initialize(req, request, state, &inbound).await;
    }
    let session = session(req, state, inbound.principal.as_deref()).await?;
    let runtime = &state.runtime;
    if let Body::Single(message) = &body {
        headers::check_standard_headers(req.headers(), message, runtime.service().as_ref())?;
    }
    crate::address_quota::mark_counted(req);
    match runtime
        .submit(&session, body, Answers::Reply, &inbound)
        .await?
    {
        Submitted::Reply { reply, batch } => answer(req, state, &session, reply, batch).await,
        Submitted::Accepted | Submitted::Stream(_) => {
            count_answer(AnswerKind::Accepted);
            Ok(HttpResponse::Accepted().finish())
        }
    }
}

/// `initialize`: creates the session, answers with its id.
async fn initialize(
    req: &HttpRequest,
    request: Request,
    state: &HttpState,
    inbound: &Inbound,
) -> Result<HttpResponse, HttpError> {
    if req.headers().contains_key(SESSION_ID) {
        // A session id names an initialized session; a new one starts
        // without (session management: initialization).
        return Err(HttpError::InvalidRequest {
            message: "initialize must be sent without Mcp-Session-Id".into(),
            id: Some(request.id),
        });
    }
    headers::check_standard_headers(
        req.headers(),
        &Message::Request(request.clone()),
        state.runtime.service().as_ref(),
    )?;
    crate::address_quota::mark_counted(req);
    let (session, reply, succeeded) = state.runtime.initialize(request, inbound).await?;
    let mut response = respond(req, state, &session, reply, false).await?;
    if succeeded {
        response.headers_mut().insert(
            SESSION_ID,
            // unwrap: session ids are visible ASCII by construction.
            #[allow(clippy::unwrap_used)]
            actix_web::http::header::HeaderValue::from_str(session.id().as_str()).unwrap(),
        );
    }
    Ok(response)
}

/// What the pipeline needs from the HTTP request beside its body.
pub(crate) fn inbound(
    req: &HttpRequest,
    transport: Transport,
    principal: Option<std::sync::Arc<mcp_cluster_store::Principal>>,
) -> Inbound {
    Inbound {
        transport,
        trace: mcp_cluster_telemetry::parent_from_headers(|name| {
            req.headers()
                .get(HeaderName::from_static(name))
                .and_then(|v| v.to_str().ok())
        }),
        client: req.peer_addr(),
        client_ip: client_ip(req),
        // Only a token that was checked (a principal was read from it).
        caller_token: principal.as_ref().and_then(|_| bearer_token(req)),
        principal,
        body_bytes: 0,
        body_hold: mcp_cluster_runtime::BodyHold::default(),
    }
}

/// The credential of the request's `Authorization: Bearer` header, read
/// as authorization read it.
fn bearer_token(req: &HttpRequest) -> Option<mcp_cluster_runtime::CallerToken> {
    let header = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    mcp_cluster_auth::bearer::bearer(header)
        .ok()
        .map(mcp_cluster_runtime::CallerToken::new)
}

/// The client's address as quotas count it: the peer, or behind trusted
/// proxies the address they forwarded for ([`crate::forwarded`]).
pub(crate) fn client_ip(req: &HttpRequest) -> Option<std::net::IpAddr> {
    let proxies = req.app_data::<web::Data<crate::forwarded::TrustedProxies>>()?;
    proxies.client_ip(req.peer_addr().map(|a| a.ip()), req.headers())
}

/// How a POST was answered, for `mcp_http_answers_total`.
#[derive(Debug, Clone, Copy)]
enum AnswerKind {
    Json,
    Sse,
    Accepted,
}

fn count_answer(kind: AnswerKind) {
    // Resolved once: the label lookup is not paid per request.
    static COUNTERS: std::sync::LazyLock<[prometheus::IntCounter; 3]> =
        std::sync::LazyLock::new(|| {
            let answers = &mcp_cluster_telemetry::metrics::metrics().http_answers;
            ["json", "sse", "accepted"].map(|kind| answers.with_label_values(&[kind]))
        });
    COUNTERS[kind as usize].inc();
}

async fn answer(
    req: &HttpRequest,
    state: &HttpState,
    session: &SessionHandle,
    reply: tokio::sync::oneshot::Receiver<ExchangeReply>,
    batch: bool,
) -> Result<HttpResponse, HttpError> {
    respond(req, state, session, reply.await, batch).await
}

/// Turns the exchange's reply into the HTTP answer.
async fn respond(
    req: &HttpRequest,
    state: &HttpState,
    session: &SessionHandle,
    reply: Result<ExchangeReply, tokio::sync::oneshot::error::RecvError>,
    batch: bool,
) -> Result<HttpResponse, HttpError> {
    match reply {
        Ok(ExchangeReply::Json(responses)) => {
            let body = if batch {
                let messages: Vec<Message> = responses.into_iter().map(Message::Response).collect();
                serde_json::to_string(&messages).unwrap_or_default()
            } else {
                let Some(response) = responses.into_iter().next() else {
                    return Err(HttpError::Unavailable("no response"));
                };
                Message::Response(response).to_json()
            };
            count_answer(AnswerKind::Json);
            Ok(HttpResponse::Ok()
                .insert_header((CONTENT_TYPE, "application/json"))
                .body(body))
        }
        Ok(ExchangeReply::Stream(stream, requests)) => {
            let follow = state.runtime.follow_new(session, &stream, requests).await?;
            count_answer(AnswerKind::Sse);
            let primes = session
                .protocol_version()
                .is_some_and(ProtocolVersion::primes_sse);
            let framing = Framing {
                priming: primes.then_some(EventId {
                    stream,
                    position: Position::START,
                }),
                retry_ms: state.runtime.config().sse_retry_ms,
                ..Framing::default()
            };
            let body = sse::body(follow, framing);
            Ok(sse::watched_response(req, state, StreamKind::Request, body))
        }
        // Cancelled before anything was sent: an empty stream, no event id,
        // so the client does not try to resume it.
        Ok(ExchangeReply::Empty) => Ok(sse::response(futures_util::stream::empty())),
        Ok(ExchangeReply::Failed(_)) => Err(HttpError::Unavailable("event log unavailable")),
        // Only stateless exchanges stream live; a session's never does.
        Ok(ExchangeReply::Live(_)) => Err(HttpError::Unavailable("unexpected live stream")),
        Err(_) => Err(HttpError::Unavailable(
            "session stopped while handling the request, retry",
        )),
    }
}

/// Finds the session a request names.
pub(crate) async fn session(
    req: &HttpRequest,
    state: &HttpState,
    principal: Option<&mcp_cluster_store::Principal>,
) -> Result<SessionHandle, HttpError> {
    let id = headers::session_id(req.headers())?.ok_or(HttpError::MissingSession)?;
    Ok(state.runtime.session_as(&id, principal).await?)
}

/// GET: the standalone SSE stream, or with `Last-Event-ID` the resumption
/// of the stream that event belongs to.
pub async fn get(req: HttpRequest, state: web::Data<HttpState>) -> Result<HttpResponse, HttpError> {
    headers::check_host_and_origin(&req, &state.config)?;
    let principal = auth::authorize(&req, &state).await?;
    headers::check_get_accept(req.headers())?;
    headers::protocol_version(req.headers())?;
    let id = headers::session_id(req.headers())?.ok_or(HttpError::MissingSession)?;
    state.stream_room()?;
    let runtime = &state.runtime;
    // `moved`: this node started serving the session for this GET (the
    // client came from another node).
    let (session, moved) = runtime.locate_as(&id, principal.as_deref()).await?;
    // Who reads: the stream counts against its address when the session
    // has no principal.
    let reader = inbound(&req, Transport::StreamableHttp, principal);
    let retry_ms = runtime.config().sse_retry_ms;
    if let Some(value) = req.headers().get(LAST_EVENT_ID) {
        let id: EventId = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or(HttpError::BadLastEventId("malformed Last-Event-ID"))?;
        let followed = runtime
            .follow_as(&session, &id.stream, id.position, &reader)
            .await;
        let outcome = match &followed {
            Ok(_) if moved => "other_node",
            Ok(_) => "ok",
            Err(RuntimeError::EventsExpired) => "gap",
            Err(RuntimeError::UnknownEvent) => "unknown",
            Err(_) => "failed",
        };
        mcp_cluster_telemetry::metrics::metrics()
            .sse_resumptions
            .with_label_values(&[outcome])
            .inc();
        let framing = Framing {
            retry_ms,
            kind: StreamKind::Resumption,
            ..Framing::default()
        };
        let body = sse::body(followed?, framing);
        return Ok(sse::watched_response(
            &req,
            &state,
            StreamKind::Resumption,
            body,
        ));
    }
    let (tail, follow) = runtime.follow_standalone_as(&session, &reader).await?;
    let primes = session
        .protocol_version()
        .is_some_and(ProtocolVersion::primes_sse);
    let framing = Framing {
        priming: primes.then_some(EventId {
            stream: session.standalone_stream().clone(),
            position: tail,
        }),
        retry_ms,
        kind: StreamKind::Standalone,
        ..Framing::default()
    };
    let body = sse::body(follow, framing);
    Ok(sse::watched_response(
        &req,
        &state,
        StreamKind::Standalone,
        body,
    ))
}

/// DELETE: ends the session.
pub async fn delete(
    req: HttpRequest,
    state: web::Data<HttpState>,
) -> Result<HttpResponse, HttpError> {
    headers::check_host_and_origin(&req, &state.config)?;
    let principal = auth::authorize(&req, &state).await?;
    headers::protocol_version(req.headers())?;
    let id = headers::session_id(req.headers())?.ok_or(HttpError::MissingSession)?;
    state
        .runtime
        .terminate_as(&id, principal.as_deref())
        .await?;
    Ok(HttpResponse::Ok().finish())
}

/// Any other method: 405 with `Allow`.
pub async fn method_not_allowed() -> HttpResponse {
    actix_web::ResponseError::error_response(&HttpError::MethodNotAllowed(ALLOW))
}
