//! A hosted upstream's limits with authorization on: each principal reaches
//! its own children only, holds at most `max_children_per_principal` of
//! them (past it, 429 with `Retry-After`), and the node at most
//! `max_children` (past it, 503 with `Retry-After`). Refused sessions start
//! no child and keep nothing; a session ended gives its place back. A
//! 2026-07-28 principal's requests run on pooled children of its own,
//! never on another principal's.

mod auth_support;
mod relay_support;

use auth_support::*;
use mcp_cluster_testkit::{TestIssuer, node_binary};
use relay_support::children_of;
use reqwest::{Method, StatusCode};
use serde_json::json;

fn retry_after(answer: &Answer) -> u64 {
    answer
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {answer:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_past_a_principal_s_or_the_node_s_limit_are_refused_with_429_or_503() {
    let issuer = TestIssuer::start().await.unwrap();
    let argv =
        serde_json::to_string(&[node_binary().display().to_string(), "--stdio".into()]).unwrap();
    let config = config_file(
        "relay-limits",
        &issuer,
        RESOURCE,
        "",
        &format!(
            "[[upstreams]]\nname = \"inner\"\ncommand = {argv}\n\
             max_children = 3\nmax_children_per_principal = 1\n"
        ),
    );
    let node = tokio::task::block_in_place(|| node(&config));
    let url = node.url().to_owned();
    let token = |who: &str| issuer.token().audience(RESOURCE).subject(who).sign();
    let (alice, bob, carol, dave) = (token("alice"), token("bob"), token("carol"), token("dave"));

    let alice_session = session(&url, &alice).await;
    let again = initialize(&url, &alice).await;
    assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS, "{again:?}");
    assert!(retry_after(&again) >= 1);
    assert!(
        again.headers.get("mcp-session-id").is_none(),
        "a refused session is kept: {again:?}"
    );
    let message = again.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("max_children_per_principal"), "{again:?}");
    assert!(again.body["error"]["data"]["retryAfterSeconds"].as_u64() >= Some(1));

    // Another principal has places of its own, until the node has none.
    let bob_session = session(&url, &bob).await;
    let _carol_session = session(&url, &carol).await;
    let busy = initialize(&url, &dave).await;
    assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE, "{busy:?}");
    assert_eq!(retry_after(&busy), 1);
    assert!(
        busy.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("max_children"),
        "{busy:?}"
    );

    // One principal's session is not another's, and its child answers.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let stolen = post(&url, Some(&bob), Some(&alice_session), &list).await;
    assert_eq!(stolen.status, StatusCode::NOT_FOUND, "{stolen:?}");
    let own = post(&url, Some(&bob), Some(&bob_session), &list).await;
    assert_eq!(own.status, StatusCode::OK, "{own:?}");
    assert!(own.body["result"]["tools"].as_array().is_some(), "{own:?}");

    // Alice's session ended: her place and the node's are free again.
    let deleted = send(
        Method::DELETE,
        &url,
        Some(&format!("Bearer {alice}")),
        Some(&alice_session),
        None,
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{deleted:?}");
    // (The session's end reaches the relay just after the DELETE's answer.)
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let init = initialize(&url, &dave).await;
        if init.status == StatusCode::OK {
            break;
        }
        assert_eq!(init.status, StatusCode::SERVICE_UNAVAILABLE, "{init:?}");
        assert!(tokio::time::Instant::now() < deadline, "{init:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let alice_again = initialize(&url, &alice).await;
    assert_eq!(
        alice_again.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the node's three places are taken: {alice_again:?}"
    );
}

/// A 2026-07-28 `tools/call` of `echo` as `token`'s principal: its text.
async fn stateless_echo(url: &str, token: &str, id: u64) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
    "name": "echo", "arguments": {"message": "mine"},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "relay-auth", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let answer = reqwest::Client::new()
        .post(url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "echo")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let answer: serde_json::Value = answer.json().await.unwrap();
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_s_2026_requests_never_run_on_another_principal_s_child() {
    let issuer = TestIssuer::start().await.unwrap();
    let argv =
        serde_json::to_string(&[node_binary().display().to_string(), "--stdio".into()]).unwrap();
    let config = config_file(
        "relay-pool",
        &issuer,
        RESOURCE,
        "",
        &format!("[[upstreams]]\nname = \"inner\"\ncommand = {argv}\n"),
    );
    let node = tokio::task::block_in_place(|| node(&config));
    let url = node.url().to_owned();
    let token = |who: &str| issuer.token().audience(RESOURCE).subject(who).sign();
    let (alice, bob) = (token("alice"), token("bob"));
    for id in 1..4 {
        assert_eq!(stateless_echo(&url, &alice, id).await, "Echo: mine");
    }
    // Alice's child, kept for her (the probe that learnt the server's
    // capabilities is gone).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while children_of(node.pid()) != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            children_of(node.pid())
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(stateless_echo(&url, &bob, 4).await, "Echo: mine");
    assert_eq!(children_of(node.pid()), 2, "bob got a child of his own");
    assert_eq!(stateless_echo(&url, &alice, 5).await, "Echo: mine");
    assert_eq!(children_of(node.pid()), 2, "alice's child served her again");
}
