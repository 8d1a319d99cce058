//! Made-up opaque tokens against a node with `[auth.introspection]` and a
//! real (test) authorization server that counts its introspection calls:
//! a flood from one client address reaches the authorization server at
//! most `calls_per_address` times, a flood from many at most
//! `calls_per_second` a second; the tokens it could not check are
//! refused with 503 and `Retry-After` (never accepted), and a valid token
//! from another address still works.

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
