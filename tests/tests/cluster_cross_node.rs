//! Client messages about a request reach the node running it, whichever
//! node receives them: `notifications/cancelled` stops a request running on
//! another node, and answers to server requests (sampling, elicitation)
//! POSTed to another node reach the waiting tool, even when that node dies
//! right after.

mod cluster_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{Cluster, RedisServer, within};
use serde_json::{Value, json};

#[tokio::test]
async fn cancel_posted_to_another_node_stops_the_request() {
    let cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({})).await;
    let b = client(&cluster.node_url(1), a.session_id().unwrap());
    let c = client(&cluster.node_url(2), a.session_id().unwrap());

    // Long enough that only the cancel can end it within the hang guard.
    let mut stream = post_sse(&a, &long_running(11, 60_000, 600, "cancel-me")).await;
    priming(&mut stream).await;
    let mut seen = Seen::default();
    while seen.progress.len() < 2 {
        record(&mut seen, next_event(&mut stream).await.expect("progress"));
    }

    post_accepted(
        &b,
        &notification(
            "notifications/cancelled",
            json!({"requestId": 11, "reason": "test"}),
        ),
    )
    .await;

    // Progress already on its way may still arrive; then the stream ends,
    // without a response.
    while let Some(event) = next_event(&mut stream).await {
        record(&mut seen, event);
    }
    assert!(
        seen.responses.is_empty(),
        "a cancelled request gets no response: {seen:?}"
    );
    assert!(seen.other.is_empty(), "{seen:?}");
    assert!(
        !seen.retried,
        "the stream is over, not interrupted: {seen:?}"
    );
    // Nothing was written after the end: resuming from the last event (on
    // a third node) finds the stream closed and empty.
    let mut after = resume(&c, seen.ids.last().unwrap()).await;
    assert!(next_event(&mut after).await.is_none(), "no more progress");
}

/// Calls `tool` on `caller`, expects a server request `method` on the
/// call's stream, answers it through `answerer` (another node), and returns
/// (the server request, the tool's result).
async fn answered_elsewhere(
    caller: &Client,
    answerer: &Client,
    tool: &str,
    arguments: Value,
    method: &str,
    answer: Value,
) -> (Value, Value) {
    let mut stream = post_sse(caller, &call(21, tool, arguments)).await;
    priming(&mut stream).await;
    let mut seen = Seen::default();
    while seen.other.is_empty() {
        let event = next_event(&mut stream).await.expect("the server request");
        record(&mut seen, event);
    }
    let ask = seen.other[0].clone();
    assert_eq!(ask["method"], method, "{ask}");
    assert!(ask["id"].is_string() || ask["id"].is_number(), "{ask}");

    post_accepted(
        answerer,
        &json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}),
    )
    .await;

    let rest = read_to_end(&mut stream).await;
    assert!(
        rest.other.is_empty() && rest.progress.is_empty(),
        "{rest:?}"
    );
    assert_eq!(rest.responses.len(), 1, "{rest:?}");
    let response = &rest.responses[0];
    assert_eq!(response["id"], 21, "{response}");
    (ask, response["result"].clone())
}

#[tokio::test]
async fn sampling_answer_posted_to_another_node_reaches_the_tool() {
    let cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({"sampling": {}})).await;
    let b = client(&cluster.node_url(1), a.session_id().unwrap());

    let (ask, result) = answered_elsewhere(
        &a,
        &b,
        "test_sampling",
        json!({"prompt": "What is 2+2?"}),
        "sampling/createMessage",
        json!({"role": "assistant", "content": {"type": "text", "text": "four, from B"},
               "model": "test-model", "stopReason": "endTurn"}),
    )
    .await;
    assert_eq!(
        ask["params"]["messages"][0]["content"]["text"],
        "What is 2+2?"
    );
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text(&result), "LLM response: four, from B", "{result}");
}

#[tokio::test]
async fn elicitation_answer_posted_to_another_node_reaches_the_tool() {
    let cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({"elicitation": {}})).await;
    let c = client(&cluster.node_url(2), a.session_id().unwrap());

    let (ask, result) = answered_elsewhere(
        &a,
        &c,
        "test_elicitation",
        json!({"message": "Who are you?"}),
        "elicitation/create",
        json!({"action": "accept", "content": {"username": "carol", "email": "carol@example.com"}}),
    )
    .await;
    assert_eq!(ask["params"]["message"], "Who are you?", "{ask}");
    assert!(ask["params"]["requestedSchema"].is_object(), "{ask}");
    assert_eq!(result["isError"], false, "{result}");
    let text = text(&result);
    assert!(text.starts_with("User response: action=accept"), "{result}");
    assert!(text.contains("carol@example.com"), "{result}");
}

/// A node accepts (202) a client's answer only once it has passed it on to
/// the node whose request asked: while Redis takes no writes it holds the
/// POST, and when it dies meanwhile the client has not been told the answer
/// was taken, sends it again elsewhere, and the tool gets it. (A node that
/// said 202 at once and died before publishing lost the answer: the tool
/// waited for it to its timeout.)
#[tokio::test]
async fn an_answer_is_accepted_only_once_passed_on() {
    // A redis-server of its own, whatever MCP_TEST_REDIS says: the test
    // pauses its writes. (Declared first, dropped after the nodes.)
    let redis = RedisServer::start_for_nodes().unwrap();
    let mut cluster = Cluster::start_on_redis(2, &redis.node_url(), &[]).unwrap();
    let a = session(&cluster.node_url(0), json!({"elicitation": {}})).await;
    let b = client(&cluster.node_url(1), a.session_id().unwrap());
    let mut stream = post_sse(
        &a,
        &call(21, "test_elicitation", json!({"message": "Who are you?"})),
    )
    .await;
    priming(&mut stream).await;
    let mut seen = Seen::default();
    while seen.other.is_empty() {
        record(
            &mut seen,
            next_event(&mut stream).await.expect("the question"),
        );
    }
    let ask = seen.other[0].clone();
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result":
        {"action": "accept", "content": {"username": "dana", "email": "dana@example.com"}}});

    // B serves the session too, and takes its lease once A's has run out
    // (3 s after A's last renewal, 1 s at most after its last use): while
    // it holds the lease, B needs no store call to take the answer in.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let pong = within(
        "ping on B",
        b.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
    )
    .await
    .unwrap();
    assert!(matches!(pong, Reply::Json(..)), "{pong:?}");
    // Reads go on; writes, PUBLISH among them, wait.
    redis
        .command(&["CLIENT", "PAUSE", "8000", "WRITE"])
        .unwrap();
    let posted = tokio::spawn({
        let answer = answer.clone();
        async move { b.post(&answer).await }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.kill_node(1);
    let reply = within("the answer POSTed to B", posted).await.unwrap();
    redis.command(&["CLIENT", "UNPAUSE"]).unwrap();
    assert!(
        !matches!(reply, Ok(Reply::Accepted)),
        "B accepted an answer it had not passed on, then died: {reply:?}"
    );

    // The client sends it again, to a node that is up.
    post_accepted(&a, &answer).await;
    let rest = read_to_end(&mut stream).await;
    assert_eq!(rest.responses.len(), 1, "{rest:?}");
    let result = &rest.responses[0]["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert!(text(result).contains("dana@example.com"), "{result}");
}
