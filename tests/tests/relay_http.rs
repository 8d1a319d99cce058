//! Hosting a Streamable HTTP MCP server (`[[upstreams]] urls = […]`): a
//! node started the way the README says opens one upstream session per
//! client session, at the replicas in turn, and relays everything over
//! HTTP. The replicas here are `mcp-node` processes of their own (their
//! built-in tools stream progress, ask questions and run long); each keeps
//! its sessions to itself, as a server on an official SDK does.

mod relay_support;

use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{
    NodeProcess, TestIssuer, free_port, metric, node_binary, until_metric, within,
};
use relay_support::call;
use serde_json::{Value, json};

const VERSION: &str = "2025-11-25";

/// A replica at a fixed port (so that it can be started again there).
fn replica(port: u16) -> NodeProcess {
    NodeProcess::spawn_bound(
        &node_binary(),
        &["--log", "warn"],
        &format!("127.0.0.1:{port}"),
    )
    .unwrap()
}

/// A node hosting the HTTP server at `urls`.
fn hosting(urls: &[String]) -> (NodeProcess, relay_support::Scratch) {
    let urls = serde_json::to_string(urls).unwrap();
    let (config, scratch) = relay_support::config_file(
        "mcp-relay-http",
        &format!("[[upstreams]]\nname = \"replicas\"\nurls = {urls}\n"),
    );
    let node = NodeProcess::spawn_logged(&node_binary(), &["--config", &config], &[]).unwrap();
    (node, scratch)
}

fn base(node: &NodeProcess) -> String {
    node.url().trim_end_matches("/mcp").to_owned()
}

async fn session(url: &str, capabilities: Value) -> (Client, Value) {
    let mut client = Client::new(url, VERSION);
    let init = within("initialize", client.initialize(capabilities))
        .await
        .unwrap();
    (client, init)
}

/// Reads `stream` until the message answering `id`; the others before it.
async fn until_answer(stream: &mut SseStream, id: i64) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let message = within("the stream", stream.next_message())
            .await
            .unwrap()
            .expect("the stream ended before the answer");
        if message["id"] == id && message.get("method").is_none() {
            return (message, before);
        }
        before.push(message);
    }
}

#[tokio::test]
async fn an_http_server_is_relayed_one_upstream_session_per_session_at_the_replicas_in_turn() {
    let replicas = [replica(free_port().unwrap()), replica(free_port().unwrap())];
    let urls: Vec<String> = replicas.iter().map(|r| r.url().to_owned()).collect();
    let (node, _scratch) = hosting(&urls);
    let url = node.url();

    // The upstream's own answer, its capabilities included.
    let (first, init) = session(url, json!({"elicitation": {}})).await;
    assert_eq!(init["serverInfo"]["name"], "mcp-node", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    let (echoed, _) = call(&first, "echo", json!({"message": "over http"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: over http");

    // The next session opens at the other replica.
    let (second, _) = session(url, json!({})).await;
    call(&second, "echo", json!({"message": "two"})).await;
    for r in &replicas {
        assert_eq!(
            metric(
                &base(r),
                "mcp_sessions_created_total{transport=\"streamable_http\"}"
            )
            .await,
            1.0,
            "each replica holds one of the two sessions"
        );
    }

    // Progress streams through, under the client's token.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "long_running_operation", "arguments": {"duration_ms": 300, "steps": 3},
        "_meta": {"progressToken": "mine"}}});
    let Reply::Sse(mut stream) = within("POST", first.post(&body)).await.unwrap() else {
        panic!("progress comes on a stream");
    };
    let (done, before) = until_answer(&mut stream, 7).await;
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("3 steps")
    );
    let progress: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{before:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "mine")
    );

    // The upstream's question is the client's to answer.
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "test_elicitation", "arguments": {"message": "Your name?"}}});
    let Reply::Sse(mut stream) = within("POST", first.post(&body)).await.unwrap() else {
        panic!("a question comes on a stream");
    };
    let question = within("the question", stream.next_message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"username": "Ada", "email": "ada@example.com"}}});
    assert!(matches!(
        within("answer", first.post(&answer)).await.unwrap(),
        Reply::Accepted
    ));
    let (done, _) = until_answer(&mut stream, 8).await;
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("action=accept") && t.contains("Ada")),
        "{done}"
    );

    // A cancellation reaches the upstream: its handler stops.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "long_running_operation", "arguments": {"duration_ms": 60000, "steps": 2}}});
    let running = tokio::spawn({
        let client = Client::new(url, VERSION);
        let mut client = client;
        client.set_session_id(first.session_id().map(str::to_owned));
        async move { client.post(&body).await }
    });
    // The replica holding the session runs it.
    let upstream_of_first = within("the call upstream", async {
        loop {
            for r in &replicas {
                if metric(&base(r), "mcp_requests_in_flight").await == 1.0 {
                    return base(r);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 9, "reason": "enough"}});
    within("cancel", first.post(&cancel)).await.unwrap();
    until_metric(&upstream_of_first, "mcp_requests_in_flight", 0.0).await;
    running.abort();

    // The client's DELETE ends the upstream session too.
    within("DELETE", first.delete()).await.unwrap();
    until_metric(
        &upstream_of_first,
        "mcp_sessions_ended_total{reason=\"deleted\"}",
        1.0,
    )
    .await;
}

/// `client`'s session, whose upstream session is gone: a call meanwhile
/// fails naming the upstream (-32603), or finds the session ended already;
/// within 30 s the session answers 404, as any ended session does.
async fn ends_with_its_upstream_session(client: &Client) {
    let ended = async {
        loop {
            let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                              "params": {"name": "echo", "arguments": {"message": "gone?"}}});
            match client.post(&body).await.unwrap() {
                Reply::Status(status, ..) if status.as_u16() == 404 => return,
                Reply::Json(answer, _) => {
                    assert_eq!(answer["error"]["code"], -32603, "{answer}");
                    let message = answer["error"]["message"].as_str().unwrap_or_default();
                    assert!(message.contains("upstream replicas"), "{answer}");
                }
                Reply::Sse(mut stream) => {
                    let (answer, _) = until_answer(&mut stream, 5).await;
                    assert_eq!(answer["error"]["code"], -32603, "{answer}");
                }
                other => panic!("neither an error nor 404: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ended)
        .await
        .expect("the session outlived its upstream session by 30 s");
}

#[tokio::test]
async fn a_replica_that_is_gone_or_forgot_its_sessions_ends_theirs() {
    let port = free_port().unwrap();
    let only = replica(port);
    let (node, _scratch) = hosting(&[only.url().to_owned()]);
    let url = node.url().to_owned();
    let (client, _) = session(&url, json!({})).await;
    call(&client, "echo", json!({"message": "before"})).await;

    // Gone (nothing listens at its address): its sessions went with it,
    // and the client's session ends (404).
    drop(only);
    ends_with_its_upstream_session(&client).await;

    // Back without its sessions (restarted in place): the upstream says
    // 404, and the client's session ends too.
    let again = replica(port);
    let (client, _) = session(&url, json!({})).await;
    call(&client, "echo", json!({"message": "before"})).await;
    drop(again);
    let _back = replica(port);
    ends_with_its_upstream_session(&client).await;
}

#[tokio::test]
async fn new_sessions_skip_a_replica_that_is_down_and_the_others_go_on() {
    let alive = replica(free_port().unwrap());
    let dead_port = free_port().unwrap();
    let doomed = replica(dead_port);
    let urls = vec![doomed.url().to_owned(), alive.url().to_owned()];
    let (node, _scratch) = hosting(&urls);
    let url = node.url();
    // One session on each replica.
    let (on_doomed, _) = session(url, json!({})).await;
    let (on_alive, _) = session(url, json!({})).await;
    drop(doomed);

    // Every new session opens, at the replica that answers; the first
    // that meets the dead one marks it down.
    for n in 0..4 {
        let (client, init) = session(url, json!({})).await;
        assert_eq!(
            init["serverInfo"]["name"], "mcp-node",
            "session {n}: {init}"
        );
        let (echoed, _) = call(&client, "echo", json!({"message": "on"})).await;
        assert_eq!(
            echoed["result"]["content"][0]["text"], "Echo: on",
            "{echoed}"
        );
    }
    let down = format!(
        "mcp_upstream_replica_up{{replica=\"{}\",upstream=\"replicas\"}}",
        urls[0]
    );
    let up = format!(
        "mcp_upstream_replica_up{{replica=\"{}\",upstream=\"replicas\"}}",
        urls[1]
    );
    let failures = format!(
        "mcp_upstream_replica_failures_total{{replica=\"{}\",upstream=\"replicas\"}}",
        urls[0]
    );
    let base = base(&node);
    assert_eq!(metric(&base, &down).await, 0.0);
    assert_eq!(metric(&base, &up).await, 1.0);
    assert!(metric(&base, &failures).await >= 1.0);

    // The session on the live replica goes on; the one on the dead one
    // ends (its calls fail naming the upstream until the node sees it).
    let (echoed, _) = call(&on_alive, "echo", json!({"message": "still"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: still");
    ends_with_its_upstream_session(&on_doomed).await;
    let (echoed, _) = call(&on_alive, "echo", json!({"message": "after"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: after");
}

#[tokio::test]
async fn the_node_sends_its_own_token_from_a_file_it_reads_again_when_it_changes() {
    let issuer = TestIssuer::start().await.unwrap();
    let (upstream, _auth_scratch) = guarded(&issuer);
    let dir = tempfile_dir("token-file");
    let token_file = dir.join("upstream.token");
    std::fs::write(&token_file, issuer.token().audience(RESOURCE).sign()).unwrap();
    let urls = serde_json::to_string(&[upstream.url()]).unwrap();
    let (config, _scratch) = relay_support::config_file(
        "mcp-relay-http-token",
        &format!(
            "[[upstreams]]\nname = \"guarded\"\nurls = {urls}\nbearer_token_file = {:?}\n",
            token_file.display().to_string()
        ),
    );
    let node = NodeProcess::spawn_logged(&node_binary(), &["--config", &config], &[]).unwrap();
    let url = node.url();

    // The client's own (bogus) token stays with the node: the upstream
    // gets the file's, and serves.
    let mut client = Client::with_http(
        reqwest::Client::builder()
            .default_headers(
                [(
                    reqwest::header::AUTHORIZATION,
                    "Bearer not-for-the-upstream".parse().unwrap(),
                )]
                .into_iter()
                .collect(),
            )
            .build()
            .unwrap(),
        url,
        VERSION,
    );
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (echoed, _) = call(&client, "echo", json!({"message": "guarded"})).await;
    assert_eq!(
        echoed["result"]["content"][0]["text"], "Echo: guarded",
        "{echoed}"
    );

    // A token the upstream refuses: new sessions fail, saying so.
    std::fs::write(&token_file, "expired-or-forged").unwrap();
    let mut refused = Client::new(url, VERSION);
    let err = within("initialize", refused.initialize(json!({})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");

    // Rotated: read again, new sessions open.
    std::fs::write(&token_file, issuer.token().audience(RESOURCE).sign()).unwrap();
    let mut rotated = Client::new(url, VERSION);
    within("initialize", rotated.initialize(json!({})))
        .await
        .unwrap();
    let (echoed, _) = call(&rotated, "echo", json!({"message": "rotated"})).await;
    assert_eq!(
        echoed["result"]["content"][0]["text"], "Echo: rotated",
        "{echoed}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The resource URI a guarded upstream's tokens name.
const RESOURCE: &str = "http://127.0.0.1:1/mcp";

/// An upstream that takes only `issuer`'s tokens for [`RESOURCE`].
fn guarded(issuer: &TestIssuer) -> (NodeProcess, relay_support::Scratch) {
    let (auth, scratch) = relay_support::config_file(
        "mcp-relay-http-auth",
        &format!(
            "[auth]\nresource = \"{RESOURCE}\"\nissuers = [\"{}\"]\n",
            issuer.issuer()
        ),
    );
    let upstream =
        NodeProcess::spawn(&node_binary(), &["--log", "warn", "--config", &auth]).unwrap();
    (upstream, scratch)
}

/// A directory of its own for a test's files, named after `test`.
fn tempfile_dir(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-relay-http-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_node_gets_its_own_token_with_client_credentials_and_keeps_it() {
    let issuer = TestIssuer::start().await.unwrap();
    let (upstream, _auth_scratch) = guarded(&issuer);
    let dir = tempfile_dir("client-credentials");
    let secret = dir.join("client.secret");
    std::fs::write(&secret, issuer.client_secret()).unwrap();
    let urls = serde_json::to_string(&[upstream.url()]).unwrap();
    let (config, _scratch) = relay_support::config_file(
        "mcp-relay-http-cc",
        &format!(
            "[[upstreams]]\nname = \"guarded\"\nurls = {urls}\n\n[upstreams.client_credentials]\n\
             token_url = {:?}\nclient_id = {:?}\nclient_secret_file = {:?}\nresource = \"{RESOURCE}\"\n",
            issuer.token_endpoint(),
            issuer.client_id(),
            secret.display().to_string()
        ),
    );
    let node = NodeProcess::spawn_logged(&node_binary(), &["--config", &config], &[]).unwrap();
    let url = node.url();

    // Two sessions, one token: kept until shortly before it expires.
    for n in 0..2 {
        let mut client = Client::new(url, VERSION);
        within("initialize", client.initialize(json!({})))
            .await
            .unwrap();
        let (echoed, _) = call(&client, "echo", json!({"message": format!("cc {n}")})).await;
        assert_eq!(
            echoed["result"]["content"][0]["text"],
            format!("Echo: cc {n}"),
            "{echoed}"
        );
    }
    assert_eq!(issuer.token_requests(), 1);
    let _ = std::fs::remove_dir_all(dir);
}
