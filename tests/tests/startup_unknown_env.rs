//! An `MCP_*` variable the node does not know is reported in its log,
//! naming it and the known name it is likely a typo of, and the node
//! starts and serves anyway; a known variable with a bad value still stops
//! it (exit 64).

use std::process::{Command, Stdio};

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use serde_json::json;

#[tokio::test]
async fn unknown_variables_are_reported_and_the_node_serves() {
    let env = [
        ("MCP_BIDN", "0.0.0.0:1"),
        ("MCP_HTTP_MAX_BODY_BYTES", "2048"),
        ("MCP_TOTALLY_UNRELATED", "1"),
        ("MCP_RUNTIME__SSE_RETRY_MS", "2000"),
    ];
    let mut node = NodeProcess::spawn_logged(&node_binary(), &["--log", "info"], &env)
        .unwrap_or_else(|err| panic!("node did not start: {err:#}"));

    let typo = node.wait_for_log("variable=MCP_BIDN").unwrap();
    assert!(typo.contains("WARN"), "{typo}");
    assert!(typo.contains("did_you_mean=MCP_BIND"), "{typo}");
    let section = node
        .wait_for_log("variable=MCP_HTTP_MAX_BODY_BYTES")
        .unwrap();
    assert!(
        section.contains("did_you_mean=MCP_HTTP__MAX_BODY_BYTES"),
        "{section}"
    );
    let unrelated = node.wait_for_log("variable=MCP_TOTALLY_UNRELATED").unwrap();
    assert!(!unrelated.contains("did_you_mean"), "{unrelated}");
    // A known one is applied, not reported.
    let log = node.log();
    assert!(
        !log.iter()
            .any(|line| line.contains("variable=MCP_RUNTIME__SSE_RETRY_MS")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|line| line.contains("sse_retry_ms: 2000")),
        "effective configuration: {log:#?}"
    );

    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    assert!(node.is_running());
}

#[test]
fn a_known_variable_with_a_bad_value_exits_with_the_config_code() {
    let output = Command::new(node_binary())
        .args(["--bind", "127.0.0.1:0"])
        .env("MCP_HTTP__MAX_BODY_BYTES", "big")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("MCP_HTTP__MAX_BODY_BYTES"), "{stderr}");
}
