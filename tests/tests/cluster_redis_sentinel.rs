//! A node behind Redis Sentinels (`redis+sentinel://`) finds the primary
//! through them and follows a failover without a restart: real processes on
//! loopback, a primary, a replica and three Sentinels. The primary is
//! killed; the Sentinels promote the replica; the session opened before
//! goes on, and the requests that failed meanwhile failed cleanly (503 with
//! a JSON-RPC error) and were few.

mod cluster_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_client::Reply;
use mcp_cluster_testkit::{NodeProcess, RedisServer, Sentinel, node_binary, within};
use reqwest::StatusCode;
use serde_json::{Value, json};

const MASTER: &str = "mcp-primary";

/// Longest wait for the Sentinels to promote the replica and the node to
/// follow: down after 1 s, then an election and the promotion.
const FAILOVER: Duration = Duration::from_secs(30);

/// The text of an `echo` answer, or why there is none.
fn echoed(reply: Reply) -> Result<String, String> {
    match reply {
        Reply::Json(body, _) => body["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no text: {body}")),
        Reply::Status(StatusCode::SERVICE_UNAVAILABLE, body) => {
            let body: Value = serde_json::from_str(&body)
                .unwrap_or_else(|err| panic!("a 503 without a JSON-RPC body ({err}): {body}"));
            assert!(body["error"]["code"].is_i64(), "{body}");
            Err(format!("503: {}", body["error"]["message"]))
        }
        other => panic!("neither an answer nor a clean 503: {other:?}"),
    }
}

async fn metric(node: &NodeProcess, name: &str) -> f64 {
    let text = within(
        "GET /metrics",
        reqwest::get(format!("http://{}/metrics", node.addr())),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_node_behind_sentinels_follows_a_failover_and_its_sessions_go_on() {
    let primary = RedisServer::start().unwrap();
    let replica = RedisServer::start_replica_of(&primary).unwrap();
    primary.wait_replicated(1).unwrap();
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start(&primary, MASTER, 2).unwrap())
        .collect();
    let hosts = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect::<Vec<_>>()
        .join(",");
    let url = format!("redis+sentinel://{hosts}/{MASTER}");
    let node = NodeProcess::spawn(&node_binary(), &["--redis-url", &url, "--log", "warn"]).unwrap();

    let client = session(node.url(), json!({})).await;
    let first = within(
        "echo before",
        client.post(&call(1, "echo", json!({"message": "a"}))),
    )
    .await
    .unwrap();
    assert_eq!(echoed(first).unwrap(), "Echo: a");
    // What the session wrote is on the replica before the primary dies:
    // this test is about following the failover, not about what an
    // asynchronous replica may miss.
    primary.wait_replicated(1).unwrap();

    primary.stop().unwrap();

    // Calls go on being made through the failover; each either answers or
    // fails cleanly, until one answers after the replica took over.
    let mut failed = 0;
    let mut id = 2;
    let started = tokio::time::Instant::now();
    let recovered = loop {
        assert!(
            started.elapsed() < FAILOVER,
            "the node did not follow the failover within {FAILOVER:?} ({failed} calls failed)"
        );
        let reply = within(
            "echo during the failover",
            client.post(&call(id, "echo", json!({"message": id.to_string()}))),
        )
        .await
        .unwrap();
        match echoed(reply) {
            Ok(text) if sentinels[0].primary_port(MASTER).ok() == Some(replica.port()) => {
                assert_eq!(text, format!("Echo: {id}"));
                break id;
            }
            Ok(_) => {}
            Err(_) => failed += 1,
        }
        id += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // At 10 calls a second, the calls that failed span the window between
    // the primary's death and the node's move: at most the failover's
    // length.
    assert!(
        failed < 300,
        "{failed} calls failed before call {recovered} answered"
    );
    // The replica is the primary now, for every Sentinel (the others learn
    // it from the one that led the failover).
    within("every Sentinel names the replica", async {
        while !sentinels
            .iter()
            .all(|s| s.primary_port(MASTER).ok() == Some(replica.port()))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // Every call after that answers, a new session opens, the node is
    // ready, and it says it followed a failover.
    for n in 0..20 {
        let reply = within(
            "echo after",
            client.post(&call(1000 + n, "echo", json!({"message": n.to_string()}))),
        )
        .await
        .unwrap();
        assert_eq!(echoed(reply).unwrap(), format!("Echo: {n}"));
    }
    let fresh = session(node.url(), json!({})).await;
    let reply = within(
        "echo in a new session",
        fresh.post(&call(1, "echo", json!({"message": "new"}))),
    )
    .await
    .unwrap();
    assert_eq!(echoed(reply).unwrap(), "Echo: new");
    within("ready again", async {
        loop {
            let status = reqwest::get(format!("http://{}/readyz", node.addr()))
                .await
                .map(|r| r.status().as_u16())
                .ok();
            if status == Some(200) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(metric(&node, "mcp_redis_reconnects_total{connection=\"failover\"}").await >= 1.0);
    assert_eq!(metric(&node, "mcp_redis_primary_known").await, 1.0);
}
