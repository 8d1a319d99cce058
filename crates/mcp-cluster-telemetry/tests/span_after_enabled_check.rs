//! The subscriber `init` installs exports a request span made right after a
//! `tracing::enabled!` check of a target that traces leave out (the access
//! log's, which the HTTP middleware checks before every request), on a
//! thread of its own as on an HTTP worker. tracing-subscriber carried the
//! trace layer's "no" for that check over to the span
//! (tokio-rs/tracing#2519), and no HTTP request span ever left a node.
//!
//! One test in this binary: `init` installs the process's global
//! subscriber once.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_cluster_telemetry::{LogFormat, OtelConfig, RequestSpanAttrs, TraceContext};

/// Reads one HTTP/1.1 request and answers 200 with an empty body; returns
/// the request's body.
fn answer_one(mut stream: TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut data = Vec::new();
    let mut buf = [0_u8; 8192];
    let (head_end, length) = loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the connection closed mid-request");
        data.extend_from_slice(&buf[..n]);
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..at]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            break (at + 4, length);
        }
    };
    while data.len() < head_end + length {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the connection closed mid-body");
        data.extend_from_slice(&buf[..n]);
    }
    stream
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .unwrap();
    data[head_end..].to_vec()
}

#[test]
fn a_request_span_made_after_checking_the_access_log_target_is_exported() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let collector = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        while !stopped.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    bodies.push(answer_one(stream));
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(err) => panic!("accept: {err}"),
            }
        }
        bodies
    });

    let config = OtelConfig::from_env(Vec::new(), Some(&endpoint)).unwrap();
    let guard = mcp_cluster_telemetry::init(LogFormat::Text, "info", &config).unwrap();
    std::thread::spawn(|| {
        // The access log is on at `info`: the check says yes, for the log.
        assert!(tracing::enabled!(
            target: "mcp_access",
            tracing::Level::INFO
        ));
        let attrs = RequestSpanAttrs {
            method: "tools/list",
            ..Default::default()
        };
        drop(mcp_cluster_telemetry::request_span(
            &attrs,
            TraceContext::new(),
        ));
    })
    .join()
    .unwrap();
    // Exports what is buffered, and waits for the collector's answer.
    guard.shutdown();
    stop.store(true, Ordering::Release);
    let bodies = collector.join().unwrap();

    let exported = |needle: &[u8]| {
        bodies
            .iter()
            .any(|b| b.windows(needle.len()).any(|w| w == needle))
    };
    assert!(
        exported(b"mcp.method.name") && exported(b"tools/list"),
        "no request span among {} export request(s)",
        bodies.len()
    );
}
