//! A hosted upstream's limits with authorization on: each principal reaches
//! its own children only, holds at most `max_children_per_principal` of
//! them (past it, 429 with `Retry-After`), and the node at most
//! `max_children` (past it, 503 with `Retry-After`). Refused sessions start
//! no child and keep nothing; a session ended gives its place back. A
//! 2026-07-28 principal's requests run on pooled children of its own,
//! never on another principal's. An HTTP upstream with `token_exchange`
//! gets each caller's token exchanged for one of its own (RFC 8693) at the
//! test authorization server, kept per principal.

mod auth_support;
mod relay_support;

use std::sync::{Arc, Mutex};

use auth_support::*;
use mcp_cluster_client::Client;
use mcp_cluster_testkit::{IssuerOptions, NodeProcess, TestIssuer, metric, node_binary, within};
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
    let answer = stateless_call(url, token, id, "echo", json!({"message": "mine"})).await;
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

/// A 2026-07-28 `tools/call` of `tool` as `token`'s principal: the
/// answer.
async fn stateless_call(
    url: &str,
    token: &str,
    id: u64,
    tool: &str,
    arguments: serde_json::Value,
) -> serde_json::Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
    "name": tool, "arguments": arguments,
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
        .header("Mcp-Name", tool)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    answer.json().await.unwrap()
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

/// The resource of the upstream behind the token exchange: it takes only
/// tokens for it, never one for the node ([`RESOURCE`]).
const UPSTREAM: &str = "http://127.0.0.1:1/upstream";

/// A node at [`RESOURCE`] hosting `upstream` (a node that takes only
/// tokens for [`UPSTREAM`]) with `token_exchange` at `issuer`; its
/// directory of files is dropped with the test.
fn exchanging(
    name: &str,
    issuer: &TestIssuer,
    upstream: &NodeProcess,
    extra: &str,
) -> (NodeProcess, relay_support::Scratch) {
    let dir = std::env::temp_dir().join(format!("mcp-relay-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("client.secret");
    std::fs::write(&secret, issuer.client_secret()).unwrap();
    let config = config_file(
        name,
        issuer,
        RESOURCE,
        "",
        &format!(
            "[[upstreams]]\nname = \"guarded\"\nurls = [\"{}\"]\n\n[upstreams.token_exchange]\n\
             token_url = {:?}\nclient_id = {:?}\nclient_secret_file = {:?}\nresource = \"{UPSTREAM}\"\n{extra}\n",
            upstream.url(),
            issuer.token_endpoint(),
            issuer.client_id(),
            secret.display().to_string()
        ),
    );
    (node(&config), relay_support::Scratch(dir))
}

/// The upstream: a node of its own that takes `issuer`'s tokens for
/// [`UPSTREAM`] only.
fn guarded(issuer: &TestIssuer) -> NodeProcess {
    node(&config_file("relay-guarded", issuer, UPSTREAM, "", ""))
}

/// A session as the principal of the token `token` holds now (read again
/// for every request): the upstream's `whoami` through it.
async fn whoami(client: &Client) -> serde_json::Value {
    let (answer, _) = relay_support::call(client, "whoami", json!({})).await;
    answer["result"]["structuredContent"].clone()
}

/// A session-era client of `url` sending the token `token` holds.
async fn client_with(url: &str, token: &Arc<Mutex<String>>) -> Client {
    let mut client = Client::new(url, VERSION);
    let token = Arc::clone(token);
    client.set_bearer(Arc::new(move || Some(token.lock().unwrap().clone())));
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_s_token_is_exchanged_for_one_of_the_upstream_s_kept_per_principal() {
    let issuer = TestIssuer::start().await.unwrap();
    let upstream = tokio::task::block_in_place(|| guarded(&issuer));
    let (front, _scratch) =
        tokio::task::block_in_place(|| exchanging("relay-exchange", &issuer, &upstream, ""));
    let url = front.url().to_owned();
    let token = |who: &str| issuer.token().audience(RESOURCE).subject(who).sign();
    let alice = token("alice");

    // The client's own token would not do at the upstream.
    assert_eq!(
        initialize(upstream.url(), &alice).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Through the node, the upstream sees alice, acted for by the node's
    // client: her token exchanged.
    let first = client_with(&url, &Arc::new(Mutex::new(alice.clone()))).await;
    let seen = whoami(&first).await;
    assert_eq!(seen["subject"], "alice", "{seen}");
    assert_eq!(seen["clientId"], issuer.client_id(), "{seen}");
    assert_eq!(issuer.exchanged_subject_tokens(), [alice]);

    // Her next session (another token of hers) uses the token kept for
    // her; bob gets his own.
    let again = client_with(&url, &Arc::new(Mutex::new(token("alice")))).await;
    assert_eq!(whoami(&again).await["subject"], "alice");
    assert_eq!(issuer.token_exchanges(), 1, "kept per principal");
    // A token of hers that grants other scopes gets one of its own: never
    // one exchanged from a token that grants more.
    let scoped = issuer
        .token()
        .audience(RESOURCE)
        .subject("alice")
        .scopes(["mcp:tools"])
        .sign();
    let narrower = client_with(&url, &Arc::new(Mutex::new(scoped.clone()))).await;
    assert_eq!(whoami(&narrower).await["subject"], "alice");
    assert_eq!(issuer.exchanged_subject_tokens().last(), Some(&scoped));
    let bob = client_with(&url, &Arc::new(Mutex::new(token("bob")))).await;
    assert_eq!(whoami(&bob).await["subject"], "bob");
    assert_eq!(issuer.token_exchanges(), 3);

    // 2026-07-28: the request's own token, exchanged the same way.
    let carol = token("carol");
    let answer = stateless_call(&url, &carol, 9, "whoami", json!({})).await;
    assert_eq!(
        answer["result"]["structuredContent"]["subject"], "carol",
        "{answer}"
    );
    assert_eq!(issuer.token_exchanges(), 4);

    let base = url.trim_end_matches("/mcp");
    let series = "mcp_upstream_token_requests_total{grant=\"token_exchange\",outcome=\"ok\",upstream=\"guarded\"}";
    assert_eq!(metric(base, series).await, 4.0);
    assert_eq!(
        metric(base, "mcp_upstream_exchanged_tokens{upstream=\"guarded\"}").await,
        4.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_due_again_is_exchanged_from_the_caller_s_newest_and_a_refusal_names_why() {
    // Tokens that last 5 s are due again at once (the node renews 30 s
    // before the end): every request exchanges the token it came with.
    let issuer = TestIssuer::start_with(IssuerOptions {
        exchanged_lifetime_secs: 5,
        ..IssuerOptions::default()
    })
    .await
    .unwrap();
    let upstream = tokio::task::block_in_place(|| guarded(&issuer));
    let (front, _scratch) =
        tokio::task::block_in_place(|| exchanging("relay-exchange-due", &issuer, &upstream, ""));
    let url = front.url().to_owned();
    let token = |who: &str| issuer.token().audience(RESOURCE).subject(who).sign();
    let (first, second) = (token("alice"), token("alice"));
    let held = Arc::new(Mutex::new(first.clone()));
    let client = client_with(&url, &held).await;
    assert_eq!(whoami(&client).await["subject"], "alice");
    *held.lock().unwrap() = second.clone();
    assert_eq!(whoami(&client).await["subject"], "alice");
    let exchanged = issuer.exchanged_subject_tokens();
    assert_eq!(exchanged.first(), Some(&first), "initialize's token first");
    assert_eq!(exchanged.last(), Some(&second), "then the newest");

    // The authorization server refuses: a new session fails, saying why,
    // and nothing of the token is in the answer.
    issuer.set_down(true);
    let dave = token("dave");
    let refused = initialize(&url, &dave).await;
    let message = refused.body["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{refused:?}"))
        .to_owned();
    assert!(
        message.contains("upstream guarded has no token for this caller")
            && message.contains("temporarily_unavailable"),
        "{message}"
    );
    assert!(!message.contains(&dave), "{message}");
    let base = url.trim_end_matches("/mcp");
    let series = "mcp_upstream_token_requests_total{grant=\"token_exchange\",outcome=\"refused\",upstream=\"guarded\"}";
    assert_eq!(metric(base, series).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanged_tokens_past_max_principals_are_dropped_soonest_to_expire_first() {
    let issuer = TestIssuer::start().await.unwrap();
    let upstream = tokio::task::block_in_place(|| guarded(&issuer));
    let (front, _scratch) = tokio::task::block_in_place(|| {
        exchanging(
            "relay-exchange-max",
            &issuer,
            &upstream,
            "max_principals = 2",
        )
    });
    let url = front.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let kept = "mcp_upstream_exchanged_tokens{upstream=\"guarded\"}";
    // Tokens far apart in lifetime, and so the tokens exchanged for them:
    // the issuer's `expires_in` counts whole seconds, and tokens made
    // within a second of each other would be ordered by where the
    // second's boundary fell (carol's then went first now and then).
    let lifetime = |who: &str| match who {
        "alice" => 100,
        "bob" => 200,
        _ => 290,
    };
    let token = |who: &str| {
        issuer
            .token()
            .audience(RESOURCE)
            .subject(who)
            .expires_in(lifetime(who))
            .sign()
    };
    for (n, who) in ["alice", "bob", "carol"].into_iter().enumerate() {
        let client = client_with(&url, &Arc::new(Mutex::new(token(who)))).await;
        assert_eq!(whoami(&client).await["subject"], who);
        assert_eq!(issuer.token_exchanges(), n as u64 + 1);
        assert_eq!(metric(&base, kept).await, (n + 1).min(2) as f64);
    }
    // Alice's, the soonest to expire, made room for carol's: she exchanges
    // again, and bob's (sooner than carol's) makes room; carol's is still
    // kept.
    let alice = client_with(&url, &Arc::new(Mutex::new(token("alice")))).await;
    assert_eq!(whoami(&alice).await["subject"], "alice");
    assert_eq!(issuer.token_exchanges(), 4);
    let carol = client_with(&url, &Arc::new(Mutex::new(token("carol")))).await;
    assert_eq!(whoami(&carol).await["subject"], "carol");
    assert_eq!(issuer.token_exchanges(), 4);
    assert_eq!(metric(&base, kept).await, 2.0);
}
