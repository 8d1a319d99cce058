//! `notifications/initialized` on one node, then at once a tool that asks
//! the client (elicitation) on another: the second node must find the
//! session initialized and ask. Before, the 202 went out while the first
//! node was still saving the record, and a request arriving elsewhere in
//! that moment found the session uninitialized: the tool answered
//! "elicitation failed: the session is not initialized" instead of asking
//! (the conformance scenario tools-call-elicitation failed that way
//! through a load balancer now and then).

mod cluster_support;

use cluster_support::*;
use serde_json::json;

/// Rounds: the window was a Redis round trip wide.
const ROUNDS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialized_on_one_node_is_seen_by_the_next_request_on_another() {
    let cluster = start(3, &[]);
    for round in 0..ROUNDS {
        let (id, _) = initialize_only(&cluster.node_url(0), json!({"elicitation": {}})).await;
        let b = client(&cluster.node_url(1), &id);
        let c = client(&cluster.node_url(2), &id);
        post_accepted(&b, &notification("notifications/initialized", json!({}))).await;
        let mut stream = post_sse(
            &c,
            &call(1, "test_elicitation", json!({"message": "Who are you?"})),
        )
        .await;
        let first = loop {
            let event = next_event(&mut stream)
                .await
                .unwrap_or_else(|| panic!("round {round}: the stream ended unanswered"));
            if !event.data.trim().is_empty() {
                break message(&event);
            }
        };
        assert_eq!(
            first["method"], "elicitation/create",
            "round {round}: the tool did not ask the client: {first}"
        );
    }
}
