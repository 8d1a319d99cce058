//! The write-stall timeout (`--sse-write-stall-timeout-secs`) on each kind
//! of SSE stream, and what it spares. A client that reads slowly but keeps
//! taking bytes while the node has more for it keeps its stream to the end,
//! every event in order; a client that stops reading is reset, on a legacy
//! `/sse` stream, a 2026-07-28 request's stream and a `Last-Event-ID`
//! resumption alike, each counted under its kind, and over HTTPS too (the
//! watch shuts down the TCP socket under the TLS session).
//! `hostile_stalled_readers.rs` runs 1,000 stalled session-era answers.

mod stall_support;
mod stateless_support;
mod tls_support;

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{GUARD, NodeProcess, TestPki, free_port, metric, node_binary, within};
use serde_json::{Value, json};
use stall_support as st;
use stateless_support as sl;

/// The nodes' write-stall timeout, in seconds.
const TIMEOUT_SECS: u64 = 2;
/// Bytes of a stalled stream's answer: well beyond what the kernel's
/// buffers (about 100 KB with the clients' segment size) and actix's write
/// buffer take, so that the answer cannot all leave the node.
const ANSWER_BYTES: usize = 384 * 1024;
/// The same over TLS, where rustls buffers up to 64 KiB more of it.
const TLS_ANSWER_BYTES: usize = 768 * 1024;
/// How long a stalled stream may take to be reset: the timeout, a scan,
/// and a generous margin for a loaded machine (a bound on a wait).
const RESET_BOUND: Duration = Duration::from_secs(TIMEOUT_SECS + 20);

/// A node answering every request as SSE, with the short timeout.
fn node(extra: &[&str]) -> NodeProcess {
    let timeout = TIMEOUT_SECS.to_string();
    let mut args = vec![
        "--log",
        "warn",
        "--response-mode",
        "sse",
        "--sse-write-stall-timeout-secs",
        &timeout,
    ];
    args.extend_from_slice(extra);
    NodeProcess::spawn(&node_binary(), &args).unwrap()
}

async fn stalls(base: &str, kind: &str) -> f64 {
    metric(
        base,
        &format!("mcp_sse_write_stalls_total{{kind=\"{kind}\"}}"),
    )
    .await
}

/// A 2026-07-28 POST of `body` as raw HTTP/1.1, with its standard headers.
fn stateless_post(addr: SocketAddr, body: &Value) -> Vec<u8> {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n"
    );
    for (name, value) in sl::headers(body) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.to_string();
    format!("{head}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// A `long_running_operation` call with progress on its stream.
fn long_running(id: u64, steps: u64, duration_ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "long_running_operation",
            "arguments": {"duration_ms": duration_ms, "steps": steps},
            "_meta": {"progressToken": id}}})
}

async fn session(url: &str) -> Client {
    let mut client = Client::new(url, st::VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_slowly_keeps_its_stream() {
    /// 5,000 progress notifications of about 200 bytes over 5 s: 200 KB/s.
    const STEPS: u64 = 5_000;
    /// The client takes at most this much at a time, four times a second
    /// (64 KB/s): the node has bytes waiting for it all along, and the
    /// client makes room for them well within each timeout.
    const READ_BYTES: usize = 16 * 1024;
    let node = node(&[]);
    let (base, addr) = (node.url().trim_end_matches("/mcp").to_owned(), node.addr());
    let client = session(node.url()).await;
    let request = st::post(
        addr,
        client.session_id().unwrap(),
        &long_running(7, STEPS, 5_000),
    );
    let (raw, reset) = tokio::task::spawn_blocking(move || {
        let mut socket = st::client(addr, 4 * READ_BYTES);
        let mut raw = st::open_sse(&mut socket, &request);
        let mut piece = vec![0u8; READ_BYTES];
        // The whole stream takes about 16 s at this pace.
        let deadline = tokio::time::Instant::now() + GUARD * 6;
        while !raw.ends_with(b"\r\n0\r\n\r\n") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stream did not end"
            );
            std::thread::sleep(Duration::from_millis(250));
            match (&socket).read(&mut piece) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&piece[..n]),
                Err(err) => panic!("reading slowly: {err}"),
            }
        }
        (raw, st::was_reset(&socket))
    })
    .await
    .unwrap();
    assert!(!reset, "a client that keeps reading is not reset");
    let messages = st::messages(&st::dechunk(&raw));
    let progress: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap() as u64)
        .collect();
    assert_eq!(progress, (1..=STEPS).collect::<Vec<_>>());
    assert_eq!(messages.last().unwrap()["id"], 7);
    assert_eq!(stalls(&base, "request").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_streams_of_each_kind_are_reset_and_counted() {
    let node = node(&[]);
    let (url, addr) = (node.url().to_owned(), node.addr());
    let base = url.trim_end_matches("/mcp").to_owned();
    let big = "x".repeat(ANSWER_BYTES);

    // Legacy HTTP+SSE: every answer travels on the `/sse` stream.
    let sse_request =
        format!("GET /sse HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
    let (legacy, endpoint) = tokio::task::spawn_blocking(move || {
        let mut socket = st::client(addr, st::SMALL_RECEIVE_BUFFER);
        let mut read = st::open_sse(&mut socket, sse_request.as_bytes());
        if st::find(&read, b"sessionId=").is_none()
            || st::find(&read[st::find(&read, b"sessionId=").unwrap()..], b"\n").is_none()
        {
            read.extend(st::read_until(&mut socket, b"\n\n"));
        }
        let text = String::from_utf8_lossy(&read).into_owned();
        let endpoint = text
            .lines()
            .find_map(|line| line.strip_prefix("data: "))
            .expect("the endpoint event")
            .to_owned();
        (socket, endpoint)
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let messages_url = format!("{base}{endpoint}");
    for body in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "stalled", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": big}}}),
    ] {
        let status = within(
            "POST /messages",
            http.post(&messages_url).json(&body).send(),
        )
        .await
        .unwrap()
        .status();
        assert_eq!(status, 202);
    }
    tokio::task::spawn_blocking(move || st::wait_for_reset(&legacy, RESET_BOUND))
        .await
        .unwrap();
    assert_eq!(stalls(&base, "legacy").await, 1.0);

    // A 2026-07-28 request's stream.
    let body = sl::tool_call(3, "echo", json!({"message": big}), json!({}), json!({}));
    tokio::task::spawn_blocking(move || {
        let mut socket = st::client(addr, st::SMALL_RECEIVE_BUFFER);
        st::open_sse(&mut socket, &stateless_post(addr, &body));
        st::wait_for_reset(&socket, RESET_BOUND);
    })
    .await
    .unwrap();
    assert_eq!(stalls(&base, "live").await, 1.0);

    // A resumption: the first reader takes the priming event and goes
    // away; the second resumes from it and reads nothing.
    let client = session(&url).await;
    let session = client.session_id().unwrap().to_owned();
    let request = st::post(addr, &session, &long_running(4, 2_000, 10_000));
    tokio::task::spawn_blocking(move || {
        let mut first = st::client(addr, st::SMALL_RECEIVE_BUFFER);
        let mut read = st::open_sse(&mut first, &request);
        if st::find(&read, b"data: \n\n").is_none() {
            read.extend(st::read_until(&mut first, b"data: \n\n"));
        }
        drop(first);
        let text = String::from_utf8_lossy(&read).into_owned();
        let id = text
            .split("id: ")
            .nth(1)
            .and_then(|rest| rest.split('\n').next())
            .expect("a priming event id")
            .to_owned();
        let resume = format!(
            "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
             Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {}\r\n\
             Last-Event-ID: {id}\r\n\r\n",
            st::VERSION
        );
        let mut second = st::client(addr, st::SMALL_RECEIVE_BUFFER);
        st::open_sse(&mut second, resume.as_bytes());
        st::wait_for_reset(&second, RESET_BOUND + Duration::from_secs(10));
    })
    .await
    .unwrap();
    assert_eq!(stalls(&base, "resumption").await, 1.0);
    // Only the stalled ones.
    assert_eq!(stalls(&base, "request").await, 0.0);
    assert_eq!(stalls(&base, "standalone").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_over_tls_is_reset() {
    let pki = TestPki::new().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let timeout = TIMEOUT_SECS.to_string();
    let node = tls_support::https_node(
        &pki,
        &[
            "--admin-bind",
            &admin.to_string(),
            "--log",
            "warn",
            "--response-mode",
            "sse",
            "--sse-write-stall-timeout-secs",
            &timeout,
        ],
        &[],
    );
    let addr = node.addr();
    let ca = pki.ca_cert();
    let body = sl::tool_call(
        1,
        "echo",
        json!({"message": "x".repeat(TLS_ANSWER_BYTES)}),
        json!({}),
        json!({}),
    );
    tokio::task::spawn_blocking(move || {
        let socket: std::net::TcpStream = st::client(addr, st::SMALL_RECEIVE_BUFFER).into();
        let name = rustls::pki_types::ServerName::IpAddress(
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST).into(),
        );
        let connection =
            rustls::ClientConnection::new(tls_support::client_config(&ca), name).unwrap();
        let mut tls = rustls::StreamOwned::new(connection, socket);
        st::open_sse(&mut tls, &stateless_post(addr, &body));
        // It reads nothing more through TLS: the node resets the TCP
        // connection under it.
        st::wait_for_reset(&tls.sock, RESET_BOUND);
    })
    .await
    .unwrap();
    assert_eq!(
        tls_support::metric(admin, "mcp_sse_write_stalls_total{kind=\"live\"}").await,
        1.0
    );
}
