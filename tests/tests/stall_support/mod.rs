//! Helpers shared by the write-stall tests (`hostile_stalled_readers.rs`,
//! `sse_write_stall.rs`): raw client sockets that read an SSE answer's
//! head and then as little as the test says, and how a test sees that the
//! node reset one.
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use mcp_cluster_testkit::GUARD;
use serde_json::Value;
use socket2::{Domain, SockRef, Socket, Type};
use tokio::time::Instant;

/// The revision the test sessions negotiate.
pub const VERSION: &str = "2025-11-25";

/// The segment size the test clients announce: an Ethernet path's, not
/// loopback's 64 KiB, so that the node's kernel sizes its send buffer as
/// it would for a client on a network (about 100 KB here) rather than to
/// megabytes.
pub const MSS: u32 = 1400;

/// The receive buffer of a client that stops reading (the kernel doubles
/// it): its window closes after a few KiB.
pub const SMALL_RECEIVE_BUFFER: usize = 4096;

/// A connected client socket with `receive_buffer` bytes of receive buffer
/// and [`MSS`], both set before connecting so that the node sees them
/// from the handshake on. Reads and writes give up after [`GUARD`].
pub fn client(addr: SocketAddr, receive_buffer: usize) -> Socket {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(receive_buffer).unwrap();
    socket.set_tcp_mss(MSS).unwrap();
    socket.connect(&addr.into()).unwrap();
    socket.set_read_timeout(Some(GUARD)).unwrap();
    socket.set_write_timeout(Some(GUARD)).unwrap();
    socket
}

/// A POST of `body` to `/mcp` in `session`, as raw HTTP/1.1.
pub fn post(addr: SocketAddr, session: &str, body: &Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: {VERSION}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `request` and reads the answer's head, and no more than a few
/// hundred bytes past it; panics unless it is a 200 SSE answer. Returns
/// what was read past the head.
pub fn open_sse(stream: &mut (impl Read + Write), request: &[u8]) -> Vec<u8> {
    stream.write_all(request).unwrap();
    let read = read_until(stream, b"\r\n\r\n");
    let end = find(&read, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&read[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    read[end..].to_vec()
}

/// Reads in small pieces until what was read holds `needle` (panics at
/// the end of the stream or after [`GUARD`] without it).
pub fn read_until(stream: &mut impl Read, needle: &[u8]) -> Vec<u8> {
    let mut read = Vec::new();
    let mut piece = [0u8; 256];
    while find(&read, needle).is_none() {
        let n = stream.read(&mut piece).unwrap();
        assert!(
            n > 0,
            "the stream ended before {:?}",
            String::from_utf8_lossy(needle)
        );
        read.extend_from_slice(&piece[..n]);
    }
    read
}

/// Where `needle` starts in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether the node reset the connection: the socket holds the error,
/// which a client that reads nothing learns without reading (and so
/// without making room for the node). Takes the error.
pub fn was_reset(socket: &impl AsFd) -> bool {
    matches!(SockRef::from(socket).take_error(), Ok(Some(err)) if err.kind() == ErrorKind::ConnectionReset)
}

/// Waits until the node resets `socket` (a blocking loop; panics after
/// `bound`).
pub fn wait_for_reset(socket: &impl AsFd, bound: Duration) {
    let start = Instant::now();
    while !was_reset(socket) {
        assert!(start.elapsed() < bound, "not reset within {bound:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The body of a chunked HTTP/1.1 answer, `raw` starting at its first
/// chunk; what follows an incomplete chunk is dropped.
pub fn dechunk(raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut at = 0;
    while let Some(line) = find(&raw[at..], b"\r\n") {
        let size = std::str::from_utf8(&raw[at..at + line])
            .ok()
            .and_then(|hex| usize::from_str_radix(hex.trim(), 16).ok())
            .expect("a chunk size");
        let start = at + line + 2;
        if size == 0 || start + size > raw.len() {
            break;
        }
        body.extend_from_slice(&raw[start..start + size]);
        at = start + size + 2;
        if at > raw.len() {
            break;
        }
    }
    body
}

/// The JSON-RPC messages of an SSE body: every `data:` line that holds
/// JSON.
pub fn messages(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect()
}
