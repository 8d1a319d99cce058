//! Session lifecycle and session-scoped state: what is served before
//! `initialize` and before `notifications/initialized`, re-initialization,
//! ping, `logging/setLevel`, resource subscriptions and list changes on the
//! standalone GET stream.

use mcp_cluster::protocol::types::CallToolResult;
use mcp_cluster::{McpServer, ToolDef};
use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{InProcessNode, fixtures, open_legacy_sse, within};
use serde_json::{Value, json};

async fn request(client: &Client, method: &str, params: Value) -> (Value, Vec<Value>) {
    within(method, client.request(method, params))
        .await
        .unwrap()
}

fn initialize_body(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "lifecycle-test", "version": "0"}}})
}

async fn standalone_stream(client: &Client) -> SseStream {
    match within("GET", client.get(None)).await.unwrap() {
        Reply::Sse(stream) => stream,
        other => panic!("expected the standalone stream, got {other:?}"),
    }
}

async fn next_message(stream: &mut SseStream) -> Value {
    within("next message", stream.next_message())
        .await
        .unwrap()
        .expect("the stream ended")
}

/// The legacy transport is the one where a session exists before
/// `initialize`: GET /sse opens it, messages go to the endpoint it names.
struct Legacy {
    http: reqwest::Client,
    messages: String,
    stream: SseStream,
}

impl Legacy {
    async fn open(node: &InProcessNode) -> Self {
        let http = reqwest::Client::new();
        let (stream, messages) = open_legacy_sse(&http, &node.base_url()).await;
        Self {
            http,
            messages,
            stream,
        }
    }

    /// POSTs one message (202) and, for a request, returns its answer.
    async fn send(&mut self, message: Value) -> Option<Value> {
        let response = within(
            "POST /messages",
            self.http
                .post(&self.messages)
                .header("content-type", "application/json")
                .body(message.to_string())
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 202);
        message.get("id")?;
        let answer = next_message(&mut self.stream).await;
        assert_eq!(answer["id"], message["id"], "{answer}");
        Some(answer)
    }
}

#[tokio::test]
async fn requests_before_initialize_are_rejected_except_ping() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let mut legacy = Legacy::open(&node).await;

    let listed = legacy
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await
        .unwrap();
    assert_eq!(listed["error"]["code"], -32600, "{listed}");
    let level = legacy
        .send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel",
                     "params": {"level": "debug"}}),
        )
        .await
        .unwrap();
    assert_eq!(level["error"]["code"], -32600, "{level}");
    let ping = legacy
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .await
        .unwrap();
    assert_eq!(ping["result"], json!({}));

    let init = legacy.send(initialize_body(4)).await.unwrap();
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");
    let listed = legacy
        .send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
        .await
        .unwrap();
    assert!(listed["result"]["tools"].is_array(), "{listed}");
}

#[tokio::test]
async fn a_second_initialize_on_a_session_is_an_error() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();

    // Legacy: the session itself refuses.
    let mut legacy = Legacy::open(&node).await;
    legacy.send(initialize_body(1)).await.unwrap();
    let again = legacy.send(initialize_body(2)).await.unwrap();
    assert_eq!(again["error"]["code"], -32600, "{again}");
    let ping = legacy
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .await
        .unwrap();
    assert_eq!(ping["result"], json!({}));

    // Streamable HTTP: an initialize naming a session is refused and the
    // session is unchanged.
    let client = node.session(json!({})).await;
    match within(
        "re-initialize",
        client.post(&initialize_body(client.next_id())),
    )
    .await
    .unwrap()
    {
        Reply::Status(status, body, _) => {
            assert_eq!(status, 400);
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"]["code"], -32600, "{body}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let (pong, _) = request(&client, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
}

#[tokio::test]
async fn before_initialized_requests_are_served_but_the_server_asks_nothing() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let mut client = node.client();
    let Reply::Json(init, headers) = within("initialize", client.post(&initialize_body(1)))
        .await
        .unwrap()
    else {
        panic!("initialize is answered as JSON");
    };
    assert!(init["result"].is_object(), "{init}");
    let id = headers["mcp-session-id"].to_str().unwrap().to_owned();
    client.set_session_id(Some(id));

    // No notifications/initialized yet: requests are served...
    let (echo, _) = request(
        &client,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "early"}}),
    )
    .await;
    assert_eq!(echo["result"]["content"][0]["text"], "early");
    // ...but the server sends no request to the client (sampling declared).
    let (sample, notes) = request(
        &client,
        "tools/call",
        json!({"name": "sample", "arguments": {"prompt": "p"}}),
    )
    .await;
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(sample["result"]["isError"], true, "{sample}");
    let text = sample["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not initialized"), "{text}");
}

#[tokio::test]
async fn ping_answers_an_empty_result() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let (pong, notes) = request(&client, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
    assert!(notes.is_empty());
    // Params are optional.
    let reply = within(
        "ping",
        client.post(&json!({"jsonrpc": "2.0", "id": "p", "method": "ping"})),
    )
    .await
    .unwrap();
    let Reply::Json(pong, _) = reply else {
        panic!("ping is answered as JSON: {reply:?}");
    };
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
}

#[tokio::test]
async fn set_level_rejects_unknown_levels() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    for params in [json!({"level": "verbose"}), json!({}), json!({"level": 3})] {
        let (response, _) = request(&client, "logging/setLevel", params.clone()).await;
        assert_eq!(response["error"]["code"], -32602, "{params}: {response}");
    }
}

async fn log_messages(client: &Client) -> Vec<Value> {
    let (response, notes) = request(
        client,
        "tools/call",
        json!({"name": "log", "arguments": {"count": 3}}),
    )
    .await;
    assert_eq!(response["result"]["content"][0]["text"], "logged");
    notes
}

#[tokio::test]
async fn set_level_filters_log_messages_by_severity() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;

    let (ok, _) = request(&client, "logging/setLevel", json!({"level": "error"})).await;
    assert_eq!(ok["result"], json!({}));
    assert_eq!(log_messages(&client).await, Vec::<Value>::new());

    request(&client, "logging/setLevel", json!({"level": "debug"})).await;
    let notes = log_messages(&client).await;
    assert_eq!(notes.len(), 3, "{notes:?}");
    for (i, note) in notes.iter().enumerate() {
        assert_eq!(note["method"], "notifications/message");
        assert_eq!(note["params"]["level"], "info");
        assert_eq!(note["params"]["data"], format!("message {i}"));
    }

    // `info` is inclusive.
    request(&client, "logging/setLevel", json!({"level": "info"})).await;
    assert_eq!(log_messages(&client).await.len(), 3);
    request(&client, "logging/setLevel", json!({"level": "notice"})).await;
    assert!(log_messages(&client).await.is_empty());
}

fn marker_tool(name: &str) -> ToolDef {
    ToolDef::new(
        name,
        "Added by a test.",
        json!({"type": "object"}),
        |_, _| async move { Ok(CallToolResult::text("marker")) },
    )
    .unwrap()
}

#[tokio::test]
async fn resource_updates_reach_subscribers_on_the_standalone_stream_until_unsubscribe() {
    let server: McpServer = fixtures::test_server();
    let node = InProcessNode::start_default(server.clone()).unwrap();
    let client = node.session(json!({})).await;
    let mut get = standalone_stream(&client).await;

    let (subscribed, _) = request(&client, "resources/subscribe", json!({"uri": "test://r"})).await;
    assert_eq!(subscribed["result"], json!({}));
    server.resource_updated("test://other");
    server.resource_updated("test://r");
    let note = next_message(&mut get).await;
    assert_eq!(note["method"], "notifications/resources/updated");
    assert_eq!(note["params"]["uri"], "test://r");

    let (unsubscribed, _) =
        request(&client, "resources/unsubscribe", json!({"uri": "test://r"})).await;
    assert_eq!(unsubscribed["result"], json!({}));
    server.resource_updated("test://r");
    // A later event that does arrive proves the update was not sent.
    server.add_tool(marker_tool("marker_after_unsubscribe"));
    let note = next_message(&mut get).await;
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
}

#[tokio::test]
async fn resource_updates_go_only_to_subscribed_sessions() {
    let server: McpServer = fixtures::test_server();
    let node = InProcessNode::start_default(server.clone()).unwrap();
    let subscriber = node.session(json!({})).await;
    let bystander = node.session(json!({})).await;
    let mut subscribed_get = standalone_stream(&subscriber).await;
    let mut bystander_get = standalone_stream(&bystander).await;
    request(
        &subscriber,
        "resources/subscribe",
        json!({"uri": "test://r"}),
    )
    .await;

    server.resource_updated("test://r");
    server.add_tool(marker_tool("marker"));

    let first = next_message(&mut subscribed_get).await;
    assert_eq!(first["method"], "notifications/resources/updated");
    let second = next_message(&mut subscribed_get).await;
    assert_eq!(second["method"], "notifications/tools/list_changed");
    let only = next_message(&mut bystander_get).await;
    assert_eq!(only["method"], "notifications/tools/list_changed", "{only}");
}

#[tokio::test]
async fn add_tool_sends_tools_list_changed_on_the_standalone_stream() {
    let server = fixtures::test_server();
    let node = InProcessNode::start_default(server.clone()).unwrap();
    let client = node.session(json!({})).await;
    let mut get = standalone_stream(&client).await;

    server.add_tool(marker_tool("added"));

    let note = next_message(&mut get).await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let (listed, _) = request(&client, "tools/list", json!({"cursor": null})).await;
    let mut names = Vec::new();
    let mut page = listed["result"].clone();
    loop {
        names.extend(
            page["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned()),
        );
        let Some(next) = page.get("nextCursor").and_then(|c| c.as_str()) else {
            break;
        };
        let next = next.to_owned();
        page = request(&client, "tools/list", json!({"cursor": next}))
            .await
            .0["result"]
            .clone();
    }
    assert!(names.iter().any(|n| n == "added"), "{names:?}");
}

#[tokio::test]
async fn list_changes_wait_for_notifications_initialized() {
    let server = fixtures::test_server();
    let node = InProcessNode::start_default(server.clone()).unwrap();
    let mut client = node.client();
    let Reply::Json(_, headers) = within("initialize", client.post(&initialize_body(1)))
        .await
        .unwrap()
    else {
        panic!("initialize is answered as JSON");
    };
    client.set_session_id(Some(headers["mcp-session-id"].to_str().unwrap().to_owned()));
    let mut get = standalone_stream(&client).await;
    let witness = node.session(json!({})).await;
    let mut witness_get = standalone_stream(&witness).await;

    // Not yet initialized: no notification for this change. Once another
    // session has it, the fan-out has reached this session's mailbox too.
    server.add_tool(marker_tool("before_initialized"));
    let seen = next_message(&mut witness_get).await;
    assert_eq!(seen["method"], "notifications/tools/list_changed");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = within("initialized", client.post(&initialized))
        .await
        .unwrap();
    assert!(matches!(reply, Reply::Accepted), "{reply:?}");
    request(&client, "ping", json!({})).await;
    server.resource_updated("test://r");
    request(&client, "resources/subscribe", json!({"uri": "test://r"})).await;
    server.resource_updated("test://r");

    let first = next_message(&mut get).await;
    assert_eq!(
        first["method"], "notifications/resources/updated",
        "the change before initialized was not announced: {first}"
    );
}
