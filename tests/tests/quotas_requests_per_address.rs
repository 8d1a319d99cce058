//! Requests without a principal have a rate quota of their own, per client
//! address (issue 31), on real nodes without authorization: clients on
//! their own loopback addresses send `server/discover` (2026-07-28),
//! session-era calls and malformed requests; once an address has sent
//! `quotas.requests_per_address`, whatever it sends gets 429 with
//! `Retry-After` and -32029 naming the quota, while other addresses are
//! served. With authorization on, requests refused for their token count
//! too, and a valid token's principal is counted as a principal, not by
//! its address. The count is the cluster's: two nodes on one Redis share
//! it.
//!
//! A small limit and a long window (one more request every ten hours):
//! nothing in these tests depends on how fast the machine is.

mod address_support;
mod auth_support;

use address_support::{Answer, client_from, discover, post, post_malformed, session};
use mcp_cluster_testkit::{
    Cluster, NodeCommand, NodeProcess, TestIssuer, metric, node_binary, within,
};
use reqwest::StatusCode;
use serde_json::json;

/// Requests an address may send in these tests (the least a node accepts:
/// a batch of `runtime.max_batch_items`, 64, must fit).
const LIMIT: &str = "64";
/// The window: one more request every 562 s once the burst is spent.
const WINDOW_SECS: &str = "36000";

fn limit() -> u64 {
    LIMIT.parse().unwrap()
}

fn node() -> NodeProcess {
    NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", "warn"],
        &[
            ("MCP_QUOTAS__REQUESTS_PER_ADDRESS", LIMIT),
            ("MCP_QUOTAS__REQUESTS_WINDOW_SECS", WINDOW_SECS),
        ],
    )
    .unwrap_or_else(|err| panic!("{err:#}"))
}

#[tokio::test]
async fn requests_without_a_principal_are_cut_per_address_and_other_addresses_served() {
    let node = node();
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let flooder = client_from("127.0.0.2");

    // A session costs two (initialize, initialized), each call one.
    let id = session(&flooder, &url).await;
    for n in 0..(limit() - 2) {
        let answer = discover(&flooder, &url, n).await;
        assert_eq!(answer.status, StatusCode::OK, "#{n}: {:?}", answer.body);
    }
    // Spent: a stateless request, a call in the session, the session's
    // stream, a DELETE and a request to no route are all refused.
    let refused = discover(&flooder, &url, 100).await;
    refused.assert_refused_by("requests_per_address");
    assert_eq!(refused.body["id"], 100);
    let call = json!({"jsonrpc": "2.0", "id": 101, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": "x"}}});
    let answer = post(&flooder, &url, Some(&id), &call).await;
    answer.assert_refused_by("requests_per_address");
    assert_eq!(answer.body["id"], 101);
    let stream = address_support::open_stream(&flooder, &url, &id).await;
    Answer::refused(stream, "requests_per_address").await;
    let deleted = within(
        "DELETE",
        flooder
            .delete(&url)
            .header("Mcp-Session-Id", &id)
            .header("MCP-Protocol-Version", "2025-11-25")
            .send(),
    )
    .await
    .unwrap();
    Answer::refused(deleted, "requests_per_address").await;
    let elsewhere = within("GET", flooder.get(format!("{base}/nowhere")).send())
        .await
        .unwrap();
    Answer::refused(elsewhere, "requests_per_address").await;

    // Behind a trusted proxy (127.0.0.1), the address it forwards for is
    // the same client, at its limit too.
    let proxy = client_from("127.0.0.1");
    let forwarded = within(
        "POST via the proxy",
        proxy
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Mcp-Session-Id", &id)
            .header("X-Forwarded-For", "127.0.0.2")
            .body(call.to_string())
            .send(),
    )
    .await
    .unwrap();
    Answer::refused(forwarded, "requests_per_address").await;

    // The others are served: another address, the proxy's own requests
    // (no address of their own), the session through them, the probes.
    let other = client_from("127.0.0.3");
    assert_eq!(discover(&other, &url, 1).await.status, StatusCode::OK);
    let answer = post(&proxy, &url, Some(&id), &call).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.body["result"]["content"][0]["text"], "Echo: x");
    for probe in ["healthz", "readyz"] {
        let answer = within("probe", flooder.get(format!("{base}/{probe}")).send())
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{probe}");
    }
    let counted = metric(
        &base,
        "mcp_quota_rejections_total{quota=\"requests_per_address\"}",
    )
    .await;
    assert!(counted >= 6.0, "{counted} refusals counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_rate_of_an_address_holds_across_nodes_refusals_included() {
    let command = NodeCommand::new(node_binary())
        .env("MCP_QUOTAS__REQUESTS_PER_ADDRESS", LIMIT)
        .env("MCP_QUOTAS__REQUESTS_WINDOW_SECS", WINDOW_SECS);
    let cluster = tokio::task::block_in_place(|| {
        Cluster::start_command(2, command, |_| Vec::new()).unwrap_or_else(|err| panic!("{err:#}"))
    });
    let (a, b) = (cluster.node_url(0), cluster.node_url(1));
    let flooder = client_from("127.0.0.2");
    // Half the limit refused as malformed by node A, half served by B.
    for n in 0..limit() / 2 {
        let malformed = post_malformed(&flooder, &a).await;
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST, "#{n}");
        let answer = discover(&flooder, &b, n).await;
        assert_eq!(answer.status, StatusCode::OK, "#{n}: {:?}", answer.body);
    }
    // Neither node alone is at the limit; the cluster is.
    for url in [&a, &b] {
        discover(&flooder, url, 99)
            .await
            .assert_refused_by("requests_per_address");
    }
    let other = client_from("127.0.0.3");
    for url in [&a, &b] {
        assert_eq!(discover(&other, url, 1).await.status, StatusCode::OK);
    }
}

/// POSTs `initialize` from `http` with `authorization` (when given).
async fn initialize_with(http: &reqwest::Client, url: &str, authorization: Option<&str>) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "address-quota-e2e", "version": "0"}}});
    let mut request = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(authorization) = authorization {
        request = request.header("Authorization", authorization);
    }
    Answer::read(within("initialize", request.send()).await.unwrap()).await
}

#[tokio::test]
async fn requests_refused_for_their_token_count_against_the_address_and_a_principal_does_not() {
    let issuer = TestIssuer::start().await.unwrap();
    let config = auth_support::config_file(
        "requests-per-address",
        &issuer,
        auth_support::RESOURCE,
        "",
        &format!(
            "[quotas]\nrequests_per_address = {LIMIT}\nrequests_window_secs = {WINDOW_SECS}\n"
        ),
    );
    let node = auth_support::node(&config);
    let url = node.url().to_owned();
    let flooder = client_from("127.0.0.2");
    // Without a token, and with one that is no token: 401, counted.
    for n in 0..limit() {
        let authorization = (n % 2 == 1).then_some("Bearer not-a-token");
        let answer = initialize_with(&flooder, &url, authorization).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "#{n}: {:?}",
            answer.body
        );
    }
    for authorization in [None, Some("Bearer not-a-token")] {
        initialize_with(&flooder, &url, authorization)
            .await
            .assert_refused_by("requests_per_address");
    }
    // A valid token from the same address has a principal: counted as
    // the principal's, not the address's.
    let token = issuer
        .token()
        .audience(auth_support::RESOURCE)
        .subject("alice")
        .sign();
    let answer = initialize_with(&flooder, &url, Some(&format!("Bearer {token}"))).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
}
