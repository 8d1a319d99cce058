//! The legacy HTTP+SSE transport (2024-11-05): GET /sse announces the
//! message endpoint, every POST there gets 202, and every answer travels on
//! the SSE stream as `event: message`.

use std::time::Duration;

use mcp_cluster_client::{SseEvent, SseStream};
use mcp_cluster_testkit::{InProcessNode, fixtures, within};
use serde_json::{Value, json};

/// GET /sse; returns the stream and the endpoint it announced.
async fn connect(http: &reqwest::Client, node: &InProcessNode) -> (SseStream, String) {
    let response = within(
        "GET /sse",
        http.get(format!("{}/sse", node.base_url()))
            .header("accept", "text/event-stream")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let mut stream = SseStream::new(response);
    let endpoint = next_event(&mut stream).await.expect("an endpoint event");
    assert_eq!(endpoint.event.as_deref(), Some("endpoint"));
    (stream, endpoint.data)
}

async fn next_event(stream: &mut SseStream) -> Option<SseEvent> {
    within("next event", stream.next_event()).await.unwrap()
}

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> reqwest::StatusCode {
    within(
        "POST",
        http.post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send(),
    )
    .await
    .unwrap()
    .status()
}

/// The next message event; it must be named `message`.
async fn next_message(stream: &mut SseStream) -> Value {
    let event = next_event(stream).await.expect("the stream ended");
    assert_eq!(event.event.as_deref(), Some("message"), "{event:?}");
    serde_json::from_str(&event.data).unwrap()
}

#[tokio::test]
async fn a_legacy_session_from_endpoint_to_tool_call() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let http = reqwest::Client::new();
    let (mut stream, endpoint) = connect(&http, &node).await;
    let session = endpoint
        .strip_prefix("/messages?sessionId=")
        .unwrap_or_else(|| panic!("unexpected endpoint {endpoint}"));
    assert!(!session.is_empty());
    let url = format!("{}{endpoint}", node.base_url());

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "0"}}});
    assert_eq!(post(&http, &url, &init).await, 202);
    let answer = next_message(&mut stream).await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["protocolVersion"], "2024-11-05");
    assert!(answer["result"]["capabilities"]["tools"].is_object());

    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&http, &url, &initialized).await, 202);

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": "legacy"}}});
    assert_eq!(post(&http, &url, &call).await, 202);
    let answer = next_message(&mut stream).await;
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["content"][0]["text"], "legacy");

    // Progress and the response of a slow call share the one stream.
    let slow = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"steps": 2, "step_ms": 5}, "_meta": {"progressToken": "p"}}});
    assert_eq!(post(&http, &url, &slow).await, 202);
    let first = next_message(&mut stream).await;
    let second = next_message(&mut stream).await;
    let response = next_message(&mut stream).await;
    assert_eq!(first["params"]["progress"], 1.0);
    assert_eq!(second["params"]["progress"], 2.0);
    assert_eq!(response["id"], 3);
    assert_eq!(response["result"]["content"][0]["text"], "done 2");
}

#[tokio::test]
async fn a_malformed_message_is_refused_and_the_stream_goes_on() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let http = reqwest::Client::new();
    let (mut stream, endpoint) = connect(&http, &node).await;
    let url = format!("{}{endpoint}", node.base_url());

    let bad = within(
        "POST",
        http.post(&url)
            .header("content-type", "application/json")
            .body("{not json")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = serde_json::from_str(&within("body", bad.text()).await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], -32700, "{body}");

    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(post(&http, &url, &ping).await, 202);
    assert_eq!(next_message(&mut stream).await["id"], 1);
}

#[tokio::test]
async fn an_unknown_session_id_gets_404() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let http = reqwest::Client::new();
    let url = format!(
        "{}/messages?sessionId=00000000-0000-4000-8000-000000000000",
        node.base_url()
    );
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(post(&http, &url, &ping).await, 404);
}

#[tokio::test]
async fn closing_the_sse_stream_ends_the_legacy_session() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let http = reqwest::Client::new();
    let (stream, endpoint) = connect(&http, &node).await;
    let url = format!("{}{endpoint}", node.base_url());
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(post(&http, &url, &ping).await, 202);

    drop(stream);

    // The server notices the disconnect on its next write; poll until then.
    within("session end", async {
        loop {
            if post(&http, &url, &ping).await == 404 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_server_request_travels_on_the_legacy_stream_and_is_answered_by_post() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let http = reqwest::Client::new();
    let (mut stream, endpoint) = connect(&http, &node).await;
    let url = format!("{}{endpoint}", node.base_url());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "legacy", "version": "0"}}});
    assert_eq!(post(&http, &url, &init).await, 202);
    next_message(&mut stream).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&http, &url, &initialized).await, 202);

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "sample", "arguments": {"prompt": "p"}}});
    assert_eq!(post(&http, &url, &call).await, 202);
    let ask = next_message(&mut stream).await;
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "legacy answer"}, "model": "m"}});
    assert_eq!(post(&http, &url, &answer).await, 202);

    let response = next_message(&mut stream).await;
    assert_eq!(response["id"], 2);
    assert_eq!(response["result"]["content"][0]["text"], "legacy answer");
}

#[tokio::test]
async fn a_cancelled_legacy_call_sends_nothing_more() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let http = reqwest::Client::new();
    let (mut stream, endpoint) = connect(&http, &node).await;
    let url = format!("{}{endpoint}", node.base_url());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "0"}}});
    post(&http, &url, &init).await;
    next_message(&mut stream).await;
    post(
        &http,
        &url,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;

    let slow = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"steps": 20, "step_ms": 300},
        "_meta": {"progressToken": "p"}}});
    post(&http, &url, &slow).await;
    assert_eq!(next_message(&mut stream).await["params"]["progress"], 1.0);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 2}});
    assert_eq!(post(&http, &url, &cancel).await, 202);
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(post(&http, &url, &ping).await, 202);

    // The next message is the ping's answer; no progress and no response of
    // the cancelled call come before or after it.
    let next = next_message(&mut stream).await;
    assert_eq!(next["id"], 3, "{next}");
    let quiet = tokio::time::timeout(Duration::from_millis(700), stream.next_event()).await;
    assert!(quiet.is_err(), "the cancelled call went on: {quiet:?}");
}

#[tokio::test]
async fn a_tool_closing_its_stream_does_not_end_a_legacy_session() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let http = reqwest::Client::new();
    let (mut stream, endpoint) = connect(&http, &node).await;
    let url = format!("{}{endpoint}", node.base_url());
    // A client may negotiate a newer revision over the old transport.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "0"}}});
    post(&http, &url, &init).await;
    assert_eq!(
        next_message(&mut stream).await["result"]["protocolVersion"],
        "2025-11-25"
    );
    post(
        &http,
        &url,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "drop_stream", "arguments": {"after_ms": 50}}});
    assert_eq!(post(&http, &url, &call).await, 202);

    let response = next_message(&mut stream).await;
    assert_eq!(response["id"], 2, "{response}");
    assert_eq!(response["result"]["content"][0]["text"], "after reconnect");
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(post(&http, &url, &ping).await, 202);
    assert_eq!(next_message(&mut stream).await["id"], 3);
}
