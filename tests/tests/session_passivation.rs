//! An idle session's actor stops on the node (passivates) while its record
//! stays in the store; its next request starts it again with its state. A
//! session whose client only reads its standalone stream passivates too:
//! the node writes the server's events to the stream for it. The node is
//! the release binary, started with `--session-passivate-secs`.

use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{NodeProcess, metric, node_binary, within};
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

const VERSION: &str = "2025-11-25";

/// Waits (at most 20 s) until `series` reads `want`.
async fn until(base: &str, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = metric(base, series).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {now}, not {want}, after 20 s"
        );
        sleep(Duration::from_millis(200)).await;
    }
}

/// A resource the listening session subscribes to.
const WATCHED: &str = "test://watched-resource";

/// `touch_resource` of `uri` through `client`: subscribers hear of it.
async fn touch(client: &Client, uri: &str) {
    let touched = result(
        client,
        "tools/call",
        json!({"name": "touch_resource", "arguments": {"uri": uri}}),
    )
    .await;
    assert_eq!(touched["isError"], false, "{touched}");
}

async fn result(client: &Client, method: &str, params: Value) -> Value {
    let (response, _) = within(method, client.request(method, params))
        .await
        .unwrap();
    response
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method}: {response}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_passivates_and_its_next_request_finds_it_with_its_state() {
    let node = NodeProcess::spawn(&node_binary(), &["--session-passivate-secs", "1"]).unwrap();
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let mut idle = Client::new(&url, VERSION);
    within("initialize", idle.initialize(json!({})))
        .await
        .unwrap();
    result(&idle, "logging/setLevel", json!({"level": "error"})).await;
    let mut listening = Client::new(&url, VERSION);
    within("initialize", listening.initialize(json!({})))
        .await
        .unwrap();
    result(&listening, "resources/subscribe", json!({"uri": WATCHED})).await;
    let mut stream: SseStream = match within("GET", listening.get(None)).await.unwrap() {
        Reply::Sse(stream) => stream,
        other => panic!("expected the standalone stream, got {other:?}"),
    };
    assert_eq!(metric(&base, "mcp_sessions_held ").await, 2.0);
    // Its actor runs: the node does not stand in for it.
    assert_eq!(
        metric(&base, "mcp_sessions_listened_passivated ").await,
        0.0
    );

    // Idle 1 s, seen by the idle check (every 5 s), then 1 s of grace: both
    // actors stop, the one whose client reads its stream too.
    until(&base, "mcp_sessions_passivated_total ", 2.0).await;
    assert_eq!(metric(&base, "mcp_sessions_held ").await, 0.0);
    // The one whose client reads its stream is counted as the node's to
    // renew and write for; the other holds nothing here.
    assert_eq!(
        metric(&base, "mcp_sessions_listened_passivated ").await,
        1.0
    );

    // The server's events still reach the open stream, written by the node
    // from the stored record, without starting the session's actor: an
    // update of the resource it subscribed to, not of another.
    touch(&idle, "test://not-watched").await;
    touch(&idle, WATCHED).await;
    let update = within("the update", stream.next_message())
        .await
        .unwrap()
        .expect("the standalone stream stays open");
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], WATCHED, "{update}");
    // Only the session that sent `touch_resource` started again.
    assert_eq!(metric(&base, "mcp_sessions_rehydrated_total ").await, 1.0);
    assert_eq!(metric(&base, "mcp_sessions_held ").await, 1.0);

    // The passivated sessions answer as before, from their records: they
    // are initialized (tools are served), and keep the log level they set:
    // the tool's info logs, which a session without a level hears, do not
    // reach the one that set `error`.
    let logging = json!({"name": "test_tool_with_logging", "arguments": {}});
    let (_, heard) = within(
        "tools/call",
        listening.request("tools/call", logging.clone()),
    )
    .await
    .unwrap();
    let logs = |notes: &[Value]| {
        notes
            .iter()
            .filter(|n| n["method"] == "notifications/message")
            .count()
    };
    assert_eq!(logs(&heard), 3, "{heard:?}");
    let (response, notes) = within("tools/call", idle.request("tools/call", logging))
        .await
        .unwrap();
    assert!(response.get("result").is_some(), "{response}");
    assert_eq!(logs(&notes), 0, "a log below the level it set: {notes:?}");
    assert_eq!(metric(&base, "mcp_sessions_rehydrated_total ").await, 2.0);
    assert_eq!(metric(&base, "mcp_sessions_held ").await, 2.0);
    assert_eq!(
        metric(&base, "mcp_sessions_listened_passivated ").await,
        0.0
    );
    drop(stream);

    // Both end with DELETE, passivated again, as any other.
    until(&base, "mcp_sessions_passivated_total ", 4.0).await;
    let status = within("DELETE", idle.delete()).await.unwrap();
    assert!(status.is_success(), "{status}");
    let status = within("DELETE", listening.delete()).await.unwrap();
    assert!(status.is_success(), "{status}");
    let (gone, _) = within("tools/list", idle.request("tools/list", json!({})))
        .await
        .unwrap_or_else(|e| (json!({"error": e.to_string()}), Vec::new()));
    assert!(
        gone.get("result").is_none(),
        "a deleted session answered: {gone}"
    );
}
