//! The request rate of clients without a principal, at the HTTP edge
//! (`quotas.requests_per_address`): every request a node answers on its
//! main listener counts once against its client's address, whatever
//! becomes of it, so that refused requests (malformed, bad headers, an
//! unknown session, a wrong path, no valid token) cost their sender as
//! much as served ones, and a flood of them meets 429 like any other.
//!
//! Who counts what:
//! - a POST whose body reaches the runtime's pipeline is counted there, by
//!   its JSON-RPC requests and notifications (cancellations and responses
//!   free, a batch by its members), as a principal's requests are; the
//!   handler marks such a request (`mark_counted`);
//! - every other request without a principal from a counted address is
//!   counted here: GETs, DELETEs and requests to no route before they run,
//!   POSTs after their answer (they were refused before the pipeline, or
//!   their token was not valid).
//!
//! Requests with a principal, the probes and `/metrics`, requests from an
//! address the quotas do not count (a trusted proxy's own, stdio) pass
//! untouched.
//!
//! An address over its rate, known to this node as such
//! ([`mcp_cluster_runtime::Runtime::over_request_rate`], no store call),
//! is answered 429 before anything of the request is read: its body is
//! never buffered (a POST of a few kilobytes excepted: it is read and
//! decoded, so that a cancellation or an answer to the server still goes
//! through, as for a principal over its quota), and such refusals are not
//! written to the access log one by one (`Unlogged`): per node and
//! address, the log gets at most one refusal each time the store is asked
//! again (when one more request would fit), besides the requests admitted.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{AUTHORIZATION, CONTENT_LENGTH};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, ResponseError, web};
use mcp_cluster_runtime::RuntimeError;

use crate::HttpState;
use crate::error::HttpError;
use crate::observe::PrincipalInfo;

/// Largest body (by its `Content-Length`) of a POST to the MCP endpoints
/// that is still read from an address over its rate: enough for any
/// cancellation and most answers to a server's question, small enough
/// that a flood of them costs little. Larger ones are refused unread.
pub const READ_WHEN_LIMITED_BYTES: u64 = 16 * 1024;

/// Marks a request whose body the runtime's pipeline counted (or chose
/// not to count: a cancellation, a response); set by the handler just
/// before it hands the body over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted;

/// Marks a refusal the access log does not write: the request came from
/// an address this node already knew to be over its rate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unlogged;

/// Marks `req` as counted by the pipeline ([`Counted`]).
pub(crate) fn mark_counted(req: &HttpRequest) {
    req.extensions_mut().insert(Counted);
}

/// Middleware of the main listener: counts the requests of clients
/// without a principal that the pipeline does not count, and refuses an
/// address over `requests_per_address` (429 with `Retry-After`) before
/// its request runs (see the module docs).
///
/// # Errors
/// Those of the wrapped service.
pub async fn requests_per_address<B: MessageBody>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    let Some(state) = req.app_data::<web::Data<HttpState>>().cloned() else {
        return pass(req, next).await;
    };
    let runtime = &state.runtime;
    if !runtime.counts_address_requests() || exempt(req.path()) {
        return pass(req, next).await;
    }
    let Some(client) = crate::streamable::client_ip(req.request()) else {
        return pass(req, next).await;
    };
    // A request with a token may have a principal: only authorization can
    // tell, in the handler.
    let may_have_principal = state.auth.is_some() && req.headers().contains_key(AUTHORIZATION);
    let pipeline = carries_a_body(&req, &state);
    // A small POST from an address over its rate is read all the same
    // (it may be a cancellation); its refusal is then not logged either.
    let mut read_while_limited = false;
    if !may_have_principal {
        if pipeline && small_body(&req) && runtime.is_over_request_rate(client) {
            read_while_limited = true;
        } else if let Some(refusal) = runtime.over_request_rate(client) {
            return Ok(refuse(req, refusal, true));
        } else if !pipeline {
            if let Err(err) = runtime.admit_request_from(client).await {
                return Ok(refuse(req, err, false));
            }
            return pass(req, next).await;
        }
    }
    let res = next.call(req).await?;
    let (principal, counted) = {
        let extensions = res.request().extensions();
        (
            extensions.contains::<PrincipalInfo>(),
            extensions.contains::<Counted>(),
        )
    };
    if principal {
        return Ok(res.map_into_left_body());
    }
    if counted {
        if read_while_limited && res.status() == StatusCode::TOO_MANY_REQUESTS {
            res.request().extensions_mut().insert(Unlogged);
        }
        return Ok(res.map_into_left_body());
    }
    // Refused before the pipeline, or its token was not valid: counted
    // now, and answered 429 instead once the address is over its rate.
    if let Some(refusal) = runtime.over_request_rate(client) {
        return Ok(replace(res, refusal, true));
    }
    match runtime.admit_request_from(client).await {
        Ok(()) => Ok(res.map_into_left_body()),
        Err(err @ RuntimeError::QuotaExceeded { .. }) => Ok(replace(res, err, false)),
        Err(err) => {
            // The answer stands; the store will be asked again next time.
            tracing::debug!(error = %err, "Request not counted.");
            Ok(res.map_into_left_body())
        }
    }
}

async fn pass<B: MessageBody>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    Ok(next.call(req).await?.map_into_left_body())
}

/// The probes and `/metrics`: whoever asks must get them.
fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// Whether the request is a POST whose body the pipeline counts (the
/// Streamable HTTP endpoint, the legacy message endpoint).
fn carries_a_body(req: &ServiceRequest, state: &HttpState) -> bool {
    req.method() == Method::POST
        && (req.path() == state.config.endpoint
            || (state.config.legacy_sse && req.path() == crate::legacy::MESSAGES_PATH))
}

/// Whether the body is declared and small ([`READ_WHEN_LIMITED_BYTES`]).
fn small_body(req: &ServiceRequest) -> bool {
    req.headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n <= READ_WHEN_LIMITED_BYTES)
}

/// Answers `req` with the refusal, unread; `quiet`: not in the access log.
fn refuse<B>(
    req: ServiceRequest,
    err: RuntimeError,
    quiet: bool,
) -> ServiceResponse<EitherBody<B>> {
    if quiet {
        req.extensions_mut().insert(Unlogged);
    }
    let response = HttpError::from(err).error_response();
    req.into_response(response).map_into_right_body()
}

/// Answers with the refusal instead of `res`; `quiet` as for [`refuse`].
fn replace<B>(
    res: ServiceResponse<B>,
    err: RuntimeError,
    quiet: bool,
) -> ServiceResponse<EitherBody<B>> {
    let (req, _answered) = res.into_parts();
    if quiet {
        req.extensions_mut().insert(Unlogged);
    }
    let response = HttpError::from(err).error_response();
    ServiceResponse::new(req, response).map_into_right_body()
}
