//! Handler failures and bad calls: each yields the right JSON-RPC error (or
//! an `isError` result) for that request only; the session and node go on.

use std::collections::HashSet;
use std::time::Duration;

use mcp_cluster::NodeConfig;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{InProcessNode, fixtures, within};
use serde_json::{Value, json};

async fn session_with(node: &InProcessNode, version: &str) -> Client {
    let mut client = Client::new(&node.url(), version);
    let init = within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    assert_eq!(init["protocolVersion"], version);
    client
}

async fn request(client: &Client, method: &str, params: Value) -> Value {
    within(method, client.request(method, params))
        .await
        .unwrap()
        .0
}

async fn call(client: &Client, name: &str, arguments: Value) -> Value {
    request(
        client,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
    .await
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error, got {response}"))
}

async fn assert_echo_works(client: &Client) {
    let response = call(client, "echo", json!({"message": "alive"})).await;
    assert_eq!(response["result"]["content"][0]["text"], "alive");
}

#[tokio::test]
async fn a_panicking_handler_fails_only_its_own_request() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = session_with(&node, "2025-11-25").await;
    let slow_id = client.next_id();
    let slow = json!({"jsonrpc": "2.0", "id": slow_id, "method": "tools/call",
                      "params": {"name": "slow", "arguments": {"steps": 4, "step_ms": 50}}});
    let (slow_reply, panicked) = within("calls", async {
        tokio::join!(client.post(&slow), async {
            // Start the panic while the slow call runs.
            tokio::time::sleep(Duration::from_millis(50)).await;
            call(&client, "panic", json!({})).await
        })
    })
    .await;

    assert_eq!(error_code(&panicked), -32603);
    assert!(panicked.get("result").is_none());
    match slow_reply.unwrap() {
        Reply::Json(response, _) => {
            assert_eq!(response["id"], slow_id);
            assert_eq!(response["result"]["content"][0]["text"], "done 4");
        }
        other => panic!("the concurrent call must complete, got {other:?}"),
    }
    assert_echo_works(&client).await;
    // The node is fine too: a new session works.
    assert_echo_works(&session_with(&node, "2025-11-25").await).await;
}

#[tokio::test]
async fn a_handler_over_the_request_timeout_fails_with_timed_out() {
    let mut config = NodeConfig::default();
    config.runtime.request_timeout_secs = 1;
    let node = InProcessNode::start(fixtures::test_server(), config).unwrap();
    let client = session_with(&node, "2025-11-25").await;

    let response = call(&client, "hang", json!({})).await;

    assert_eq!(error_code(&response), -32603);
    let message = response["error"]["message"].as_str().unwrap();
    assert!(message.contains("timed out"), "{message}");
    assert_echo_works(&client).await;
}

#[tokio::test]
async fn output_breaking_the_output_schema_is_an_internal_error() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = session_with(&node, "2025-11-25").await;

    assert_eq!(
        error_code(&call(&client, "bad_output", json!({})).await),
        -32603
    );

    let typed = call(&client, "typed_add", json!({"a": 1, "b": 2})).await;
    assert_eq!(typed["result"]["structuredContent"], json!({"sum": 3.0}));
    assert_eq!(typed["result"]["isError"], false);
}

#[tokio::test]
async fn a_tool_with_an_output_schema_that_returns_no_structured_content_is_an_internal_error() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    for version in ["2024-11-05", "2025-06-18", "2025-11-25"] {
        let client = session_with(&node, version).await;

        let response = call(&client, "unstructured_output", json!({})).await;

        // Never a text-only answer the client could not check against the
        // schema it was given: the provider's bug shows as -32603.
        assert_eq!(error_code(&response), -32603, "{version}: {response}");
        let message = response["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("no structuredContent") && message.contains("outputSchema"),
            "{version}: {message}"
        );
        assert_echo_works(&client).await;
    }
}

#[tokio::test]
async fn invalid_arguments_are_a_tool_error_from_2025_11_25() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = session_with(&node, "2025-11-25").await;

    let response = call(&client, "echo", json!({"message": 5})).await;

    let result = &response["result"];
    assert_eq!(result["isError"], true, "{response}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("invalid arguments"), "{text}");
    assert!(result.get("structuredContent").is_none(), "{response}");
}

#[tokio::test]
async fn invalid_arguments_are_invalid_params_before_2025_11_25() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = session_with(&node, "2025-06-18").await;

    let missing = call(&client, "echo", json!({})).await;
    assert_eq!(error_code(&missing), -32602);
    let wrong_type = call(&client, "typed_add", json!({"a": "one", "b": 2})).await;
    assert_eq!(error_code(&wrong_type), -32602);
}

#[tokio::test]
async fn unknown_names_and_bad_arguments_get_their_codes() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = session_with(&node, "2025-11-25").await;

    assert_eq!(
        error_code(&call(&client, "no_such_tool", json!({})).await),
        -32602
    );
    let unknown_resource =
        request(&client, "resources/read", json!({"uri": "test://missing"})).await;
    assert_eq!(error_code(&unknown_resource), -32002);
    let no_name = request(&client, "prompts/get", json!({"name": "greet"})).await;
    assert_eq!(error_code(&no_name), -32602);
    let no_args = request(
        &client,
        "prompts/get",
        json!({"name": "greet", "arguments": {}}),
    )
    .await;
    assert_eq!(error_code(&no_args), -32602);
    let unknown_prompt = request(&client, "prompts/get", json!({"name": "nope"})).await;
    assert_eq!(error_code(&unknown_prompt), -32602);
    // A cursor the server did not issue, the empty one included, is -32602.
    for method in [
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "prompts/list",
    ] {
        for cursor in ["not-a-cursor", ""] {
            let bad = request(&client, method, json!({ "cursor": cursor })).await;
            assert_eq!(error_code(&bad), -32602, "{method} {cursor:?}");
        }
    }
    // A list that fits one page has no nextCursor at all (the tool list,
    // longer than a page, is walked below).
    for method in ["resources/list", "resources/templates/list", "prompts/list"] {
        let listed = request(&client, method, json!({})).await;
        assert!(listed["result"].is_object(), "{method}: {listed}");
        assert!(
            listed["result"].get("nextCursor").is_none(),
            "{method}: {listed}"
        );
    }
    let unknown_method = request(&client, "tools/nonsense", json!({})).await;
    assert_eq!(error_code(&unknown_method), -32601);

    // The good versions of the same calls work.
    let read = request(&client, "resources/read", json!({"uri": "test://r"})).await;
    assert_eq!(read["result"]["contents"][0]["text"], "resource text");
    let greet = request(
        &client,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "Ada"}}),
    )
    .await;
    assert_eq!(
        greet["result"]["messages"][0]["content"]["text"],
        "Hello Ada"
    );
}

#[tokio::test]
async fn tools_list_pages_visit_every_tool_exactly_once() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = session_with(&node, "2025-11-25").await;
    let expected: HashSet<&str> = [
        "echo",
        "slow",
        "panic",
        "hang",
        "sample",
        "elicit",
        "roots",
        "log",
        "drop_stream",
        "mirrored",
        "typed_add",
        "bad_output",
        "unstructured_output",
    ]
    .into();

    let mut names = Vec::new();
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = request(&client, "tools/list", params).await["result"].clone();
        let tools = page["tools"].as_array().unwrap();
        assert!(tools.len() <= 5, "page size is 5: {}", tools.len());
        pages.push(tools.len());
        names.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        // Pagination: nextCursor is present only if more results exist.
        let Some(next) = page.get("nextCursor") else {
            break;
        };
        let next = next.as_str().expect("nextCursor is a string");
        assert!(!next.is_empty(), "a present cursor is never empty");
        assert!(pages.len() < 10, "pagination does not end");
        cursor = Some(next.to_owned());
    }

    assert_eq!(pages, vec![5, 5, 3]);
    let unique: HashSet<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        unique.len(),
        names.len(),
        "a tool was listed twice: {names:?}"
    );
    assert_eq!(unique, expected);
    // The same walk gives the same order (deterministic listing).
    let first = request(&client, "tools/list", json!({})).await;
    let first: Vec<&str> = first["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        first,
        names[..5].iter().map(String::as_str).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn call_results_carry_content_and_structured_content_only_when_structured() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = session_with(&node, "2025-11-25").await;

    for (name, args) in [
        ("echo", json!({"message": ""})),
        ("echo", json!({"message": "x"})),
        ("typed_add", json!({"a": 2, "b": 3})),
        ("log", json!({"count": 0})),
        ("echo", json!({"message": 7})),
        ("sample", json!({"prompt": "no sampling capability"})),
    ] {
        let response = call(&client, name, args.clone()).await;
        let result = &response["result"];
        // Only the tool with an output schema returns structured data.
        assert_eq!(
            result.get("structuredContent").is_some(),
            name == "typed_add",
            "{name} {args}: {response}"
        );
        let content = result["content"].as_array().expect("content");
        assert!(!content.is_empty(), "{name} {args}: {response}");
        assert!(result["isError"].is_boolean(), "{name} {args}: {response}");
    }
    let typed = call(&client, "typed_add", json!({"a": 2, "b": 3})).await;
    assert_eq!(typed["result"]["structuredContent"], json!({"sum": 5.0}));
}

#[tokio::test]
async fn a_timeout_after_progress_ends_the_stream_with_the_error() {
    let mut config = NodeConfig::default();
    config.runtime.request_timeout_secs = 1;
    let node = InProcessNode::start(fixtures::test_server(), config).unwrap();
    let client = session_with(&node, "2025-11-25").await;
    let id = client.next_id();
    let slow = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"steps": 100, "step_ms": 100},
        "_meta": {"progressToken": "t"}}});
    let Reply::Sse(mut stream) = within("POST", client.post(&slow)).await.unwrap() else {
        panic!("progress makes it SSE");
    };
    let mut last = None;
    while let Some(message) = within("next", stream.next_message()).await.unwrap() {
        assert!(last.is_none(), "nothing after the response: {message}");
        if message.get("method").is_none() {
            last = Some(message);
        }
    }
    let last = last.expect("the timeout error ends the stream");
    assert_eq!(last["id"], id);
    assert_eq!(error_code(&last), -32603);
}

#[tokio::test]
async fn a_client_that_never_answers_makes_the_ask_time_out() {
    let mut config = NodeConfig::default();
    config.runtime.ask_timeout_secs = 1;
    let node = InProcessNode::start(fixtures::test_server(), config).unwrap();
    let mut client = Client::new(&node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({"sampling": {}})))
        .await
        .unwrap();

    let (response, notes) = within(
        "sample",
        client.request(
            "tools/call",
            json!({"name": "sample", "arguments": {"prompt": "p"}}),
        ),
    )
    .await
    .unwrap();

    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["method"], "sampling/createMessage");
    assert_eq!(response["result"]["isError"], true, "{response}");
    let text = response["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("in time"), "{text}");
}
