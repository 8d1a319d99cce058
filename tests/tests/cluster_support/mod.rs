//! Helpers shared by the cluster end-to-end tests (`cluster_*.rs`): a
//! started [`Cluster`], sessions and clients on given nodes, SSE reading
//! under hang guards.
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseEvent, SseStream};
use mcp_cluster_testkit::{Cluster, within};
use serde_json::{Value, json};

/// The revision every test session negotiates.
pub const VERSION: &str = "2025-11-25";

/// Starts Redis, `n` nodes and nginx (blocking: call it before the first
/// await, or from `spawn_blocking`).
pub fn start(n: usize, extra_args: &[&str]) -> Cluster {
    Cluster::start(n, extra_args).unwrap_or_else(|err| panic!("cluster did not start: {err:#}"))
}

/// A client of `url` using the existing session `session`.
pub fn client(url: &str, session: &str) -> Client {
    let mut client = Client::new(url, VERSION);
    client.set_session_id(Some(session.to_owned()));
    client
}

/// `initialize` alone (no `notifications/initialized`) on `url`; returns
/// the session id and the result.
pub async fn initialize_only(url: &str, capabilities: Value) -> (String, Value) {
    let client = Client::new(url, VERSION);
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": capabilities,
        "clientInfo": {"name": "cluster-e2e", "version": "0"}}});
    match within("initialize", client.post(&body)).await.unwrap() {
        Reply::Json(response, headers) => {
            let session = headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_else(|| panic!("no Mcp-Session-Id: {response}"))
                .to_owned();
            assert!(response["result"].is_object(), "{response}");
            (session, response["result"].clone())
        }
        other => panic!("initialize answered {other:?}"),
    }
}

/// An initialized session (both steps) on `url`.
pub async fn session(url: &str, capabilities: Value) -> Client {
    let mut client = Client::new(url, VERSION);
    if let Err(err) = within("initialize", client.initialize(capabilities)).await {
        panic!("initialize on {url} failed: {err}");
    }
    client
}

/// `tools/call` of `name`.
pub fn call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

/// `tools/call` of `name` asking for progress with `token`.
pub fn call_with_progress(id: i64, name: &str, arguments: Value, token: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments,
                      "_meta": {"progressToken": token}}})
}

/// `long_running_operation` with progress.
pub fn long_running(id: i64, duration_ms: u64, steps: u64, token: &str) -> Value {
    call_with_progress(
        id,
        "long_running_operation",
        json!({"duration_ms": duration_ms, "steps": steps}),
        token,
    )
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// The SSE stream of a reply, or a panic naming what came instead.
pub fn expect_sse(reply: Reply) -> SseStream {
    match reply {
        Reply::Sse(stream) => stream,
        other => panic!("expected an SSE stream, got {other:?}"),
    }
}

/// POSTs `body` and expects an SSE answer.
pub async fn post_sse(client: &Client, body: &Value) -> SseStream {
    expect_sse(within("POST", client.post(body)).await.unwrap())
}

/// POSTs `body` and expects 202.
pub async fn post_accepted(client: &Client, body: &Value) {
    let reply = within("POST", client.post(body)).await.unwrap();
    assert!(matches!(reply, Reply::Accepted), "expected 202: {reply:?}");
}

/// GET with `Last-Event-ID`, expecting an SSE stream.
pub async fn resume(client: &Client, last_event_id: &str) -> SseStream {
    expect_sse(
        within("GET resume", client.get(Some(last_event_id)))
            .await
            .unwrap(),
    )
}

/// The next event (`None`: the server closed the stream).
pub async fn next_event(stream: &mut SseStream) -> Option<SseEvent> {
    within("next SSE event", stream.next_event()).await.unwrap()
}

/// The next event if one comes within `wait` (`None` on timeout or end).
pub async fn event_within(stream: &mut SseStream, wait: Duration) -> Option<Option<SseEvent>> {
    match tokio::time::timeout(wait, stream.next_event()).await {
        Ok(event) => Some(event.unwrap()),
        Err(_) => None,
    }
}

/// The JSON-RPC message an event carries.
pub fn message(event: &SseEvent) -> Value {
    serde_json::from_str(&event.data).unwrap_or_else(|err| panic!("{err}: {event:?}"))
}

/// The priming event: an id and empty data. Returns its id.
pub async fn priming(stream: &mut SseStream) -> String {
    let event = next_event(stream).await.expect("a priming event");
    assert!(event.has_data && event.data.is_empty(), "{event:?}");
    event.id.expect("the priming event has an id")
}

/// The progress value of a `notifications/progress` message.
pub fn progress_of(message: &Value) -> f64 {
    assert_eq!(message["method"], "notifications/progress", "{message}");
    message["params"]["progress"].as_f64().unwrap()
}

/// The first text content of a tool result.
pub fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// What one read of a request stream saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Progress values in order.
    pub progress: Vec<f64>,
    /// Other messages (notifications, server requests) in order.
    pub other: Vec<Value>,
    /// The responses (normally at most one), in order.
    pub responses: Vec<Value>,
    /// Ids of the events carrying messages.
    pub ids: Vec<String>,
    /// The stream ended with a bare `retry` block (closed early).
    pub retried: bool,
}

/// Reads a request stream to its end.
pub async fn read_to_end(stream: &mut SseStream) -> Seen {
    let mut seen = Seen::default();
    while let Some(event) = next_event(stream).await {
        record(&mut seen, event);
    }
    seen
}

/// Adds one event to `seen`.
pub fn record(seen: &mut Seen, event: SseEvent) {
    if !event.has_data || event.data.is_empty() {
        if event.retry.is_some() && !event.has_data {
            seen.retried = true;
        }
        return;
    }
    assert!(
        seen.responses.is_empty(),
        "nothing may follow the response: {event:?}"
    );
    seen.ids
        .push(event.id.clone().expect("every event has an id"));
    let m = message(&event);
    if m["method"] == "notifications/progress" {
        seen.progress.push(progress_of(&m));
    } else if m.get("method").is_some() {
        seen.other.push(m);
    } else {
        seen.responses.push(m);
    }
}

/// GET `/readyz` on node `i`: the status.
pub async fn readyz(cluster: &Cluster, i: usize) -> u16 {
    let url = format!("http://{}/readyz", cluster.node_addr(i));
    within("GET /readyz", reqwest::get(url))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}
