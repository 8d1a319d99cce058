//! Near its connection limit a node refuses new long-lived streams with an
//! answer instead of letting them take the last connections: a node
//! allowed 40 connections keeps 4 of them from streams. GET streams (one
//! per session, each on its own connection) are held until one is refused
//! with 503, `Retry-After` and a JSON-RPC error; a request still finds a
//! connection and is answered; once a stream ends, a new one is admitted.

use std::time::Duration;

use mcp_cluster_client::{Client, SseStream};
use mcp_cluster_testkit::{NodeProcess, metric, node_binary, within};
use serde_json::{Value, json};

const VERSION: &str = "2025-11-25";
const MAX_CONNECTIONS: usize = 40;
/// `ConnectionGate::stream_headroom` for 40 connections.
const HEADROOM: usize = 4;

/// A GET of `session`'s standalone stream, as a raw request (its status,
/// `Retry-After` and body are what the test reads).
async fn raw_get(http: &reqwest::Client, url: &str, session: &str) -> reqwest::Response {
    within(
        "GET",
        http.get(url)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", VERSION)
            .send(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn streams_past_the_headroom_get_503_while_requests_are_answered() {
    // A keep-alive comment every second: the node sees a stream's
    // connection closed at its next write.
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &[
            "--max-connections",
            &MAX_CONNECTIONS.to_string(),
            "--workers",
            "1",
            "--quota-initialize-per-address",
            "0",
            "--log",
            "warn",
        ],
        &[("MCP_RUNTIME__SSE_KEEP_ALIVE_SECS", "1")],
    )
    .unwrap();
    let url = node.url().to_owned();
    // One pool: each open stream holds a connection of its own, the
    // initializes reuse the idle ones.
    let http = reqwest::Client::new();
    let mut held: Vec<(Client, SseStream)> = Vec::new();
    let refused = loop {
        assert!(
            held.len() < MAX_CONNECTIONS,
            "{} streams held on a node allowed {MAX_CONNECTIONS} connections",
            held.len()
        );
        let mut client = Client::with_http(http.clone(), &url, VERSION);
        within("initialize", client.initialize(json!({})))
            .await
            .unwrap();
        let session = client.session_id().unwrap().to_owned();
        let response = raw_get(&http, &url, &session).await;
        if response.status() == 503 {
            break (client, response);
        }
        assert_eq!(response.status(), 200, "{:?}", response.text().await);
        held.push((client, SseStream::new(response)));
    };
    let (waiting, response) = refused;
    // The connections in use then: the streams, the GET refused, maybe an
    // idle pooled one.
    assert!(
        held.len() + HEADROOM + 2 >= MAX_CONNECTIONS,
        "refused after only {} streams",
        held.len()
    );
    assert_eq!(
        response
            .headers()
            .get("Retry-After")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("as many streams as its connection limit allows"),
        "{body}"
    );

    // A request still gets a connection and an answer.
    let (echo, _) = within(
        "echo at the stream limit",
        waiting.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "room"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(echo["result"]["content"][0]["text"], "Echo: room", "{echo}");

    // One stream ends: once the node sees its connection closed (at the
    // next keep-alive), a stream is admitted again.
    drop(held.pop());
    let session = waiting.session_id().unwrap().to_owned();
    let admitted = within("a stream admitted again", async {
        loop {
            let response = raw_get(&http, &url, &session).await;
            if response.status() == 200 {
                break response;
            }
            assert_eq!(response.status(), 503);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    drop(admitted);
    let base = url.trim_end_matches("/mcp");
    let refusals = metric(
        base,
        "mcp_connections_refused_total{reason=\"stream_limit\"} ",
    )
    .await;
    assert!(refusals >= 1.0, "{refusals}");
}
