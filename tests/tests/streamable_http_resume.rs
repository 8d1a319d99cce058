//! Resumability: a dropped SSE stream resumes with `Last-Event-ID`, replaying
//! exactly the missed events in order, then goes on live to the response;
//! the server may close a stream early (polling); the standalone stream has
//! one reader at a time and sends keep-alives while idle.

use std::time::Duration;

use mcp_cluster::{McpServer, NodeConfig};
use mcp_cluster_client::{Client, Reply, SseEvent, SseStream};
use mcp_cluster_testkit::{InProcessNode, fixtures, within};
use serde_json::{Value, json};

fn slow_call(id: i64, steps: u64, step_ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"steps": steps, "step_ms": step_ms},
        "_meta": {"progressToken": "resume"}}})
}

fn expect_sse(reply: Reply) -> SseStream {
    match reply {
        Reply::Sse(stream) => stream,
        other => panic!("expected an SSE stream, got {other:?}"),
    }
}

async fn post_sse(client: &Client, body: &Value) -> SseStream {
    expect_sse(within("POST", client.post(body)).await.unwrap())
}

async fn resume(client: &Client, last_event_id: &str) -> SseStream {
    expect_sse(
        within("GET resume", client.get(Some(last_event_id)))
            .await
            .unwrap(),
    )
}

async fn next_event(stream: &mut SseStream) -> Option<SseEvent> {
    within("next event", stream.next_event()).await.unwrap()
}

fn message(event: &SseEvent) -> Value {
    serde_json::from_str(&event.data).unwrap_or_else(|err| panic!("{err}: {event:?}"))
}

fn progress_of(message: &Value) -> f64 {
    assert_eq!(message["method"], "notifications/progress", "{message}");
    message["params"]["progress"].as_f64().unwrap()
}

/// The priming event: an id, `retry`, empty data.
async fn priming(stream: &mut SseStream) -> String {
    let event = next_event(stream).await.expect("a priming event");
    assert!(event.has_data && event.data.is_empty(), "{event:?}");
    assert!(event.retry.is_some(), "{event:?}");
    event.id.expect("the priming event has an id")
}

/// Reads a stream to its end: (progress values, the response, event ids).
async fn read_to_end(stream: &mut SseStream) -> (Vec<f64>, Option<Value>, Vec<String>) {
    let mut progress = Vec::new();
    let mut response = None;
    let mut ids = Vec::new();
    while let Some(event) = next_event(stream).await {
        assert!(
            event.has_data,
            "no bare block on a completed stream: {event:?}"
        );
        assert!(
            response.is_none(),
            "nothing may follow the response: {event:?}"
        );
        ids.push(event.id.clone().expect("every event has an id"));
        let m = message(&event);
        if m.get("method").is_some() {
            progress.push(progress_of(&m));
        } else {
            response = Some(m);
        }
    }
    (progress, response, ids)
}

#[tokio::test]
async fn resuming_after_a_drop_delivers_exactly_the_missed_events_then_the_response() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let mut stream = post_sse(&client, &slow_call(id, 10, 50)).await;
    let priming_id = priming(&mut stream).await;
    let mut first_ids = Vec::new();
    for expected in 1..=3 {
        let event = next_event(&mut stream).await.unwrap();
        assert_eq!(progress_of(&message(&event)), f64::from(expected));
        first_ids.push(event.id.unwrap());
    }
    let last_read = first_ids[2].clone();
    drop(stream);
    // Events go on into the log while no one listens.
    tokio::time::sleep(Duration::from_millis(120)).await;

    let mut resumed = resume(&client, &last_read).await;
    let (progress, response, resumed_ids) = read_to_end(&mut resumed).await;
    assert_eq!(progress, vec![4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
    let response = response.expect("the resumed stream ends with the response");
    assert_eq!(response["id"], id);
    assert_eq!(response["result"]["content"][0]["text"], "done 10");
    assert!(resumed_ids.iter().all(|i| !first_ids.contains(i)));

    // From the priming event: everything, once.
    let mut replay = resume(&client, &priming_id).await;
    let (progress, response, replay_ids) = read_to_end(&mut replay).await;
    assert_eq!(progress, (1..=10).map(f64::from).collect::<Vec<_>>());
    assert_eq!(response.unwrap()["id"], id);
    assert_eq!(&replay_ids[..3], &first_ids[..]);
    assert_eq!(&replay_ids[3..], &resumed_ids[..]);
}

#[tokio::test]
async fn resuming_a_finished_stream_replays_its_tail_and_ends() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let mut stream = post_sse(&client, &slow_call(id, 4, 5)).await;
    priming(&mut stream).await;
    let (progress, response, ids) = read_to_end(&mut stream).await;
    assert_eq!(progress, vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(response.unwrap()["id"], id);

    let mut tail = resume(&client, &ids[1]).await;
    let (progress, response, tail_ids) = read_to_end(&mut tail).await;
    assert_eq!(progress, vec![3.0, 4.0]);
    assert_eq!(response.unwrap()["id"], id);
    assert_eq!(tail_ids, ids[2..]);

    // From the response itself: nothing left, the stream just ends.
    let mut empty = resume(&client, ids.last().unwrap()).await;
    assert_eq!(next_event(&mut empty).await, None);
}

#[tokio::test]
async fn a_stream_the_server_closes_early_is_resumed_to_the_result() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "drop_stream", "arguments": {"after_ms": 300}}});
    let mut stream = post_sse(&client, &call).await;
    let priming_id = priming(&mut stream).await;
    let retry = next_event(&mut stream).await.expect("a retry block");
    assert!(retry.retry.is_some() && !retry.has_data, "{retry:?}");
    assert_eq!(next_event(&mut stream).await, None, "then EOF");

    let mut resumed = resume(&client, &priming_id).await;
    let (progress, response, _) = read_to_end(&mut resumed).await;
    assert!(progress.is_empty(), "no progress token, no progress");
    let response = response.expect("the result after reconnecting");
    assert_eq!(response["id"], id);
    assert_eq!(response["result"]["content"][0]["text"], "after reconnect");
}

#[tokio::test]
async fn a_stream_closed_early_after_progress_resumes_without_loss_or_duplicates() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "drop_stream", "arguments": {"after_ms": 300},
        "_meta": {"progressToken": 1}}});
    let mut stream = post_sse(&client, &call).await;
    priming(&mut stream).await;
    // The server may close before or after sending progress 1.
    let mut seen = Vec::new();
    let mut saw_retry = false;
    while let Some(event) = next_event(&mut stream).await {
        assert!(!saw_retry, "nothing after the retry block: {event:?}");
        if event.has_data {
            seen.push(progress_of(&message(&event)));
        } else {
            assert!(event.retry.is_some(), "{event:?}");
            saw_retry = true;
        }
    }
    assert!(saw_retry, "the server closes with a retry block");

    let last_id = stream.last_event_id.clone().unwrap();
    let mut resumed = resume(&client, &last_id).await;
    let (progress, response, _) = read_to_end(&mut resumed).await;
    seen.extend(progress);
    assert_eq!(seen, vec![1.0, 2.0], "each progress once, in order");
    assert_eq!(
        response.unwrap()["result"]["content"][0]["text"],
        "after reconnect"
    );
}

async fn standalone(client: &Client) -> SseStream {
    expect_sse(within("GET", client.get(None)).await.unwrap())
}

async fn tools_list_changed(server: &McpServer, stream: &mut SseStream, tool: &str) {
    server.add_tool(
        mcp_cluster::ToolDef::new(tool, "Added.", json!({"type": "object"}), |_, _| async {
            Ok(mcp_cluster::protocol::types::CallToolResult::text("added"))
        })
        .unwrap(),
    );
    let note = within("list_changed", stream.next_message())
        .await
        .unwrap()
        .expect("the stream ended");
    assert_eq!(note["method"], "notifications/tools/list_changed");
}

#[tokio::test]
async fn a_second_standalone_get_takes_over_and_the_first_ends_with_retry() {
    let server = fixtures::test_server();
    let node = InProcessNode::start_default(server.clone()).unwrap();
    let client = node.session(json!({})).await;
    let mut first = standalone(&client).await;
    priming(&mut first).await;

    let mut second = standalone(&client).await;

    let retry = next_event(&mut first).await.expect("a retry block");
    assert!(retry.retry.is_some() && !retry.has_data, "{retry:?}");
    assert_eq!(next_event(&mut first).await, None);
    priming(&mut second).await;
    tools_list_changed(&server, &mut second, "after_takeover").await;
}

#[tokio::test]
async fn the_standalone_stream_resumes_from_its_last_event_id() {
    let server = fixtures::test_server();
    let node = InProcessNode::start_default(server.clone()).unwrap();
    let client = node.session(json!({})).await;
    let mut get = standalone(&client).await;
    priming(&mut get).await;
    tools_list_changed(&server, &mut get, "one").await;
    let seen = get.last_event_id.clone().unwrap();
    drop(get);
    // Sent while no one listens.
    server.add_tool(
        mcp_cluster::ToolDef::new("two", "Added.", json!({"type": "object"}), |_, _| async {
            Ok(mcp_cluster::protocol::types::CallToolResult::text("added"))
        })
        .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut resumed = resume(&client, &seen).await;
    let missed = within("missed", resumed.next_message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(missed["method"], "notifications/tools/list_changed");
    assert_ne!(resumed.last_event_id.as_deref(), Some(seen.as_str()));
    tools_list_changed(&server, &mut resumed, "three").await;
}

#[tokio::test]
async fn an_idle_standalone_stream_gets_keep_alive_comments() {
    let mut config = NodeConfig::default();
    config.runtime.sse_keep_alive_secs = 1;
    let node = InProcessNode::start(fixtures::test_server(), config).unwrap();
    let client = node.session(json!({})).await;
    let mut get = standalone(&client).await;
    priming(&mut get).await;

    within("keep-alive", async {
        while get.comments() == 0 {
            // Comments are not events: poll the body in short slices.
            if let Ok(event) =
                tokio::time::timeout(Duration::from_millis(200), get.next_event()).await
            {
                panic!("an idle stream carries no events: {event:?}");
            }
        }
    })
    .await;
    assert!(get.comments() >= 1);
}

#[tokio::test]
async fn last_event_id_of_another_session_is_refused() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let owner = node.session(json!({})).await;
    let other = node.session(json!({})).await;
    let mut stream = post_sse(&owner, &slow_call(owner.next_id(), 2, 5)).await;
    let priming_id = priming(&mut stream).await;
    read_to_end(&mut stream).await;

    match within("GET", other.get(Some(&priming_id))).await.unwrap() {
        Reply::Status(status, _, _) => assert!(status.is_client_error(), "{status}"),
        Reply::Sse(mut s) => panic!(
            "another session's stream was served: {:?}",
            s.next_event().await
        ),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn resuming_while_the_post_stream_is_open_moves_delivery_to_the_new_connection() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let mut original = post_sse(&client, &slow_call(id, 6, 60)).await;
    priming(&mut original).await;
    let first = next_event(&mut original).await.unwrap();
    assert_eq!(progress_of(&message(&first)), 1.0);

    let mut resumed = resume(&client, first.id.as_deref().unwrap()).await;

    // The original ends with `retry` (after at most what was on its way).
    loop {
        let event = next_event(&mut original).await.expect("a retry block");
        if !event.has_data {
            assert!(event.retry.is_some(), "{event:?}");
            break;
        }
    }
    assert_eq!(next_event(&mut original).await, None);
    let (progress, response, _) = read_to_end(&mut resumed).await;
    assert_eq!(progress, vec![2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(response.unwrap()["id"], id);
}

#[tokio::test]
async fn before_2025_11_25_the_server_does_not_close_a_stream_early() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let mut client = Client::new(&node.url(), "2025-06-18");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let id = client.next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "drop_stream", "arguments": {"after_ms": 50}, "_meta": {"progressToken": "t"}}});
    let mut stream = post_sse(&client, &call).await;

    // No priming event in this revision, and no early close: the progress,
    // then the response on the same connection.
    let (progress, response, _) = read_to_end(&mut stream).await;
    assert_eq!(progress, vec![1.0, 2.0]);
    assert_eq!(
        response.expect("the response on the same connection")["result"]["content"][0]["text"],
        "after reconnect"
    );
}
