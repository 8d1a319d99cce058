//! Redis restarted empty: every SSE stream a node holds ends with a
//! JSON-RPC error, never in silence (which a client cannot tell from a
//! cancellation): a request's stream answers its request with -32603 and
//! the request's id, wherever it is followed; a standalone stream, which
//! may carry no response, ends with an `error` log message. Before: 56 open streams ended with neither a
//! response nor `retry`.

mod cluster_support;

use cluster_support::*;
use mcp_cluster_client::{Reply, SseEvent, SseStream};
use mcp_cluster_testkit::within;
use serde_json::{Value, json};

/// Reads to the end; returns the events after the last one with an id.
async fn rest(stream: &mut SseStream) -> Vec<SseEvent> {
    let mut events = Vec::new();
    while let Some(event) = within("next event", stream.next_event()).await.unwrap() {
        events.push(event);
    }
    events
}

/// The one error an ending stream carries, as an event without id.
fn lost(events: &[SseEvent]) -> Value {
    let errors: Vec<Value> = events
        .iter()
        .filter(|e| e.has_data && !e.data.is_empty())
        .map(message)
        .filter(|m| m.get("error").is_some())
        .collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    let notice = events
        .iter()
        .find(|e| e.data.contains("\"error\""))
        .unwrap();
    assert!(
        notice.id.is_none(),
        "no event id: nothing follows it: {notice:?}"
    );
    assert_eq!(errors[0]["error"]["code"], -32603, "{errors:?}");
    assert!(
        errors[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream lost"),
        "{errors:?}"
    );
    errors[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_end_with_an_error_when_redis_comes_back_empty() {
    let cluster = start(2, &[]);
    let (a_url, b_url) = (cluster.node_url(0), cluster.node_url(1));

    // A call on node 0, resumed on node 1 (which follows it from Redis).
    let a = session(&a_url, json!({})).await;
    let mut first = post_sse(&a, &long_running(5, 20_000, 20, "lost")).await;
    priming(&mut first).await;
    let progress = next_event(&mut first).await.expect("progress");
    let on_b = client(&b_url, a.session_id().unwrap());
    let mut resumed = resume(&on_b, progress.id.as_deref().unwrap()).await;
    let next = next_event(&mut resumed).await.expect("progress on node 1");
    assert_eq!(message(&next)["method"], "notifications/progress");

    // Another session's standalone stream on node 1.
    let b = session(&b_url, json!({})).await;
    let Reply::Sse(mut standalone) = within("GET", b.get(None)).await.unwrap() else {
        panic!("the standalone stream");
    };
    priming(&mut standalone).await;

    cluster.redis().restart().unwrap();

    let error = lost(&rest(&mut resumed).await);
    assert_eq!(error["id"], 5, "the request's own id: {error}");
    // A standalone stream carries no response: an `error` log message.
    let events = rest(&mut standalone).await;
    let messages: Vec<Value> = events
        .iter()
        .filter(|e| e.has_data && !e.data.is_empty())
        .map(message)
        .collect();
    assert_eq!(messages.len(), 1, "{events:?}");
    assert_eq!(
        messages[0]["method"], "notifications/message",
        "{messages:?}"
    );
    assert_eq!(messages[0]["params"]["level"], "error", "{messages:?}");
    assert!(
        messages[0]["params"]["data"]
            .as_str()
            .unwrap()
            .contains("stream lost"),
        "{messages:?}"
    );
}
