//! Bad input to the Streamable HTTP endpoint: each one gets its exact HTTP
//! status and a JSON-RPC error body, and the node keeps serving afterwards.

use std::time::Duration;

use futures_util::stream;
use mcp_cluster::NodeConfig;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{InProcessNode, fixtures, raw_http};
use reqwest::header::{ACCEPT, ALLOW, CONTENT_TYPE, HOST, HeaderMap, HeaderValue, ORIGIN};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const LATEST: &str = "2025-11-25";
/// Small enough that a test body crosses it easily.
const SMALL_BODY_LIMIT_BYTES: usize = 1024;
/// Guard against a hung test, not an assertion on timing.
const GUARD: Duration = Duration::from_secs(20);

fn start() -> InProcessNode {
    InProcessNode::start_default(fixtures::test_server()).unwrap()
}

async fn session(node: &InProcessNode, version: &str) -> Client {
    let mut client = Client::new(&node.url(), version);
    client.initialize(json!({})).await.unwrap();
    client
}

/// The headers of a well-formed POST, in `session` when given.
fn post_headers(session: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert("mcp-protocol-version", HeaderValue::from_static(LATEST));
    if let Some(id) = session {
        h.insert("mcp-session-id", HeaderValue::from_str(id).unwrap());
    }
    h
}

/// The headers of a well-formed GET in `session`.
fn get_headers(session: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    h.insert("mcp-protocol-version", HeaderValue::from_static(LATEST));
    h.insert("mcp-session-id", HeaderValue::from_str(session).unwrap());
    h
}

/// Sends `method` to the endpoint with exactly `headers` and `body`.
async fn send(
    node: &InProcessNode,
    method: Method,
    headers: HeaderMap,
    body: impl Into<reqwest::Body>,
) -> (StatusCode, HeaderMap, String) {
    let response = reqwest::Client::new()
        .request(method, node.url())
        .headers(headers)
        .body(body)
        .timeout(GUARD)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

async fn post(node: &InProcessNode, headers: HeaderMap, body: &str) -> (StatusCode, String) {
    let (status, _, text) = send(node, Method::POST, headers, body.to_owned()).await;
    (status, text)
}

/// Parses a JSON-RPC error response and checks its code and id (the
/// request's own id whenever it could be read, JSON-RPC 2.0 section 5); returns
/// the error message.
fn assert_error(body: &str, code: i64, id: &Value) -> String {
    let value: Value =
        serde_json::from_str(body).unwrap_or_else(|err| panic!("body is not JSON ({err}): {body}"));
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    assert!(value.get("result").is_none(), "{value}");
    assert_eq!(value["error"]["code"], code, "{value}");
    assert_eq!(value.get("id").unwrap_or(&Value::Null), id, "{value}");
    value["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("error without message: {value}"))
        .to_owned()
}

/// The session answers a tool call.
async fn assert_serving(client: &Client) {
    let (response, _) = client
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "still here"}}),
        )
        .await
        .unwrap();
    assert_eq!(response["result"]["content"][0]["text"], "still here");
}

/// A new session can start and work.
async fn assert_node_serving(node: &InProcessNode) {
    assert_serving(&session(node, LATEST).await).await;
}

fn ping(id: i64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string()
}

#[tokio::test]
async fn invalid_json_is_400_parse_error() {
    let node = start();
    let client = session(&node, LATEST).await;
    let (status, body) = post(&node, post_headers(client.session_id()), "{\"jsonrpc\": ").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, -32700, &Value::Null);
    assert_serving(&client).await;
}

#[tokio::test]
async fn json_that_is_not_a_message_is_400_invalid_request() {
    let node = start();
    let client = session(&node, LATEST).await;
    for body in ["42", "\"ping\"", "[]"] {
        let (status, text) = post(&node, post_headers(client.session_id()), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {text}");
        assert_error(&text, -32600, &Value::Null);
    }
    assert_serving(&client).await;
}

#[tokio::test]
async fn null_id_is_400_invalid_request() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = json!({"jsonrpc": "2.0", "id": null, "method": "ping"}).to_string();
    let (status, body) = post(&node, post_headers(client.session_id()), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = assert_error(&body, -32600, &Value::Null);
    assert!(message.contains("null"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn wrong_jsonrpc_version_is_400_invalid_request() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = json!({"jsonrpc": "1.0", "id": 3, "method": "ping"}).to_string();
    let (status, body) = post(&node, post_headers(client.session_id()), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = assert_error(&body, -32600, &json!(3));
    assert!(message.contains("jsonrpc"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn missing_jsonrpc_member_is_400_invalid_request() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = json!({"id": 4, "method": "ping"}).to_string();
    let (status, body) = post(&node, post_headers(client.session_id()), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = assert_error(&body, -32600, &json!(4));
    assert!(message.contains("jsonrpc"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn unknown_method_is_a_method_not_found_response_for_its_id() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "no/such/method"}).to_string();
    let (status, body) = post(&node, post_headers(client.session_id()), &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_error(&body, -32601, &json!(5));
    assert_serving(&client).await;
}

#[tokio::test]
async fn params_not_an_object_is_400_invalid_params_with_the_id() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = json!({"jsonrpc": "2.0", "id": "p-1", "method": "tools/list", "params": [1, 2]})
        .to_string();
    let (status, body) = post(&node, post_headers(client.session_id()), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, -32602, &json!("p-1"));
    assert_serving(&client).await;
}

#[tokio::test]
async fn batch_in_a_2025_11_25_session_is_400_invalid_request() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    ])
    .to_string();
    let (status, body) = post(&node, post_headers(client.session_id()), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = assert_error(&body, -32600, &Value::Null);
    assert!(message.contains("batch"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn batch_in_a_2025_03_26_session_is_answered_as_an_array() {
    let node = start();
    let client = session(&node, "2025-03-26").await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "two", "method": "tools/call",
         "params": {"name": "echo", "arguments": {"message": "b"}}}
    ]);
    let Reply::Json(value, _) = client.post(&batch).await.unwrap() else {
        panic!("expected a JSON answer to the batch");
    };
    let answers = value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"));
    assert_eq!(answers.len(), 2, "{value}");
    let by_id = |id: Value| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer for {id}: {value}"))
    };
    assert_eq!(by_id(json!(1))["result"], json!({}));
    assert_eq!(by_id(json!("two"))["result"]["content"][0]["text"], "b");
    assert_serving(&client).await;
}

#[tokio::test]
async fn invalid_element_of_a_2025_03_26_batch_gets_its_own_error() {
    let node = start();
    let client = session(&node, "2025-03-26").await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "1.0", "id": 2, "method": "ping"}
    ]);
    let Reply::Json(value, _) = client.post(&batch).await.unwrap() else {
        panic!("expected a JSON answer to the batch");
    };
    let answers = value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"));
    assert_eq!(answers.len(), 2, "{value}");
    let ok = answers.iter().find(|a| a["id"] == 1).unwrap();
    assert_eq!(ok["result"], json!({}), "{value}");
    let bad = answers.iter().find(|a| a["id"] == 2).unwrap();
    assert_eq!(bad["error"]["code"], -32600, "{value}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn batch_of_notifications_in_a_2025_03_26_session_is_202() {
    let node = start();
    let client = session(&node, "2025-03-26").await;
    let batch = json!([
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 900}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 901}}
    ]);
    assert!(matches!(
        client.post(&batch).await.unwrap(),
        Reply::Accepted
    ));
    assert_serving(&client).await;
}

fn small_limit_node() -> InProcessNode {
    let mut config = NodeConfig::default();
    config.http.max_body_bytes = SMALL_BODY_LIMIT_BYTES;
    InProcessNode::start(fixtures::test_server(), config).unwrap()
}

fn oversized_echo() -> String {
    let message = "x".repeat(SMALL_BODY_LIMIT_BYTES * 2);
    json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"message": message}}})
    .to_string()
}

#[tokio::test]
async fn oversized_body_with_content_length_is_413() {
    let node = small_limit_node();
    let client = session(&node, LATEST).await;
    let (status, body) = post(&node, post_headers(client.session_id()), &oversized_echo()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let message = assert_error(&body, -32600, &Value::Null);
    assert!(message.contains("1024"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn oversized_chunked_body_is_413() {
    let node = small_limit_node();
    let client = session(&node, LATEST).await;
    let bytes = oversized_echo().into_bytes();
    // A streamed body has no Content-Length: it goes out chunked, so only
    // counting the bytes read can catch it.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(256).map(|c| Ok(c.to_vec())).collect();
    let (status, headers, body) = send(
        &node,
        Method::POST,
        post_headers(client.session_id()),
        reqwest::Body::wrap_stream(stream::iter(chunks)),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{headers:?} {body}");
    assert_error(&body, -32600, &Value::Null);
    assert_serving(&client).await;
}

#[tokio::test]
async fn chunked_body_under_the_limit_is_served() {
    let node = small_limit_node();
    let client = session(&node, LATEST).await;
    let bytes = ping(21).into_bytes();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(4).map(|c| Ok(c.to_vec())).collect();
    let (status, _, body) = send(
        &node,
        Method::POST,
        post_headers(client.session_id()),
        reqwest::Body::wrap_stream(stream::iter(chunks)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let value: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(value["id"], 21);
    assert_eq!(value["result"], json!({}));
}

#[tokio::test]
async fn missing_session_id_on_a_request_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let (status, body) = post(&node, post_headers(None), &ping(1)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = assert_error(&body, -32600, &json!(1));
    assert!(message.contains("Mcp-Session-Id"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn request_before_initialize_is_400() {
    let node = start();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let (status, body) = post(&node, post_headers(None), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, -32600, &json!(1));
    assert_node_serving(&node).await;
}

#[tokio::test]
async fn unknown_session_id_is_404() {
    let node = start();
    let unknown = "0b7c4f6e-2f1d-4c59-9a43-1e0d6f1b2a3c";
    let (status, body) = post(&node, post_headers(Some(unknown)), &ping(1)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&body, -32600, &json!(1));
    assert_node_serving(&node).await;
}

#[tokio::test]
async fn ended_session_is_404_on_post_get_and_delete() {
    let node = start();
    let client = session(&node, LATEST).await;
    let id = client.session_id().unwrap().to_owned();
    assert_eq!(client.delete().await.unwrap(), StatusCode::OK);

    let (status, body) = post(&node, post_headers(Some(&id)), &ping(1)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "POST: {body}");
    assert_error(&body, -32600, &json!(1));

    let (status, _, body) = send(&node, Method::GET, get_headers(&id), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "GET: {body}");
    assert_error(&body, -32600, &Value::Null);

    let mut delete = get_headers(&id);
    delete.remove(ACCEPT);
    let (status, _, body) = send(&node, Method::DELETE, delete, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "DELETE: {body}");
    assert_error(&body, -32600, &Value::Null);

    assert_node_serving(&node).await;
}

async fn assert_malformed_session_id(value: HeaderValue) {
    let node = start();
    let mut headers = post_headers(None);
    headers.insert("mcp-session-id", value);
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = assert_error(&body, -32600, &json!(1));
    assert!(message.contains("Mcp-Session-Id"), "{message}");
    assert_node_serving(&node).await;
}

#[tokio::test]
async fn non_ascii_session_id_is_400() {
    let value = HeaderValue::from_bytes("séance-1".as_bytes()).unwrap();
    assert_malformed_session_id(value).await;
}

#[tokio::test]
async fn over_long_session_id_is_400() {
    let value = HeaderValue::from_str(&"a".repeat(129)).unwrap();
    assert_malformed_session_id(value).await;
}

#[tokio::test]
async fn session_id_with_a_space_is_400() {
    assert_malformed_session_id(HeaderValue::from_static("abc def")).await;
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = post_headers(client.session_id());
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let message = assert_error(&body, -32600, &Value::Null);
    assert!(message.contains("application/json"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn missing_content_type_is_415() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = post_headers(client.session_id());
    headers.remove(CONTENT_TYPE);
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_error(&body, -32600, &Value::Null);
    assert_serving(&client).await;
}

/// Sends `head` (request line and headers, without the blank line) and
/// `body` over a plain socket, for requests reqwest would amend (it adds
/// `Accept: */*` when none is set). Returns the status and the body.
async fn send_raw(node: &InProcessNode, head: String, body: String) -> (u16, String) {
    let addr = node.addr();
    let head = format!(
        "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close",
        body.len()
    );
    tokio::task::spawn_blocking(move || raw_http(addr, &head, &body).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn post_without_accept_is_406() {
    let node = start();
    let client = session(&node, LATEST).await;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\n\
         MCP-Protocol-Version: {LATEST}\r\nMcp-Session-Id: {}",
        client.session_id().unwrap()
    );
    let (status, body) = send_raw(&node, head, ping(1)).await;
    assert_eq!(status, 406, "{body}");
    let message = assert_error(&body, -32600, &Value::Null);
    assert!(message.contains("text/event-stream"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn post_accepting_only_json_is_406() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = post_headers(client.session_id());
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
    assert_error(&body, -32600, &Value::Null);
    assert_serving(&client).await;
}

#[tokio::test]
async fn post_refusing_event_stream_by_weight_is_406() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = post_headers(client.session_id());
    // RFC 9110 12.4.2: q=0 means "not acceptable".
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream;q=0"),
    );
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "{body}");
    assert_error(&body, -32600, &Value::Null);
    assert_serving(&client).await;
}

#[tokio::test]
async fn get_without_event_stream_accept_is_406() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = get_headers(client.session_id().unwrap());
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    let (status, _, body) = send(&node, Method::GET, headers, "").await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
    let message = assert_error(&body, -32600, &Value::Null);
    assert!(message.contains("text/event-stream"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn duplicate_in_flight_request_id_is_refused() {
    let node = start();
    let client = session(&node, LATEST).await;
    let headers = post_headers(client.session_id());
    let hang = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "hang", "arguments": {}}})
    .to_string();
    // Two POSTs with id 7: whichever reaches the session second finds the
    // first in flight. The first never ends by itself, so the one that
    // completes is the refused one, whatever the arrival order.
    let url = node.url();
    let spawn_hang = || {
        let (url, headers, hang) = (url.clone(), headers.clone(), hang.clone());
        tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(url)
                .headers(headers)
                .body(hang)
                .send()
                .await
                .unwrap();
            (response.status(), response.text().await.unwrap())
        })
    };
    let mut first = spawn_hang();
    let mut second = spawn_hang();
    let (refused, mut in_flight) = tokio::time::timeout(GUARD, async {
        tokio::select! {
            done = &mut first => (done.unwrap(), second),
            done = &mut second => (done.unwrap(), first),
        }
    })
    .await
    .expect("neither duplicate was refused");
    let (status, body) = refused;
    assert_eq!(status, StatusCode::OK, "{body}");
    let message = assert_error(&body, -32600, &json!(7));
    assert!(message.contains("already in flight"), "{message}");
    assert!(!in_flight.is_finished(), "the in-flight request ended");

    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 7, "reason": "test over"}});
    assert!(matches!(
        client.post(&cancel).await.unwrap(),
        Reply::Accepted
    ));
    // Cancelled: the hanging POST ends without a response.
    let (status, body) = tokio::time::timeout(GUARD, &mut in_flight)
        .await
        .expect("cancelled request did not end")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("\"result\""), "{body}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn cancel_of_an_unknown_id_is_202() {
    let node = start();
    let client = session(&node, LATEST).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 4242}});
    assert!(matches!(
        client.post(&cancel).await.unwrap(),
        Reply::Accepted
    ));
    assert_serving(&client).await;
}

fn with_last_event_id(session: &str, value: &str) -> HeaderMap {
    let mut headers = get_headers(session);
    headers.insert("last-event-id", HeaderValue::from_str(value).unwrap());
    headers
}

#[tokio::test]
async fn garbage_last_event_id_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let headers = with_last_event_id(client.session_id().unwrap(), "not-an-event-id");
    let (status, _, body) = send(&node, Method::GET, headers, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = assert_error(&body, -32600, &Value::Null);
    assert!(message.contains("Last-Event-ID"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn last_event_id_of_another_session_is_400_like_an_unknown_one() {
    let node = start();
    let owner = session(&node, LATEST).await;
    let other = session(&node, LATEST).await;
    // The owner's stream: priming event, progress, response.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "slow", "arguments": {"steps": 2, "step_ms": 1},
                                 "_meta": {"progressToken": "secret-progress"}}});
    let Reply::Sse(mut stream) = owner.post(&call).await.unwrap() else {
        panic!("expected SSE for a call with progress");
    };
    let priming = stream.next_event().await.unwrap().unwrap();
    let event_id = priming.id.expect("priming event id");
    while stream.next_event().await.unwrap().is_some() {}

    let (status, _, foreign_body) = send(
        &node,
        Method::GET,
        with_last_event_id(other.session_id().unwrap(), &event_id),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{foreign_body}");
    let foreign = assert_error(&foreign_body, -32600, &Value::Null);
    assert!(!foreign_body.contains("secret-progress"), "{foreign_body}");
    assert!(!foreign_body.contains("done 2"), "{foreign_body}");

    // A well-formed id of a stream that exists nowhere.
    let (_, position) = event_id.split_once('.').unwrap();
    let unknown_id = format!("{}.{position}", "0".repeat(32));
    let (status, _, unknown_body) = send(
        &node,
        Method::GET,
        with_last_event_id(other.session_id().unwrap(), &unknown_id),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{unknown_body}");
    let unknown = assert_error(&unknown_body, -32600, &Value::Null);
    assert_eq!(foreign, unknown);

    assert_serving(&owner).await;
    assert_serving(&other).await;
}

#[tokio::test]
async fn hostile_origin_is_403_and_loopback_origin_is_served() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = post_headers(client.session_id());
    headers.insert(ORIGIN, HeaderValue::from_static("http://evil.example.com"));
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_error(&body, -32600, &Value::Null);

    let mut headers = post_headers(client.session_id());
    headers.insert(ORIGIN, HeaderValue::from_static("http://localhost:3000"));
    let (status, body) = post(&node, headers, &ping(2)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["id"], 2);
    assert_serving(&client).await;
}

#[tokio::test]
async fn hostile_origin_on_get_and_delete_is_403_and_ends_nothing() {
    let node = start();
    let client = session(&node, LATEST).await;
    let id = client.session_id().unwrap();
    let evil = HeaderValue::from_static("http://evil.example.com");
    let mut get = get_headers(id);
    get.insert(ORIGIN, evil.clone());
    let (status, _, body) = send(&node, Method::GET, get, "").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "GET: {body}");
    assert_error(&body, -32600, &Value::Null);
    let mut delete = get_headers(id);
    delete.remove(ACCEPT);
    delete.insert(ORIGIN, evil);
    let (status, _, body) = send(&node, Method::DELETE, delete, "").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "DELETE: {body}");
    assert_error(&body, -32600, &Value::Null);
    assert_serving(&client).await;
}

#[tokio::test]
async fn hostile_host_is_403_and_loopback_host_is_served() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = post_headers(client.session_id());
    headers.insert(HOST, HeaderValue::from_static("evil.example.com"));
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_error(&body, -32600, &Value::Null);

    let mut headers = post_headers(client.session_id());
    let host = format!("localhost:{}", node.addr().port());
    headers.insert(HOST, HeaderValue::from_str(&host).unwrap());
    let (status, body) = post(&node, headers, &ping(2)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["id"], 2);
    assert_serving(&client).await;
}

#[tokio::test]
async fn unsupported_protocol_version_header_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let mut headers = post_headers(client.session_id());
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("1999-01-01"),
    );
    let (status, body) = post(&node, headers, &ping(1)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // The version is checked once the body says which era the request is
    // of, so the error answers the request by its id.
    let message = assert_error(&body, -32600, &json!(1));
    assert!(message.contains("1999-01-01"), "{message}");
    for method in [Method::GET, Method::DELETE] {
        let mut headers = get_headers(client.session_id().unwrap());
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_static("1999-01-01"),
        );
        let (status, _, body) = send(&node, method.clone(), headers, "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method}: {body}");
        assert_error(&body, -32600, &Value::Null);
    }
    assert_serving(&client).await;
}

#[tokio::test]
async fn put_and_patch_are_405_with_allow() {
    let node = start();
    let client = session(&node, LATEST).await;
    for method in [Method::PUT, Method::PATCH] {
        let (status, headers, body) = send(
            &node,
            method.clone(),
            post_headers(client.session_id()),
            ping(1),
        )
        .await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        let allow = headers
            .get(ALLOW)
            .unwrap_or_else(|| panic!("{method}: no Allow header"))
            .to_str()
            .unwrap();
        let mut listed: Vec<&str> = allow.split(',').map(str::trim).collect();
        listed.sort_unstable();
        assert_eq!(listed, ["DELETE", "GET", "POST"], "{method}");
        assert_error(&body, -32600, &Value::Null);
    }
    assert_serving(&client).await;
}

#[tokio::test]
async fn initialize_with_a_session_id_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": LATEST, "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    })
    .to_string();
    let (status, headers, body) = send(
        &node,
        Method::POST,
        post_headers(client.session_id()),
        initialize,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(headers.get("mcp-session-id").is_none(), "{headers:?}");
    let message = assert_error(&body, -32600, &json!(1));
    assert!(message.contains("Mcp-Session-Id"), "{message}");
    assert_serving(&client).await;
}

#[tokio::test]
async fn a_refused_initialize_answers_with_its_request_id() {
    let mut config = NodeConfig::default();
    config.runtime.max_sessions = 1;
    let node = InProcessNode::start(fixtures::test_server(), config).unwrap();
    let first = session(&node, LATEST).await;
    let init = json!({"jsonrpc": "2.0", "id": "init-2", "method": "initialize", "params": {
        "protocolVersion": LATEST, "capabilities": {},
        "clientInfo": {"name": "second", "version": "0"}}});
    let (status, headers, body) =
        send(&node, Method::POST, post_headers(None), init.to_string()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "1");
    let message = assert_error(&body, -32603, &json!("init-2"));
    assert!(message.contains("too many sessions"), "{message}");
    assert_serving(&first).await;
}
