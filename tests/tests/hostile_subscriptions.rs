//! A subscription flood is bounded: over-long URIs (-32602) and URIs of no
//! resource (-32002) are refused, a session holds at most
//! `max_subscriptions_per_session`, memory stays put (before: 2,000
//! subscriptions to 100 KB URIs took +780 MB), and in Redis the session
//! record is not rewritten per subscription (they live in a set beside it).

mod hostile_support;

use hostile_support::*;
use mcp_cluster_client::Client;
use mcp_cluster_testkit::Cluster;
use serde_json::json;

async fn subscribe(client: &Client, id: i64, uri: &str) -> serde_json::Value {
    call(
        client,
        &request(id, "resources/subscribe", json!({ "uri": uri })),
    )
    .await
}

/// Floods one session; returns it.
async fn flood(url: &str) -> Client {
    let client = session(url, VERSION).await;
    let long = "u".repeat(100 * 1024);
    for i in 0..2000 {
        let answer = subscribe(&client, i, &format!("test://{i}/{long}")).await;
        assert_eq!(error_code(&answer), -32602, "{i}");
    }
    for i in 0..500 {
        let answer = subscribe(&client, 10_000 + i, &format!("nowhere://{i}")).await;
        assert_eq!(error_code(&answer), -32002, "{answer}");
        assert_eq!(answer["error"]["data"]["uri"], format!("nowhere://{i}"));
    }
    // Resources the server has (template instances): up to the limit.
    for i in 0..64 {
        let answer = subscribe(&client, 20_000 + i, &format!("test://template/{i}/data")).await;
        assert!(answer.get("result").is_some(), "{i}: {answer}");
    }
    let answer = subscribe(&client, 30_000, "test://template/64/data").await;
    assert_eq!(error_code(&answer), -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unsubscribe"),
        "{answer}"
    );
    // Unsubscribing frees room.
    let answer = call(
        &client,
        &request(
            30_001,
            "resources/unsubscribe",
            json!({"uri": "test://template/0/data"}),
        ),
    )
    .await;
    assert!(answer.get("result").is_some(), "{answer}");
    let answer = subscribe(&client, 30_002, "test://template/64/data").await;
    assert!(answer.get("result").is_some(), "{answer}");
    client
}

#[tokio::test]
async fn a_subscription_flood_is_refused_and_costs_no_memory() {
    let node = node(&[]);
    assert_serving(node.url()).await;
    let before = node.rss_bytes();
    flood(node.url()).await;
    let after = node.rss_bytes();
    eprintln!(
        "subscription flood (embedded): RSS {} MiB -> {} MiB",
        before / MIB,
        after / MIB
    );
    assert!(
        after < before + 64 * MIB,
        "RSS grew from {before} to {after} bytes"
    );
    assert_serving(node.url()).await;
}

#[tokio::test]
async fn in_redis_subscriptions_live_beside_the_record_and_are_bounded() {
    let cluster = Cluster::start(1, &["--log", "warn"]).unwrap();
    let url = cluster.node_url(0);
    let client = session(&url, VERSION).await;
    let id = client.session_id().unwrap().to_owned();
    let record = format!("mcp:{{{id}}}:session");
    let subs = format!("mcp:{{{id}}}:subs");
    let size = || cluster.redis().command(&["STRLEN", &record]).unwrap();
    let answer = subscribe(&client, 100, "test://static-text").await;
    assert!(answer.get("result").is_some(), "{answer}");
    let one = size();
    let answer = call(
        &client,
        &request(
            101,
            "resources/unsubscribe",
            json!({"uri": "test://static-text"}),
        ),
    )
    .await;
    assert!(answer.get("result").is_some(), "{answer}");
    for i in 0..64 {
        let answer = subscribe(&client, i, &format!("test://template/{i}/data")).await;
        assert!(answer.get("result").is_some(), "{answer}");
    }
    assert_eq!(size(), one, "the record does not grow with subscriptions");
    assert_eq!(cluster.redis().command(&["SCARD", &subs]).unwrap(), "64");
    let answer = subscribe(&client, 64, "test://template/64/data").await;
    assert_eq!(error_code(&answer), -32602, "{answer}");
    assert_eq!(cluster.redis().command(&["SCARD", &subs]).unwrap(), "64");
    // The set lives and goes with the session.
    let ttl: i64 = cluster
        .redis()
        .command(&["PTTL", &subs])
        .unwrap()
        .parse()
        .unwrap();
    assert!(ttl > 0, "the subscriptions expire with the session: {ttl}");
    assert!(client.delete().await.unwrap().is_success());
    assert_eq!(cluster.redis().command(&["EXISTS", &subs]).unwrap(), "0");
}
