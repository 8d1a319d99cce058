//! A new connection must bring its first request within the header timeout
//! (`http.request_header_timeout_secs`), or the node closes it without a
//! word; a connection that did stays open for its next request for the
//! keep-alive time, and must bring that request's head within the header
//! timeout after it; a request served for longer than both keeps its
//! connection.
//!
//! Before, actix-web answered `408 Request Timeout` on a connection that
//! had sent nothing. HTTP clients park spare connections in their pools
//! (hyper opens one for a waiting request and keeps it when another frees
//! up first): a client that picked such a connection for its next request
//! as the 408 arrived failed that request with "unexpected message"
//! (`hostile_retained_owners` failed so on a busy machine, its 32 calls
//! sharing one client's pool).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use serde_json::json;
use tokio::time::Instant;

/// The node's header timeout here, short to keep the test short.
const HEADER_TIMEOUT: Duration = Duration::from_secs(1);

fn node() -> NodeProcess {
    node_keeping_alive("10")
}

/// A node with the header timeout above and `keep_alive` seconds of
/// keep-alive.
fn node_keeping_alive(keep_alive: &str) -> NodeProcess {
    NodeProcess::spawn_logged(
        &node_binary(),
        &["--keep-alive-secs", keep_alive],
        &[("MCP_HTTP__REQUEST_HEADER_TIMEOUT_SECS", "1")],
    )
    .unwrap_or_else(|err| panic!("{err:#}"))
}

/// What the node sends on `stream` until it closes it, and how long that
/// took from `since`. Gives up after 30 s (the node never closed it).
fn until_closed(mut stream: TcpStream, since: Instant) -> (Vec<u8>, Duration) {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            // A reset ends it too; a timeout means it was never closed.
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(err) => panic!("the node did not close the connection: {err}"),
        }
    }
    (bytes, since.elapsed())
}

#[test]
fn a_connection_without_a_request_is_closed_without_a_word() {
    let node = node();
    let since = Instant::now();
    let silent = TcpStream::connect(node.addr()).unwrap();
    let mut partial = TcpStream::connect(node.addr()).unwrap();
    partial
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    for (what, stream) in [("nothing sent", silent), ("half a head sent", partial)] {
        closed_without_a_word(what, stream, since, HEADER_TIMEOUT);
    }
}

/// Asserts that the node closes `stream` without sending anything, and not
/// sooner than `after` from `since`.
fn closed_without_a_word(what: &str, stream: TcpStream, since: Instant, after: Duration) {
    let (bytes, waited) = until_closed(stream, since);
    assert!(
        bytes.is_empty(),
        "{what}: closed without an answer, got {:?}",
        String::from_utf8_lossy(&bytes)
    );
    assert!(
        waited >= after - Duration::from_millis(100),
        "{what}: not before {after:?} ({waited:?})"
    );
}

/// One `GET /healthz` on `stream`, kept alive; its status line.
fn healthz(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    // The answer is small and ends with the body "ok".
    while !answer.ends_with(b"ok") {
        let n = stream.read(&mut chunk).expect("an answer");
        assert!(n > 0, "closed before answering: {answer:?}");
        answer.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn a_connection_that_brought_its_request_in_time_stays_for_the_next() {
    let node = node();
    let mut stream = TcpStream::connect(node.addr()).unwrap();
    assert_eq!(healthz(&mut stream), "HTTP/1.1 200 OK");
    // Past the header timeout (and actix's backstop after it), within the
    // keep-alive time: the connection still serves.
    std::thread::sleep(HEADER_TIMEOUT * 3);
    assert_eq!(healthz(&mut stream), "HTTP/1.1 200 OK");
}

#[test]
fn half_a_head_after_a_served_request_is_closed_too() {
    // Before, actix stopped its keep-alive timer at the first byte of the
    // next request and started no other: this connection stayed open.
    let keep_alive = Duration::from_secs(1);
    let node = node_keeping_alive("1");
    let mut stream = TcpStream::connect(node.addr()).unwrap();
    assert_eq!(healthz(&mut stream), "HTTP/1.1 200 OK");
    let served = Instant::now();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    // Due the keep-alive time and the header timeout after the response.
    closed_without_a_word("half a head", stream, served, keep_alive + HEADER_TIMEOUT);
}

#[tokio::test]
async fn a_request_served_longer_than_the_timeouts_keeps_its_connection() {
    // 1 s of keep-alive and 1 s for a head: a connection is due a request
    // 2 s after its last response, but not while one is served.
    let node = node_keeping_alive("1");
    let mut client = Client::new(node.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (answer, progress) = within(
        "a 4 s call",
        client.request(
            "tools/call",
            json!({"name": "long_running_operation",
                "arguments": {"duration_ms": 4000, "steps": 4},
                "_meta": {"progressToken": "p"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "Long running operation completed: 4 steps in 4000 ms",
        "{answer}"
    );
    assert_eq!(progress.len(), 4, "{progress:?}");
}
