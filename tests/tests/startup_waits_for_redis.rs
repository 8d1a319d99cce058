//! A node started before its Redis: it listens at once, alive but not
//! ready, answers MCP requests with 503 + `Retry-After`, keeps trying with
//! a backoff, and serves as soon as Redis is there, without ever exiting.
//! SIGTERM while it waits ends it cleanly; a Redis URL that does not parse
//! is a configuration error (exit 64) at once.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{GUARD, NodeProcess, RedisServer, free_port, node_binary, within};
use serde_json::{Value, json};

const VERSION: &str = "2025-11-25";

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "startup", "version": "0"}}})
}

/// GET `path` on `addr`: the status and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = within(path, reqwest::get(format!("http://{addr}{path}")))
        .await
        .unwrap_or_else(|err| panic!("GET {path} on {addr}: {err}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A node told to use Redis on `redis_port`, with an admin listener on
/// `admin`.
fn node_waiting_for(redis_port: u16, admin: SocketAddr) -> NodeProcess {
    let url = format!("redis://127.0.0.1:{redis_port}/");
    let admin = admin.to_string();
    let args = [
        "--redis-url",
        url.as_str(),
        "--admin-bind",
        admin.as_str(),
        "--log",
        "info",
        "--drain-delay-secs",
        "0",
    ];
    NodeProcess::spawn_logged(&node_binary(), &args, &[])
        .unwrap_or_else(|err| panic!("node did not start: {err:#}"))
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[tokio::test]
async fn a_node_started_before_redis_waits_not_ready_then_serves() {
    let redis_port = free_port().unwrap();
    let admin = loopback(free_port().unwrap());
    let mut node = node_waiting_for(redis_port, admin);

    // Listening at once, on both listeners: alive, not ready, and why.
    assert_eq!(get(node.addr(), "/healthz").await, (200, "ok".to_owned()));
    assert_eq!(get(admin, "/healthz").await.0, 200);
    for addr in [node.addr(), admin] {
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503, "/readyz on {addr}: {body}");
        assert!(body.contains("not connected"), "/readyz on {addr}: {body}");
    }
    // Scrapable while starting, and saying so, on the admin listener only.
    let (status, metrics) = get(admin, "/metrics").await;
    assert_eq!(status, 200, "/metrics on {admin}");
    assert!(
        metrics.contains("mcp_node_drain_phase{phase=\"starting\"} 1"),
        "{metrics}"
    );
    assert_eq!(get(node.addr(), "/metrics").await.0, 404);

    // MCP requests: 503, Retry-After, a JSON-RPC error saying why.
    let response = within(
        "initialize while waiting",
        reqwest::Client::new()
            .post(node.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize_body().to_string())
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert_eq!(
        body["error"]["message"], "session store not connected yet",
        "{body}"
    );

    // Each failed attempt is logged with its number.
    let line = node.wait_for_log("attempt=2").unwrap();
    assert!(line.contains("WARN"), "{line}");
    assert!(node.is_running());

    // Redis comes up on the port the node was told: it connects and serves.
    let redis = RedisServer::start_on(redis_port).unwrap();
    within("the node becomes ready", async {
        while get(node.addr(), "/readyz").await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(get(admin, "/readyz").await, (200, "ready".to_owned()));
    let (_, metrics) = get(admin, "/metrics").await;
    assert!(
        metrics.contains("mcp_node_drain_phase{phase=\"serving\"} 1"),
        "{metrics}"
    );
    let mut client = Client::new(node.url(), VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (response, _) = within(
        "tools/call echo",
        client.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "late"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        response["result"]["content"][0]["text"], "Echo: late",
        "{response}"
    );
    // The session is in this Redis: the node runs in cluster mode.
    let session = client.session_id().unwrap().to_owned();
    let keys = redis.command(&["DBSIZE"]).unwrap();
    assert_ne!(keys, "0", "no key in Redis for session {session}");

    node.wait_for_log("Session store connected.").unwrap();
    assert!(node.is_running(), "the node exited while waiting");
    let status = node.terminate_within(GUARD).unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn without_an_admin_listener_a_waiting_node_shows_metrics_to_allowed_hosts_only() {
    let redis_port = free_port().unwrap();
    let url = format!("redis://127.0.0.1:{redis_port}/");
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--redis-url", url.as_str(), "--log", "info"],
        &[],
    )
    .unwrap_or_else(|err| panic!("node did not start: {err:#}"));
    let (status, metrics) = get(node.addr(), "/metrics").await;
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains("mcp_node_drain_phase{phase=\"starting\"} 1"),
        "{metrics}"
    );
    // A page that rebinds its name to the node's address: refused.
    let rebound = within(
        "scrape as another host",
        reqwest::Client::new()
            .get(format!("http://{}/metrics", node.addr()))
            .header("Host", "rebound.example")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(rebound.status(), 403);
}

#[tokio::test]
async fn sigterm_while_waiting_for_redis_ends_the_node_cleanly() {
    let redis_port = free_port().unwrap();
    let admin = loopback(free_port().unwrap());
    let mut node = node_waiting_for(redis_port, admin);
    assert_eq!(get(node.addr(), "/readyz").await.0, 503);
    node.wait_for_log("Session store not connected yet")
        .unwrap();

    let status = node.terminate_within(GUARD).unwrap();
    assert_eq!(status.code(), Some(0), "{:?}", node.log());
    node.wait_for_log("Stopped before the session store connected.")
        .unwrap();
}

#[test]
fn a_redis_url_that_does_not_parse_exits_with_the_config_code() {
    let binary = node_binary();
    assert!(
        binary.exists(),
        "{} not found: cargo build -p mcp-node",
        binary.display()
    );
    let mut child = Command::new(&binary)
        .args([
            "--redis-url",
            "redis://127.0.0.1:port/",
            "--bind",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if waited >= GUARD {
            let _ = child.kill();
            panic!("mcp-node with a bad Redis URL did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
        waited += Duration::from_millis(20);
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("url"), "{stderr}");
}
