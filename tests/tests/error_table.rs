//! The error table of `proto-docs/errors.md`, walked against real
//! `mcp-node` processes: the table is parsed when the test runs, and every
//! row id has a trigger here, a real HTTP exchange that makes that error
//! happen. Each answer is checked against its row: the HTTP status, the
//! JSON-RPC code (or `isError`), the message, and, for rows whose retry
//! advice is `wait`, `Retry-After` with `error.data.retryAfterSeconds` and
//! `retryAfterMs`. A row without a trigger, or a trigger without a row,
//! fails the test; [`NOT_REACHABLE`] names the rows no client can make
//! happen on purpose, one reason each.

mod auth_support;

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use mcp_cluster_client::SseStream;
use mcp_cluster_testkit::{
    NodeProcess, RedisServer, TestIssuer, node_binary, open_legacy_sse, within,
};
use regex::Regex;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// Rows no HTTP exchange can make happen on purpose, each with why.
const NOT_REACHABLE: &[(&str, &str)] = &[
    (
        "E-event-log",
        "needs the event log to fail between a request's start and its switch to SSE: a race",
    ),
    (
        "E-session-stopped",
        "needs the session actor to stop while a request waits on it: a race",
    ),
    (
        "E-shutting-down",
        "needs a request to arrive in the instant between the drain's end and the exit",
    ),
    (
        "E-hosted-node",
        "needs a hosted server ([[upstreams]]) and a child process; relay_*.rs cover it",
    ),
    (
        "E-hosted-client",
        "needs a hosted server ([[upstreams]]) and a child process; relay_*.rs cover it",
    ),
    (
        "E-auth-throttled",
        "needs the introspection budget spent by a flood; auth_introspection_flood.rs covers it",
    ),
    (
        "E-overloaded",
        "a full session mailbox needs the session actor to fall behind its client, a race no client makes happen on purpose",
    ),
    (
        "J-task-lost",
        "needs the node running a task to die; session_tasks.rs and tasks_cluster.rs kill one",
    ),
    (
        "J-task-unstored",
        "needs the store to fail between a session's request and its task's creation: a race",
    ),
    (
        "J-panic",
        "no built-in tool panics; handler_failures.rs covers it with a fixture tool in process",
    ),
    (
        "J-output-schema",
        "no built-in tool breaks its outputSchema; structured_content.rs covers it in process",
    ),
];

/// Every row id this file has a trigger for (see [`trigger`]).
const TRIGGERS: &[&str] = &[
    "E-host",
    "E-origin",
    "E-content-type",
    "E-accept-post",
    "E-accept-get",
    "E-method",
    "E-body-size",
    "E-body-read",
    "E-body-time",
    "E-parse",
    "E-invalid",
    "E-params",
    "E-batch-size",
    "E-version",
    "E-init-session",
    "E-session-missing",
    "E-session-malformed",
    "E-session-unknown",
    "E-header-mismatch",
    "E-batch-version",
    "E-lei-malformed",
    "E-lei-unknown",
    "E-lei-expired",
    "E-sessions-full",
    "E-streams-full",
    "E-node-full",
    "E-store",
    "E-quota",
    "E-auth-missing",
    "E-auth-invalid",
    "E-auth-scope",
    "E-auth-unavailable",
    "S-meta",
    "S-version-header",
    "S-version",
    "S-headers",
    "S-method",
    "S-capability",
    "S-batch",
    "S-response",
    "E-node-budget",
    "J-not-initialized",
    "J-initialized",
    "J-id-in-flight",
    "J-init-in-batch",
    "J-method",
    "J-unknown-tool",
    "J-params",
    "J-tool-args-old",
    "J-resource",
    "J-in-flight",
    "J-timeout",
    "J-drain",
    "J-url-elicitation",
    "J-tool-error",
    "J-task-negotiation",
    "J-task-unknown",
    "J-task-ended",
    "J-task-no-result",
    "J-tool-args",
];

const ACCEPT_BOTH: &str = "application/json, text/event-stream";
const STATELESS: &str = "2026-07-28";

/// One row of the table.
#[derive(Debug, Clone)]
struct Row {
    id: String,
    http: u16,
    /// `None` for `—` (no body), `Some(None)` for `isError`.
    code: Option<Option<i64>>,
    /// The message as written, without backticks; `None` for `—`.
    message: Option<String>,
    retry: String,
}

/// What a node answered.
#[derive(Debug)]
struct Seen {
    status: u16,
    headers: HeaderMap,
    /// The JSON-RPC message answering the request (`Null` for no body).
    body: Value,
}

fn table() -> Vec<Row> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto-docs/errors.md");
    let text = std::fs::read_to_string(path).unwrap();
    let id = Regex::new(r"^`([EJS]-[a-z0-9-]+)`$").unwrap();
    let mut rows = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.trim().split('|').map(str::trim).collect();
        let Some(caps) = cells.get(1).and_then(|c| id.captures(c)) else {
            continue;
        };
        assert_eq!(cells.len(), 9, "a row has 7 cells: {line}");
        assert!(
            ["wait", "again", "fix", "reconnect", "no"].contains(&cells[7]),
            "the retry advice is one of the five words: {line}"
        );
        let unticked = |cell: &str| cell.trim_matches('`').to_owned();
        rows.push(Row {
            id: caps[1].to_owned(),
            http: cells[4]
                .parse()
                .unwrap_or_else(|_| panic!("HTTP of {line}")),
            code: match cells[5] {
                "—" => None,
                "isError" => Some(None),
                code => Some(Some(
                    code.parse().unwrap_or_else(|_| panic!("code: {line}")),
                )),
            },
            message: (cells[6] != "—").then(|| unticked(cells[6])),
            retry: cells[7].to_owned(),
        });
    }
    rows
}

/// The message pattern: `<…>` any text, a final `…` anything after.
fn pattern(message: &str) -> Regex {
    let (body, open) = match message.strip_suffix('…') {
        Some(body) => (body, true),
        None => (message, false),
    };
    let placeholder = Regex::new(r"<[^>]*>").unwrap();
    let mut out = String::from("^");
    let mut last = 0;
    for m in placeholder.find_iter(body) {
        out.push_str(&regex::escape(&body[last..m.start()]));
        out.push_str(".+?");
        last = m.end();
    }
    out.push_str(&regex::escape(&body[last..]));
    if !open {
        out.push('$');
    }
    Regex::new(&out).unwrap()
}

fn check(row: &Row, seen: &Seen) {
    let what = format!("{}: {seen:?}", row.id);
    assert_eq!(seen.status, row.http, "status of {what}");
    let (code, message) = match row.code {
        None => {
            assert!(seen.body.is_null(), "no body expected, {what}");
            return;
        }
        Some(None) => {
            assert_eq!(seen.body["result"]["isError"], true, "isError, {what}");
            (None, seen.body["result"]["content"][0]["text"].as_str())
        }
        Some(Some(code)) => (Some(code), seen.body["error"]["message"].as_str()),
    };
    if let Some(code) = code {
        assert_eq!(seen.body["error"]["code"], code, "code of {what}");
    }
    let message = message.unwrap_or_else(|| panic!("no message in {what}"));
    let expected = row.message.as_deref().unwrap_or_default();
    assert!(
        pattern(expected).is_match(message),
        "message of {what}: {message:?} is not {expected:?}"
    );
    let retry_after = seen
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if row.retry == "wait" {
        let secs = retry_after.unwrap_or_else(|| panic!("Retry-After in {what}"));
        assert!(secs >= 1, "{what}");
        let data = &seen.body["error"]["data"];
        assert_eq!(data["retryAfterSeconds"], secs, "retryAfterSeconds, {what}");
        assert_eq!(data["retryAfterMs"], secs * 1000, "retryAfterMs, {what}");
    } else {
        assert_eq!(retry_after, None, "no Retry-After unless `wait`, {what}");
    }
}

#[test]
fn every_row_has_a_trigger_and_every_trigger_a_row() {
    let rows: BTreeSet<String> = table().into_iter().map(|r| r.id).collect();
    assert!(rows.len() > 40, "the table was not found: {rows:?}");
    let triggers: BTreeSet<String> = TRIGGERS.iter().map(|s| (*s).to_owned()).collect();
    let excluded: BTreeSet<String> = NOT_REACHABLE.iter().map(|(s, _)| (*s).to_owned()).collect();
    assert!(
        triggers.is_disjoint(&excluded),
        "a row both triggered and excluded"
    );
    let covered: BTreeSet<String> = triggers.union(&excluded).cloned().collect();
    let untriggered: Vec<_> = rows.difference(&covered).collect();
    assert!(
        untriggered.is_empty(),
        "rows without a trigger: {untriggered:?}"
    );
    let orphans: Vec<_> = covered.difference(&rows).collect();
    assert!(orphans.is_empty(), "triggers without a row: {orphans:?}");
}

/// The nodes the triggers use.
struct Nodes {
    /// Small limits: body 1 KiB, batches of 4, 1 s to send headers or a
    /// body, 1 request in flight per session, 2 s per request, 1 listen
    /// stream, 1 event kept per stream.
    plain: NodeProcess,
    /// One session at most.
    one_session: NodeProcess,
    /// One new session per address.
    quota: NodeProcess,
    /// Eight connections: four streams.
    streams: NodeProcess,
    /// 2,000 bytes in flight in all.
    budget: NodeProcess,
}

fn spawn(args: &[&str], env: &[(&str, &str)]) -> NodeProcess {
    let mut all = vec!["--log", "warn"];
    all.extend_from_slice(args);
    NodeProcess::spawn_logged(&node_binary(), &all, env).unwrap_or_else(|err| panic!("{err:#}"))
}

fn base(url: &str) -> String {
    url.trim_end_matches("/mcp").to_owned()
}

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// Reads an answer: JSON, or the first JSON-RPC response on an SSE stream.
async fn read(response: reqwest::Response) -> Seen {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let sse = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let body = if sse {
        let mut stream = SseStream::new(response);
        loop {
            let message = within("an SSE message", stream.next_message())
                .await
                .unwrap()
                .unwrap_or(Value::Null);
            if message.is_null()
                || message.get("result").is_some()
                || message.get("error").is_some()
            {
                break message;
            }
        }
    } else {
        let text = within("a body", response.text()).await.unwrap();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    Seen {
        status,
        headers,
        body,
    }
}

/// POSTs `body` with the session-era headers plus `extra`.
async fn post(url: &str, session: Option<&str>, extra: &[(&str, &str)], body: &Value) -> Seen {
    let mut headers = vec![
        ("Accept", ACCEPT_BOTH),
        ("Content-Type", "application/json"),
    ];
    if let Some(s) = session {
        headers.push(("Mcp-Session-Id", s));
    }
    let request = http().post(url).headers(header_map(&headers, extra));
    let response = within("POST", request.body(body.to_string()).send())
        .await
        .unwrap();
    read(response).await
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn init_body(version: &str) -> Value {
    rpc(
        0,
        "initialize",
        json!({"protocolVersion": version, "capabilities": {},
               "clientInfo": {"name": "error-table", "version": "0"}}),
    )
}

/// An initialized session of `version`: its id.
async fn session(url: &str, version: &str) -> String {
    let response = within(
        "initialize",
        http()
            .post(url)
            .header("Accept", ACCEPT_BOTH)
            .json(&init_body(version))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200, "initialize");
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let seen = post(url, Some(&id), &[("MCP-Protocol-Version", version)], &done).await;
    assert_eq!(seen.status, 202, "initialized");
    id
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    rpc(
        id,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
}

/// A stateless request with its `_meta` and standard headers.
fn stateless(id: u64, method: &str, mut params: Value) -> Value {
    if params.get("_meta").is_none() {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {},
        });
    }
    rpc(id, method, params)
}

async fn post_stateless(url: &str, body: &Value, extra: &[(&str, &str)]) -> Seen {
    let method = body["method"].as_str().unwrap_or_default().to_owned();
    let name = body["params"]["name"].as_str().map(str::to_owned);
    let mut headers = vec![("MCP-Protocol-Version", STATELESS), ("Mcp-Method", &method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    for (k, v) in extra {
        headers.retain(|(h, _)| !h.eq_ignore_ascii_case(k));
        headers.push((k, v));
    }
    post(url, None, &headers, body).await
}

/// A GET `/mcp` of `session`, with `extra` headers.
async fn get(url: &str, session: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let defaults = [("Accept", "text/event-stream"), ("Mcp-Session-Id", session)];
    let request = http().get(url).headers(header_map(&defaults, extra));
    within("GET", request.send()).await.unwrap()
}

/// `defaults` with `extra` in place of the same names.
fn header_map(defaults: &[(&str, &str)], extra: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in defaults.iter().chain(extra) {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap();
        map.insert(name, value.parse().unwrap());
    }
    map
}

/// Raw bytes on a fresh connection, read to the end (blocking, off the
/// runtime): status and body.
async fn raw(node: &NodeProcess, bytes: Vec<u8>, pause_after: bool) -> Seen {
    let addr = node.addr();
    let (status, body) = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut socket = std::net::TcpStream::connect(addr).unwrap();
        socket
            .set_read_timeout(Some(mcp_cluster_testkit::GUARD))
            .unwrap();
        socket.write_all(&bytes).unwrap();
        if !pause_after {
            let _ = socket.shutdown(std::net::Shutdown::Write);
        }
        let mut response = Vec::new();
        let _ = socket.read_to_end(&mut response);
        let text = String::from_utf8_lossy(&response).into_owned();
        let status: u16 = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
        (status, body.unwrap_or_default())
    })
    .await
    .unwrap();
    Seen {
        status,
        headers: HeaderMap::new(),
        body: serde_json::from_str(&body).unwrap_or(Value::Null),
    }
}

/// The first event id of a tool call's SSE answer in `session`.
async fn first_event_id(url: &str, session: &str) -> String {
    let body = rpc(
        1,
        "tools/call",
        json!({"name": "test_tool_with_progress", "arguments": {},
               "_meta": {"progressToken": "p"}}),
    );
    let response = within(
        "POST",
        http()
            .post(url)
            .header("Accept", ACCEPT_BOTH)
            .header("Mcp-Session-Id", session)
            .json(&body)
            .send(),
    )
    .await
    .unwrap();
    let mut stream = SseStream::new(response);
    let mut first = None;
    while let Some(event) = within("an event", stream.next_event()).await.unwrap() {
        if first.is_none() {
            first = event.id.clone();
        }
    }
    first.expect("an event with an id")
}

/// Waits until the node at `base` reports at least `at_least` for `series`.
async fn until_metric(base: &str, series: &str, at_least: f64) {
    within(series, async {
        while mcp_cluster_testkit::metric(base, series).await < at_least {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A long call in the background; waits until it runs.
async fn running(url: &str, session: &str, id: u64) -> tokio::task::JoinHandle<Seen> {
    let node = base(url);
    let (url, session) = (url.to_owned(), session.to_owned());
    let task = tokio::spawn(async move {
        let body = call(
            id,
            "long_running_operation",
            json!({"duration_ms": 4000, "steps": 1}),
        );
        post(&url, Some(&session), &[], &body).await
    });
    // Until its handler runs.
    until_metric(&node, "mcp_requests_in_flight", 1.0).await;
    task
}

async fn trigger(id: &str, n: &Nodes) -> Vec<Seen> {
    let url = n.plain.url();
    let v = "2025-11-25";
    let ping = rpc(1, "ping", json!({}));
    let one = |seen| vec![seen];
    match id {
        "E-host" => one(post(url, None, &[("Host", "evil.example")], &init_body(v)).await),
        "E-origin" => one(post(
            url,
            None,
            &[("Origin", "http://evil.example")],
            &init_body(v),
        )
        .await),
        "E-content-type" => {
            one(post(url, None, &[("Content-Type", "text/plain")], &init_body(v)).await)
        }
        "E-accept-post" => {
            one(post(url, None, &[("Accept", "application/json")], &init_body(v)).await)
        }
        "E-accept-get" => {
            let s = session(url, v).await;
            one(read(get(url, &s, &[("Accept", "application/json")]).await).await)
        }
        "E-method" => {
            let r = within("PUT", http().put(url).send()).await.unwrap();
            let seen = read(r).await;
            assert!(seen.headers.contains_key("allow"), "{seen:?}");
            one(seen)
        }
        "E-body-size" => {
            let mut body = init_body(v);
            body["params"]["clientInfo"]["name"] = "x".repeat(2000).into();
            one(post(url, None, &[], &body).await)
        }
        "E-body-read" => {
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: {ACCEPT_BOTH}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\n{{\"js\r\nzz\r\n",
                n.plain.addr()
            );
            one(raw(&n.plain, head.into_bytes(), false).await)
        }
        "E-body-time" => {
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: {ACCEPT_BOTH}\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"",
                n.plain.addr()
            );
            one(raw(&n.plain, head.into_bytes(), true).await)
        }
        "E-parse" => {
            let r = http()
                .post(url)
                .header("Accept", ACCEPT_BOTH)
                .header("Content-Type", "application/json")
                .body("{not json")
                .send();
            one(read(within("POST", r).await.unwrap()).await)
        }
        "E-invalid" => one(post(
            url,
            None,
            &[],
            &json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
        )
        .await),
        "E-params" => {
            let s = session(url, v).await;
            one(post(
                url,
                Some(&s),
                &[],
                &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}),
            )
            .await)
        }
        "E-batch-size" => {
            let s = session(url, "2025-03-26").await;
            let batch: Vec<Value> = (1..=5).map(|i| rpc(i, "ping", json!({}))).collect();
            one(post(url, Some(&s), &[], &Value::Array(batch)).await)
        }
        "E-version" => {
            let s = session(url, v).await;
            one(read(get(url, &s, &[("MCP-Protocol-Version", "1999-01-01")]).await).await)
        }
        "E-init-session" => {
            let s = session(url, v).await;
            one(post(url, Some(&s), &[], &init_body(v)).await)
        }
        "E-session-missing" => one(post(url, None, &[], &ping).await),
        "E-session-malformed" => one(post(url, Some("bad id"), &[], &ping).await),
        "E-session-unknown" => one(post(url, Some("no-such-session"), &[], &ping).await),
        "E-header-mismatch" => {
            let s = session(url, v).await;
            one(post(url, Some(&s), &[("Mcp-Method", "tools/list")], &ping).await)
        }
        "E-batch-version" => {
            let s = session(url, v).await;
            let batch = json!([ping, rpc(2, "ping", json!({}))]);
            let streamable = post(url, Some(&s), &[], &batch).await;
            // Legacy: after `initialize` (before it, a batch is served).
            let (mut stream, messages) = open_legacy_sse(&http(), &base(n.budget.url())).await;
            let init = post(&messages, None, &[], &init_body("2024-11-05")).await;
            assert_eq!(init.status, 202, "{init:?}");
            within("the answer", stream.next_message())
                .await
                .unwrap()
                .unwrap();
            vec![streamable, post(&messages, None, &[], &batch).await]
        }
        "E-lei-malformed" => {
            let s = session(url, v).await;
            one(read(get(url, &s, &[("Last-Event-ID", "garbage")]).await).await)
        }
        "E-lei-unknown" => {
            let a = session(url, v).await;
            let event = first_event_id(url, &a).await;
            let b = session(url, v).await;
            one(read(get(url, &b, &[("Last-Event-ID", &event)]).await).await)
        }
        "E-lei-expired" => {
            let s = session(url, v).await;
            let event = first_event_id(url, &s).await;
            one(read(get(url, &s, &[("Last-Event-ID", &event)]).await).await)
        }
        "E-sessions-full" => {
            let url = n.one_session.url();
            session(url, v).await;
            one(post(url, None, &[], &init_body(v)).await)
        }
        "E-streams-full" => {
            let url = n.streams.url();
            let mut open = Vec::new();
            for _ in 0..8 {
                let s = session(url, v).await;
                let response = get(url, &s, &[]).await;
                if response.status() != 200 {
                    return one(read(response).await);
                }
                open.push(response);
            }
            panic!("8 streams on a node of 8 connections were all served")
        }
        "E-node-full" => {
            let listen = stateless(
                1,
                "subscriptions/listen",
                json!({"notifications": {"toolsListChanged": true}}),
            );
            let first = within(
                "listen",
                http()
                    .post(url)
                    .header("Accept", ACCEPT_BOTH)
                    .header("MCP-Protocol-Version", STATELESS)
                    .header("Mcp-Method", "subscriptions/listen")
                    .json(&listen)
                    .send(),
            )
            .await
            .unwrap();
            assert_eq!(first.status(), 200, "the first listen");
            let second = post_stateless(
                url,
                &stateless(
                    2,
                    "subscriptions/listen",
                    json!({"notifications": {"toolsListChanged": true}}),
                ),
                &[],
            )
            .await;
            drop(first);
            // A 2025-11-25 session's task on a node that runs its one task.
            let node = spawn(&[], &[("MCP_RUNTIME__MAX_RUNNING_TASKS", "1")]);
            let s = session(node.url(), v).await;
            let task = |id| {
                rpc(
                    id,
                    "tools/call",
                    json!({"name": "slow_compute", "arguments": {"seconds": 60, "label": "x"}, "task": {}}),
                )
            };
            let running = post(node.url(), Some(&s), &[], &task(3)).await;
            assert!(running.body["result"]["task"].is_object(), "{running:?}");
            let refused = post(node.url(), Some(&s), &[], &task(4)).await;
            vec![second, refused]
        }
        "E-store" => {
            let redis = RedisServer::start_for_nodes().unwrap();
            let node = spawn(&["--redis-url", &redis.node_url()], &[]);
            let s = session(node.url(), v).await;
            redis.stop().unwrap();
            let in_session = post(
                node.url(),
                Some(&s),
                &[],
                &call(1, "echo", json!({"message": "x"})),
            )
            .await;
            let new_session = post(node.url(), None, &[], &init_body(v)).await;
            vec![in_session, new_session]
        }
        "E-quota" => {
            // From 127.0.0.2: loopback itself is exempt from address quotas.
            let from = reqwest::Client::builder()
                .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
                .build()
                .unwrap();
            let mut refused = None;
            for _ in 0..2 {
                let r = from
                    .post(n.quota.url())
                    .header("Accept", ACCEPT_BOTH)
                    .json(&init_body(v))
                    .send();
                refused = Some(read(within("initialize", r).await.unwrap()).await);
            }
            let refused = refused.unwrap();
            assert_eq!(
                refused.body["error"]["data"]["quota"], "initialize_per_address",
                "{refused:?}"
            );
            one(refused)
        }
        "E-auth-missing" | "E-auth-invalid" | "E-auth-scope" | "E-auth-unavailable" => {
            auth(id).await
        }
        "S-meta" => {
            let body = stateless(
                1,
                "tools/list",
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS}}),
            );
            one(post_stateless(url, &body, &[]).await)
        }
        "S-version-header" => one(post_stateless(
            url,
            &stateless(1, "tools/list", json!({})),
            &[("MCP-Protocol-Version", "2025-11-25")],
        )
        .await),
        "S-version" => {
            let body = rpc(
                1,
                "tools/list",
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                "io.modelcontextprotocol/clientCapabilities": {}}}),
            );
            let seen = post_stateless(url, &body, &[("MCP-Protocol-Version", "2099-01-01")]).await;
            assert!(
                seen.body["error"]["data"]["supported"].is_array(),
                "{seen:?}"
            );
            one(seen)
        }
        "S-headers" => one(post_stateless(
            url,
            &stateless(1, "tools/list", json!({})),
            &[("Mcp-Method", "prompts/list")],
        )
        .await),
        "S-method" => one(post_stateless(url, &stateless(1, "ping", json!({})), &[]).await),
        "S-capability" => {
            let body = stateless(
                1,
                "tools/call",
                json!({"name": "test_sampling", "arguments": {"prompt": "hi"}}),
            );
            one(post_stateless(url, &body, &[]).await)
        }
        "S-batch" => {
            let batch = json!([
                stateless(1, "tools/list", json!({})),
                stateless(2, "tools/list", json!({}))
            ]);
            one(post(url, None, &[("MCP-Protocol-Version", STATELESS)], &batch).await)
        }
        "S-response" => one(post(
            url,
            None,
            &[("MCP-Protocol-Version", STATELESS)],
            &json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
        )
        .await),
        "J-not-initialized" | "J-initialized" => {
            let (mut stream, messages) = open_legacy_sse(&http(), &base(url)).await;
            let first = if id == "J-not-initialized" {
                rpc(1, "tools/list", json!({}))
            } else {
                init_body("2024-11-05")
            };
            let mut last = None;
            for body in [first, init_body("2024-11-05")]
                .iter()
                .take(if id == "J-initialized" { 2 } else { 1 })
            {
                let seen = post(&messages, None, &[], body).await;
                assert_eq!(seen.status, 202, "{seen:?}");
                let answer = within("the answer", stream.next_message())
                    .await
                    .unwrap()
                    .unwrap();
                last = Some(Seen {
                    status: 200,
                    headers: HeaderMap::new(),
                    body: answer,
                });
            }
            one(last.unwrap())
        }
        "J-id-in-flight" | "J-in-flight" => {
            let s = session(url, v).await;
            let long = running(url, &s, 7).await;
            let again = if id == "J-id-in-flight" { 7 } else { 8 };
            let seen = post(
                url,
                Some(&s),
                &[],
                &call(again, "echo", json!({"message": "x"})),
            )
            .await;
            long.abort();
            one(seen)
        }
        "J-init-in-batch" => {
            let s = session(url, "2025-03-26").await;
            let seen = post(url, Some(&s), &[], &json!([init_body("2025-03-26"), ping])).await;
            let answer = seen
                .body
                .as_array()
                .and_then(|a| a.iter().find(|m| m["id"] == 0).cloned());
            one(Seen {
                body: answer.unwrap_or(Value::Null),
                ..seen
            })
        }
        "J-method" => {
            let s = session(url, v).await;
            one(post(url, Some(&s), &[], &rpc(1, "no/such", json!({}))).await)
        }
        "J-unknown-tool" => {
            let s = session(url, v).await;
            one(post(url, Some(&s), &[], &call(1, "no_such_tool", json!({}))).await)
        }
        "J-params" => {
            let s = session(url, v).await;
            one(post(
                url,
                Some(&s),
                &[],
                &rpc(1, "tools/list", json!({"cursor": "garbage"})),
            )
            .await)
        }
        "J-tool-args-old" => {
            let s = session(url, "2025-06-18").await;
            one(post(url, Some(&s), &[], &call(1, "add", json!({"a": "one"}))).await)
        }
        "J-tool-args" => {
            let s = session(url, v).await;
            let in_session = post(url, Some(&s), &[], &call(1, "add", json!({"a": "one"}))).await;
            let body = stateless(
                2,
                "tools/call",
                json!({"name": "add", "arguments": {"a": "one"}}),
            );
            vec![in_session, post_stateless(url, &body, &[]).await]
        }
        "J-resource" => {
            let s = session(url, v).await;
            one(post(
                url,
                Some(&s),
                &[],
                &rpc(1, "resources/read", json!({"uri": "test://no-such"})),
            )
            .await)
        }
        "E-node-budget" => {
            // A node holding nothing admits any one request: a running call
            // holds its ~1.6 KB, and the next body past the 2,000 bytes
            // left is refused before it is read.
            let url = n.budget.url();
            let s = session(url, v).await;
            let (held_url, held_session) = (url.to_owned(), s.clone());
            let held = tokio::spawn(async move {
                let body = call(
                    2,
                    "long_running_operation",
                    json!({"duration_ms": 2000, "steps": 1, "padding": "x".repeat(1500)}),
                );
                post(&held_url, Some(&held_session), &[], &body).await
            });
            // Until the node holds the running call's bytes.
            until_metric(&base(url), "mcp_retained_bytes{kind=\"in_flight\"}", 1500.0).await;
            let refused = post(
                url,
                Some(&s),
                &[],
                &call(3, "echo", json!({"message": "y".repeat(800)})),
            )
            .await;
            let held = held.await.unwrap();
            assert_eq!(held.status, 200, "the held call: {held:?}");
            one(refused)
        }
        "J-url-elicitation" => {
            let s = session(url, v).await;
            one(post(
                url,
                Some(&s),
                &[],
                &call(1, "test_url_elicitation_required", json!({})),
            )
            .await)
        }
        "J-timeout" => {
            let s = session(url, v).await;
            one(post(
                url,
                Some(&s),
                &[],
                &call(
                    1,
                    "long_running_operation",
                    json!({"duration_ms": 10000, "steps": 1}),
                ),
            )
            .await)
        }
        "J-drain" => {
            let mut node = spawn(&["--drain-grace-secs", "1", "--drain-delay-secs", "0"], &[]);
            let s = session(node.url(), v).await;
            let long = tokio::spawn({
                let (url, s) = (node.url().to_owned(), s.clone());
                async move {
                    post(
                        &url,
                        Some(&s),
                        &[],
                        &call(
                            1,
                            "long_running_operation",
                            json!({"duration_ms": 30000, "steps": 1}),
                        ),
                    )
                    .await
                }
            });
            until_metric(&base(node.url()), "mcp_requests_in_flight", 1.0).await;
            let status = tokio::task::spawn_blocking(move || {
                let status = node.terminate_within(mcp_cluster_testkit::GUARD);
                (node, status)
            });
            let seen = within("the stopped request", long).await.unwrap();
            let (_node, exit) = status.await.unwrap();
            exit.unwrap();
            one(seen)
        }
        "J-task-negotiation" => {
            let s = session(url, v).await;
            let task = |id, tool: &str| {
                rpc(
                    id,
                    "tools/call",
                    json!({"name": tool, "arguments": {}, "task": {}}),
                )
            };
            vec![
                post(url, Some(&s), &[], &task(1, "echo")).await,
                post(url, Some(&s), &[], &call(2, "failing_job", json!({}))).await,
            ]
        }
        "J-task-unknown" => {
            let s = session(url, v).await;
            let mut seen = Vec::new();
            for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
                let body = rpc(1, method, json!({"taskId": "no-such-task"}));
                seen.push(post(url, Some(&s), &[], &body).await);
            }
            seen
        }
        "J-task-ended" | "J-task-no-result" => {
            // Default limits: a task and the requests about it are in
            // flight together.
            let node = spawn(&[], &[]);
            let url = node.url();
            let s = session(url, v).await;
            let seconds = if id == "J-task-ended" { 0 } else { 60 };
            let created = post(
                url,
                Some(&s),
                &[],
                &rpc(
                    1,
                    "tools/call",
                    json!({"name": "slow_compute", "arguments": {"seconds": seconds, "label": "x"}, "task": {}}),
                ),
            )
            .await;
            let task = created.body["result"]["task"]["taskId"].clone();
            assert!(task.is_string(), "{created:?}");
            let about = |id, method: &str| rpc(id, method, json!({"taskId": task}));
            if id == "J-task-ended" {
                // `tasks/result` waits for the end.
                post(url, Some(&s), &[], &about(2, "tasks/result")).await;
                one(post(url, Some(&s), &[], &about(3, "tasks/cancel")).await)
            } else {
                post(url, Some(&s), &[], &about(2, "tasks/cancel")).await;
                one(post(url, Some(&s), &[], &about(3, "tasks/result")).await)
            }
        }
        "J-tool-error" => {
            let s = session(url, v).await;
            one(post(
                url,
                Some(&s),
                &[],
                &call(1, "test_error_handling", json!({})),
            )
            .await)
        }
        other => panic!("no trigger for {other}"),
    }
}

/// The authorization rows, on nodes whose `[auth]` names a real issuer
/// (up, or down from the start).
async fn auth(id: &str) -> Vec<Seen> {
    use auth_support::{RESOURCE, config_file, node};
    let issuer = TestIssuer::start().await.unwrap();
    if id == "E-auth-unavailable" {
        issuer.set_down(true);
    }
    let config = config_file(
        &format!("error-table-{id}"),
        &issuer,
        RESOURCE,
        "required_scopes = [\"mcp\"]\njwks_refresh_min_secs = 1",
        "",
    );
    let node = tokio::task::spawn_blocking(move || node(&config))
        .await
        .unwrap();
    let url = node.url().to_owned();
    let good = issuer.token().audience(RESOURCE).scopes(["mcp"]);
    let (header, token) = match id {
        "E-auth-missing" => (None, String::new()),
        "E-auth-invalid" => (Some(()), good.forge_alg_none()),
        "E-auth-scope" => (Some(()), issuer.token().audience(RESOURCE).sign()),
        _ => (Some(()), good.sign()),
    };
    let bearer = format!("Bearer {token}");
    let extra: Vec<(&str, &str)> = header
        .map(|()| ("Authorization", bearer.as_str()))
        .into_iter()
        .collect();
    let seen = post(&url, None, &extra, &init_body("2025-11-25")).await;
    if seen.status == 401 || seen.status == 403 {
        assert!(seen.headers.contains_key("www-authenticate"), "{seen:?}");
    }
    vec![seen]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_row_of_the_error_table_happens_as_written() {
    let rows = table();
    let nodes = tokio::task::spawn_blocking(|| Nodes {
        plain: spawn(
            &[
                "--max-body-bytes",
                "1024",
                "--request-body-timeout-secs",
                "1",
                "--max-in-flight",
                "1",
                "--request-timeout-secs",
                "2",
            ],
            &[
                ("MCP_HTTP__REQUEST_HEADER_TIMEOUT_SECS", "1"),
                ("MCP_RUNTIME__MAX_BATCH_ITEMS", "4"),
                ("MCP_RUNTIME__MAX_LISTEN_STREAMS", "1"),
                ("MCP_RETENTION__MAX_EVENTS_PER_STREAM", "1"),
            ],
        ),
        one_session: spawn(&["--max-sessions", "1"], &[]),
        quota: spawn(&["--quota-initialize-per-address", "1"], &[]),
        streams: spawn(&["--max-connections", "8"], &[]),
        budget: spawn(&[], &[("MCP_RUNTIME__MAX_IN_FLIGHT_BYTES", "2000")]),
    })
    .await
    .unwrap();
    let mut failures = Vec::new();
    for row in &rows {
        if NOT_REACHABLE.iter().any(|(id, _)| *id == row.id) {
            continue;
        }
        let row = row.clone();
        let seen = match AssertUnwindSafe(trigger(&row.id, &nodes))
            .catch_unwind()
            .await
        {
            Ok(seen) => seen,
            Err(err) => {
                failures.push(format!(
                    "{}: the trigger failed: {}",
                    row.id,
                    panic_text(&*err)
                ));
                continue;
            }
        };
        assert!(!seen.is_empty(), "{}", row.id);
        // One row's failure does not hide the next one's.
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            for seen in &seen {
                check(&row, seen);
            }
        }));
        if let Err(err) = result {
            failures.push(panic_text(&*err));
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn panic_text(err: &(dyn std::any::Any + Send)) -> String {
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}
