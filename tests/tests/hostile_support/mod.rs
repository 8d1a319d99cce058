//! Helpers shared by the hostile-client tests (`hostile_*.rs`): a node
//! process, sessions on it, and memory readings.
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use serde_json::{Value, json};

/// The revision test sessions negotiate (batches need 2025-03-26).
pub const VERSION: &str = "2025-11-25";

/// One MiB.
pub const MIB: u64 = 1 << 20;

/// A node process with `args` (blocking: call it before the first await).
pub fn node(args: &[&str]) -> NodeProcess {
    let mut all = vec!["--log", "warn"];
    all.extend_from_slice(args);
    NodeProcess::spawn(&node_binary(), &all).unwrap_or_else(|err| panic!("node: {err:#}"))
}

/// A new, initialized session of `version` on `url`.
pub async fn session(url: &str, version: &str) -> Client {
    let mut client = Client::new(url, version);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    client
}

/// A request body.
pub fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// POSTs a request and returns its JSON answer (the node answers these
/// methods without a stream).
pub async fn call(client: &Client, body: &Value) -> Value {
    match within("POST", client.post(body)).await.unwrap() {
        Reply::Json(value, _) => value,
        other => panic!("expected a JSON answer to {body}: {other:?}"),
    }
}

/// The error code of a JSON-RPC answer.
pub fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

/// The node answers a tool call in a new session.
pub async fn assert_serving(url: &str) {
    let client = session(url, VERSION).await;
    let answer = call(
        &client,
        &request(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "still here"}}),
        ),
    )
    .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "Echo: still here",
        "{answer}"
    );
}
