//! New sessions per client address, on a real node without authorization:
//! a flood of `initialize` from several addresses (client sockets bound to
//! 127.0.0.2, 127.0.0.3, …) is cut per address with 429, `Retry-After` and
//! a JSON-RPC error naming the quota, while other addresses, sessions
//! already open and the probes are served as before. Behind a trusted
//! proxy, `X-Forwarded-For` names the client; from anyone else it is
//! ignored. The legacy `GET /sse` counts as a new session too.

use std::net::IpAddr;
use std::time::Duration;

use futures_util::future::join_all;
use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// New sessions an address may open per minute in these tests.
const LIMIT: usize = 3;

fn node() -> NodeProcess {
    NodeProcess::spawn(
        &node_binary(),
        &[
            "--log",
            "warn",
            "--quota-initialize-per-address",
            &LIMIT.to_string(),
        ],
    )
    .unwrap_or_else(|err| panic!("{err:#}"))
}

/// A client whose connections come from `ip`.
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    fn retry_after(&self) -> u64 {
        self.headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no Retry-After in {:?}", self.headers))
    }
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    forwarded_for: Option<&str>,
    body: &Value,
) -> Answer {
    let mut request = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(body);
    if let Some(s) = session {
        request = request.header("Mcp-Session-Id", s);
    }
    if let Some(f) = forwarded_for {
        request = request.header("X-Forwarded-For", f);
    }
    let response = within("POST", request.send()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = within("body", response.text()).await.unwrap();
    Answer {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

fn initialize_body(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "quota-e2e", "version": "0"}}})
}

async fn initialize(
    http: &reqwest::Client,
    url: &str,
    id: i64,
    forwarded_for: Option<&str>,
) -> Answer {
    post(http, url, None, forwarded_for, &initialize_body(id)).await
}

/// A refusal by `initialize_per_address`, answering request `id`.
fn assert_refused(answer: &Answer, id: i64) {
    assert_eq!(
        answer.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{:?}",
        answer.body
    );
    let wait = answer.retry_after();
    // 3 a minute: one more every 20 s.
    assert!((1..=20).contains(&wait), "Retry-After {wait}");
    let error = &answer.body["error"];
    assert_eq!(answer.body["id"], id);
    assert_eq!(error["code"], -32029);
    assert_eq!(error["data"]["quota"], "initialize_per_address");
    assert_eq!(error["data"]["retryAfterSeconds"], wait);
    assert_eq!(error["data"]["retryAfterMs"], wait * 1000);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("initialize_per_address"),
        "{error}"
    );
    assert!(answer.headers.get("mcp-session-id").is_none());
}

async fn metric(base: &str, series: &str) -> f64 {
    let text = within("metrics", reqwest::get(format!("{base}/metrics")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} not in /metrics"))
}

#[tokio::test]
async fn a_flood_of_initialize_is_cut_per_client_address_and_the_node_serves_on() {
    let node = node();
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let addresses: Vec<String> = (2..=6).map(|i| format!("127.0.0.{i}")).collect();

    // Every address floods at once; each gets its own LIMIT sessions.
    let floods = addresses.iter().map(|ip| {
        let url = url.clone();
        async move {
            let http = client_from(ip);
            let mut answers = Vec::new();
            for id in 0..(LIMIT as i64 + 3) {
                answers.push((id, initialize(&http, &url, id, None).await));
            }
            answers
        }
    });
    let mut sessions = Vec::new();
    for (ip, answers) in addresses.iter().zip(join_all(floods).await) {
        for (id, answer) in &answers[..LIMIT] {
            assert_eq!(
                answer.status,
                StatusCode::OK,
                "{ip} #{id}: {:?}",
                answer.body
            );
        }
        for (id, answer) in &answers[LIMIT..] {
            assert_refused(answer, *id);
        }
        let first = &answers[0].1;
        sessions.push((
            ip,
            first.headers["mcp-session-id"].to_str().unwrap().to_owned(),
        ));
    }

    // The node serves on: sessions already open (from limited addresses),
    // a new address, the probes.
    for (ip, session) in &sessions {
        let http = client_from(ip);
        let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
        let answer = post(&http, &url, Some(session), None, &list).await;
        assert_eq!(answer.status, StatusCode::OK, "{ip}: {:?}", answer.body);
        assert!(answer.body["result"]["tools"].is_array());
    }
    let fresh = initialize(&client_from("127.0.0.9"), &url, 1, None).await;
    assert_eq!(fresh.status, StatusCode::OK);
    for probe in ["healthz", "readyz"] {
        let answer = within("probe", reqwest::get(format!("{base}/{probe}")))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{probe}");
    }
    let refused = (addresses.len() * 3) as f64;
    assert_eq!(
        metric(
            &base,
            "mcp_quota_rejections_total{quota=\"initialize_per_address\"}"
        )
        .await,
        refused
    );
    assert_eq!(
        metric(
            &base,
            "mcp_http_rejections_total{reason=\"quota_exceeded\"}"
        )
        .await,
        refused
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_address_is_counted_and_from_others_ignored() {
    let node = node();
    let url = node.url().to_owned();
    // 127.0.0.1 is a trusted proxy by default (a proxy on the node's host).
    let proxy = client_from("127.0.0.1");
    for id in 0..LIMIT as i64 {
        let answer = initialize(&proxy, &url, id, Some("198.51.100.1, 203.0.113.7")).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    }
    let over = initialize(&proxy, &url, 7, Some("203.0.113.7")).await;
    assert_refused(&over, 7);
    let other = initialize(&proxy, &url, 8, Some("203.0.113.8")).await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "another client behind the proxy"
    );
    // The proxy's own requests (or a local client's) have no address of
    // their own: a proxy carries many clients, so they are not limited.
    for id in 0..(LIMIT as i64 + 2) {
        let answer = initialize(&proxy, &url, id, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    }
    // From an address that is not a trusted proxy, the header is the
    // client's own claim: ignored, the peer is counted.
    let direct = client_from("127.0.0.7");
    for id in 0..LIMIT as i64 {
        let claim = format!("203.0.113.{}", 100 + id);
        let answer = initialize(&direct, &url, id, Some(&claim)).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    }
    let spoofed = initialize(&direct, &url, 9, Some("203.0.113.200")).await;
    assert_refused(&spoofed, 9);
}

#[tokio::test]
async fn a_legacy_sse_connection_counts_as_a_new_session() {
    let node = node();
    let url = node.url().to_owned();
    let sse = url.replace("/mcp", "/sse");
    let http = client_from("127.0.0.8");
    let mut open = Vec::new();
    for _ in 0..2 {
        let stream = within(
            "GET /sse",
            http.get(&sse).header("Accept", "text/event-stream").send(),
        )
        .await
        .unwrap();
        assert_eq!(stream.status(), StatusCode::OK);
        open.push(stream);
    }
    let third = initialize(&http, &url, 3, None).await;
    assert_eq!(third.status, StatusCode::OK);
    let refused = within(
        "GET /sse",
        http.get(&sse).header("Accept", "text/event-stream").send(),
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["data"]["quota"], "initialize_per_address");
    // The open legacy streams are not disturbed.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for stream in &open {
        assert_eq!(stream.status(), StatusCode::OK);
    }
}
