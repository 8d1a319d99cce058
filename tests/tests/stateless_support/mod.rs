//! Helpers of the 2026-07-28 (stateless) end-to-end tests: requests with
//! their `_meta` and headers, answers read whether JSON or SSE, and raw
//! response streams for listen and cancellation.
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};

/// The stateless revision.
pub const VERSION: &str = "2026-07-28";

/// Client capabilities that can answer every input request.
pub fn all_caps() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
}

/// The `_meta` of a stateless request.
pub fn meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "stateless-e2e", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A request body: `params` with `_meta` added (unless it has one).
pub fn request(id: u64, method: &str, mut params: Value, caps: Value) -> Value {
    if params.get("_meta").is_none() {
        params["_meta"] = meta(caps);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The standard headers a 2026-07-28 client sends for `body`.
pub fn headers(body: &Value) -> Vec<(String, String)> {
    let method = body["method"].as_str().unwrap_or_default();
    let mut out = vec![
        ("MCP-Protocol-Version".to_owned(), VERSION.to_owned()),
        ("Mcp-Method".to_owned(), method.to_owned()),
    ];
    let name = match method {
        "tools/call" | "prompts/get" => body["params"]["name"].as_str(),
        "resources/read" => body["params"]["uri"].as_str(),
        "tasks/get" | "tasks/update" | "tasks/cancel" => body["params"]["taskId"].as_str(),
        _ => None,
    };
    if let Some(name) = name {
        out.push(("Mcp-Name".to_owned(), name.to_owned()));
    }
    out
}

/// POSTs `body` with the standard headers (replaced or removed by
/// `overrides`: a `None` value drops the header).
pub async fn send(
    url: &str,
    body: &Value,
    overrides: &[(&str, Option<&str>)],
) -> reqwest::Response {
    send_with(&reqwest::Client::new(), url, body, overrides).await
}

/// As [`send`], on `http` (a client bound to a source address, say).
pub async fn send_with(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    overrides: &[(&str, Option<&str>)],
) -> reqwest::Response {
    let mut builder = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    for (name, value) in headers(body) {
        if overrides.iter().any(|(n, _)| n.eq_ignore_ascii_case(&name)) {
            continue;
        }
        builder = builder.header(name, value);
    }
    for (name, value) in overrides {
        if let Some(value) = value {
            builder = builder.header(*name, *value);
        }
    }
    mcp_cluster_testkit::within("POST", builder.body(body.to_string()).send())
        .await
        .expect("POST")
}

/// An answer: HTTP status, response headers, the notifications before the
/// response, and the response.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub session_header: bool,
    pub notifications: Vec<Value>,
    pub response: Value,
}

/// POSTs `body` and reads the whole answer (JSON, or SSE up to the
/// response with the request's id).
pub async fn call(url: &str, body: &Value, overrides: &[(&str, Option<&str>)]) -> Answer {
    call_with(&reqwest::Client::new(), url, body, overrides).await
}

/// As [`call`], on `http` (a client bound to a source address, say).
pub async fn call_with(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    overrides: &[(&str, Option<&str>)],
) -> Answer {
    let res = send_with(http, url, body, overrides).await;
    let status = res.status().as_u16();
    let session_header = res.headers().contains_key("mcp-session-id");
    let sse = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !sse {
        let text = mcp_cluster_testkit::within("body", res.text())
            .await
            .expect("body");
        let response = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text}));
        return Answer {
            status,
            session_header,
            notifications: Vec::new(),
            response,
        };
    }
    let mut stream = Messages::new(res);
    let mut notifications = Vec::new();
    loop {
        let message = stream
            .next()
            .await
            .unwrap_or_else(|| panic!("the stream ended before the response to {body}"));
        if message.get("id") == body.get("id") && message.get("method").is_none() {
            return Answer {
                status,
                session_header,
                notifications,
                response: message,
            };
        }
        notifications.push(message);
    }
}

/// The JSON-RPC messages of an SSE response, one per `data:` line.
pub struct Messages {
    res: reqwest::Response,
    buffer: String,
}

impl Messages {
    pub fn new(res: reqwest::Response) -> Self {
        Self {
            res,
            buffer: String::new(),
        }
    }

    /// The next message within 10 s; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        self.next_within(Duration::from_secs(10))
            .await
            .expect("a message within 10 s")
    }

    /// The next message within `wait`: `Err` when none came, `Ok(None)`
    /// when the stream ended.
    pub async fn next_within(&mut self, wait: Duration) -> Result<Option<Value>, ()> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Some(end) = self.buffer.find('\n') {
                let line: String = self.buffer.drain(..=end).collect();
                if let Some(data) = line.trim_end().strip_prefix("data:") {
                    let data = data.trim();
                    if !data.is_empty() {
                        return Ok(Some(serde_json::from_str(data).expect("JSON data")));
                    }
                }
            }
            match tokio::time::timeout_at(deadline, self.res.chunk()).await {
                Err(_) => return Err(()),
                Ok(Ok(None) | Err(_)) => return Ok(None),
                Ok(Ok(Some(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
            }
        }
    }
}

/// `tools/call` of `name` with `arguments` and these extra params.
pub fn tool_call(id: u64, name: &str, arguments: Value, extra: Value, caps: Value) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            params[k] = v;
        }
    }
    request(id, "tools/call", params, caps)
}

/// The text of a tool result's first content item.
pub fn text(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {response}"))
}

/// An accepted elicitation answering `field` with `value`.
pub fn accept(field: &str, value: &str) -> Value {
    json!({"action": "accept", "content": {field: value}})
}

/// Reads `/metrics` of a node and returns the value of one sample line
/// (`name{labels}` exactly as printed), 0 when absent.
pub async fn metric(base: &str, sample: &str) -> f64 {
    mcp_cluster_testkit::metric(base, sample).await
}

/// Client capabilities with the tasks extension (and elicitation).
pub fn task_caps() -> Value {
    json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// `tasks/get` on `url` until `done` holds for its result (20 s at most);
/// the last answer.
pub async fn poll_task(url: &str, task: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut id = 1000;
    loop {
        id += 1;
        let body = request(id, "tasks/get", json!({"taskId": task}), task_caps());
        let view = call(url, &body, &[]).await.response;
        if done(&view["result"]) || tokio::time::Instant::now() > deadline {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
