//! What an operator sees of the HTTP side: `/metrics`, the access log
//! (one line per request) and `X-Request-Id`.
//!
//! An access-log line holds only bounded, well-formed values, whatever the
//! client sent: its route (one of the node's, or `other`), a JSON-RPC
//! method this server knows (or `other`, `response`, `batch`), a session
//! id only when the header is one (1 to 128 visible ASCII characters), a
//! request id only when the client's is one, else the node's own. So a
//! line is a few hundred bytes whatever the request, and a client filling
//! the log must send as many requests, which its rate quota bounds
//! ([`crate::address_quota`]): refusals of an address this node already
//! knows to be over its rate are not logged one by one.

use std::sync::Arc;

use tokio::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use mcp_cluster_store::SessionId;
use mcp_cluster_telemetry::metrics::{self, NodeGauges};

use crate::HttpState;

/// The request id header: taken from the client (or the proxy before it)
/// when it is 1–128 visible ASCII characters, generated otherwise, and
/// echoed on the response.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The `tracing` target of access-log lines (filter it with
/// `--log info,mcp_access=off`).
pub const ACCESS_TARGET: &str = "mcp_access";

/// The `rpc_method` of a message whose method this server does not know,
/// and the `path` of a request to none of its routes.
pub const OTHER: &str = "other";

/// What a handler learned about the request, for the access log.
#[derive(Debug, Clone, Copy)]
pub struct RpcInfo {
    /// The JSON-RPC method of a single message as the server names it
    /// ([`mcp_cluster_runtime::known_client_method`]), else [`OTHER`];
    /// `response` for a response, `batch` for a batch.
    pub method: &'static str,
}

/// Who the request acted for: the principal of its valid access token.
/// Set by authorization whenever there is one; read by the access log and
/// by the request rate of addresses ([`crate::address_quota`], which
/// counts only requests without one).
#[derive(Debug, Clone)]
pub struct PrincipalInfo(pub Arc<mcp_cluster_store::Principal>);

/// Records the principal of the request.
pub(crate) fn note_principal(req: &HttpRequest, principal: &Arc<mcp_cluster_store::Principal>) {
    req.extensions_mut()
        .insert(PrincipalInfo(Arc::clone(principal)));
}

/// The `rpc_method` of a message's method: the method when this server
/// knows it, else [`OTHER`].
pub(crate) fn method_label(method: &str) -> &'static str {
    mcp_cluster_runtime::known_client_method(method).unwrap_or(OTHER)
}

/// Records the JSON-RPC method of the request (a label from
/// [`method_label`], or `response` / `batch`) for the access log (only
/// when the access log is on).
pub(crate) fn note_method(req: &HttpRequest, method: &'static str) {
    if tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        req.extensions_mut().insert(RpcInfo { method });
    }
}

/// GET `/metrics` on the admin listener: the Prometheus text exposition
/// format, outside the Host and Origin checks of the MCP endpoint (a
/// scraper addresses the pod, not the service name).
pub async fn metrics(state: web::Data<HttpState>) -> HttpResponse {
    let runtime = &state.runtime;
    let body = metrics::metrics().render(NodeGauges {
        sessions_held: runtime.session_count(),
        sessions_listened_passivated: runtime.listened_passivated(),
        max_sessions: runtime.config().max_sessions,
        requests_in_flight: runtime.in_flight(),
        exchanges_open: runtime.open_exchanges(),
        drain_phase: runtime.drain_phase(),
    });
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, metrics::CONTENT_TYPE))
        .body(body)
}

/// GET `/metrics` on the main listener of a node without an admin
/// listener: as [`metrics()`], behind the Host and Origin checks of the MCP
/// endpoint, so that a page that rebinds its name to a node on the
/// visitor's machine cannot read it (403). A scraper that addresses the
/// node by another name needs it in the Host allow-list, or the admin
/// listener.
///
/// # Errors
/// [`crate::HttpError::ForbiddenHost`], [`crate::HttpError::ForbiddenOrigin`].
pub async fn metrics_on_main(
    req: HttpRequest,
    state: web::Data<HttpState>,
) -> Result<HttpResponse, crate::HttpError> {
    crate::headers::check_host_and_origin(&req, &state.config)?;
    Ok(metrics(state).await)
}

fn request_id(req: &ServiceRequest) -> HeaderValue {
    req.headers()
        .get(REQUEST_ID)
        .filter(|v| {
            let b = v.as_bytes();
            !b.is_empty() && b.len() <= 128 && b.iter().all(|c| c.is_ascii_graphic())
        })
        .cloned()
        .unwrap_or_else(new_request_id)
}

/// A new request id: 32 lowercase hex digits. Unique, not secret: a
/// thread-local generator, no system call per request (as a v4 UUID would
/// make), and written on the stack (the header value is the only
/// allocation).
fn new_request_id() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let random = fastrand::u128(..);
    let mut id = [0u8; 32];
    for (i, digit) in id.iter_mut().enumerate() {
        *digit = HEX[((random >> (124 - 4 * i)) & 0xf) as usize];
    }
    // unwrap: hex digits are a valid header value.
    #[allow(clippy::unwrap_used)]
    HeaderValue::from_bytes(&id).unwrap()
}

/// The `http_route` label and the access log's `path`: one of the node's
/// routes, or `other` (never the path a client sent).
fn route(req: &HttpRequest) -> &str {
    let path = req.path();
    let endpoint = req
        .app_data::<web::Data<HttpState>>()
        .map(|s| s.config.endpoint.as_str());
    match path {
        _ if Some(path) == endpoint => path,
        crate::legacy::SSE_PATH | crate::legacy::MESSAGES_PATH => path,
        "/healthz" | "/readyz" | "/metrics" => path,
        _ if path.starts_with(mcp_cluster_auth::WELL_KNOWN) => mcp_cluster_auth::WELL_KNOWN,
        _ => OTHER,
    }
}

/// Middleware: gives every request an `X-Request-Id`, and when the
/// response head is ready writes one access-log line and records
/// `http_server_request_duration_seconds` (an SSE answer's duration ends
/// at its head; the stream's life is in the SSE metrics).
///
/// # Errors
/// Those of the wrapped service.
pub async fn access_log(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let served = crate::request_head::arrived(req.request());
    let id = request_id(&req);
    let mut res = next.call(req).await?;
    let elapsed = started.elapsed();
    let request = res.request();
    let status = res.status();
    metrics::metrics()
        .http_duration
        .with_label_values(&[request.method().as_str(), route(request), status.as_str()])
        .observe(elapsed.as_secs_f64());
    let quiet = request
        .extensions()
        .contains::<crate::address_quota::Unlogged>();
    if !quiet && tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        // The client's header only when it is a session id; else the one
        // the node gave (its own).
        let session = crate::headers::session_id(request.headers())
            .ok()
            .flatten()
            .or_else(|| crate::headers::session_id(res.headers()).ok().flatten());
        let rpc_method = request
            .extensions()
            .get::<RpcInfo>()
            .map_or("", |i| i.method);
        let principal = request
            .extensions()
            .get::<PrincipalInfo>()
            .map(|p| p.0.key())
            .unwrap_or_default();
        tracing::info!(
            target: ACCESS_TARGET,
            method = %request.method(),
            path = route(request),
            status = status.as_u16(),
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            session_id = session.as_ref().map_or("", SessionId::as_str),
            rpc_method = rpc_method,
            principal = principal,
            request_id = id.to_str().unwrap_or(""),
            peer = request.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default(),
            "HTTP request."
        );
    }
    res.headers_mut().insert(REQUEST_ID, id);
    Ok(res.map_body(|_, body| crate::request_head::UntilServed::new(body, served)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_request_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (new_request_id(), new_request_id());
        for id in [&a, &b] {
            let id = id.to_str().unwrap();
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
                "{id}"
            );
        }
        assert_ne!(a, b);
    }
}
