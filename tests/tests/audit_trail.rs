//! The audit trail (`[audit]`): `mcp-node` started the way the README says,
//! federating two `mcp-node --stdio` upstreams, writes one JSON line per
//! request to the file configured: who, which session, which upstream and
//! tool, a hash of the arguments (never their values unless configured),
//! the outcome and the duration.

mod relay_support;

use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{NodeProcess, OtlpReceiver, node_binary, within};
use relay_support::{Scratch, call, config_file};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A node federating alpha and beta (`mcp-node --stdio`), its audit trail
/// in `audit.jsonl` beside its configuration, with `settings` more lines
/// of `[audit]`.
fn audited(settings: &str) -> (NodeProcess, Scratch, std::path::PathBuf) {
    audited_with(settings, &[])
}

/// As [`audited`], with `env` for the node.
fn audited_with(
    settings: &str,
    env: &[(&str, &str)],
) -> (NodeProcess, Scratch, std::path::PathBuf) {
    let argv =
        serde_json::to_string(&[node_binary().display().to_string(), "--stdio".into()]).unwrap();
    let (path, scratch) = config_file("mcp-audit", "");
    let trail = scratch.0.join("audit.jsonl");
    let config = format!(
        "[audit]\noutput = {:?}\n{settings}\n\n[[upstreams]]\nname = \"alpha\"\ncommand = {argv}\n\n[[upstreams]]\nname = \"beta\"\ncommand = {argv}\n",
        trail.display().to_string()
    );
    std::fs::write(&path, config).unwrap();
    let node = NodeProcess::spawn_logged(&node_binary(), &["--config", &path], env).unwrap();
    (node, scratch, trail)
}

/// The trail's records, once it holds one for each of `methods_and_names`
/// (10 s at most).
async fn records(trail: &std::path::Path, wanted: &[(&str, &str)]) -> Vec<Value> {
    let read = async {
        loop {
            let text = std::fs::read_to_string(trail).unwrap_or_default();
            let records: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
            let has = |(method, name): &(&str, &str)| {
                records
                    .iter()
                    .any(|r| r["method"] == *method && r["name"] == *name)
            };
            if wanted.iter().all(has) {
                return records;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    within("the audit records", async { Ok::<_, ()>(read.await) })
        .await
        .unwrap()
}

fn one<'a>(records: &'a [Value], method: &str, name: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["method"] == method && r["name"] == name)
        .unwrap_or_else(|| panic!("no record of {method} {name}: {records:?}"))
}

#[tokio::test]
async fn every_call_is_recorded_with_its_upstream_and_outcome_never_its_arguments() {
    let (node, _scratch, trail) = audited("");
    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let session = client.session_id().unwrap().to_owned();
    let arguments = json!({"message": "a secret the user typed"});
    let (echoed, _) = call(&client, "alpha_echo", arguments.clone()).await;
    assert!(echoed["result"].is_object(), "{echoed}");
    let (failed, _) = call(&client, "beta_test_error_handling", json!({})).await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let (refused, _) = call(&client, "gamma_echo", json!({})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let records = records(
        &trail,
        &[
            ("tools/call", "alpha_echo"),
            ("tools/call", "beta_test_error_handling"),
            ("tools/call", "gamma_echo"),
        ],
    )
    .await;
    let echo = one(&records, "tools/call", "alpha_echo");
    assert_eq!(echo["upstream"], "alpha", "{echo}");
    assert_eq!(echo["session"], session.as_str(), "{echo}");
    assert_eq!(echo["outcome"], "ok", "{echo}");
    assert!(echo["principal"].is_null(), "no authorization: {echo}");
    assert!(echo["request_id"].is_number(), "{echo}");
    assert!(echo["duration_ms"].as_f64().unwrap() >= 0.0, "{echo}");
    assert!(
        echo["node"].as_str().is_some_and(|n| !n.is_empty()),
        "{echo}"
    );
    assert!(echo["time"].as_str().unwrap().ends_with('Z'), "{echo}");
    let digest: String = Sha256::digest(arguments.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(echo["arguments_sha256"], digest.as_str(), "{echo}");
    assert!(echo.get("arguments").is_none(), "{echo}");
    let text = std::fs::read_to_string(&trail).unwrap();
    assert!(!text.contains("a secret the user typed"), "{text}");

    let error = one(&records, "tools/call", "beta_test_error_handling");
    assert_eq!(
        (&error["upstream"], &error["outcome"]),
        (&json!("beta"), &json!("tool_error"))
    );
    let unknown = one(&records, "tools/call", "gamma_echo");
    assert_eq!(unknown["outcome"], "error", "{unknown}");
    assert_eq!(unknown["error_code"], -32602, "{unknown}");
    assert!(unknown["upstream"].is_null(), "{unknown}");

    let metrics = within("GET /metrics", async {
        reqwest::get(node.url().replace("/mcp", "/metrics"))
            .await?
            .text()
            .await
    })
    .await
    .unwrap();
    let written = |outcome: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "mcp_audit_records_total{{outcome=\"{outcome}\"}} "
                ))
            })
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_default()
    };
    assert!(
        written("ok") >= 1 && written("tool_error") >= 1 && written("error") >= 1,
        "{metrics}"
    );
}

#[tokio::test]
async fn arguments_are_written_only_when_configured() {
    let (node, _scratch, trail) = audited("arguments = true");
    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (added, _) = call(&client, "beta_add", json!({"a": 2, "b": 40})).await;
    assert!(added["result"].is_object(), "{added}");
    let records = records(&trail, &[("tools/call", "beta_add")]).await;
    let add = one(&records, "tools/call", "beta_add");
    assert_eq!(add["arguments"], json!({"a": 2, "b": 40}), "{add}");
    assert_eq!(add["upstream"], "beta", "{add}");
}

#[tokio::test]
async fn a_cancelled_call_is_recorded_as_cancelled() {
    let (node, _scratch, trail) = audited("");
    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let long = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "alpha_long_running_operation", "arguments": {"duration_ms": 5000, "steps": 50},
        "_meta": {"progressToken": 9}}});
    let Reply::Sse(mut stream) = within("the long call", client.post(&long)).await.unwrap() else {
        panic!("progress comes on a stream");
    };
    let first = within("first progress", stream.next_message())
        .await
        .unwrap();
    assert!(first.is_some(), "the call runs");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 9, "reason": "changed my mind"}});
    assert!(matches!(
        within("cancel", client.post(&cancel)).await.unwrap(),
        Reply::Accepted
    ));
    let records = records(&trail, &[("tools/call", "alpha_long_running_operation")]).await;
    let cancelled = one(&records, "tools/call", "alpha_long_running_operation");
    assert_eq!(cancelled["outcome"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["upstream"], "alpha", "{cancelled}");
    assert!(
        cancelled["duration_ms"].as_f64().unwrap() < 5000.0,
        "ended by the cancel, not by the tool: {cancelled}"
    );
}

#[tokio::test]
async fn records_go_out_as_otlp_log_records_when_asked() {
    let receiver = OtlpReceiver::start().unwrap();
    let endpoint = receiver.endpoint();
    let (node, _scratch, trail) = audited_with(
        "otlp = true",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (echoed, _) = call(&client, "beta_echo", json!({"message": "to the collector"})).await;
    assert!(echoed["result"].is_object(), "{echoed}");
    let log = receiver
        .wait_for_log(
            |l| l.attributes.get("mcp.audit.name").map(String::as_str) == Some("beta_echo"),
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(log.event_name, "mcp.audit");
    assert_eq!(log.severity_text, "INFO");
    let attr = |k: &str| log.attributes.get(k).map(String::as_str);
    assert_eq!(attr("mcp.audit.upstream"), Some("beta"));
    assert_eq!(attr("mcp.audit.method"), Some("tools/call"));
    assert_eq!(attr("mcp.audit.outcome"), Some("ok"));
    assert!(
        attr("mcp.audit.arguments_sha256").is_some_and(|h| h.len() == 64),
        "{log:?}"
    );
    assert!(attr("mcp.audit.arguments").is_none(), "{log:?}");
    assert_eq!(
        log.resource.get("service.name").map(String::as_str),
        Some("mcp-node")
    );
    // The file has it too.
    records(&trail, &[("tools/call", "beta_echo")]).await;
}

#[tokio::test]
async fn otlp_records_without_an_endpoint_are_refused_at_start() {
    let (path, _scratch) = config_file("mcp-audit-refused", "[audit]\notlp = true\n");
    let output = within(
        "the node's refusal",
        tokio::process::Command::new(node_binary())
            .args(["--config", &path, "--bind", "127.0.0.1:0"])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("audit.otlp needs an OTLP endpoint"),
        "{stderr}"
    );
}
