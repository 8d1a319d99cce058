//! A client that stops reading an SSE answer, over a real socket: the node
//! does not read the stream's events ahead of it (actix-web pulls the body
//! only while its write buffer has room, the follow reads the log only
//! when pulled), so what waits for the client stays in the event log, and
//! the node holds a bounded buffer for the connection. When the client
//! reads again, every event arrives, in order.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use mcp_cluster_testkit::{GUARD, InProcessNode, fixtures, within};
use serde_json::json;
use socket2::{Domain, Socket, Type};

/// Events the tool writes while the client does not read.
const EVENTS: u64 = 400;
/// Bytes of each: 400 × 64 KiB is 25 MiB, far beyond every buffer on the
/// way (the node's, the kernel's on both ends).
const EVENT_BYTES: u64 = 64 * 1024;
/// The most events the node may have read for the stuck client: one read
/// batch (64) ahead of what went out, plus what actix's 32 KiB write
/// buffer and the sockets' kernel buffers hold (the client's receive buffer
/// is kept small; the node's send buffer grows to a few MiB at most).
const MOST_READ: u64 = EVENTS / 2;

async fn counter(node: &InProcessNode, name: &str) -> u64 {
    let text = within(
        "metrics",
        reqwest::get(format!("{}/metrics", node.base_url())),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics")) as u64
}

/// A connection with a small receive buffer (set before connecting, so
/// the window the node sees stays small), sending `request`.
fn stuck_client(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    stream.write_all(request).unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_leaves_its_events_in_the_log() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let client = node.session(json!({})).await;
    let session = client.session_id().unwrap().to_owned();
    let appended = counter(&node, "mcp_event_log_appends_total").await;
    let replayed = counter(&node, "mcp_event_log_replayed_events_total").await;

    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "log", "arguments": {"count": EVENTS, "bytes": EVENT_BYTES}}})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        node.addr(),
        body.len()
    );
    let addr = node.addr();
    let mut stream = tokio::task::spawn_blocking(move || stuck_client(addr, request.as_bytes()))
        .await
        .unwrap();

    // The tool writes every event (and its response) into the log, whether
    // or not anyone reads.
    within("the tool's events", async {
        while counter(&node, "mcp_event_log_appends_total").await < appended + EVENTS + 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let read_while_stuck = counter(&node, "mcp_event_log_replayed_events_total").await - replayed;
    eprintln!(
        "the node read {read_while_stuck} of {EVENTS} events for a client that reads nothing"
    );
    assert!(
        read_while_stuck <= MOST_READ,
        "the node read {read_while_stuck} of {EVENTS} events for a client that reads nothing"
    );
    // The node serves others meanwhile.
    let (answer, _) = within("tools/list", client.request("tools/list", json!({})))
        .await
        .unwrap();
    assert!(answer["result"]["tools"].is_array());

    // The client reads again: every event, in order, then the response.
    let text = tokio::task::spawn_blocking(move || {
        stream.set_read_timeout(Some(GUARD)).unwrap();
        let mut all = Vec::new();
        stream.read_to_end(&mut all).unwrap();
        String::from_utf8(all).unwrap()
    })
    .await
    .unwrap();
    let messages: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| !data.is_empty())
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(
        messages.len() as u64,
        EVENTS + 1,
        "every event, then the response"
    );
    for (i, message) in messages[..EVENTS as usize].iter().enumerate() {
        let data = message["params"]["data"].as_str().unwrap();
        assert!(
            data.starts_with(&format!("message {i} ")),
            "event {i} out of order"
        );
    }
    assert_eq!(messages[EVENTS as usize]["id"], 7);
}
