//! Made-up opaque tokens against a node with `[auth.introspection]` and a
//! real (test) authorization server that counts its introspection calls:
//! a flood from one client address reaches the authorization server at
//! most `calls_per_address` times, a flood from many at most
//! `calls_per_second` a second; the tokens it could not check are
//! refused with 503 and `Retry-After` (never accepted), and a valid token
//! from another address still works. Thirty addresses flooding within
//! their shares leave the bound's reserve to a client with good tokens, and
//! a refused token sent again is answered from the negative cache.

mod auth_support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use auth_support::*;
use futures_util::StreamExt;
use mcp_cluster_testkit::{NodeProcess, TestIssuer, within};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::time::Instant;

/// A node introspecting opaque tokens at `issuer`, with `bounds` lines in
/// `[auth.introspection]`.
fn node_with(issuer: &TestIssuer, name: &str, bounds: &str) -> NodeProcess {
    let tail = format!(
        "[auth.introspection]\nclient_id = \"{}\"\nclient_secret = \"{}\"\n{bounds}",
        issuer.client_id(),
        issuer.client_secret()
    );
    node(&config_file(name, issuer, RESOURCE, "", &tail))
}

/// A client whose connections come from `ip`.
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// `initialize` with bearer `token` from `http`: status, `Retry-After`,
/// body.
async fn initialize_from(
    http: &reqwest::Client,
    url: &str,
    token: &str,
) -> (StatusCode, Option<u64>, Value) {
    let response = within(
        "initialize",
        http.post(url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", VERSION)
            .bearer_auth(token)
            .json(&initialize_body())
            .send(),
    )
    .await
    .unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let text = within("body", response.text()).await.unwrap();
    (
        status,
        retry_after,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Sends one made-up token per request from each of `addresses`
/// (`per_address` each, 16 at a time); returns how many were answered
/// 401 and 503. Anything else fails the test.
async fn flood(url: &str, addresses: &[String], per_address: usize) -> (usize, usize) {
    let clients: Vec<Arc<reqwest::Client>> = addresses
        .iter()
        .map(|ip| Arc::new(client_from(ip)))
        .collect();
    let requests = (0..per_address).flat_map(|n| {
        clients
            .iter()
            .enumerate()
            .map(move |(a, http)| (Arc::clone(http), format!("made-up-{a}-{n}")))
    });
    let answers: Vec<_> = futures_util::stream::iter(requests)
        .map(|(http, token)| async move { initialize_from(&http, url, &token).await })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut counted = (0, 0);
    for (status, retry_after, body) in answers {
        match status {
            StatusCode::UNAUTHORIZED => counted.0 += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                counted.1 += 1;
                assert!(retry_after.is_some_and(|s| s >= 1), "{body}");
                let message = body["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("too many access tokens"), "{body}");
            }
            other => panic!("a made-up token answered {other}: {body}"),
        }
    }
    counted
}

#[tokio::test]
async fn made_up_tokens_from_one_address_cost_the_authorization_server_its_share_only() {
    let issuer = TestIssuer::start().await.unwrap();
    let node = node_with(
        &issuer,
        "introspection-per-address",
        "calls_per_address = 10\ncalls_per_address_window_secs = 3600\ncalls_per_second = 0",
    );
    let url = node.url().to_owned();
    let before = issuer.introspections();

    let (refused, throttled) = flood(&url, &["127.0.0.2".to_owned()], 500).await;
    let calls = issuer.introspections() - before;
    eprintln!(
        "500 made-up tokens from one address: {calls} introspection calls, \
         {refused} answered 401, {throttled} answered 503"
    );
    assert!(
        calls <= 10,
        "{calls} introspection calls for 500 made-up tokens"
    );
    assert_eq!((refused, throttled), (10, 490), "{calls} calls");

    // A valid token from another address is introspected and accepted.
    let valid = issuer.opaque_token(true, json!({"aud": RESOURCE, "sub": "dora"}));
    let (status, _, body) = initialize_from(&client_from("127.0.0.3"), &url, &valid).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // From the flooding address, a token not seen yet waits its turn: never
    // accepted unchecked.
    let other = issuer.opaque_token(true, json!({"aud": RESOURCE, "sub": "eve"}));
    let (status, retry_after, _) = initialize_from(&client_from("127.0.0.2"), &url, &other).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(retry_after.is_some());
}

#[tokio::test]
async fn made_up_tokens_from_many_addresses_are_bounded_in_all() {
    let issuer = TestIssuer::start().await.unwrap();
    let node = node_with(
        &issuer,
        "introspection-in-all",
        "calls_per_address = 0\ncalls_per_second = 5",
    );
    let url = node.url().to_owned();
    let before = issuer.introspections();
    let addresses: Vec<String> = (10..16).map(|i| format!("127.0.0.{i}")).collect();

    let started = Instant::now();
    let (refused, throttled) = flood(&url, &addresses, 50).await;
    let elapsed = started.elapsed().as_secs() + 1;
    let calls = issuer.introspections() - before;
    eprintln!(
        "300 made-up tokens from six addresses: {calls} introspection calls within {elapsed} s"
    );
    // A burst of 5, then 5 a second: however long the flood took.
    let most = 5 + 5 * elapsed;
    assert!(
        calls <= most,
        "{calls} introspection calls for 300 made-up tokens in {elapsed} s"
    );
    assert_eq!(refused as u64, calls);
    assert_eq!(refused + throttled, 300);

    // Once the flood stops, a valid token is accepted again.
    let valid = issuer.opaque_token(true, json!({"aud": RESOURCE, "sub": "fay"}));
    let http = client_from("127.0.0.30");
    within("a valid token accepted after the flood", async {
        loop {
            let (status, _, body) = initialize_from(&http, &url, &valid).await;
            match status {
                StatusCode::OK => break,
                StatusCode::SERVICE_UNAVAILABLE => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                other => panic!("{other}: {body}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn a_refused_token_sent_again_costs_no_call() {
    let issuer = TestIssuer::start().await.unwrap();
    // No bound: only the negative cache keeps the calls down.
    let node = node_with(
        &issuer,
        "introspection-negative-cache",
        "calls_per_address = 0\ncalls_per_second = 0",
    );
    let url = node.url().to_owned();
    let http = client_from("127.0.0.40");
    let before = issuer.introspections();
    for _ in 0..100 {
        let (status, _, body) = initialize_from(&http, &url, "made-up-again").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let revoked = issuer.opaque_token(false, json!({"aud": RESOURCE}));
    for _ in 0..100 {
        let (status, _, body) = initialize_from(&http, &url, &revoked).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    assert_eq!(issuer.introspections() - before, 2, "one call per token");
}

/// Pause between two made-up tokens of one attacking address.
const ATTACK_PAUSE: Duration = Duration::from_millis(100);

/// Pause between two new tokens of the honest client: at least the
/// interval of the node's bound (1/10 s here), however busy the machine
/// (a sleep lasts at least this long).
const NEW_TOKEN_EVERY: Duration = Duration::from_millis(200);

/// Sends one made-up token from `ip`, again after each 503's
/// `Retry-After`, until it is introspected (answered 401).
async fn made_up_until_checked(url: &str, ip: &str) {
    let http = client_from(ip);
    for n in 0.. {
        let token = format!("made-up-{ip}-first-{n}");
        let (status, retry_after, body) = initialize_from(&http, url, &token).await;
        match status {
            StatusCode::UNAUTHORIZED => return,
            StatusCode::SERVICE_UNAVAILABLE => {
                tokio::time::sleep(Duration::from_secs(retry_after.unwrap_or(1))).await;
            }
            other => panic!("a made-up token answered {other}: {body}"),
        }
    }
}

/// Sends made-up tokens from `ip` until `stop`, one at a time, as fast as
/// [`ATTACK_PAUSE`] allows: the node's bound per address keeps it within
/// its share, which it spends. Each 503 goes on `refused`.
async fn made_up_until_stopped(
    url: String,
    ip: String,
    refused: tokio::sync::mpsc::UnboundedSender<()>,
    stop: Arc<tokio::sync::Notify>,
) {
    let http = client_from(&ip);
    let stopped = stop.notified();
    tokio::pin!(stopped);
    for n in 0.. {
        let token = format!("made-up-{ip}-{n}");
        let (status, _, body) = tokio::select! {
            answer = initialize_from(&http, &url, &token) => answer,
            () = &mut stopped => return,
        };
        match status {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::SERVICE_UNAVAILABLE => {
                let _ = refused.send(());
            }
            other => panic!("a made-up token answered {other}: {body}"),
        }
        tokio::select! {
            () = tokio::time::sleep(ATTACK_PAUSE) => {}
            () = &mut stopped => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_addresses_spending_the_node_bound_leave_a_share_for_the_others() {
    let issuer = TestIssuer::start().await.unwrap();
    // The share per address as by default (60 a minute); the node's calls
    // in all fewer than thirty addresses take at their share.
    let node = node_with(&issuer, "introspection-reserve", "calls_per_second = 10");
    let url = node.url().to_owned();
    let attackers: Vec<String> = (100..130).map(|i| format!("127.0.0.{i}")).collect();
    let before = issuer.introspections();
    let started = Instant::now();

    // Each of thirty addresses has a made-up token introspected, one
    // address after the other...
    for ip in &attackers {
        within(
            "a made-up token introspected",
            made_up_until_checked(&url, ip),
        )
        .await;
    }
    // ...then all of them send made-up tokens at once, each within its
    // share, until the node refuses them for its bound in all.
    let (refused, mut refusals) = tokio::sync::mpsc::unbounded_channel();
    let stop = Arc::new(tokio::sync::Notify::new());
    let flood: Vec<_> = attackers
        .iter()
        .map(|ip| {
            tokio::spawn(made_up_until_stopped(
                url.clone(),
                ip.clone(),
                refused.clone(),
                Arc::clone(&stop),
            ))
        })
        .collect();
    within("the flood refused for the bound", async {
        for _ in 0..attackers.len() {
            refusals.recv().await.unwrap();
        }
    })
    .await;

    // Meanwhile, a client at an address that sent none: each of its new
    // tokens is introspected and accepted, none refused for the bound. (It
    // is in good standing: the reserve's burst, 2 here, is its at once,
    // then one call each 1/10 s, as the bucket drains; its share of the
    // reserve is 5 a minute.)
    let http = client_from("127.0.0.200");
    let mut answers = Vec::new();
    for n in 0..5 {
        let claims = json!({"aud": RESOURCE, "sub": format!("real-{n}")});
        let token = issuer.opaque_token(true, claims);
        answers.push(initialize_from(&http, &url, &token).await);
        tokio::time::sleep(NEW_TOKEN_EVERY).await;
    }
    stop.notify_waiters();
    for task in flood {
        task.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs() + 1;
    let calls = issuer.introspections() - before;
    let statuses: Vec<u16> = answers.iter().map(|(s, _, _)| s.as_u16()).collect();
    eprintln!(
        "thirty addresses flooding made-up tokens: {calls} introspection calls in {elapsed} s; \
         the real client's five new tokens: {statuses:?}"
    );
    for (status, _, body) in &answers {
        assert_eq!(*status, StatusCode::OK, "{body}");
    }
    // The node's bound held: a burst of 10, then 10 a second.
    assert!(calls <= 10 + 10 * elapsed, "{calls} calls in {elapsed} s");
}
