//! Nodes and Redis over TLS, with an ACL user and client certificates: two
//! nodes sharing a TLS-only `redis-server` (`--tls-auth-clients yes`, the
//! `default` user off, the nodes' user allowed exactly the commands
//! `proto-docs/redis-layout.md` lists) serve one session across both, one with the password
//! in a file and one with it in the URL, which the effective configuration
//! log redacts. A node Redis refuses (wrong password, no client
//! certificate, a CA that did not sign Redis's certificate, a plain client
//! on the TLS port) stays up and not ready, saying what to check.

mod tls_support;

use std::path::Path;

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{NodeProcess, RedisServer, TestPki, node_binary, within};
use serde_json::json;
use tls_support::*;

const USER: &str = "mcp";
const PASSWORD: &str = "s3cret-Redis";

/// The TLS flags of a node trusting `ca` and presenting `pki`'s client
/// certificate (when `client_cert`).
fn redis_tls_args(pki: &TestPki, ca: &Path, client_cert: bool) -> Vec<String> {
    let mut args = vec!["--redis-ca-file".to_owned(), ca.display().to_string()];
    if client_cert {
        args.extend([
            "--redis-client-cert".to_owned(),
            pki.client_cert().display().to_string(),
            "--redis-client-key".to_owned(),
            pki.client_key().display().to_string(),
        ]);
    }
    args
}

fn node(args: &[String]) -> NodeProcess {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend(["--log", "info,mcp_access=off", "--drain-delay-secs", "0"]);
    NodeProcess::spawn_logged(&node_binary(), &all, &[])
        .unwrap_or_else(|err| panic!("node did not start: {err:#}"))
}

async fn readyz(node: &NodeProcess) -> (u16, String) {
    let url = node.url().replace("/mcp", "/readyz");
    let response = within("readyz", reqwest::get(url)).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn two_nodes_share_a_tls_redis_with_an_acl_user_and_serve_one_session() {
    let pki = TestPki::new().unwrap();
    let redis = RedisServer::start_tls(&pki, Some((USER, PASSWORD))).unwrap();
    // Node A: user in the URL, password in a file.
    let password_file = pki.dir().join("redis-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let mut a_args = vec![
        "--redis-url".to_owned(),
        redis.url().replacen("://", &format!("://{USER}@"), 1),
        "--redis-password-file".to_owned(),
        password_file.display().to_string(),
    ];
    a_args.extend(redis_tls_args(&pki, &pki.ca_cert(), true));
    // Node B: user and password in the URL.
    let mut b_args = vec!["--redis-url".to_owned(), redis.url_as(USER, PASSWORD)];
    b_args.extend(redis_tls_args(&pki, &pki.ca_cert(), true));
    let a = node(&a_args);
    let b = node(&b_args);
    for n in [&a, &b] {
        n.wait_for_log("Listening.").unwrap();
        // Ready: the command connection answers PING and the pub/sub
        // connection is up, both over TLS as the ACL user.
        assert_eq!(readyz(n).await, (200, "ready".to_owned()));
    }
    let effective = b.wait_for_log("Effective configuration.").unwrap();
    assert!(!effective.contains(PASSWORD), "{effective}");
    assert!(effective.contains(&format!("{USER}:***@")), "{effective}");

    // One session, created on A, used and ended on B.
    let mut on_a = Client::new(a.url(), VERSION);
    within("initialize on A", on_a.initialize(json!({})))
        .await
        .unwrap();
    let mut on_b = Client::new(b.url(), VERSION);
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let (response, notifications) = within(
        "a call with progress on B",
        on_b.request(
            "tools/call",
            json!({"name": "long_running_operation",
                   "arguments": {"duration_ms": 300, "steps": 3},
                   "_meta": {"progressToken": "p"}}),
        ),
    )
    .await
    .unwrap();
    assert!(response["result"].is_object(), "{response}");
    assert_eq!(notifications.len(), 3, "{notifications:?}");
    let (echo, _) = within(
        "echo on A",
        on_a.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "tls redis"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(echo["result"]["content"][0]["text"], "Echo: tls redis");
    assert_ne!(redis.command(&["DBSIZE"]).unwrap(), "0");
    // Both nodes are logged in as the ACL user, which may send exactly the
    // commands proto-docs/redis-layout.md lists: all of the above went
    // through with no other.
    let clients = redis.command(&["CLIENT", "LIST"]).unwrap();
    let as_user = clients
        .lines()
        .filter(|l| l.contains(&format!(" user={USER} ")))
        .count();
    assert!(as_user >= 4, "two connections per node:\n{clients}");
    assert!(
        within("DELETE on B", on_b.delete())
            .await
            .unwrap()
            .is_success()
    );
}

/// A node Redis refuses: up, not ready, and its log says what to check.
async fn refused_with(args: &[String], expected: &str) {
    let node = node(args);
    let line = node.wait_for_log("retrying").unwrap();
    assert!(line.contains(expected), "{expected:?} not in: {line}");
    assert!(!line.contains(PASSWORD), "{line}");
    let (status, body) = readyz(&node).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not connected"), "{body}");
}

#[tokio::test]
async fn a_node_redis_refuses_stays_not_ready_and_says_why() {
    let pki = TestPki::new().unwrap();
    let redis = RedisServer::start_tls(&pki, Some((USER, PASSWORD))).unwrap();
    let with = |url: String, mut tls: Vec<String>| {
        let mut args = vec!["--redis-url".to_owned(), url];
        args.append(&mut tls);
        args
    };

    let wrong_password = with(
        redis.url_as(USER, "wrong"),
        redis_tls_args(&pki, &pki.ca_cert(), true),
    );
    refused_with(&wrong_password, "wrong user or password").await;

    let no_client_cert = with(
        redis.url_as(USER, PASSWORD),
        redis_tls_args(&pki, &pki.ca_cert(), false),
    );
    refused_with(&no_client_cert, "client_cert_file").await;

    let stranger = TestPki::new().unwrap();
    let other_ca = with(
        redis.url_as(USER, PASSWORD),
        redis_tls_args(&pki, &stranger.ca_cert(), true),
    );
    refused_with(&other_ca, "not signed by a trusted CA").await;

    let plain = with(
        redis
            .url_as(USER, PASSWORD)
            .replacen("rediss://", "redis://", 1),
        Vec::new(),
    );
    refused_with(&plain, "TLS port").await;
}
