//! Traces leave a real `mcp-node` over OTLP/HTTP to a real receiver: a
//! control-bus message carrying a `traceparent` is handled in that trace,
//! with the node's resource attributes; spans still buffered are exported
//! when the node stops; an unsupported OTLP protocol stops the node at
//! startup.

use std::time::Duration;

use mcp_client::Client;
use mcp_testkit::{NodeProcess, OtlpReceiver, ReceivedSpan, RedisServer, node_binary, within};
use serde_json::json;

/// The caller's context, chosen by the test.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// Room for the batch processor's delay and a loaded machine; a hang
/// guard, not an assertion on time.
const ARRIVAL: Duration = Duration::from_secs(30);

/// A node of a one-node cluster on `redis`, exporting to `receiver` with
/// `env` added.
fn node(redis: &RedisServer, receiver: &OtlpReceiver, env: &[(&str, &str)]) -> NodeProcess {
    let endpoint = receiver.endpoint();
    let mut all = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=e2e",
        ),
    ];
    all.extend_from_slice(env);
    let redis_url = redis.url();
    NodeProcess::spawn_logged(
        &node_binary(),
        &[
            "--redis-url",
            &redis_url,
            "--drain-delay-secs",
            "0",
            "--drain-grace-secs",
            "1",
        ],
        &all,
    )
    .unwrap()
}

/// Opens a session on `node` (its actor lives there), and publishes on the
/// control bus, as another node would, the client's cancellation of a
/// request of that session, carrying the test's trace context.
async fn deliver_traced_cancel(redis: &RedisServer, node: &NodeProcess) -> String {
    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let session = client.session_id().unwrap().to_owned();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 99, "reason": "test"}});
    let message = json!({
        "type": "deliver",
        "session": session,
        "message": cancel.to_string(),
        "origin": "0000000000000000000000000000e2e0",
        "trace": format!("00-{TRACE_ID}-{PARENT_ID}-01"),
    });
    let receivers = redis
        .command(&["PUBLISH", "mcp:ctl", &message.to_string()])
        .unwrap();
    assert_eq!(receivers, "1", "the node listens on the control bus");
    session
}

fn is_handled_cancel(span: &ReceivedSpan) -> bool {
    span.trace_id == TRACE_ID && span.name == "process deliver"
}

#[tokio::test]
async fn a_routed_cancel_is_handled_in_the_callers_trace() {
    let receiver = OtlpReceiver::start().unwrap();
    let redis = RedisServer::start().unwrap();
    // Export within a tenth of a second rather than the default 5 s.
    let node = node(&redis, &receiver, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]);

    let session = deliver_traced_cancel(&redis, &node).await;

    let span = receiver.wait_for(is_handled_cancel, ARRIVAL).await.unwrap();
    assert_eq!(span.parent_span_id.as_deref(), Some(PARENT_ID));
    assert_eq!(span.kind, "consumer");
    assert_eq!(span.attr("mcp.session.id"), Some(session.as_str()));
    assert_eq!(
        span.attr("mcp.method.name"),
        Some("notifications/cancelled")
    );
    assert_eq!(span.attr("messaging.operation.type"), Some("process"));
    assert_eq!(span.resource["service.name"], "mcp-node");
    assert_eq!(span.resource["service.version"], env!("CARGO_PKG_VERSION"));
    assert!(
        span.resource["service.instance.id"].ends_with(&format!("-{}", node.pid())),
        "{:?}",
        span.resource
    );
    assert_eq!(span.resource["deployment.environment.name"], "e2e");
    assert_eq!(span.resource["telemetry.sdk.language"], "rust");
}

#[tokio::test]
async fn buffered_spans_are_exported_when_the_node_stops() {
    let receiver = OtlpReceiver::start().unwrap();
    let redis = RedisServer::start().unwrap();
    // The batch would wait a minute: only the shutdown flush sends it.
    let mut node = node(
        &redis,
        &receiver,
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
            ("OTEL_SERVICE_NAME", "traced-node"),
        ],
    );
    deliver_traced_cancel(&redis, &node).await;

    let status = tokio::task::spawn_blocking(move || node.terminate())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    let span = receiver.wait_for(is_handled_cancel, ARRIVAL).await.unwrap();
    assert_eq!(span.resource["service.name"], "traced-node");
}

#[test]
fn an_unsupported_otlp_protocol_stops_the_node_at_startup() {
    let output = std::process::Command::new(node_binary())
        .args([
            "--bind",
            "127.0.0.1:0",
            "--otlp-endpoint",
            "http://127.0.0.1:4317",
        ])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc") && stderr.contains("http/protobuf"),
        "{stderr}"
    );
}
