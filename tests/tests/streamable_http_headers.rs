//! Standard MCP request headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`)
//! checked against the body, and the headers and framing of the server's
//! answers (`Mcp-Session-Id`, SSE headers, the priming event).

use std::time::Duration;

use mcp_cluster_client::sse::SseStream;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{InProcessNode, fixtures, raw_http};
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

const LATEST: &str = "2025-11-25";
/// Guard against a hung test, not an assertion on timing.
const GUARD: Duration = Duration::from_secs(20);
/// `"Hello, 世界"` in the base64 sentinel form.
const HELLO_WORLD_BASE64: &str = "=?base64?SGVsbG8sIOS4lueVjA==?=";

fn start() -> InProcessNode {
    InProcessNode::start_default(fixtures::test_server()).unwrap()
}

async fn session(node: &InProcessNode, version: &str) -> Client {
    let mut client = Client::new(&node.url(), version);
    client.initialize(json!({})).await.unwrap();
    client
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            )
        })
        .collect()
}

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn call(id: i64, tool: &str, arguments: Value) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
}

/// POSTs `body` with `extra` headers; expects a JSON answer for `id` with a
/// result, and returns the result.
async fn expect_result(client: &Client, body: &Value, extra: HeaderMap) -> Value {
    match client.post_with(body, extra).await.unwrap() {
        Reply::Json(value, _) => {
            assert_eq!(value["id"], body["id"], "{value}");
            assert!(value.get("error").is_none(), "{value}");
            value["result"].clone()
        }
        other => panic!("expected a JSON result, got {other:?}"),
    }
}

/// POSTs `body` with `extra` headers; expects 400 with a HeaderMismatch
/// error for the body's id, and returns the error message.
async fn expect_mismatch(client: &Client, body: &Value, extra: HeaderMap) -> String {
    match client.post_with(body, extra).await.unwrap() {
        Reply::Status(status, text, _) => {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
            assert_header_mismatch(&text, &body["id"])
        }
        other => panic!("expected 400, got {other:?}"),
    }
}

fn assert_header_mismatch(text: &str, id: &Value) -> String {
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}"));
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    assert_eq!(value["error"]["code"], -32020, "{value}");
    assert_eq!(&value["id"], id, "{value}");
    value["error"]["message"].as_str().unwrap().to_owned()
}

fn echoed(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap();
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn matching_mcp_method_is_served() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = request(1, "tools/list", json!({}));
    let result = expect_result(&client, &body, headers(&[("mcp-method", "tools/list")])).await;
    assert!(result["tools"].is_array(), "{result}");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 999}});
    let extra = headers(&[("mcp-method", "notifications/cancelled")]);
    assert!(matches!(
        client.post_with(&note, extra).await.unwrap(),
        Reply::Accepted
    ));
}

#[tokio::test]
async fn mismatching_mcp_method_is_400_header_mismatch() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = request(2, "tools/list", json!({}));
    let message = expect_mismatch(&client, &body, headers(&[("mcp-method", "prompts/list")])).await;
    assert!(message.contains("prompts/list"), "{message}");
    // Header values are case-sensitive.
    expect_mismatch(&client, &body, headers(&[("mcp-method", "Tools/List")])).await;
}

#[tokio::test]
async fn mcp_method_on_a_notification_is_checked() {
    let node = start();
    let client = session(&node, LATEST).await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 999}});
    match client
        .post_with(&note, headers(&[("mcp-method", "tools/call")]))
        .await
        .unwrap()
    {
        Reply::Status(status, text, _) => {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
            assert_header_mismatch(&text, &Value::Null);
        }
        other => panic!("expected 400, got {other:?}"),
    }
}

#[tokio::test]
async fn mcp_name_of_tools_call_is_checked_against_params_name() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = call(3, "echo", json!({"message": "hi"}));
    let ok = headers(&[("mcp-method", "tools/call"), ("mcp-name", "echo")]);
    let result = expect_result(&client, &body, ok).await;
    assert_eq!(result["content"][0]["text"], "hi");
    let bad = headers(&[("mcp-method", "tools/call"), ("mcp-name", "slow")]);
    let message = expect_mismatch(&client, &body, bad).await;
    assert!(message.contains("slow"), "{message}");
}

#[tokio::test]
async fn mcp_name_of_resources_read_is_checked_against_params_uri() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = request(4, "resources/read", json!({"uri": "test://r"}));
    let result = expect_result(&client, &body, headers(&[("mcp-name", "test://r")])).await;
    assert_eq!(result["contents"][0]["text"], "resource text");
    expect_mismatch(&client, &body, headers(&[("mcp-name", "test://other")])).await;
}

#[tokio::test]
async fn mcp_name_of_prompts_get_is_checked_against_params_name() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = request(
        5,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "Ada"}}),
    );
    let result = expect_result(&client, &body, headers(&[("mcp-name", "greet")])).await;
    assert_eq!(result["messages"][0]["content"]["text"], "Hello Ada");
    expect_mismatch(&client, &body, headers(&[("mcp-name", "Ada")])).await;
}

#[tokio::test]
async fn plain_mcp_param_matching_the_argument_is_served() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = call(6, "mirrored", json!({"region": "us-west1", "query": "q"}));
    let extra = headers(&[("mcp-name", "mirrored"), ("mcp-param-region", "us-west1")]);
    let result = expect_result(&client, &body, extra).await;
    assert_eq!(echoed(&result)["region"], "us-west1");
}

#[tokio::test]
async fn plain_mcp_param_not_matching_the_argument_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = call(7, "mirrored", json!({"region": "us-west1", "query": "q"}));
    let message =
        expect_mismatch(&client, &body, headers(&[("mcp-param-region", "eu-west1")])).await;
    assert!(message.contains("Region"), "{message}");
}

#[tokio::test]
async fn base64_mcp_param_of_a_non_ascii_argument_is_served() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = call(
        8,
        "mirrored",
        json!({"region": "Hello, 世界", "query": "q"}),
    );
    let extra = headers(&[("mcp-param-region", HELLO_WORLD_BASE64)]);
    let result = expect_result(&client, &body, extra).await;
    assert_eq!(echoed(&result)["region"], "Hello, 世界");
    // The same sentinel against another value disagrees.
    let other = call(9, "mirrored", json!({"region": "Hello", "query": "q"}));
    let extra = headers(&[("mcp-param-region", HELLO_WORLD_BASE64)]);
    expect_mismatch(&client, &other, extra).await;
}

#[tokio::test]
async fn invalid_base64_mcp_param_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = call(
        10,
        "mirrored",
        json!({"region": "Hello, 世界", "query": "q"}),
    );
    let extra = headers(&[("mcp-param-region", "=?base64?not*base64!?=")]);
    expect_mismatch(&client, &body, extra).await;
}

#[tokio::test]
async fn mcp_param_without_the_argument_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let body = call(11, "mirrored", json!({"query": "q"}));
    let extra = headers(&[("mcp-param-region", "us-west1")]);
    expect_mismatch(&client, &body, extra).await;
    // A null argument is an absent one.
    let body = call(12, "mirrored", json!({"region": null, "query": "q"}));
    let extra = headers(&[("mcp-param-region", "us-west1")]);
    expect_mismatch(&client, &body, extra).await;
}

/// POSTs over a plain socket so header names reach the server exactly as
/// written here (reqwest lowercases them). Returns the status and body.
async fn post_raw(
    node: &InProcessNode,
    session: &str,
    lines: &[&str],
    body: &Value,
) -> (u16, String) {
    let addr = node.addr();
    let body = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {LATEST}\r\n\
         MCP-SESSION-ID: {session}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for line in lines {
        head.push_str(line);
        head.push_str("\r\n");
    }
    let head = head.trim_end_matches("\r\n").to_owned();
    tokio::task::spawn_blocking(move || raw_http(addr, &head, &body).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn standard_header_names_are_case_insensitive() {
    let node = start();
    let client = session(&node, LATEST).await;
    let id = client.session_id().unwrap();
    let body = call(13, "mirrored", json!({"region": "us-west1", "query": "q"}));
    let matching = [
        "MCP-METHOD: tools/call",
        "mcp-NAME: mirrored",
        "MCP-Param-REGION: us-west1",
    ];
    let (status, text) = post_raw(&node, id, &matching, &body).await;
    assert_eq!(status, 200, "{text}");
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(echoed(&value["result"])["region"], "us-west1");
    // Each header, spelled oddly, is still recognized: a wrong value is
    // refused.
    for line in [
        "MCP-METHOD: tools/list",
        "mcp-NAME: echo",
        "MCP-Param-REGION: eu-west1",
    ] {
        let (status, text) = post_raw(&node, id, &[line], &body).await;
        assert_eq!(status, 400, "{line}: {text}");
        assert_header_mismatch(&text, &json!(13));
    }
}

#[tokio::test]
async fn initialize_answers_with_a_uuid_session_id() {
    let node = start();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": LATEST, "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    let response = reqwest::Client::new()
        .post(node.url())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-method", "initialize")
        .body(body.to_string())
        .timeout(GUARD)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let id = response
        .headers()
        .get("mcp-session-id")
        .expect("Mcp-Session-Id on the initialize response")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id:?}");
    assert_eq!(id.len(), 36, "{id:?}");
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "{id:?}");
    assert!(
        id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
        "{id:?}"
    );
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["result"]["protocolVersion"], LATEST);
}

#[tokio::test]
async fn initialize_with_a_mismatching_mcp_method_is_400_without_a_session() {
    let node = start();
    let body = json!({
        "jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": LATEST, "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    let response = reqwest::Client::new()
        .post(node.url())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-method", "tools/list")
        .body(body.to_string())
        .timeout(GUARD)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.headers().get("mcp-session-id").is_none());
    assert_header_mismatch(&response.text().await.unwrap(), &json!("init"));
}

fn slow_with_progress(id: i64, steps: u64) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": "slow", "arguments": {"steps": steps, "step_ms": 1},
               "_meta": {"progressToken": "p"}}),
    )
}

/// POSTs `body` in `client`'s session with reqwest, returning the raw
/// response (so its headers can be read).
async fn post_for_response(client: &Client, version: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(client.url())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", version)
        .header("mcp-session-id", client.session_id().unwrap())
        .body(body.to_string())
        .timeout(GUARD)
        .send()
        .await
        .unwrap()
}

fn assert_sse_headers(headers: &HeaderMap) {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    assert_eq!(
        get(CONTENT_TYPE.as_str()),
        Some("text/event-stream"),
        "{headers:?}"
    );
    assert_eq!(get("x-accel-buffering"), Some("no"), "{headers:?}");
    assert_eq!(get(CACHE_CONTROL.as_str()), Some("no-cache"), "{headers:?}");
}

#[tokio::test]
async fn sse_responses_carry_the_streaming_headers() {
    let node = start();
    let client = session(&node, LATEST).await;
    let response = post_for_response(&client, LATEST, &slow_with_progress(1, 2)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_sse_headers(response.headers());
    let mut stream = SseStream::new(response);
    while stream.next_event().await.unwrap().is_some() {}

    let standalone = reqwest::Client::new()
        .get(client.url())
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", LATEST)
        .header("mcp-session-id", client.session_id().unwrap())
        .timeout(GUARD)
        .send()
        .await
        .unwrap();
    assert_eq!(standalone.status(), StatusCode::OK);
    assert_sse_headers(standalone.headers());
}

/// Reads a whole SSE answer; returns its blocks.
async fn read_all(mut stream: SseStream) -> Vec<mcp_cluster_client::sse::SseEvent> {
    let mut events = Vec::new();
    let read = async {
        while let Some(event) = stream.next_event().await.unwrap() {
            events.push(event);
        }
    };
    tokio::time::timeout(GUARD, read)
        .await
        .expect("stream did not end");
    events
}

#[tokio::test]
async fn post_sse_stream_of_a_2025_11_25_session_opens_with_a_priming_event() {
    let node = start();
    let client = session(&node, LATEST).await;
    let response = post_for_response(&client, LATEST, &slow_with_progress(1, 2)).await;
    assert_sse_headers(response.headers());
    let events = read_all(SseStream::new(response)).await;
    let priming = events.first().expect("an event");
    assert!(
        priming.id.as_deref().is_some_and(|id| !id.is_empty()),
        "{priming:?}"
    );
    assert!(priming.retry.is_some(), "{priming:?}");
    assert!(priming.has_data && priming.data.is_empty(), "{priming:?}");
    // Then the progress notifications and the response, each with its own id.
    let messages: Vec<Value> = events[1..]
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[2]["id"], 1);
    assert_eq!(messages[2]["result"]["content"][0]["text"], "done 2");
    let mut ids: Vec<&str> = events.iter().filter_map(|e| e.id.as_deref()).collect();
    assert_eq!(ids.len(), events.len());
    ids.dedup();
    assert_eq!(ids.len(), events.len(), "event ids repeat: {events:?}");
}

#[tokio::test]
async fn post_sse_stream_of_a_2025_03_26_session_has_no_priming_event() {
    let node = start();
    let client = session(&node, "2025-03-26").await;
    let response = post_for_response(&client, "2025-03-26", &slow_with_progress(1, 2)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_sse_headers(response.headers());
    let events = read_all(SseStream::new(response)).await;
    assert_eq!(events.len(), 3, "{events:?}");
    for event in &events {
        assert!(!event.data.is_empty(), "empty data event: {event:?}");
        assert_eq!(event.retry, None, "{event:?}");
        serde_json::from_str::<Value>(&event.data).unwrap();
    }
    assert!(
        events[0].data.contains("notifications/progress"),
        "{events:?}"
    );
    let last: Value = serde_json::from_str(&events[2].data).unwrap();
    assert_eq!(last["result"]["content"][0]["text"], "done 2");
}

#[tokio::test]
async fn repeated_standard_header_with_a_disagreeing_value_is_400() {
    let node = start();
    let client = session(&node, LATEST).await;
    let id = client.session_id().unwrap();
    let body = call(14, "mirrored", json!({"region": "us-west1", "query": "q"}));
    // A proxy may route on any one of repeated values: every one must
    // agree with the body, whichever comes first.
    for (name, good, bad) in [
        ("Mcp-Method", "tools/call", "tools/list"),
        ("Mcp-Name", "mirrored", "echo"),
        ("Mcp-Param-Region", "us-west1", "eu-west1"),
    ] {
        for (first, second) in [(good, bad), (bad, good)] {
            let lines = [format!("{name}: {first}"), format!("{name}: {second}")];
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let (status, text) = post_raw(&node, id, &lines, &body).await;
            assert_eq!(status, 400, "{name}: {first}, {second}: {text}");
            assert_header_mismatch(&text, &json!(14));
        }
    }
}
