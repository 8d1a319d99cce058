//! Authorization at the HTTP edge: every request to the MCP endpoints
//! (Streamable HTTP and legacy HTTP+SSE) carries a bearer token when
//! authorization is on; the protected resource metadata is served for
//! clients to find out where to get one.
//!
//! The check runs before the body is read (a request without a valid
//! token costs no buffering), and tool scopes once the body is decoded,
//! before anything in it runs.

use std::sync::Arc;

use actix_web::http::header::{AUTHORIZATION, CONTENT_TYPE};
use actix_web::{HttpRequest, HttpResponse, web};
use mcp_cluster_auth::{AuthError, Authenticator, Principal};
use mcp_cluster_protocol::jsonrpc::Body;
use mcp_cluster_protocol::{Message, methods};
use mcp_cluster_runtime::McpService;

use crate::HttpState;
use crate::error::HttpError;

/// Checks the request's bearer token. `None` when authorization is off.
///
/// # Errors
/// 401 (no or invalid token), 403 (a scope every request needs is
/// missing), 503 (the authorization server cannot be reached).
pub(crate) async fn authorize(
    req: &HttpRequest,
    state: &HttpState,
) -> Result<Option<Arc<Principal>>, HttpError> {
    let Some(auth) = &state.auth else {
        return Ok(None);
    };
    let mut values = req.headers().get_all(AUTHORIZATION);
    let header = values.next();
    if values.next().is_some() {
        // Two credentials: which one is meant cannot be told.
        return Err(refused(auth, AuthError::MalformedHeader));
    }
    let client = crate::streamable::client_ip(req);
    match auth
        .authenticate(header.map(|v| v.as_bytes()), client)
        .await
    {
        Ok(principal) => {
            crate::observe::note_principal(req, &principal);
            Ok(Some(principal))
        }
        Err(err) => {
            if err.detail().is_some() {
                // The client reads only that the server is unavailable.
                tracing::debug!(error = err.for_log(), "Token not checked.");
            }
            Err(refused(auth, err))
        }
    }
}

/// Checks that `principal` may call every tool a body calls: the scopes
/// each tool needs (its own, and configured ones). A batch is refused whole.
///
/// # Errors
/// 403 `insufficient_scope` naming every scope the tool needs.
pub(crate) fn check_tool_scopes(
    state: &HttpState,
    principal: Option<&Principal>,
    body: &Body,
) -> Result<(), HttpError> {
    let (Some(auth), Some(principal)) = (&state.auth, principal) else {
        return Ok(());
    };
    let service = state.runtime.service();
    let check = |message: &Message| check_message(auth, service.as_ref(), principal, message);
    match body {
        Body::Single(message) => check(message),
        Body::Batch(items) => items.iter().flatten().try_for_each(check),
    }
}

fn check_message(
    auth: &Authenticator,
    service: &dyn McpService,
    principal: &Principal,
    message: &Message,
) -> Result<(), HttpError> {
    let Message::Request(request) = message else {
        return Ok(());
    };
    if request.method != methods::TOOLS_CALL {
        return Ok(());
    }
    let Some(tool) = request
        .params
        .as_ref()
        .and_then(|p| p.get("name"))
        .and_then(serde_json::Value::as_str)
    else {
        return Ok(());
    };
    let needed = auth.tool_scopes(tool, &service.tool_scopes(tool));
    auth.check_scopes(principal, &needed).map_err(|err| {
        Authenticator::count_refusal(&err);
        refused(auth, err).for_request(Some(request.id.clone()))
    })
}

fn refused(auth: &Authenticator, err: AuthError) -> HttpError {
    let challenge = auth.metadata().challenge(&err);
    HttpError::Auth {
        error: err,
        challenge,
    }
}

/// GET the protected resource metadata (RFC 9728). Public: clients read it
/// before they have a token, browsers from other origins too.
pub async fn metadata(state: web::Data<HttpState>) -> HttpResponse {
    match &state.auth {
        Some(auth) => HttpResponse::Ok()
            .insert_header((CONTENT_TYPE, "application/json"))
            .insert_header(("Access-Control-Allow-Origin", "*"))
            .insert_header(("Cache-Control", "max-age=300"))
            .body(auth.metadata().document().to_owned()),
        None => HttpResponse::NotFound().finish(),
    }
}
