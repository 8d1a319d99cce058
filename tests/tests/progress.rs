//! Progress: notifications only when the client sent a `progressToken`, with
//! strictly increasing values, all before the response and none after it.

use mcp_cluster_client::{Reply, SseStream};
use mcp_cluster_testkit::{InProcessNode, fixtures, within};
use serde_json::{Value, json};

fn slow_call(id: i64, steps: u64, meta: Option<Value>) -> Value {
    let mut params = json!({"name": "slow", "arguments": {"steps": steps, "step_ms": 10}});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// Every message of the stream, to its end.
async fn drain(mut stream: SseStream) -> Vec<Value> {
    let mut messages = Vec::new();
    while let Some(message) = within("next message", stream.next_message()).await.unwrap() {
        messages.push(message);
    }
    messages
}

async fn progress_run(token: Value) {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let body = slow_call(id, 6, Some(json!({"progressToken": token})));
    let Reply::Sse(stream) = within("POST", client.post(&body)).await.unwrap() else {
        panic!("a call with progress is answered as SSE");
    };
    let messages = drain(stream).await;

    let (last, before) = messages.split_last().expect("at least the response");
    assert_eq!(last["id"], id, "the response comes last: {messages:?}");
    assert_eq!(last["result"]["content"][0]["text"], "done 6");
    let mut values = Vec::new();
    for message in before {
        assert_eq!(message["method"], "notifications/progress", "{message}");
        assert_eq!(message["params"]["progressToken"], token);
        assert_eq!(message["params"]["total"], 6.0);
        values.push(message["params"]["progress"].as_f64().unwrap());
    }
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "progress must strictly increase: {values:?}"
    );
    assert_eq!(values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[tokio::test]
async fn progress_strictly_increases_and_precedes_the_response_with_a_string_token() {
    progress_run(json!("progress-token")).await;
}

#[tokio::test]
async fn progress_echoes_a_numeric_token() {
    progress_run(json!(42)).await;
}

#[tokio::test]
async fn no_progress_is_sent_without_a_progress_token() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    match within("POST", client.post(&slow_call(id, 3, None)))
        .await
        .unwrap()
    {
        Reply::Json(response, _) => {
            assert_eq!(response["id"], id);
            assert_eq!(response["result"]["content"][0]["text"], "done 3");
        }
        other => panic!("expected a plain JSON answer, got {other:?}"),
    }
    // `_meta` without a token is the same as none.
    let id = client.next_id();
    let reply = within("POST", client.post(&slow_call(id, 2, Some(json!({})))))
        .await
        .unwrap();
    assert!(matches!(reply, Reply::Json(..)), "{reply:?}");
}

#[tokio::test]
async fn concurrent_calls_each_get_only_their_own_progress() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let (a, b) = (client.next_id(), client.next_id());
    let body_a = slow_call(a, 4, Some(json!({"progressToken": "a"})));
    let body_b = slow_call(b, 5, Some(json!({"progressToken": "b"})));
    let (reply_a, reply_b) = within("POSTs", async {
        tokio::join!(client.post(&body_a), client.post(&body_b))
    })
    .await;
    for (reply, id, token, steps) in [(reply_a, a, "a", 4), (reply_b, b, "b", 5)] {
        let Reply::Sse(stream) = reply.unwrap() else {
            panic!("expected SSE");
        };
        let messages = drain(stream).await;
        assert_eq!(messages.len(), steps + 1, "{messages:?}");
        assert!(
            messages[..steps]
                .iter()
                .all(|m| m["params"]["progressToken"] == token)
        );
        assert_eq!(messages[steps]["id"], id);
    }
}
