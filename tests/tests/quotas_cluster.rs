//! Quotas across a cluster (nodes sharing a real Redis): the counts are
//! the cluster's, not each node's. New sessions per address, requests and
//! open sessions per principal hold whichever node a client reaches; a
//! principal's stream slots are held by the node serving the stream, and
//! lapse when that node dies without a word.

mod auth_support;

use std::net::IpAddr;
use std::time::Duration;

use auth_support::{RESOURCE, config_file, initialize, post, session};
use mcp_cluster_testkit::{Cluster, GUARD, TestIssuer, within};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A client whose connections come from `ip`.
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

async fn initialize_from(http: &reqwest::Client, url: &str) -> (StatusCode, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "quota-e2e", "version": "0"}}});
    let response = within(
        "initialize",
        http.post(url)
            .header("Accept", "application/json, text/event-stream")
            .json(&body)
            .send(),
    )
    .await
    .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initialize_limit_per_address_holds_across_nodes() {
    let cluster = tokio::task::block_in_place(|| {
        Cluster::start(2, &["--quota-initialize-per-address", "4"])
            .unwrap_or_else(|err| panic!("{err:#}"))
    });
    let nodes = [cluster.node_url(0), cluster.node_url(1)];
    let flooder = client_from("127.0.0.2");
    for i in 0..4 {
        let (status, body) = initialize_from(&flooder, &nodes[i % 2]).await;
        assert_eq!(status, StatusCode::OK, "#{i}: {body}");
    }
    // Two on each node so far: neither node alone is at 4, the cluster is.
    for url in &nodes {
        let (status, body) = initialize_from(&flooder, url).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["error"]["data"]["quota"], "initialize_per_address");
    }
    let other = client_from("127.0.0.3");
    for url in &nodes {
        let (status, _) = initialize_from(&other, url).await;
        assert_eq!(status, StatusCode::OK);
    }
}

/// GET: the session's standalone stream, held open by the returned
/// response (or the refusal).
async fn open_stream(url: &str, token: &str, session: &str) -> reqwest::Response {
    within(
        "GET",
        reqwest::Client::new()
            .get(url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", auth_support::VERSION)
            .header("Authorization", format!("Bearer {token}"))
            .header("Mcp-Session-Id", session)
            .send(),
    )
    .await
    .unwrap()
}

async fn quota_refused(response: reqwest::Response) -> String {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    body["error"]["data"]["quota"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principals_sessions_and_streams_count_cluster_wide_and_a_dead_nodes_streams_lapse() {
    let issuer = TestIssuer::start().await.unwrap();
    let config = config_file(
        "quotas-cluster",
        &issuer,
        RESOURCE,
        "",
        // Keep-alives every second: a node notices a closed stream at its
        // next write.
        "[quotas]\nsessions_per_principal = 2\nstreams_per_principal = 1\nstream_lease_secs = 3\n\
         [runtime]\nsse_keep_alive_secs = 1\n",
    );
    let config = config.to_str().unwrap().to_owned();
    let mut cluster = tokio::task::block_in_place(|| {
        Cluster::start(2, &["--config", &config]).unwrap_or_else(|err| panic!("{err:#}"))
    });
    let (a, b) = (cluster.node_url(0), cluster.node_url(1));
    let alice = issuer.token().audience(RESOURCE).subject("alice").sign();
    let bob = issuer.token().audience(RESOURCE).subject("bob").sign();

    // Sessions: one on each node, and alice is at her two.
    let first = session(&a, &alice).await;
    let second = session(&b, &alice).await;
    for url in [&a, &b] {
        let third = initialize(url, &alice).await;
        assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS, "{third:?}");
        assert_eq!(
            third.body["error"]["data"]["quota"],
            "sessions_per_principal"
        );
    }
    assert_eq!(initialize(&a, &bob).await.status, StatusCode::OK);

    // Streams: alice reads one on node A; none more, on either node.
    let held = open_stream(&a, &alice, &first).await;
    assert_eq!(held.status(), StatusCode::OK);
    let refused = open_stream(&b, &alice, &second).await;
    assert_eq!(quota_refused(refused).await, "streams_per_principal");
    // Reconnecting to the stream she already reads takes its slot over.
    let again = open_stream(&b, &alice, &first).await;
    assert_eq!(again.status(), StatusCode::OK);
    drop((held, again));
    // Closed: the slot comes back (released in the background).
    let reopened = eventually_open(&b, &alice, &second).await;

    // Node B dies without a word while serving alice's stream: nobody
    // releases or renews its slot, which lapses with its lease (3 s).
    drop(reopened);
    let on_a = eventually_open(&a, &alice, &first).await;
    drop(on_a);
    let on_b = eventually_open(&b, &alice, &second).await;
    tokio::task::block_in_place(|| cluster.kill_node(1));
    drop(on_b);
    let refused = open_stream(&a, &alice, &first).await;
    assert_eq!(quota_refused(refused).await, "streams_per_principal");
    let lapsed = eventually_open(&a, &alice, &first).await;
    assert_eq!(lapsed.status(), StatusCode::OK);

    // Sessions outlive the node that created them: still two for alice,
    // until she ends one.
    let third = initialize(&a, &alice).await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    let bearer = format!("Bearer {alice}");
    let deleted = auth_support::send(
        reqwest::Method::DELETE,
        &a,
        Some(&bearer),
        Some(&second),
        None,
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK);
    let third = initialize(&a, &alice).await;
    assert_eq!(third.status, StatusCode::OK, "{third:?}");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let mine = post(&a, Some(&alice), Some(&first), &list).await;
    assert_eq!(mine.status, StatusCode::OK);
}

/// Opens the stream once the quota lets it (within the test guard).
async fn eventually_open(url: &str, token: &str, session: &str) -> reqwest::Response {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let response = open_stream(url, token, session).await;
        if response.status() == StatusCode::OK {
            return response;
        }
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principals_requests_count_across_nodes() {
    let issuer = TestIssuer::start().await.unwrap();
    let config = config_file(
        "quotas-requests",
        &issuer,
        RESOURCE,
        "",
        "[quotas]\nrequests_per_principal = 8\n[runtime]\nmax_batch_items = 8\n",
    );
    let config = config.to_str().unwrap().to_owned();
    let cluster = tokio::task::block_in_place(|| {
        Cluster::start(2, &["--config", &config]).unwrap_or_else(|err| panic!("{err:#}"))
    });
    let nodes = [cluster.node_url(0), cluster.node_url(1)];
    let alice = issuer.token().audience(RESOURCE).subject("alice").sign();
    let bob = issuer.token().audience(RESOURCE).subject("bob").sign();
    // initialize and notifications/initialized: two.
    let id = session(&nodes[0], &alice).await;
    for i in 0..6 {
        let list = json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"});
        let answer = post(&nodes[i % 2], Some(&alice), Some(&id), &list).await;
        assert_eq!(answer.status, StatusCode::OK, "#{i}: {answer:?}");
    }
    for url in &nodes {
        let list = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"});
        let answer = post(url, Some(&alice), Some(&id), &list).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{answer:?}");
        assert_eq!(answer.body["id"], 99);
        assert_eq!(
            answer.body["error"]["data"]["quota"],
            "requests_per_principal"
        );
    }
    let theirs = session(&nodes[1], &bob).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let answer = post(&nodes[0], Some(&bob), Some(&theirs), &list).await;
    assert_eq!(answer.status, StatusCode::OK);
}
