//! The session era's long-lived streams of sessions without a principal
//! have a quota per client address (issue 31), as 2026-07-28 listen
//! streams do: on real nodes without authorization, an address holding
//! `quotas.streams_per_address` standalone GET streams and legacy `/sse`
//! streams gets 429 with -32029 naming the quota for one more, while
//! another address opens its own; reconnecting to a stream keeps its one
//! slot, and a closed stream gives its slot back. With two nodes on one
//! Redis the count is the cluster's.

mod address_support;

use std::time::Duration;

use address_support::{Answer, client_from, open_legacy, open_stream, post, session};
use mcp_cluster_testkit::{Cluster, NodeCommand, NodeProcess, node_binary, within};
use reqwest::StatusCode;
use serde_json::json;

/// Streams an address may hold open in these tests.
const SLOTS: &str = "2";

/// Opens a GET stream of `session` as soon as the address has a free slot
/// again (a closed stream's slot is given back in the background).
async fn eventually_open(http: &reqwest::Client, url: &str, session: &str) -> reqwest::Response {
    within("a freed stream slot is taken again", async {
        loop {
            let response = open_stream(http, url, session).await;
            if response.status() == StatusCode::OK {
                return response;
            }
            Answer::refused(response, "streams_per_address").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn an_address_holds_at_most_its_streams_get_and_legacy_alike() {
    // Keep-alives every second: the node notices a closed stream at its
    // next write.
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", "warn"],
        &[
            ("MCP_QUOTAS__STREAMS_PER_ADDRESS", SLOTS),
            ("MCP_RUNTIME__SSE_KEEP_ALIVE_SECS", "1"),
        ],
    )
    .unwrap_or_else(|err| panic!("{err:#}"));
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let reader = client_from("127.0.0.2");
    let sessions = [
        session(&reader, &url).await,
        session(&reader, &url).await,
        session(&reader, &url).await,
    ];

    // A GET stream and a legacy stream take the address's two slots.
    let first = open_stream(&reader, &url, &sessions[0]).await;
    assert_eq!(first.status(), StatusCode::OK);
    let legacy = open_legacy(&reader, &base).await;
    assert_eq!(legacy.status(), StatusCode::OK);
    let refused = open_stream(&reader, &url, &sessions[1]).await;
    Answer::refused(refused, "streams_per_address").await;
    let refused = open_legacy(&reader, &base).await;
    Answer::refused(refused, "streams_per_address").await;
    // Reconnecting to the stream it reads takes that stream's slot over.
    let again = open_stream(&reader, &url, &sessions[0]).await;
    assert_eq!(again.status(), StatusCode::OK);
    drop(first);

    // Another address reads the same kind of streams, and the sessions of
    // the limited address still answer.
    let other = client_from("127.0.0.3");
    let theirs = session(&other, &url).await;
    let stream = open_stream(&other, &url, &theirs).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let legacy_other = open_legacy(&other, &base).await;
    assert_eq!(legacy_other.status(), StatusCode::OK);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let answer = post(&reader, &url, Some(&sessions[2]), &list).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);

    // The legacy stream closes: its slot comes back.
    drop(legacy);
    let third = eventually_open(&reader, &url, &sessions[2]).await;
    let refused = open_stream(&reader, &url, &sessions[1]).await;
    Answer::refused(refused, "streams_per_address").await;
    drop((again, third, stream, legacy_other));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streams_of_an_address_count_across_nodes() {
    let command = NodeCommand::new(node_binary()).env("MCP_QUOTAS__STREAMS_PER_ADDRESS", SLOTS);
    let cluster = tokio::task::block_in_place(|| {
        Cluster::start_command(2, command, |_| Vec::new()).unwrap_or_else(|err| panic!("{err:#}"))
    });
    let (a, b) = (cluster.node_url(0), cluster.node_url(1));
    let reader = client_from("127.0.0.2");
    let sessions = [
        session(&reader, &a).await,
        session(&reader, &b).await,
        session(&reader, &a).await,
    ];
    // One stream on each node: neither node alone holds two, the cluster
    // does.
    let on_a = open_stream(&reader, &a, &sessions[0]).await;
    assert_eq!(on_a.status(), StatusCode::OK);
    let on_b = open_stream(&reader, &b, &sessions[1]).await;
    assert_eq!(on_b.status(), StatusCode::OK);
    for url in [&a, &b] {
        let refused = open_stream(&reader, url, &sessions[2]).await;
        Answer::refused(refused, "streams_per_address").await;
        let base = url.trim_end_matches("/mcp");
        let refused = open_legacy(&reader, base).await;
        Answer::refused(refused, "streams_per_address").await;
    }
    // Another address is not counted with it.
    let other = client_from("127.0.0.3");
    let theirs = session(&other, &b).await;
    let stream = open_stream(&other, &a, &theirs).await;
    assert_eq!(stream.status(), StatusCode::OK);
    // A stream moving to the other node (the client reconnects there)
    // keeps its one slot.
    let moved = open_stream(&reader, &a, &sessions[1]).await;
    assert_eq!(moved.status(), StatusCode::OK);
    drop((on_a, on_b, moved, stream));
}
