//! What an operator sees of the HTTP side: `/metrics`, the access log
//! (one line per request) and `X-Request-Id`.

use tokio::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use mcp_cluster_telemetry::metrics::{self, NodeGauges};

use crate::HttpState;
use crate::headers::SESSION_ID;

/// The request id header: taken from the client (or the proxy before it)
/// when it is 1–128 visible ASCII characters, generated otherwise, and
/// echoed on the response.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The `tracing` target of access-log lines (filter it with
/// `--log info,mcp_access=off`).
pub const ACCESS_TARGET: &str = "mcp_access";

/// What a handler learned about the request, for the access log.
#[derive(Debug, Clone, Default)]
pub struct RpcInfo {
    /// The JSON-RPC method of a single message (`batch` for a batch).
    pub method: Option<String>,
}

/// Who the request acted for (its principal's key), for the access log.
#[derive(Debug, Clone)]
pub struct PrincipalInfo(pub String);

/// Records the principal of the request for the access log (only when the
/// access log is on).
pub(crate) fn note_principal(req: &HttpRequest, principal: &mcp_cluster_store::Principal) {
    if tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        req.extensions_mut().insert(PrincipalInfo(principal.key()));
    }
}

/// Records the JSON-RPC method of the request for the access log (only
/// when the access log is on: it costs an allocation).
pub(crate) fn note_method(req: &HttpRequest, method: &str) {
    if tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        req.extensions_mut().insert(RpcInfo {
            method: Some(method.to_owned()),
        });
    }
}

/// GET `/metrics` on the admin listener: the Prometheus text exposition
/// format, outside the Host and Origin checks of the MCP endpoint (a
/// scraper addresses the pod, not the service name).
pub async fn metrics(state: web::Data<HttpState>) -> HttpResponse {
    let runtime = &state.runtime;
    let body = metrics::metrics().render(NodeGauges {
        sessions_held: runtime.session_count(),
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
        .unwrap_or_else(|| {
            // Unique, not secret: a thread-local generator, no system call
            // per request (as a v4 UUID would make).
            let id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
            // unwrap: hex digits are a valid header value.
            #[allow(clippy::unwrap_used)]
            HeaderValue::from_str(&id).unwrap()
        })
}

/// The `http_route` label: one of the node's routes, or `other` (never
/// the path a client sent).
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
        _ => "other",
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
    let id = request_id(&req);
    let mut res = next.call(req).await?;
    let elapsed = started.elapsed();
    let request = res.request();
    let status = res.status();
    metrics::metrics()
        .http_duration
        .with_label_values(&[request.method().as_str(), route(request), status.as_str()])
        .observe(elapsed.as_secs_f64());
    if tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        let session = request
            .headers()
            .get(SESSION_ID)
            .or_else(|| res.headers().get(SESSION_ID))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let rpc_method = request
            .extensions()
            .get::<RpcInfo>()
            .and_then(|i| i.method.clone())
            .unwrap_or_default();
        let principal = request
            .extensions()
            .get::<PrincipalInfo>()
            .map(|p| p.0.clone())
            .unwrap_or_default();
        tracing::info!(
            target: ACCESS_TARGET,
            method = %request.method(),
            path = request.path(),
            status = status.as_u16(),
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            session_id = session,
            rpc_method = rpc_method,
            principal = principal,
            request_id = id.to_str().unwrap_or(""),
            peer = request.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default(),
            "HTTP request."
        );
    }
    res.headers_mut().insert(REQUEST_ID, id);
    Ok(res)
}
