//! Authorization across a cluster (three nodes sharing a real Redis, nginx
//! round robin in front): a session is bound to its principal on every
//! node, and the official TypeScript SDK client gets a token by itself
//! (401, protected resource metadata, issuer discovery, client
//! credentials) and works through the load balancer.

mod auth_support;

use std::path::Path;
use std::process::Command;

use auth_support::*;
use mcp_cluster_testkit::{Cluster, TestIssuer, within};
use reqwest::{Method, StatusCode};
use serde_json::json;

fn cluster(config: &Path) -> Cluster {
    let config = config.to_str().unwrap().to_owned();
    Cluster::start(3, &["--config", &config]).unwrap_or_else(|err| panic!("{err:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_reusing_anothers_session_id_on_another_node_meets_404() {
    let issuer = TestIssuer::start().await.unwrap();
    let config = config_file("cluster-binding", &issuer, RESOURCE, "", "");
    let cluster = tokio::task::block_in_place(|| cluster(&config));
    let alice = issuer.token().audience(RESOURCE).subject("alice").sign();
    let bob = issuer.token().audience(RESOURCE).subject("bob").sign();
    let id = session(&cluster.node_url(0), &alice).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});

    for node in [1, 2, 0] {
        let url = cluster.node_url(node);
        let stolen = post(&url, Some(&bob), Some(&id), &list).await;
        assert_eq!(
            stolen.status,
            StatusCode::NOT_FOUND,
            "node {node}: {stolen:?}"
        );
        let bearer = format!("Bearer {bob}");
        for method in [Method::GET, Method::DELETE] {
            let answer = send(method.clone(), &url, Some(&bearer), Some(&id), None).await;
            assert_eq!(answer.status, StatusCode::NOT_FOUND, "node {node} {method}");
        }
    }
    // Untouched by all that: alice goes on, on any node, and ends it.
    for node in [2, 1] {
        let mine = post(&cluster.node_url(node), Some(&alice), Some(&id), &list).await;
        assert_eq!(mine.status, StatusCode::OK, "node {node}: {mine:?}");
    }
    let bearer = format!("Bearer {alice}");
    let deleted = send(
        Method::DELETE,
        &cluster.node_url(1),
        Some(&bearer),
        Some(&id),
        None,
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK);
    let gone = post(&cluster.node_url(2), Some(&alice), Some(&id), &list).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_connects_with_a_bearer_token_through_the_cluster() {
    let issuer = TestIssuer::start().await.unwrap();
    let issuer_url = issuer.issuer().to_owned();
    // The SDK checks that the metadata names the URL it connects to: the
    // resource is the load balancer's endpoint.
    let cluster = tokio::task::block_in_place(|| {
        Cluster::start_with(3, |lb| {
            let config = config_file("cluster-sdk", &issuer, lb, "", "");
            vec!["--config".into(), config.to_str().unwrap().to_owned()]
        })
        .unwrap_or_else(|err| panic!("{err:#}"))
    });
    let lb = cluster.lb_url();
    let token_a = issuer.token().audience(&lb).subject("sdk-a").sign();
    let token_b = issuer.token().audience(&lb).subject("sdk-b").sign();
    let js = Path::new(env!("CARGO_MANIFEST_DIR")).join("js");
    let node = js.join("node_modules/.bin/node");
    assert!(
        node.exists(),
        "{} missing: run `npm ci --prefix tests/js` (tests/run-all.sh does)",
        node.display()
    );
    let mut command = Command::new(node);
    command.arg(js.join("sdk-auth-e2e.mjs")).args([
        lb.as_str(),
        issuer_url.as_str(),
        issuer.client_id(),
        issuer.client_secret(),
        token_a.as_str(),
        token_b.as_str(),
    ]);
    let output = within(
        "the SDK script",
        tokio::task::spawn_blocking(move || command.output()),
    )
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("7 passed, 0 failed"), "{stdout}");
    assert!(issuer.token_requests() >= 1, "the SDK got its token itself");
}
