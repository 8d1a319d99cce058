//! A client cannot make a node hold megabytes per session: `initialize`
//! with huge capabilities or client info is refused (-32602, no session),
//! and 200 of them leave the node's memory where it was (before the limit:
//! 200 x 3.5 MiB of capabilities took RSS from 58 MB to 2.27 GB).

mod hostile_support;

use futures_util::StreamExt;
use hostile_support::*;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::within;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_client_state_is_refused_and_costs_no_memory() {
    let node = node(&[]);
    let url = node.url().to_owned();
    assert_serving(&url).await;
    let before = node.rss_bytes();

    let blob = "x".repeat(3 * 1024 * 1024 + 512 * 1024);
    let capabilities = json!({"experimental": {"blob": blob}});
    let info = json!({"name": blob, "version": "1"});
    let attempts = futures_util::stream::iter(0..200)
        .map(|i| {
            let url = url.clone();
            let (capabilities, info) = if i % 2 == 0 {
                (capabilities.clone(), json!({"name": "big", "version": "1"}))
            } else {
                (json!({}), info.clone())
            };
            async move {
                let body = request(
                    1,
                    "initialize",
                    json!({"protocolVersion": VERSION, "capabilities": capabilities, "clientInfo": info}),
                );
                within("initialize", Client::new(&url, VERSION).post(&body))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    for reply in attempts {
        let Reply::Json(answer, headers) = reply else {
            panic!("expected a JSON answer: {reply:?}");
        };
        assert_eq!(error_code(&answer), -32602, "{answer}");
        assert_eq!(answer["id"], 1, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("at most"), "{message}");
        assert!(
            !headers.contains_key("mcp-session-id"),
            "no session for a refused initialize"
        );
    }

    let after = node.rss_bytes();
    eprintln!(
        "oversized initialize x200: RSS {} MiB -> {} MiB",
        before / MIB,
        after / MIB
    );
    // Parsing a 3.5 MiB body costs transient memory the allocator may keep;
    // what must not happen is memory that grows with every attempt.
    assert!(
        after < before + 150 * MIB,
        "RSS grew from {before} to {after} bytes"
    );
    assert_serving(&url).await;
}
