//! The span of a request that simply completes leaves a real `mcp-node`
//! for a real OTLP receiver, on every transport and era: session-era
//! Streamable HTTP answered as JSON and as SSE (a call that reports
//! progress, and `--response-mode sse`), embedded and on Redis; the legacy
//! HTTP+SSE transport; stdio; and stateless 2026-07-28 requests. Each span
//! is the child of the caller's `traceparent` (HTTP header, or
//! `params._meta`, which wins and links the header's), named and
//! attributed as the OpenTelemetry MCP conventions say.
//!
//! The node is started as an operator starts it (README, "Traces"): the
//! flag or `OTEL_EXPORTER_OTLP_ENDPOINT`, with or without a sampler and a
//! batch delay. `MCP_NODE_BIN` picks the binary (the release build in
//! `tests/run-all.sh`).

mod stateless_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{
    NODE_BIN_ENV, NodeProcess, OtlpReceiver, ReceivedSpan, RedisServer, node_binary,
    open_legacy_sse, within,
};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

/// Room for the batch processor's delay (5 s by default) on a loaded
/// machine; a hang guard, not an assertion on time.
const ARRIVAL: Duration = Duration::from_secs(40);

/// The caller's span a request's span must be a child of.
fn traceparent(trace_id: &str, span_id: &str) -> String {
    format!("00-{trace_id}-{span_id}-01")
}

fn traceparent_header(trace_id: &str, span_id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        "traceparent",
        HeaderValue::from_str(&traceparent(trace_id, span_id)).unwrap(),
    );
    headers
}

/// A node exporting to `receiver` the way the README shows: `how` is the
/// flag or the variable, `extra_env` the operator's other `OTEL_*`.
fn node(
    receiver: &OtlpReceiver,
    how: Endpoint,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> NodeProcess {
    let endpoint = receiver.endpoint();
    let mut all_args = args.to_vec();
    let mut env = extra_env.to_vec();
    match how {
        Endpoint::Flag => all_args.extend(["--otlp-endpoint", endpoint.as_str()]),
        Endpoint::Env => env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())),
    }
    NodeProcess::spawn_logged(&node_binary(), &all_args, &env).unwrap()
}

#[derive(Clone, Copy)]
enum Endpoint {
    /// `--otlp-endpoint URL`.
    Flag,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT=URL`.
    Env,
}

/// The operator's choice for a quick look: every trace, exported within a
/// fifth of a second.
const ALWAYS_ON_FAST: &[(&str, &str)] = &[
    ("OTEL_TRACES_SAMPLER", "always_on"),
    ("OTEL_BSP_SCHEDULE_DELAY", "200"),
];

/// Waits for the span named `name` in trace `trace_id`.
async fn span(receiver: &OtlpReceiver, trace_id: &str, name: &str) -> ReceivedSpan {
    receiver
        .wait_for(|s| s.trace_id == trace_id && s.name == name, ARRIVAL)
        .await
        .unwrap_or_else(|err| panic!("no span {name:?} in trace {trace_id}: {err:#}"))
}

/// What every completed request's span carries: SERVER, child of
/// `parent`, no error, the method and id, and the node's identity.
fn assert_completed(span: &ReceivedSpan, parent: &str, method: &str, id: &str) {
    assert_eq!(span.kind, "server", "{span:#?}");
    assert_eq!(span.parent_span_id.as_deref(), Some(parent), "{span:#?}");
    assert_eq!(span.status, "unset", "{span:#?}");
    assert_eq!(span.attr("error.type"), None, "{span:#?}");
    assert_eq!(span.attr("mcp.method.name"), Some(method), "{span:#?}");
    assert_eq!(span.attr("jsonrpc.request.id"), Some(id), "{span:#?}");
    assert_eq!(span.resource["service.name"], "mcp-node", "{span:#?}");
}

/// Streamable HTTP over TCP from this host.
fn assert_over_http(span: &ReceivedSpan) {
    assert_eq!(span.attr("network.transport"), Some("tcp"), "{span:#?}");
    assert_eq!(
        span.attr("network.protocol.name"),
        Some("http"),
        "{span:#?}"
    );
    assert_eq!(span.attr("client.address"), Some("127.0.0.1"), "{span:#?}");
}

fn assert_echo_call(span: &ReceivedSpan) {
    assert_eq!(span.attr("gen_ai.tool.name"), Some("echo"), "{span:#?}");
    assert_eq!(
        span.attr("gen_ai.operation.name"),
        Some("execute_tool"),
        "{span:#?}"
    );
}

/// `initialize` POSTed with a `traceparent` header; returns the session
/// id and leaves the client in the session, `notifications/initialized`
/// sent.
async fn initialize_traced(client: &mut Client, trace_id: &str, span_id: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "traces-e2e", "version": "0"}}});
    let reply = within(
        "initialize",
        client.post_with(&body, traceparent_header(trace_id, span_id)),
    )
    .await
    .unwrap();
    let Reply::Json(answer, headers) = reply else {
        panic!("initialize answered {reply:?}")
    };
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    client.set_session_id(Some(session.clone()));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = within("initialized", client.post(&initialized))
        .await
        .unwrap();
    assert!(matches!(reply, Reply::Accepted), "{reply:?}");
    session
}

/// Reads an SSE answer up to the response with `id`.
async fn response_on(stream: &mut SseStream, id: i64) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let message = within("SSE message", stream.next_message())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended before response {id}: {before:?}"));
        if message["id"] == id && message.get("method").is_none() {
            return (message, before);
        }
        before.push(message);
    }
}

/// Session era on the embedded store, answered as JSON: `initialize` and
/// `tools/call` with a `traceparent` header, the node started with only
/// `--otlp-endpoint` (the default sampler and batch delay).
#[tokio::test]
async fn session_json_answers_are_exported_in_the_callers_trace() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let receiver = OtlpReceiver::start().unwrap();
    let node = node(&receiver, Endpoint::Flag, &[], &[]);
    let mut client = Client::new(node.url(), "2025-11-25");
    let session = initialize_traced(&mut client, TRACE, "00f067aa0ba902b7").await;

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "traced"}}});
    let reply = within(
        "tools/call",
        client.post_with(&call, traceparent_header(TRACE, "00f067aa0ba902b8")),
    )
    .await
    .unwrap();
    let Reply::Json(answer, _) = reply else {
        panic!("echo answered {reply:?}")
    };
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: traced");

    let init = span(&receiver, TRACE, "initialize").await;
    assert_completed(&init, "00f067aa0ba902b7", "initialize", "1");
    assert_over_http(&init);
    assert_eq!(init.attr("mcp.session.id"), Some(session.as_str()));

    let echo = span(&receiver, TRACE, "tools/call echo").await;
    assert_completed(&echo, "00f067aa0ba902b8", "tools/call", "2");
    assert_over_http(&echo);
    assert_echo_call(&echo);
    assert_eq!(echo.attr("mcp.session.id"), Some(session.as_str()));
    assert_eq!(echo.attr("mcp.protocol.version"), Some("2025-11-25"));
}

/// Session era answered as SSE because the call reports progress; its
/// `traceparent` header is the parent and the `_meta` context is linked.
#[tokio::test]
async fn a_call_answered_on_sse_is_exported_in_its_header_trace() {
    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const HEADER_TRACE: &str = "1af7651916cd43dd8448eb211c80319c";
    let receiver = OtlpReceiver::start().unwrap();
    let node = node(&receiver, Endpoint::Env, &[], ALWAYS_ON_FAST);
    let mut client = Client::new(node.url(), "2025-11-25");
    initialize_traced(&mut client, HEADER_TRACE, "b7ad6b7169203330").await;

    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "long_running_operation", "arguments": {"duration_ms": 100, "steps": 2},
        "_meta": {"progressToken": "p-7",
                  "traceparent": traceparent(TRACE, "b7ad6b7169203331")}}});
    let reply = within(
        "tools/call",
        client.post_with(&call, traceparent_header(HEADER_TRACE, "b7ad6b7169203332")),
    )
    .await
    .unwrap();
    let Reply::Sse(mut stream) = reply else {
        panic!("a call with progress answered {reply:?}")
    };
    let (answer, before) = response_on(&mut stream, 7).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(
        before
            .iter()
            .any(|m| m["method"] == "notifications/progress"),
        "{before:?}"
    );

    let call = span(&receiver, HEADER_TRACE, "tools/call long_running_operation").await;
    assert_completed(&call, "b7ad6b7169203332", "tools/call", "7");
    assert_over_http(&call);
    let links: Vec<(&str, &str)> = call
        .links
        .iter()
        .map(|l| (l.trace_id.as_str(), l.span_id.as_str()))
        .collect();
    assert_eq!(links, [(TRACE, "b7ad6b7169203331")], "{call:#?}");
}

/// `--response-mode sse`: even `echo` is answered as SSE.
#[tokio::test]
async fn answers_in_sse_response_mode_are_exported() {
    const TRACE: &str = "2af7651916cd43dd8448eb211c80319c";
    let receiver = OtlpReceiver::start().unwrap();
    let node = node(
        &receiver,
        Endpoint::Flag,
        &["--response-mode", "sse"],
        ALWAYS_ON_FAST,
    );
    let mut client = Client::new(node.url(), "2025-11-25");
    initialize_traced(&mut client, TRACE, "c7ad6b7169203330").await;

    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "as sse"}}});
    let reply = within(
        "tools/call",
        client.post_with(&call, traceparent_header(TRACE, "c7ad6b7169203331")),
    )
    .await
    .unwrap();
    let Reply::Sse(mut stream) = reply else {
        panic!("--response-mode sse answered {reply:?}")
    };
    let (answer, _) = response_on(&mut stream, 3).await;
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: as sse");

    let echo = span(&receiver, TRACE, "tools/call echo").await;
    assert_completed(&echo, "c7ad6b7169203331", "tools/call", "3");
    assert_over_http(&echo);
    assert_echo_call(&echo);
}

/// A node of a cluster on Redis, answered as JSON.
#[tokio::test]
async fn session_answers_of_a_node_on_redis_are_exported() {
    const TRACE: &str = "3af7651916cd43dd8448eb211c80319c";
    let receiver = OtlpReceiver::start().unwrap();
    let redis = RedisServer::start().unwrap();
    let redis_url = redis.url();
    let node = node(
        &receiver,
        Endpoint::Env,
        &["--redis-url", &redis_url],
        ALWAYS_ON_FAST,
    );
    let mut client = Client::new(node.url(), "2025-11-25");
    let session = initialize_traced(&mut client, TRACE, "d7ad6b7169203330").await;

    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    let reply = within(
        "tools/call",
        client.post_with(&call, traceparent_header(TRACE, "d7ad6b7169203331")),
    )
    .await
    .unwrap();
    assert!(matches!(reply, Reply::Json(..)), "{reply:?}");

    let init = span(&receiver, TRACE, "initialize").await;
    assert_completed(&init, "d7ad6b7169203330", "initialize", "1");
    let add = span(&receiver, TRACE, "tools/call add").await;
    assert_completed(&add, "d7ad6b7169203331", "tools/call", "4");
    assert_over_http(&add);
    assert_eq!(add.attr("gen_ai.tool.name"), Some("add"));
    assert_eq!(add.attr("mcp.session.id"), Some(session.as_str()));
}

/// The legacy HTTP+SSE transport (2024-11-05): POSTs to the message
/// endpoint with a `traceparent` header, answers on the `/sse` stream.
#[tokio::test]
async fn legacy_sse_answers_are_exported_in_the_callers_trace() {
    const TRACE: &str = "4af7651916cd43dd8448eb211c80319c";
    let receiver = OtlpReceiver::start().unwrap();
    let node = node(&receiver, Endpoint::Env, &[], ALWAYS_ON_FAST);
    let base = format!("http://{}", node.addr());
    let http = reqwest::Client::new();
    let (mut stream, url) = open_legacy_sse(&http, &base).await;
    let session = url
        .split_once("/messages?sessionId=")
        .unwrap_or_else(|| panic!("endpoint {url:?}"))
        .1
        .to_owned();
    let post = |body: Value, span_id: &'static str| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let status = within(
                "POST",
                http.post(url)
                    .header("content-type", "application/json")
                    .header("traceparent", traceparent(TRACE, span_id))
                    .body(body.to_string())
                    .send(),
            )
            .await
            .unwrap()
            .status();
            assert_eq!(status, 202);
        }
    };

    post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "legacy", "version": "0"}}}),
        "e7ad6b7169203330",
    )
    .await;
    let (init, _) = response_on(&mut stream, 1).await;
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05", "{init}");
    post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "e7ad6b716920333f",
    )
    .await;
    post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "echo", "arguments": {"message": "legacy"}}}),
        "e7ad6b7169203331",
    )
    .await;
    let (answer, _) = response_on(&mut stream, 2).await;
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: legacy");

    let init = span(&receiver, TRACE, "initialize").await;
    assert_completed(&init, "e7ad6b7169203330", "initialize", "1");
    let echo = span(&receiver, TRACE, "tools/call echo").await;
    assert_completed(&echo, "e7ad6b7169203331", "tools/call", "2");
    assert_over_http(&echo);
    assert_echo_call(&echo);
    assert_eq!(echo.attr("mcp.session.id"), Some(session.as_str()));
    assert_eq!(echo.attr("mcp.protocol.version"), Some("2024-11-05"));
}

/// `mcp-node --stdio`: the span of a completed call reaches the collector
/// while the process runs (not only at its exit), child of the call's
/// `_meta.traceparent` (stdio has no headers).
#[tokio::test]
async fn stdio_answers_are_exported_while_the_node_runs() {
    const TRACE: &str = "5af7651916cd43dd8448eb211c80319c";
    let receiver = OtlpReceiver::start().unwrap();
    let mut child: Child = Command::new(node_binary())
        .args(["--stdio", "--otlp-endpoint", &receiver.endpoint()])
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env_remove(NODE_BIN_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let killer = KillOnDrop(child);
    let mut exchange = move |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        if message.get("id").is_none() {
            return Value::Null;
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    let answers = tokio::task::spawn_blocking(move || {
        let init = exchange(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "stdio", "version": "0"}}}));
        exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let echo = exchange(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "piped"},
                       "_meta": {"traceparent": traceparent(TRACE, "f7ad6b7169203331")}}}));
        (init, echo, exchange)
    });
    let (init, echo, _stdin_kept_open) = within("stdio exchange", answers).await.unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(
        echo["result"]["content"][0]["text"], "Echo: piped",
        "{echo}"
    );

    let span = span(&receiver, TRACE, "tools/call echo").await;
    assert_completed(&span, "f7ad6b7169203331", "tools/call", "2");
    assert_echo_call(&span);
    assert_eq!(span.attr("network.transport"), Some("pipe"), "{span:#?}");
    assert_eq!(span.attr("network.protocol.name"), None, "{span:#?}");
    drop(killer);
}

/// Kills the stdio node if the test fails before it exits.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Stateless 2026-07-28: `server/discover` and `tools/call`, each with
/// its `_meta` (protocol version, client info and capabilities, and the
/// caller's `traceparent`) and the standard headers. `_meta`'s context is
/// the parent of the discover, which has no `traceparent` header; the call
/// also sends one, which is its parent, `_meta`'s then linked.
#[tokio::test]
async fn stateless_requests_are_exported_in_their_header_trace_else_their_meta_s() {
    use stateless_support::{VERSION, call, meta, request};

    const TRACE: &str = "6af7651916cd43dd8448eb211c80319c";
    const HEADER_TRACE: &str = "7af7651916cd43dd8448eb211c80319c";
    let receiver = OtlpReceiver::start().unwrap();
    let node = node(&receiver, Endpoint::Env, &[], ALWAYS_ON_FAST);

    let mut discover_meta = meta(json!({}));
    discover_meta["traceparent"] = json!(traceparent(TRACE, "a7ad6b7169203330"));
    let discover = request(
        1,
        "server/discover",
        json!({"_meta": discover_meta}),
        json!({}),
    );
    let answer = call(node.url(), &discover, &[]).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.response["result"]["supportedVersions"].is_array());

    let mut call_meta = meta(json!({}));
    call_meta["traceparent"] = json!(traceparent(TRACE, "a7ad6b7169203331"));
    let echo = request(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "stateless"}, "_meta": call_meta}),
        json!({}),
    );
    let header = traceparent(HEADER_TRACE, "a7ad6b7169203332");
    let answer = call(node.url(), &echo, &[("traceparent", Some(header.as_str()))]).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        answer.response["result"]["content"][0]["text"],
        "Echo: stateless"
    );

    let discovered = span(&receiver, TRACE, "server/discover").await;
    assert_completed(&discovered, "a7ad6b7169203330", "server/discover", "1");
    assert_over_http(&discovered);
    assert_eq!(discovered.attr("mcp.protocol.version"), Some(VERSION));
    assert_eq!(discovered.attr("mcp.session.id"), None);

    let echo = span(&receiver, HEADER_TRACE, "tools/call echo").await;
    assert_completed(&echo, "a7ad6b7169203332", "tools/call", "2");
    assert_over_http(&echo);
    assert_echo_call(&echo);
    assert_eq!(echo.attr("mcp.protocol.version"), Some(VERSION));
    let links: Vec<(&str, &str)> = echo
        .links
        .iter()
        .map(|l| (l.trace_id.as_str(), l.span_id.as_str()))
        .collect();
    assert_eq!(links, [(TRACE, "a7ad6b7169203331")], "{echo:#?}");
}
