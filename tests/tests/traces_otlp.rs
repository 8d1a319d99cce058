//! Traces leave a real `mcp-node` over OTLP/HTTP to a real receiver: a
//! control-bus message carrying a `traceparent` is handled in that trace,
//! with the node's resource attributes; spans still buffered are exported
//! when the node stops; every `OTEL_*` value the README says is refused
//! stops the node at startup with code 64 and one line naming it.

use std::time::Duration;

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{
    NODE_BIN_ENV, NodeProcess, OtlpReceiver, ReceivedSpan, RedisServer, node_binary, within,
};
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

/// Runs the node with traces on (`--otlp-endpoint`, or the variable when
/// `env` names an endpoint) and `env`, expecting it to refuse to start;
/// returns its exit code and stderr. A node that starts anyway is killed
/// after a while and reported.
fn refused_start(env: &[(&str, &str)]) -> (Option<i32>, String) {
    use std::io::Read;
    use std::process::{Command, Stdio};

    let mut command = Command::new(node_binary());
    command
        .env_remove(NODE_BIN_ENV)
        .args(["--bind", "127.0.0.1:0"]);
    if !env.iter().any(|(k, _)| k.contains("ENDPOINT")) {
        command.args(["--otlp-endpoint", "http://127.0.0.1:4318"]);
    }
    let mut child = command
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // A hang guard of 30 s: a refused start takes milliseconds.
    let poll = Duration::from_millis(20);
    for _ in 0..1500 {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), reader.join().unwrap());
        }
        std::thread::sleep(poll);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!(
        "{env:?}: the node started instead of refusing: {}",
        reader.join().unwrap()
    );
}

/// A refused environment, the `VAR=value` its stderr line names, and what
/// else that line must say.
type Refusal = (
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

#[test]
fn every_documented_otel_refusal_stops_the_node_at_startup() {
    let cases: &[Refusal] = &[
        (
            &[("OTEL_EXPORTER_OTLP_COMPRESSION", "bogus")],
            "OTEL_EXPORTER_OTLP_COMPRESSION=bogus",
            "unknown compression",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
            "OTEL_EXPORTER_OTLP_COMPRESSION=gzip",
            "not built in",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd")],
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=zstd",
            "not built in",
        ),
        (
            &[("OTEL_BSP_SCHEDULE_DELAY", "soon")],
            "OTEL_BSP_SCHEDULE_DELAY=soon",
            "milliseconds",
        ),
        (
            &[("OTEL_BSP_EXPORT_TIMEOUT", "-5")],
            "OTEL_BSP_EXPORT_TIMEOUT=-5",
            "milliseconds",
        ),
        (
            &[("OTEL_BSP_MAX_QUEUE_SIZE", "lots")],
            "OTEL_BSP_MAX_QUEUE_SIZE=lots",
            "whole number",
        ),
        (
            &[("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5000")],
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=5000",
            "OTEL_BSP_MAX_QUEUE_SIZE",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "garbage")],
            "OTEL_EXPORTER_OTLP_HEADERS=",
            "key=value",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=s3cret,x")],
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS=",
            "key=value",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
            "http/protobuf",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")],
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json",
            "http/protobuf",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")],
            "OTEL_EXPORTER_OTLP_ENDPOINT=https://collector:4318",
            "https is not built in",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")],
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector:4318",
            "http:// URL",
        ),
        (
            &[("OTEL_TRACES_EXPORTER", "zipkin")],
            "OTEL_TRACES_EXPORTER=zipkin",
            "only otlp and none",
        ),
        (
            &[("OTEL_TRACES_SAMPLER", "sometimes")],
            "OTEL_TRACES_SAMPLER=sometimes",
            "always_on",
        ),
        (
            &[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ],
            "OTEL_TRACES_SAMPLER_ARG=2",
            "between 0 and 1",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")],
            "OTEL_EXPORTER_OTLP_TIMEOUT=soon",
            "milliseconds",
        ),
        (
            &[("OTEL_RESOURCE_ATTRIBUTES", "novalue")],
            "OTEL_RESOURCE_ATTRIBUTES=novalue",
            "key=value",
        ),
    ];
    for (env, named, reason) in cases {
        let (code, stderr) = refused_start(env);
        assert_eq!(code, Some(64), "{env:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(named)).collect();
        let [line] = lines.as_slice() else {
            panic!("{env:?}: one line naming {named}: {stderr}")
        };
        assert!(line.contains(reason), "{env:?}: {line}");
    }
    // Header values may be credentials: never echoed.
    let (_, stderr) = refused_start(&[("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cret,x")]);
    assert!(!stderr.contains("s3cret"), "{stderr}");
}
