//! A hosted server's requests join the caller's trace: the node gives the
//! child the `traceparent` of its own span for the request (a child of the
//! caller's `traceparent` header) as `_meta.traceparent`, and exports that
//! span, so the child's spans hang under the node's in one trace. Run
//! against the release build too (`tests/run-all.sh`, `TRACES_TESTS`).

use std::path::Path;
use std::time::Duration;

use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{NodeProcess, OtlpReceiver, node_binary, within};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_ID: &str = "b7ad6b7169203331";

/// Room for the batch processor's delay on a loaded machine; a hang guard.
const ARRIVAL: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_gets_the_node_s_span_as_its_parent_in_meta() {
    let receiver = OtlpReceiver::start().unwrap();
    let dir = std::env::temp_dir().join(format!("mcp-relay-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("relay/hostile.py");
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstreams]]\nname = \"echo\"\ncommand = {}\n",
            json!(["python3", script.display().to_string(), "echo-meta"])
        ),
    )
    .unwrap();
    let endpoint = receiver.endpoint();
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--config", config.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
    )
    .unwrap();
    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(
        "traceparent",
        HeaderValue::from_str(&format!("00-{TRACE_ID}-{PARENT_ID}-01")).unwrap(),
    );
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "act", "arguments": {}}});
    let reply = within("tools/call", client.post_with(&call, headers))
        .await
        .unwrap();
    let body = match reply {
        Reply::Json(body, _) => body,
        Reply::Sse(mut stream) => within("answer", stream.next_message())
            .await
            .unwrap()
            .unwrap(),
        other => panic!("{other:?}"),
    };
    let text = body["result"]["content"][0]["text"].as_str().unwrap_or("");
    let meta: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("{body}"));
    let traceparent = meta["traceparent"].as_str().unwrap_or("");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "the child got no traceparent: {meta}");
    assert_eq!(parts[1], TRACE_ID, "not the caller's trace: {meta}");
    assert_ne!(
        parts[2], PARENT_ID,
        "the child's parent must be the node's span: {meta}"
    );
    let span_id = parts[2].to_owned();
    let span = receiver
        .wait_for(|s| s.trace_id == TRACE_ID && s.span_id == span_id, ARRIVAL)
        .await
        .unwrap_or_else(|err| panic!("the child's parent span was not exported: {err:#}"));
    assert_eq!(span.parent_span_id.as_deref(), Some(PARENT_ID), "{span:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
