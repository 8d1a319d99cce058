//! Opening a session (`initialize`, then `notifications/initialized`),
//! checked like every other request: the answer must be one response with
//! the request's id, a result and not an error, and the result must be an
//! initialize result (`protocolVersion`, `capabilities`, `serverInfo`).
//! `mcp_cluster_client::Client::initialize` takes a JSON answer without looking at
//! its id, so a wrong answer would have counted as an open session.
//!
//! Owner and stop path: [`open`] owns its request and answer; it ends when
//! the answer and the `initialized` notification are through, or at its
//! first failure. Callers bound it with their own timeouts.

use mcp_cluster_client::{Client, Reply, SseStream};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

use crate::check::{CallCheck, Violation};
use crate::session::{response_ok, violation};
use crate::stats::ErrorKind;

/// `Mcp-Session-Id`.
const SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// The id of `initialize`. The session's later requests take theirs from
/// [`Client::next_id`], which starts at 1, so no id repeats in a session.
const INITIALIZE_ID: i64 = 0;

/// Opens a session on `url`: returns a client that holds its id (if the
/// server gave one) and speaks the negotiated protocol version.
///
/// # Errors
/// The first failure: HTTP status, transport, JSON-RPC error, or a broken
/// rule (`protocol:wrong_id`, `protocol:wrong_result`, ...).
pub(crate) async fn open(
    http: &reqwest::Client,
    url: &str,
    protocol_version: &str,
    capabilities: &Value,
) -> Result<Client, ErrorKind> {
    let body = json!({
        "jsonrpc": "2.0", "id": INITIALIZE_ID, "method": "initialize",
        "params": {"protocolVersion": protocol_version, "capabilities": capabilities,
                   "clientInfo": {"name": "mcp-loadtest", "version": env!("CARGO_PKG_VERSION")}}
    });
    let response = http
        .post(url)
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .header(PROTOCOL_VERSION, protocol_version)
        .body(body.to_string())
        .send()
        .await
        .map_err(transport)?;
    if response.status() != StatusCode::OK {
        return Err(ErrorKind::answer(
            response.status().as_u16(),
            response.headers(),
        ));
    }
    let session = response
        .headers()
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let is_sse = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut check = CallCheck::new(INITIALIZE_ID, None);
    if is_sse {
        let mut stream = SseStream::new(response);
        // Up to the response, as a client would; the stream's end is the
        // server's business (and a missing response shows in the check).
        while check.response().is_none() {
            let Some(message) = stream.next_message().await.map_err(client_error)? else {
                break;
            };
            check.observe(message).map_err(violation)?;
        }
    } else {
        let bytes = response.bytes().await.map_err(transport)?;
        let message =
            serde_json::from_slice(&bytes).map_err(|_| violation(Violation::Malformed))?;
        check.observe(message).map_err(violation)?;
    }
    let version = initialize_answer(&check)?;
    let mut client = Client::with_http(http.clone(), url, &version);
    client.set_session_id(session);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    match client.post(&initialized).await.map_err(client_error)? {
        Reply::Accepted => Ok(client),
        Reply::Status(status, _, headers) => Err(ErrorKind::answer(status.as_u16(), &headers)),
        _ => Err(ErrorKind::Protocol("protocol:notification_answered")),
    }
}

/// The negotiated protocol version from a checked `initialize` answer.
///
/// # Errors
/// A missing response, a JSON-RPC error, or a result that is not an
/// initialize result.
fn initialize_answer(check: &CallCheck) -> Result<String, ErrorKind> {
    check.finish(false).map_err(violation)?;
    let response = response_ok(check)?;
    let result = response.get("result").unwrap_or(&Value::Null);
    let version = result.get("protocolVersion").and_then(Value::as_str);
    match version {
        Some(version)
            if result.get("capabilities").is_some_and(Value::is_object)
                && result.get("serverInfo").is_some_and(Value::is_object) =>
        {
            Ok(version.to_owned())
        }
        _ => Err(violation(Violation::WrongResult)),
    }
}

fn transport(err: reqwest::Error) -> ErrorKind {
    if err.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::transport(&err)
    }
}

fn client_error(err: mcp_cluster_client::ClientError) -> ErrorKind {
    match err {
        mcp_cluster_client::ClientError::Http(err) => transport(err),
        mcp_cluster_client::ClientError::Json(_) => violation(Violation::Malformed),
        mcp_cluster_client::ClientError::Status { status, .. } => {
            ErrorKind::status(status.as_u16())
        }
        err => ErrorKind::transport(&err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(message: Value) -> Result<String, ErrorKind> {
        let mut check = CallCheck::new(INITIALIZE_ID, None);
        check.observe(message).map_err(violation)?;
        initialize_answer(&check)
    }

    fn result() -> Value {
        json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
               "serverInfo": {"name": "s", "version": "1"}})
    }

    #[test]
    fn an_initialize_result_with_the_request_id_opens_the_session() {
        let message = json!({"jsonrpc": "2.0", "id": INITIALIZE_ID, "result": result()});
        assert_eq!(answer(message), Ok("2025-06-18".to_owned()));
    }

    #[test]
    fn an_answer_with_another_id_is_not_a_session() {
        let message = json!({"jsonrpc": "2.0", "id": 1, "result": result()});
        assert_eq!(answer(message), Err(violation(Violation::WrongId)));
    }

    #[test]
    fn an_error_or_a_result_that_is_not_an_initialize_result_is_not_a_session() {
        let error = json!({"jsonrpc": "2.0", "id": INITIALIZE_ID,
                           "error": {"code": -32600, "message": "busy"}});
        assert_eq!(answer(error), Err(ErrorKind::JsonRpc(-32600)));
        for broken in [
            json!({"content": [{"type": "text", "text": null}]}),
            json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
            json!({"protocolVersion": 1, "capabilities": {}, "serverInfo": {}}),
        ] {
            let message = json!({"jsonrpc": "2.0", "id": INITIALIZE_ID, "result": broken});
            assert_eq!(answer(message), Err(violation(Violation::WrongResult)));
        }
    }

    #[test]
    fn no_answer_is_not_a_session() {
        let check = CallCheck::new(INITIALIZE_ID, None);
        assert_eq!(
            initialize_answer(&check),
            Err(violation(Violation::MissingResponse))
        );
    }
}
