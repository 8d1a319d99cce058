//! A client cannot fill the node's disk through its log (issue 31): the
//! access log writes only bounded, well-formed values of what a client
//! sent, also for requests the node refuses, and refused requests count
//! against the address's request rate (`quotas.requests_per_address`), so
//! that a flood of them meets 429 and then costs the node neither its body
//! nor a log line each. A real node logs to a file; clients on addresses
//! the quotas count (sockets bound to 127.0.0.2, …) send JSON-RPC methods
//! of 4 MB, session ids and request ids of 4 KB, paths of 4 KB, malformed
//! bodies.

mod address_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use address_support::{client_from, post_malformed};
use mcp_cluster_testkit::{NodeProcess, metric, node_binary, raw_http_from, within};
use reqwest::StatusCode;

/// Requests of the flood (as in the issue).
const FLOOD: usize = 32;
/// Bytes of each flooding method name: the body limit (4 MiB) less the
/// rest of the body.
const METHOD_BYTES: usize = 4 * 1024 * 1024 - 100;
/// What the whole flood may add to the log.
const MAX_GROWTH_BYTES: u64 = 1024 * 1024;

/// A fresh file for a node's log, in a directory of this test process.
fn log_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-log-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.log"))
}

/// The access-log lines written so far.
fn access_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("HTTP request."))
        .map(str::to_owned)
        .collect()
}

/// Waits (a bounded time) until the log holds `n` access-log lines.
async fn access_lines_at_least(log: &Path, n: usize) -> Vec<String> {
    within("the access-log lines", async {
        loop {
            let lines = access_lines(log);
            if lines.len() >= n {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn megabyte_method_names_grow_the_log_by_a_short_line_each() {
    let log = log_file("methods");
    let node = NodeProcess::spawn_logging_to(&node_binary(), &["--log", "info"], &[], &log)
        .unwrap_or_else(|err| panic!("{err:#}"));
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let before = std::fs::metadata(&log).unwrap().len();

    let http = client_from("127.0.0.2");
    let method = "m".repeat(METHOD_BYTES);
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#);
    let long_header = "s".repeat(4096);
    for i in 0..FLOOD {
        let mut request = http
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("X-Request-Id", &long_header)
            .body(body.clone());
        if i % 2 == 1 {
            request = request.header("Mcp-Session-Id", &long_header);
        }
        let response = within("POST", request.send()).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "#{i}");
    }
    let path = format!("{base}/{}", "p".repeat(4096));
    let response = within("GET", http.get(&path).send()).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    let lines = access_lines_at_least(&log, FLOOD + 1).await;
    let grown = std::fs::metadata(&log).unwrap().len() - before;
    assert!(
        grown < MAX_GROWTH_BYTES,
        "{FLOOD} requests with methods of {METHOD_BYTES} bytes grew the log by {grown} bytes"
    );
    // Each refused request still has its line, with bounded values only.
    assert_eq!(lines.len(), FLOOD + 1, "{lines:#?}");
    for line in &lines[..FLOOD] {
        assert!(line.contains("rpc_method=\"other\""), "{line}");
        assert!(line.contains("path=\"/mcp\""), "{line}");
        assert!(line.contains("session_id=\"\""), "{line}");
        assert!(!line.contains(&long_header), "{line}");
    }
    assert!(lines[FLOOD].contains("path=\"other\""), "{}", lines[FLOOD]);
    println!(
        "{FLOOD} requests with methods of {METHOD_BYTES} bytes: the log grew by {grown} bytes"
    );
    drop(node);
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn refused_requests_count_against_the_address_and_then_cost_no_body_and_no_line() {
    // 64 requests, then one more every 562 s: nothing here races a clock.
    const LIMIT: usize = 64;
    const SENT: usize = 200;
    let log = log_file("refused");
    let node = NodeProcess::spawn_logging_to(
        &node_binary(),
        &["--log", "info"],
        &[
            ("MCP_QUOTAS__REQUESTS_PER_ADDRESS", "64"),
            ("MCP_QUOTAS__REQUESTS_WINDOW_SECS", "36000"),
        ],
        &log,
    )
    .unwrap_or_else(|err| panic!("{err:#}"));
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let flooder = client_from("127.0.0.4");
    let mut statuses = Vec::new();
    for _ in 0..SENT {
        let response = post_malformed(&flooder, &url).await;
        statuses.push(response.status());
    }
    assert!(
        statuses[..LIMIT]
            .iter()
            .all(|s| *s == StatusCode::BAD_REQUEST),
        "{statuses:?}"
    );
    assert!(
        statuses[LIMIT..]
            .iter()
            .all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    // Refused by the store once, then by what the node knows: one line of
    // 429 for the whole flood.
    let lines = access_lines_at_least(&log, LIMIT + 1).await;
    let answered = |status: u16| {
        lines
            .iter()
            .filter(|l| l.contains(&format!("status={status} ")) && l.contains("127.0.0.4"))
            .count()
    };
    assert_eq!(answered(400), LIMIT, "{lines:#?}");
    assert_eq!(answered(429), 1, "{lines:#?}");
    assert_eq!(
        metric(
            &base,
            "mcp_quota_rejections_total{quota=\"requests_per_address\"}"
        )
        .await,
        (SENT - LIMIT) as f64
    );

    // A large body from the address is refused before it is sent: the
    // node does not wait for it (it would for 30 s, its body timeout).
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {METHOD_BYTES}"
    );
    let addr = node.addr();
    let (status, body) = tokio::task::spawn_blocking(move || {
        raw_http_from("127.0.0.4".parse().unwrap(), addr, head.as_bytes(), "")
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("requests_per_address"), "{body}");
    // Another address is served as before.
    let other = post_malformed(&client_from("127.0.0.5"), &url).await;
    assert_eq!(other.status(), StatusCode::BAD_REQUEST);
    drop(node);
    let _ = std::fs::remove_file(&log);
}
