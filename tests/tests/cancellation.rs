//! Cancellation: `notifications/cancelled` (and its `$/cancelRequest` alias)
//! stops a running request, closes its stream without a response, and leaves
//! the session working; DELETE cancels everything in flight.

use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{InProcessNode, fixtures, within};
use serde_json::{Value, json};

/// Steps of `slow` far apart, so that nothing is due while a cancel travels.
const SLOW_STEP_MS: u64 = 300;

/// A second client on the same session (a `Client` is not shared across tasks).
fn same_session(node: &InProcessNode, client: &Client) -> Client {
    let mut other = node.client();
    other.set_session_id(client.session_id().map(str::to_owned));
    other
}

fn slow_call(id: i64, token: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"steps": 20, "step_ms": SLOW_STEP_MS},
        "_meta": {"progressToken": token}}})
}

async fn open_sse(client: &Client, body: &Value) -> SseStream {
    match within("POST", client.post(body)).await.unwrap() {
        Reply::Sse(stream) => stream,
        other => panic!("expected an SSE answer, got {other:?}"),
    }
}

async fn next_message(stream: &mut SseStream) -> Option<Value> {
    within("next message", stream.next_message()).await.unwrap()
}

fn progress_value(message: &Value) -> Option<f64> {
    (message["method"] == "notifications/progress")
        .then(|| message["params"]["progress"].as_f64())
        .flatten()
}

/// Reads progress until `count` arrived; returns the values.
async fn read_progress(stream: &mut SseStream, count: usize) -> Vec<f64> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let message = next_message(stream).await.expect("stream ended early");
        seen.push(progress_value(&message).expect("a progress notification"));
    }
    seen
}

async fn assert_ends_without_anything(mut stream: SseStream) {
    if let Some(message) = next_message(&mut stream).await {
        panic!("nothing may follow a cancellation, got {message}");
    }
}

async fn assert_session_works(client: &Client) {
    let (response, _) = within(
        "echo",
        client.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "still here"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(response["result"]["content"][0]["text"], "still here");
}

async fn cancel_running_slow_call(method: &str, params: impl Fn(i64) -> Value) {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let mut stream = open_sse(&client, &slow_call(id, "tok")).await;
    assert_eq!(read_progress(&mut stream, 2).await, vec![1.0, 2.0]);

    let cancel = json!({"jsonrpc": "2.0", "method": method, "params": params(id)});
    assert!(matches!(
        within("cancel", client.post(&cancel)).await.unwrap(),
        Reply::Accepted
    ));

    assert_ends_without_anything(stream).await;
    assert_session_works(&client).await;
}

#[tokio::test]
async fn notifications_cancelled_stops_a_running_call_and_closes_its_stream() {
    cancel_running_slow_call(
        "notifications/cancelled",
        |id| json!({"requestId": id, "reason": "test"}),
    )
    .await;
}

#[tokio::test]
async fn cancel_request_alias_with_id_stops_a_running_call() {
    cancel_running_slow_call("$/cancelRequest", |id| json!({"id": id})).await;
}

#[tokio::test]
async fn cancelling_one_call_leaves_a_concurrent_call_of_the_session_running() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let first = client.next_id();
    let second = client.next_id();
    let mut cancelled = open_sse(&client, &slow_call(first, "a")).await;
    let mut kept = open_sse(
        &client,
        &json!({"jsonrpc": "2.0", "id": second, "method": "tools/call", "params": {
            "name": "slow", "arguments": {"steps": 3, "step_ms": 20},
            "_meta": {"progressToken": "b"}}}),
    )
    .await;
    read_progress(&mut cancelled, 1).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": first}});
    assert!(matches!(
        client.post(&cancel).await.unwrap(),
        Reply::Accepted
    ));
    assert_ends_without_anything(cancelled).await;

    let mut last = None;
    while let Some(message) = next_message(&mut kept).await {
        last = Some(message);
    }
    let last = last.expect("the other call answered");
    assert_eq!(last["id"], second);
    assert_eq!(last["result"]["content"][0]["text"], "done 3");
}

#[tokio::test]
async fn cancelling_a_pending_json_post_closes_it_with_an_empty_event_stream() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let canceller = same_session(&node, &client);
    let id = client.next_id();
    let hang = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "hang", "arguments": {}}});
    let mut post = tokio::spawn(async move { client.post(&hang).await });

    // The cancel may overtake the request on another worker (an unknown id
    // is ignored), so it is repeated until the POST completes.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": id}});
    let reply = within("cancelled POST", async {
        loop {
            assert!(matches!(
                canceller.post(&cancel).await.unwrap(),
                Reply::Accepted
            ));
            if let Ok(done) = tokio::time::timeout(Duration::from_millis(200), &mut post).await {
                break done.unwrap().unwrap();
            }
        }
    })
    .await;
    let Reply::Sse(mut stream) = reply else {
        panic!("expected an empty 200 text/event-stream, got {reply:?}");
    };
    let first = within("empty body", stream.next_event()).await.unwrap();
    assert_eq!(first, None, "the body must be empty");
    assert_session_works(&canceller).await;
}

#[tokio::test]
async fn delete_ends_the_streams_of_in_flight_requests() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let mut stream = open_sse(&client, &slow_call(client.next_id(), "t")).await;
    read_progress(&mut stream, 1).await;

    assert_eq!(within("DELETE", client.delete()).await.unwrap(), 200);

    assert_ends_without_anything(stream).await;
}

#[tokio::test]
async fn delete_closes_a_pending_json_post_without_a_response() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let deleter = same_session(&node, &client);
    let hang = json!({"jsonrpc": "2.0", "id": client.next_id(), "method": "tools/call",
                      "params": {"name": "hang", "arguments": {}}});
    let post = tokio::spawn(async move { client.post(&hang).await });
    // Let the request reach the session before the session ends.
    tokio::time::sleep(Duration::from_millis(200)).await;

    assert_eq!(within("DELETE", deleter.delete()).await.unwrap(), 200);

    match within("POST", post).await.unwrap().unwrap() {
        Reply::Sse(stream) => assert_ends_without_anything(stream).await,
        other => panic!("expected an empty event stream, got {other:?}"),
    }
}

#[tokio::test]
async fn cancelling_a_call_waiting_for_the_client_ends_it_and_a_late_answer_is_ignored() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let mut client = node.client();
    within("initialize", client.initialize(json!({"sampling": {}})))
        .await
        .unwrap();
    let id = client.next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "sample", "arguments": {"prompt": "p"}}});
    let mut stream = open_sse(&client, &call).await;
    let ask = next_message(&mut stream).await.expect("a sampling request");
    assert_eq!(ask["method"], "sampling/createMessage");

    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": id}});
    assert!(matches!(
        client.post(&cancel).await.unwrap(),
        Reply::Accepted
    ));
    assert_ends_without_anything(stream).await;

    let late = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "late"}, "model": "m"}});
    assert!(matches!(client.post(&late).await.unwrap(), Reply::Accepted));
    assert_session_works(&client).await;
}

#[tokio::test]
async fn cancelling_with_a_string_id_or_an_unknown_id() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let unknown = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "never-sent"}});
    assert!(matches!(
        client.post(&unknown).await.unwrap(),
        Reply::Accepted
    ));

    let mut body = slow_call(0, "s");
    body["id"] = json!("call-one");
    let mut stream = open_sse(&client, &body).await;
    read_progress(&mut stream, 1).await;
    // Same digits, other type: a different id, so nothing is cancelled.
    let numeric = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 1}});
    client.post(&numeric).await.unwrap();
    let still_running = next_message(&mut stream).await.expect("still running");
    assert_eq!(progress_value(&still_running), Some(2.0));
    let by_string = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": "call-one"}});
    client.post(&by_string).await.unwrap();
    assert_ends_without_anything(stream).await;
    assert_session_works(&client).await;
}
