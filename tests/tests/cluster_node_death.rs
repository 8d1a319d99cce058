//! A node dies (SIGKILL) in the middle of a request: a surviving node
//! notices the missing heartbeats and finalizes the orphaned stream, so a
//! client resuming it elsewhere gets a JSON-RPC error instead of waiting
//! forever; the session lives on on the other nodes.

mod cluster_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_testkit::within;
use serde_json::json;

/// The documented bound for finalizing a dead node's requests
/// (HEARTBEAT_TTL + REAP_INTERVAL = 9 s, plus the writes), with room for a
/// loaded machine. An upper bound against hangs, not a timing assertion.
const FINALIZATION_BOUND: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_dead_nodes_request_is_answered_with_an_error_on_resume_elsewhere() {
    let mut cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({})).await;
    let id = a.session_id().unwrap().to_owned();
    let b = client(&cluster.node_url(1), &id);
    let c = client(&cluster.node_url(2), &id);

    let mut stream = post_sse(&a, &long_running(42, 60_000, 60, "doomed")).await;
    priming(&mut stream).await;
    let mut on_a = Seen::default();
    while on_a.progress.len() < 2 {
        record(&mut on_a, next_event(&mut stream).await.expect("progress"));
    }
    let last_read = on_a.ids.last().unwrap().clone();

    cluster.kill_node(0);
    // The connection to A is gone with it.
    drop(stream);

    let mut resumed = resume(&b, &last_read).await;
    let on_b = tokio::time::timeout(FINALIZATION_BOUND, async {
        let mut seen = Seen::default();
        while let Some(event) = resumed.next_event().await.unwrap() {
            record(&mut seen, event);
        }
        seen
    })
    .await
    .expect("the orphaned stream is finalized within the bound");

    assert!(!on_b.retried, "{on_b:?}");
    assert!(on_b.other.is_empty(), "{on_b:?}");
    // Whatever A wrote after the last event read, once and in order.
    let progress: Vec<f64> = on_a
        .progress
        .iter()
        .chain(&on_b.progress)
        .copied()
        .collect();
    let expected: Vec<f64> = (1..=progress.len()).map(|p| p as f64).collect();
    assert_eq!(progress, expected, "{on_a:?} {on_b:?}");
    assert_eq!(on_b.responses.len(), 1, "{on_b:?}");
    let response = &on_b.responses[0];
    assert_eq!(response["id"], 42, "{response}");
    assert_eq!(response["error"]["code"], -32603, "{response}");
    assert!(response.get("result").is_none(), "{response}");

    // The session lives on, on both survivors.
    for (name, node) in [("B", &b), ("C", &c)] {
        let (echo, _) = within(
            "echo",
            node.request(
                "tools/call",
                json!({"name": "echo", "arguments": {"message": name}}),
            ),
        )
        .await
        .unwrap();
        assert_eq!(text(&echo["result"]), format!("Echo: {name}"), "{echo}");
    }
}
