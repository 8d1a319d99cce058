//! Helpers shared by the authorization tests (`auth_*.rs`): a node
//! configuration naming a [`TestIssuer`], and raw HTTP with a bearer token.
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

use std::path::PathBuf;

use mcp_cluster_testkit::{NodeProcess, TestIssuer, node_binary, within};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// The revision test sessions negotiate.
pub const VERSION: &str = "2025-11-25";

/// The resource URI of single-node tests: what tokens must name in `aud`.
/// (The SDK test through the cluster uses the load balancer's real URL.)
pub const RESOURCE: &str = "http://127.0.0.1:1/mcp";

/// Writes a node configuration file: `[auth]` with `resource`, the
/// issuer, `extra` lines appended to the section (`jwks_refresh_min_secs =
/// 0`), and `tail` after it (other sections).
pub fn config_file(
    name: &str,
    issuer: &TestIssuer,
    resource: &str,
    extra: &str,
    tail: &str,
) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-auth-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "[auth]\nresource = \"{resource}\"\nissuers = [\"{}\"]\n{extra}\n{tail}\n",
        issuer.issuer()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A node with that configuration (blocking: before the first await).
pub fn node(config: &std::path::Path) -> NodeProcess {
    let config = config.to_str().unwrap();
    NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", "warn,mcp_access=info", "--config", config],
        &[],
    )
    .unwrap_or_else(|err| panic!("node: {err:#}"))
}

/// An answer: status, headers, body (JSON when it parses, else the text).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    /// `WWW-Authenticate`, or "".
    pub fn challenge(&self) -> &str {
        self.headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// `Mcp-Session-Id`.
    pub fn session(&self) -> String {
        self.headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no session id: {self:?}"))
            .to_owned()
    }
}

/// A request with `Authorization` set to `authorization` (when given).
pub async fn send(
    method: reqwest::Method,
    url: &str,
    authorization: Option<&str>,
    session: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", VERSION);
    if let Some(a) = authorization {
        request = request.header("Authorization", a);
    }
    if let Some(s) = session {
        request = request.header("Mcp-Session-Id", s);
    }
    if let Some(b) = body {
        request = request.json(b);
    }
    let response = within("request", request.send()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = if headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
    {
        // A stream: the first `data:` line is enough here.
        String::new()
    } else {
        within("body", response.text()).await.unwrap()
    };
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        headers,
        body,
    }
}

/// POSTs `body` with a bearer token.
pub async fn post(url: &str, token: Option<&str>, session: Option<&str>, body: &Value) -> Answer {
    let authorization = token.map(|t| format!("Bearer {t}"));
    send(
        reqwest::Method::POST,
        url,
        authorization.as_deref(),
        session,
        Some(body),
    )
    .await
}

/// `initialize` as `token`'s principal; the answer (with the session id
/// header on success).
pub async fn initialize(url: &str, token: &str) -> Answer {
    post(url, Some(token), None, &initialize_body()).await
}

/// An `initialize` request.
pub fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "auth-e2e", "version": "0"}}})
}

/// An initialized session of `token`'s principal: its id.
pub async fn session(url: &str, token: &str) -> String {
    let init = initialize(url, token).await;
    assert_eq!(init.status, StatusCode::OK, "{init:?}");
    let id = init.session();
    let initialized = post(
        url,
        Some(token),
        Some(&id),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(initialized.status, StatusCode::ACCEPTED, "{initialized:?}");
    id
}

/// A `tools/call` request.
pub fn call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

/// The value of parameter `name` in a `WWW-Authenticate` challenge.
pub fn param(challenge: &str, name: &str) -> Option<String> {
    let start = challenge.find(&format!("{name}=\""))? + name.len() + 2;
    let end = challenge[start..].find('"')? + start;
    Some(challenge[start..end].to_owned())
}
