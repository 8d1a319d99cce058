//! Server-to-client requests (sampling, elicitation, roots): sent on the
//! calling request's SSE stream, answered by the client's POST (202), and the
//! answer (or the client's error, or a missing capability) reaches the tool.

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{InProcessNode, fixtures, within};
use serde_json::{Value, json};

async fn next_message(stream: &mut SseStream) -> Value {
    within("next message", stream.next_message())
        .await
        .unwrap()
        .expect("the stream ended")
}

/// Calls `tool`, expects a server request `method` on its stream, answers
/// it with `answer` (a `result` or an `error` member), and returns the tool's
/// result.
async fn ask_and_answer(
    client: &Client,
    tool: &str,
    arguments: Value,
    method: &str,
    answer: (&str, Value),
) -> (Value, Value) {
    let id = client.next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    let Reply::Sse(mut stream) = within("call", client.post(&call)).await.unwrap() else {
        panic!("a call that asks the client is answered as SSE");
    };
    let ask = next_message(&mut stream).await;
    assert_eq!(ask["method"], method, "{ask}");
    assert!(
        ask["id"].is_string() || ask["id"].is_number(),
        "a server request has an id: {ask}"
    );
    assert_ne!(ask["id"], json!(id));

    let mut response = json!({"jsonrpc": "2.0", "id": ask["id"]});
    response[answer.0] = answer.1;
    let reply = within("answer", client.post(&response)).await.unwrap();
    assert!(matches!(reply, Reply::Accepted), "{reply:?}");

    let result = next_message(&mut stream).await;
    assert_eq!(result["id"], id, "{result}");
    let end = within("end", stream.next_message()).await.unwrap();
    assert_eq!(end, None, "the stream closes after the response");
    (ask, result["result"].clone())
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn sampling_request_travels_on_the_call_stream_and_its_answer_reaches_the_tool() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({"sampling": {}})).await;

    let (ask, result) = ask_and_answer(
        &client,
        "sample",
        json!({"prompt": "say hi"}),
        "sampling/createMessage",
        (
            "result",
            json!({"role": "assistant", "content": {"type": "text", "text": "hi there"},
                   "model": "test-model", "stopReason": "endTurn"}),
        ),
    )
    .await;

    assert_eq!(ask["params"]["messages"][0]["content"]["text"], "say hi");
    assert_eq!(ask["params"]["maxTokens"], 10);
    assert_eq!(result["isError"], false);
    assert_eq!(text(&result), "hi there");
}

#[tokio::test]
async fn elicitation_answer_reaches_the_tool() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({"elicitation": {}})).await;

    let (ask, result) = ask_and_answer(
        &client,
        "elicit",
        json!({}),
        "elicitation/create",
        (
            "result",
            json!({"action": "accept", "content": {"name": "x"}}),
        ),
    )
    .await;

    assert_eq!(ask["params"]["message"], "name?");
    assert!(ask["params"]["requestedSchema"].is_object(), "{ask}");
    assert_eq!(result["isError"], false);
    assert_eq!(text(&result), "accept");
}

#[tokio::test]
async fn roots_answer_reaches_the_tool() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({"roots": {"listChanged": true}})).await;

    let (_, result) = ask_and_answer(
        &client,
        "roots",
        json!({}),
        "roots/list",
        (
            "result",
            json!({"roots": [{"uri": "file:///work", "name": "work"}]}),
        ),
    )
    .await;

    assert_eq!(result["isError"], false);
    let roots: Value = serde_json::from_str(text(&result)).unwrap();
    assert_eq!(roots, json!([{"uri": "file:///work", "name": "work"}]));
}

#[tokio::test]
async fn a_client_error_answer_is_reported_by_the_tool() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({"sampling": {}})).await;

    let (_, result) = ask_and_answer(
        &client,
        "sample",
        json!({"prompt": "p"}),
        "sampling/createMessage",
        (
            "error",
            json!({"code": -1, "message": "user rejected sampling"}),
        ),
    )
    .await;

    assert_eq!(result["isError"], true, "{result}");
    assert!(
        text(&result).contains("user rejected sampling"),
        "{}",
        text(&result)
    );
}

#[tokio::test]
async fn a_client_without_the_capability_gets_an_error_result_and_no_request() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;

    for (tool, args, capability) in [
        ("sample", json!({"prompt": "p"}), "sampling"),
        ("elicit", json!({}), "elicitation"),
        ("roots", json!({}), "roots"),
    ] {
        let (response, notes) = within(
            tool,
            client.request("tools/call", json!({"name": tool, "arguments": args})),
        )
        .await
        .unwrap();
        assert!(notes.is_empty(), "no server request may be sent: {notes:?}");
        let result = &response["result"];
        assert_eq!(result["isError"], true, "{response}");
        assert!(text(result).contains(capability), "{}", text(result));
    }
}

#[tokio::test]
async fn elicitation_is_not_sent_to_a_2025_03_26_session() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let mut client = Client::new(&node.url(), "2025-03-26");
    within("initialize", client.initialize(json!({"elicitation": {}})))
        .await
        .unwrap();

    let (response, notes) = within(
        "elicit",
        client.request("tools/call", json!({"name": "elicit", "arguments": {}})),
    )
    .await
    .unwrap();

    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(response["result"]["isError"], true, "{response}");
}

#[tokio::test]
async fn an_answer_to_an_unknown_server_request_is_accepted_and_ignored() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({"sampling": {}})).await;
    let stray = json!({"jsonrpc": "2.0", "id": "srv-unknown", "result": {}});
    let reply = within("stray answer", client.post(&stray)).await.unwrap();
    assert!(matches!(reply, Reply::Accepted), "{reply:?}");
    let (pong, _) = within("ping", client.request("ping", json!({})))
        .await
        .unwrap();
    assert_eq!(pong["result"], json!({}));
}
