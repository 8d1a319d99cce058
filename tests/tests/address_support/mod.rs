//! Helpers of the per-address quota tests: clients whose connections come
//! from one loopback address (127.0.0.2, 127.0.0.3, …: all of 127.0.0.0/8
//! is local on Linux, and only 127.0.0.1 is a trusted proxy by default),
//! sessions, streams and stateless requests from them, and the shape of a
//! quota's refusal.
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

use std::net::IpAddr;
use std::time::Duration;

use mcp_cluster_testkit::within;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// The session-era version these tests speak.
pub const VERSION: &str = "2025-11-25";

/// A client whose connections come from `ip`. It keeps an idle connection
/// for less time than the node does (5 s: keep-alive, and a new
/// connection's first request), as the README asks of a load balancer in
/// front of the nodes: otherwise a request sent on a spare connection
/// just as the node closes it fails ("connection closed before message
/// completed"), and a flood of calls that keeps the node busy for seconds
/// leaves such connections in the pool.
pub fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// POSTs a body that is not JSON to `url`: refused with 400 before any
/// pipeline counts it (the HTTP edge counts it against the address).
pub async fn post_malformed(http: &reqwest::Client, url: &str) -> reqwest::Response {
    within(
        "POST",
        http.post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body("{not json")
            .send(),
    )
    .await
    .unwrap()
}

/// An answer read whole (JSON bodies; anything else as a string).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let text = within("the body", response.text()).await.unwrap();
        Self {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }

    /// Reads `response`, which must be a refusal by `quota` (see
    /// [`Self::assert_refused_by`]); a stream opened instead is not read.
    pub async fn refused(response: reqwest::Response, quota: &str) {
        assert_eq!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "not refused by {quota}"
        );
        Self::read(response).await.assert_refused_by(quota);
    }

    /// Asserts a refusal by `quota`: 429, `Retry-After` (at least 1 s) and
    /// -32029 naming the quota, with `data.retryAfterSeconds` the same.
    pub fn assert_refused_by(&self, quota: &str) {
        assert_eq!(
            self.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{:?}",
            self.body
        );
        let wait: u64 = self
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no Retry-After in {:?}", self.headers));
        assert!(wait >= 1);
        let error = &self.body["error"];
        assert_eq!(error["code"], -32029, "{:?}", self.body);
        assert_eq!(error["data"]["quota"], quota, "{:?}", self.body);
        assert_eq!(error["data"]["retryAfterSeconds"], wait, "{:?}", self.body);
        assert_eq!(
            error["data"]["retryAfterMs"],
            wait * 1000,
            "{:?}",
            self.body
        );
        assert!(
            error["message"].as_str().unwrap().contains(quota),
            "{:?}",
            self.body
        );
    }
}

/// POSTs a session-era message (with `session` when given).
pub async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> Answer {
    let mut request = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", VERSION)
        .body(body.to_string());
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    Answer::read(within("POST", request.send()).await.unwrap()).await
}

/// `initialize` then `notifications/initialized`: the new session's id.
pub async fn session(http: &reqwest::Client, url: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "address-quota-e2e", "version": "0"}}});
    let response = within(
        "initialize",
        http.post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body.to_string())
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = post(http, url, Some(&id), &initialized).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{:?}", answer.body);
    id
}

/// A 2026-07-28 `server/discover`, with its `_meta` and headers.
pub async fn discover(http: &reqwest::Client, url: &str, id: u64) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "address-quota-e2e", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let request = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "server/discover")
        .body(body.to_string());
    Answer::read(within("server/discover", request.send()).await.unwrap()).await
}

/// GET: `session`'s standalone stream, held open by the returned
/// response (or the refusal).
pub async fn open_stream(http: &reqwest::Client, url: &str, session: &str) -> reqwest::Response {
    within(
        "GET",
        http.get(url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", VERSION)
            .header("Mcp-Session-Id", session)
            .send(),
    )
    .await
    .unwrap()
}

/// GET `/sse` (legacy HTTP+SSE): a new session and its stream, held open
/// by the returned response (or the refusal).
pub async fn open_legacy(http: &reqwest::Client, base: &str) -> reqwest::Response {
    within(
        "GET /sse",
        http.get(format!("{base}/sse"))
            .header("Accept", "text/event-stream")
            .send(),
    )
    .await
    .unwrap()
}
