//! Redis goes away: requests fail fast with a clear error (503 with a
//! JSON-RPC error body), readiness fails, no node crashes; when Redis comes
//! back (same port, empty), every node reconnects by itself and serves new
//! sessions again, streams and wake-ups included.

mod cluster_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{Cluster, within};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "outage", "version": "0"}}})
}

/// Asserts a 503 whose body is a JSON-RPC error.
fn assert_unavailable(reply: Reply, what: &str) {
    match reply {
        Reply::Status(status, body, _) => {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
            let body: Value = serde_json::from_str(&body)
                .unwrap_or_else(|err| panic!("{what}: body is not JSON ({err}): {body}"));
            assert_eq!(body["jsonrpc"], "2.0", "{what}: {body}");
            assert!(body["error"]["code"].is_i64(), "{what}: {body}");
            assert!(body["error"]["message"].is_string(), "{what}: {body}");
        }
        other => panic!("{what}: expected 503, got {other:?}"),
    }
}

async fn healthz(cluster: &Cluster, i: usize) -> u16 {
    let url = format!("http://{}/healthz", cluster.node_addr(i));
    within("GET /healthz", reqwest::get(url))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test]
async fn requests_fail_fast_while_redis_is_down_and_nodes_reconnect_after() {
    let cluster = start(3, &[]);
    let before = session(&cluster.node_url(0), json!({})).await;

    cluster.redis().stop().unwrap();

    for i in 0..cluster.len() {
        let url = cluster.node_url(i);
        let reply = within(
            "initialize while Redis is down",
            Client::new(&url, VERSION).post(&initialize_body()),
        )
        .await
        .unwrap();
        assert_unavailable(reply, &format!("initialize on node {i}"));
        assert_eq!(readyz(&cluster, i).await, 503, "/readyz of node {i}");
    }
    let call = call(9, "echo", json!({"message": "down"}));
    let reply = within("call while Redis is down", before.post(&call))
        .await
        .unwrap();
    assert_unavailable(reply, "request of an existing session");
    for i in 0..cluster.len() {
        assert_eq!(healthz(&cluster, i).await, 200, "node {i} is alive");
    }

    cluster.redis().restart().unwrap();

    // Redis came back empty: the old session is gone (once the node's
    // command connection is back; until then, 503).
    within("the old session is gone", async {
        loop {
            match before.post(&call).await.unwrap() {
                Reply::Status(StatusCode::NOT_FOUND, _, _) => break,
                Reply::Status(StatusCode::SERVICE_UNAVAILABLE, _, _) => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                other => panic!("a session Redis lost: {other:?}"),
            }
        }
    })
    .await;
    for i in 0..cluster.len() {
        // The node reconnects by itself; a 503 until it has.
        let mut refused = 0;
        within("a new session works again", async {
            while let Err(err) = serves(&cluster, i).await {
                assert!(err.contains("503"), "node {i}: {err}");
                if refused == 0 {
                    eprintln!("node {i} refused: {err}");
                }
                refused += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        eprintln!("node {i}: {refused} attempt(s) refused (503) while reconnecting");
        // Ready again once its pub/sub connection is back too, which may
        // come a moment after the command connection that served above.
        within(&format!("/readyz of node {i} is 200 again"), async {
            while readyz(&cluster, i).await != 200 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
    }
}

/// A new session on node `i`: echo, and a stream begun there and resumed
/// on the next node, which tails node `i`'s appends live (so both nodes'
/// pub/sub connections work). `Err` with the reply when the node refuses.
async fn serves(cluster: &Cluster, i: usize) -> Result<(), String> {
    let mut client = Client::new(&cluster.node_url(i), VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .map_err(|err| err.to_string())?;
    let message = format!("n{i}");
    let echo = call(2, "echo", json!({"message": message}));
    match within("echo", client.post(&echo)).await.unwrap() {
        Reply::Json(echo, _) => {
            assert_eq!(
                text(&echo["result"]),
                format!("Echo: n{i}"),
                "node {i}: {echo}"
            )
        }
        other => return Err(format!("echo: {other:?}")),
    }

    let mut stream = match within("POST", client.post(&long_running(10, 1000, 10, "again")))
        .await
        .unwrap()
    {
        Reply::Sse(stream) => stream,
        other => return Err(format!("long_running_operation: {other:?}")),
    };
    priming(&mut stream).await;
    let mut seen = Seen::default();
    record(&mut seen, next_event(&mut stream).await.expect("progress"));
    let last = seen.ids.last().unwrap().clone();
    drop(stream);
    let other = client_on_next(cluster, i, &client);
    let mut resumed = match within("GET resume", other.get(Some(&last))).await.unwrap() {
        Reply::Sse(stream) => stream,
        other => return Err(format!("resume: {other:?}")),
    };
    let rest = read_to_end(&mut resumed).await;
    let progress: Vec<f64> = seen
        .progress
        .iter()
        .chain(&rest.progress)
        .copied()
        .collect();
    assert_eq!(
        progress,
        (1..=10).map(f64::from).collect::<Vec<_>>(),
        "node {i}"
    );
    assert_eq!(rest.responses.len(), 1, "node {i}: {rest:?}");
    assert_eq!(rest.responses[0]["id"], 10);
    Ok(())
}

/// A client of `session`'s session on the node after `i`.
fn client_on_next(cluster: &Cluster, i: usize, session: &Client) -> Client {
    client(
        &cluster.node_url((i + 1) % cluster.len()),
        session.session_id().unwrap(),
    )
}
