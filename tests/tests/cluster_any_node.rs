//! Any node serves any request of any session: the steps of one session
//! spread over three nodes (direct node URLs, one session id) behave as on a
//! single node — lifecycle, log level, resource subscriptions with the
//! standalone stream held by another node, and DELETE ending the session on
//! every node.

mod cluster_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{Cluster, GUARD, metric, within};
use reqwest::StatusCode;
use serde_json::json;

/// How long a stream must stay quiet to count as "nothing more comes".
const QUIET: Duration = Duration::from_millis(1500);

#[tokio::test]
async fn lifecycle_steps_on_three_different_nodes() {
    let cluster = start(3, &[]);
    let (id, result) = initialize_only(&cluster.node_url(0), json!({})).await;
    assert_eq!(result["protocolVersion"], VERSION);
    let b = client(&cluster.node_url(1), &id);
    let c = client(&cluster.node_url(2), &id);

    post_accepted(&b, &notification("notifications/initialized", json!({}))).await;
    let (response, _) = within(
        "tools/call on C",
        c.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "hi"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(text(&response["result"]), "Echo: hi", "{response}");
    assert_eq!(response["result"]["isError"], false, "{response}");
}

#[tokio::test]
async fn log_level_set_on_one_node_filters_logs_on_another() {
    let cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({})).await;
    let id = a.session_id().unwrap().to_owned();
    let b = client(&cluster.node_url(1), &id);
    // B holds the session before the level changes, so the change must
    // reach an actor that already exists there.
    within("ping on B", b.request("ping", json!({})))
        .await
        .unwrap();

    let (set, _) = within(
        "setLevel error on A",
        a.request("logging/setLevel", json!({"level": "error"})),
    )
    .await
    .unwrap();
    assert!(set["result"].is_object(), "{set}");
    let (response, seen) = within(
        "logging tool on B",
        b.request(
            "tools/call",
            json!({"name": "test_tool_with_logging", "arguments": {}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(response["result"]["isError"], false, "{response}");
    assert!(
        seen.iter().all(|m| m["method"] != "notifications/message"),
        "info logs pass a level of error: {seen:?}"
    );

    let (set, _) = within(
        "setLevel debug on B",
        b.request("logging/setLevel", json!({"level": "debug"})),
    )
    .await
    .unwrap();
    assert!(set["result"].is_object(), "{set}");
    let (response, seen) = within(
        "logging tool on B",
        b.request(
            "tools/call",
            json!({"name": "test_tool_with_logging", "arguments": {}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(response["result"]["isError"], false, "{response}");
    let logs: Vec<_> = seen
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 3, "info logs pass a level of debug: {seen:?}");
    assert!(
        logs.iter().all(|m| m["params"]["level"] == "info"),
        "{logs:?}"
    );
}

/// `touch_resource` of `uri` through `client`: the resource is updated.
async fn touch(client: &Client, uri: &str) {
    let (touched, _) = within(
        "touch",
        client.request(
            "tools/call",
            json!({"name": "touch_resource", "arguments": {"uri": uri}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(touched["result"]["isError"], false, "{touched}");
}

/// A session made on node A that subscribes there to `uri`, and its
/// standalone stream read on node B (past its priming event).
async fn subscribed_on_a_read_on_b(cluster: &Cluster, uri: &str) -> (String, SseStream) {
    let a = session(&cluster.node_url(0), json!({})).await;
    let id = a.session_id().unwrap().to_owned();
    let (subscribed, _) = within(
        "subscribe on A",
        a.request("resources/subscribe", json!({"uri": uri})),
    )
    .await
    .unwrap();
    assert!(subscribed["result"].is_object(), "{subscribed}");
    let b = client(&cluster.node_url(1), &id);
    let mut standalone = expect_sse(within("GET on B", b.get(None)).await.unwrap());
    priming(&mut standalone).await;
    (id, standalone)
}

#[tokio::test]
async fn resource_update_reaches_the_standalone_stream_on_another_node_once() {
    let cluster = start(3, &[]);
    let uri = "test://watched-resource";
    let (id, mut standalone) = subscribed_on_a_read_on_b(&cluster, uri).await;
    let c = client(&cluster.node_url(2), &id);

    touch(&c, uri).await;
    the_update_once(&mut standalone, uri).await;
}

/// The next event of `standalone` is the update of `uri`, with an id, and
/// nothing else arrives (keep-alive comments are no events).
async fn the_update_once(standalone: &mut SseStream, uri: &str) {
    let event = next_event(standalone)
        .await
        .expect("the standalone stream stays open");
    let update = message(&event);
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], uri, "{update}");
    assert!(event.id.is_some(), "{event:?}");
    match event_within(standalone, QUIET).await {
        None => {}
        Some(more) => panic!("a second delivery or an early end: {more:?}"),
    }
}

/// A session whose client only reads its standalone stream passivates on
/// every node, the stream's too; an update made on a third node still
/// reaches the stream once, written by the stream's node from the record
/// in Redis, without starting the session's actor there.
#[tokio::test]
async fn an_update_reaches_a_passivated_session_whose_stream_is_read_on_another_node() {
    let cluster = start(3, &["--session-passivate-secs", "1"]);
    let bases: Vec<String> = (0..3)
        .map(|i| cluster.node_url(i).trim_end_matches("/mcp").to_owned())
        .collect();
    let uri = "test://watched-resource";
    let (_, mut standalone) = subscribed_on_a_read_on_b(&cluster, uri).await;

    // Idle 1 s, seen by the idle check (every 5 s), then 1 s of grace.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for base in &bases[..2] {
        while metric(base, "mcp_sessions_held ").await != 0.0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{base} still holds the session's actor"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let started = metric(&bases[1], "mcp_sessions_rehydrated_total ").await;

    let toucher = session(&cluster.node_url(2), json!({})).await;
    touch(&toucher, "test://not-watched").await;
    touch(&toucher, uri).await;
    the_update_once(&mut standalone, uri).await;
    assert_eq!(metric(&bases[1], "mcp_sessions_held ").await, 0.0);
    assert_eq!(
        metric(&bases[1], "mcp_sessions_rehydrated_total ").await,
        started,
        "the stream's node started the session's actor for the update"
    );
}

/// Subscriptions made on one node while the standalone stream is read on
/// another, each followed at once by an update made on a third: every
/// update reaches the stream. The node holding the stream learns of a
/// subscription on the control channel; the subscribe is answered only
/// after that announcement went out, so an update the client causes next
/// is announced after it.
#[tokio::test]
async fn an_update_right_after_a_subscribe_elsewhere_reaches_the_stream() {
    const ROUNDS: usize = 40;
    let cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({})).await;
    let id = a.session_id().unwrap().to_owned();
    let b = client(&cluster.node_url(1), &id);
    let c = client(&cluster.node_url(2), &id);
    let mut standalone = expect_sse(within("GET on A", a.get(None)).await.unwrap());
    priming(&mut standalone).await;

    for round in 0..ROUNDS {
        let uri = format!("test://template/round-{round}/data");
        let (subscribed, _) = within(
            "subscribe on B",
            b.request("resources/subscribe", json!({"uri": uri})),
        )
        .await
        .unwrap();
        assert!(subscribed["result"].is_object(), "{subscribed}");
        touch(&c, &uri).await;
        let update = match event_within(&mut standalone, GUARD).await {
            Some(Some(event)) => message(&event),
            other => panic!("round {round}: no update for {uri}: {other:?}"),
        };
        assert_eq!(
            update["params"]["uri"],
            uri.as_str(),
            "round {round}: {update}"
        );
    }
}

#[tokio::test]
async fn delete_on_one_node_ends_the_session_on_every_node() {
    let cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({})).await;
    let id = a.session_id().unwrap().to_owned();
    let clients: Vec<_> = (0..3).map(|i| client(&cluster.node_url(i), &id)).collect();
    // Every node holds the session before it ends.
    for (i, c) in clients.iter().enumerate() {
        let (pong, _) = within("ping", c.request("ping", json!({}))).await.unwrap();
        assert!(pong["result"].is_object(), "node {i}: {pong}");
    }

    let status = within("DELETE on B", clients[1].delete()).await.unwrap();
    assert_eq!(status, StatusCode::OK);

    for (i, c) in clients.iter().enumerate() {
        let ping = json!({"jsonrpc": "2.0", "id": 100 + i, "method": "ping"});
        match within("POST after DELETE", c.post(&ping)).await.unwrap() {
            Reply::Status(status, _, _) => {
                assert_eq!(status, StatusCode::NOT_FOUND, "POST on node {i}")
            }
            other => panic!("POST on node {i} after DELETE: {other:?}"),
        }
        match within("GET after DELETE", c.get(None)).await.unwrap() {
            Reply::Status(status, _, _) => {
                assert_eq!(status, StatusCode::NOT_FOUND, "GET on node {i}")
            }
            other => panic!("GET on node {i} after DELETE: {other:?}"),
        }
    }
}
