//! A batch runs whole or not at all: one longer than `max_batch_items` gets
//! HTTP 400 with -32600 (not retryable: no 503, no `Retry-After`) before
//! anything in it runs, and one the session cannot start whole gets an
//! error per request with nothing applied. Before: a batch of 300 got 503
//! after part of it had run (a subscription stayed, 64 calls ran on).

mod hostile_support;

use std::time::Duration;

use hostile_support::*;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::within;
use serde_json::{Value, json};

/// The notification a subscriber gets when the watched resource changes.
const WATCHED: &str = "test://watched-resource";

fn touch(id: i64) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": "touch_resource", "arguments": {"uri": WATCHED}}),
    )
}

/// A second session, subscribed to the watched resource, with its GET
/// stream open: it sees every touch that runs.
async fn watcher(url: &str) -> mcp_cluster_client::SseStream {
    let client = session(url, VERSION).await;
    let answer = call(
        &client,
        &request(1, "resources/subscribe", json!({"uri": WATCHED})),
    )
    .await;
    assert!(answer.get("result").is_some(), "{answer}");
    let Reply::Sse(mut stream) = within("GET", client.get(None)).await.unwrap() else {
        panic!("the standalone stream");
    };
    // The priming event: the stream is open from here on.
    within("priming", stream.next_event()).await.unwrap();
    stream
}

/// Whether `stream` brings a resource update within a second.
async fn touched(stream: &mut mcp_cluster_client::SseStream) -> bool {
    let wait = async {
        loop {
            match stream.next_message().await {
                Ok(Some(message)) if message["method"] == "notifications/resources/updated" => {
                    return true;
                }
                Ok(Some(_)) => {}
                _ => return false,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(1), wait)
        .await
        .unwrap_or(false)
}

async fn post_batch(client: &Client, batch: &[Value]) -> Reply {
    within("POST batch", client.post(&Value::Array(batch.to_vec())))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_batch_is_refused_before_anything_runs() {
    let node = node(&[]);
    let mut watching = watcher(node.url()).await;
    let client = session(node.url(), "2025-03-26").await;

    let mut batch = vec![request(
        1,
        "resources/subscribe",
        json!({"uri": "test://static-text"}),
    )];
    batch.extend((2..=300).map(touch));
    match post_batch(&client, &batch).await {
        Reply::Status(status, body, _) => {
            assert_eq!(status.as_u16(), 400, "{body}");
            let answer: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(error_code(&answer), -32600, "{answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains("batch of 300 messages"), "{message}");
            assert!(message.contains("limit of 64"), "{message}");
        }
        other => panic!("an over-long batch: {other:?}"),
    }
    assert!(
        !touched(&mut watching).await,
        "no call of the refused batch ran"
    );

    // At the limit it runs whole: every member answered, each touch seen.
    let batch: Vec<Value> = (1..=64).map(touch).collect();
    let Reply::Json(Value::Array(answers), _) = post_batch(&client, &batch).await else {
        panic!("a batch at the limit is answered");
    };
    assert_eq!(answers.len(), 64);
    assert!(
        answers.iter().all(|a| a.get("result").is_some()),
        "{answers:?}"
    );
    assert!(touched(&mut watching).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_session_cannot_start_whole_changes_nothing() {
    let node = node(&["--max-in-flight", "8"]);
    let mut watching = watcher(node.url()).await;
    let client = session(node.url(), "2025-03-26").await;
    // Four long calls hold four of the eight slots (their streams are
    // kept open, unread: a disconnection would not stop them either).
    let mut running = Vec::new();
    for id in 100..104 {
        let body = request(
            id,
            "tools/call",
            json!({"name": "long_running_operation", "arguments": {"duration_ms": 5000, "steps": 5},
                   "_meta": {"progressToken": id}}),
        );
        let reply = within("long call", client.post(&body)).await.unwrap();
        assert!(matches!(reply, Reply::Sse(_)), "{reply:?}");
        running.push(reply);
    }
    // A subscription and five touches: six requests, four free slots.
    let mut batch = vec![request(
        1,
        "resources/subscribe",
        json!({"uri": "test://static-text"}),
    )];
    batch.extend((2..7).map(touch));
    let Reply::Json(Value::Array(answers), _) = post_batch(&client, &batch).await else {
        panic!("a refused batch is answered with an error per request");
    };
    assert_eq!(answers.len(), 6, "{answers:?}");
    for answer in &answers {
        assert_eq!(error_code(answer), -32603, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("nothing in the batch was run"),
            "{message}"
        );
    }
    assert!(
        !touched(&mut watching).await,
        "no touch of the refused batch ran"
    );
    // Nor is its subscription in force.
    // Open once its headers are in (2025-03-26 streams have no priming
    // event).
    let Reply::Sse(mut own) = within("GET", client.get(None)).await.unwrap() else {
        panic!("the standalone stream");
    };
    let other = session(node.url(), VERSION).await;
    let answer = call(
        &other,
        &request(
            1,
            "tools/call",
            json!({"name": "touch_resource", "arguments": {"uri": "test://static-text"}}),
        ),
    )
    .await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(
        !touched(&mut own).await,
        "the refused subscription is not in force"
    );
    drop(running);
}
