//! The 2026-07-28 era on the Streamable HTTP endpoint: which POSTs belong to
//! it, its header rules, and how its answers map to HTTP.
//!
//! A POST is stateless when its request carries the new `_meta`
//! (`io.modelcontextprotocol/protocolVersion`) or its `MCP-Protocol-Version`
//! header names a revision no session can speak (2026-07-28, or, without
//! `Mcp-Session-Id`, one this server does not know: it gets -32022 with the
//! versions it could use).
//! `initialize` always opens a session-era session, and a request without
//! either marker stays in the session era, so both eras share `/mcp`.

use actix_web::http::StatusCode;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse};
use mcp_cluster_protocol::jsonrpc::Body;
use mcp_cluster_protocol::{
    ErrorCode, ErrorObject, Message, ProtocolVersion, Request, Response, methods,
};
use mcp_cluster_runtime::{Caller, ExchangeReply, Inbound, RequestMeta, StatelessReply};

use crate::HttpState;
use crate::error::HttpError;
use crate::headers::{self, PROTOCOL_VERSION};
use crate::sse::{self, StreamKind};

/// Whether a POST body belongs to the stateless era.
pub(crate) fn is_stateless(req: &HttpRequest, body: &Body) -> bool {
    let header = req.headers().get(PROTOCOL_VERSION).map(|v| {
        v.to_str()
            .ok()
            .and_then(|v| v.parse::<ProtocolVersion>().ok())
    });
    // A header no session can speak: one of the stateless revisions, or a
    // version this server does not know on a request that names no
    // session (the stateless era answers it with the versions it has; a
    // session's request keeps the session era's 400).
    let header_stateless = match header {
        Some(Some(version)) => version.is_stateless(),
        Some(None) => !req.headers().contains_key(crate::headers::SESSION_ID),
        None => false,
    };
    // `initialize` opens a session unless it says it is of the stateless
    // era, where it is a removed method (404).
    match body {
        Body::Single(Message::Request(r)) => {
            header_stateless || RequestMeta::present(r.stateless_meta().as_deref())
        }
        Body::Single(Message::Notification(n)) => {
            header_stateless || RequestMeta::present(n.stateless_meta().as_deref())
        }
        Body::Single(Message::Response(_)) | Body::Batch(_) => header_stateless,
    }
}

/// Answers a stateless POST.
pub(crate) async fn post(
    req: &HttpRequest,
    body: Body,
    state: &HttpState,
    inbound: Inbound,
) -> Result<HttpResponse, HttpError> {
    let request = match body {
        Body::Single(Message::Request(request)) => request,
        // A client may still tell (cancellation on stdio has no use here:
        // closing the stream cancels); nothing is due.
        Body::Single(Message::Notification(_)) => return Ok(HttpResponse::Accepted().finish()),
        Body::Single(Message::Response(_)) => {
            return Err(HttpError::InvalidRequest {
                message: "2026-07-28 has no server-to-client requests to answer: input \
                          goes in the retried request's inputResponses"
                    .into(),
                id: None,
            });
        }
        Body::Batch(_) => {
            return Err(HttpError::InvalidRequest {
                message: "2026-07-28 requests are sent one per POST, not in a batch".into(),
                id: None,
            });
        }
    };
    let id = request.id.clone();
    // In this order (each a 400): the `_meta` fields (-32602), the header
    // against `_meta` (-32020), the version (-32022), the routing headers
    // (-32020). The method (404) and capabilities (-32021) come next.
    let bad_request = |error| HttpError::Rpc {
        status: StatusCode::BAD_REQUEST,
        error,
        id: Some(id.clone()),
    };
    let meta = RequestMeta::read(request.stateless_meta().as_deref()).map_err(bad_request)?;
    check_version_header(req, &request, &meta)?;
    meta.version().map_err(bad_request)?;
    let service = state.runtime.service();
    // What the headers are checked against (a hosted server's mirrored
    // arguments) may be learnt only now.
    if let Err(error) = service.prepare_stateless(&Caller::of(&inbound)).await {
        return Ok(json(Response::error(Some(id), error)));
    }
    headers::check_required_headers(req.headers(), &request, service.as_ref())?;
    // A listen stream is counted by the runtime; a request's by the body.
    let kind = (request.method != methods::SUBSCRIPTIONS_LISTEN).then_some(StreamKind::Live);
    if kind.is_none() {
        state
            .stream_room()
            .map_err(|err| err.for_request(Some(id.clone())))?;
    }
    crate::address_quota::mark_counted(req);
    match state.runtime.stateless(request, meta, &inbound).await {
        StatelessReply::Now(response) => Ok(json(response)),
        StatelessReply::Refused(err, id) => Err(HttpError::from(err).for_request(Some(id))),
        StatelessReply::Running { reply, guard } => match reply.await {
            Ok(ExchangeReply::Json(responses)) => responses
                .into_iter()
                .next()
                .map(json)
                .ok_or(HttpError::Unavailable("no response")),
            Ok(ExchangeReply::Live(rx)) => {
                let keep_alive = state.runtime.config().sse_keep_alive();
                let body = sse::live_body(rx, guard, kind, keep_alive);
                let watched = kind.unwrap_or(StreamKind::Listen);
                Ok(sse::watched_response(req, state, watched, body))
            }
            Ok(ExchangeReply::Empty) => Ok(sse::response(futures_util::stream::empty())),
            Ok(ExchangeReply::Stream(..) | ExchangeReply::Failed(_)) | Err(_) => Err(
                HttpError::Unavailable("the request stopped before its answer, retry"),
            ),
        },
    }
}

/// The header and `_meta` must name the same version (-32020).
fn check_version_header(
    req: &HttpRequest,
    request: &Request,
    meta: &RequestMeta,
) -> Result<(), HttpError> {
    let sent = req
        .headers()
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if sent == meta.requested {
        return Ok(());
    }
    let shown = |v: &str| v.chars().take(64).collect::<String>();
    Err(HttpError::HeaderMismatch {
        message: format!(
            "MCP-Protocol-Version header value '{}' does not match body value '{}'",
            shown(sent),
            shown(&meta.requested)
        ),
        id: Some(request.id.clone()),
    })
}

/// A JSON answer, with the status 2026-07-28 gives its errors.
fn json(response: Response) -> HttpResponse {
    let status = match &response.outcome {
        Err(err) => status_of(err),
        Ok(_) => StatusCode::OK,
    };
    HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, "application/json"))
        .body(Message::Response(response).to_json())
}

/// The HTTP status of a stateless request's JSON-RPC error: 404 for a
/// method the server does not have, 400 for the errors a client must fix
/// before retrying (version, headers, capabilities), 200 otherwise.
fn status_of(err: &ErrorObject) -> StatusCode {
    match err.code {
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::HEADER_MISMATCH
        | ErrorCode::MISSING_CLIENT_CAPABILITY => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}
