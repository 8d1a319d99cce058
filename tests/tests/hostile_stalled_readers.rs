//! Clients that open SSE streams and never read them cannot hold a node's
//! memory or its connections. A node started with
//! `--sse-write-stall-timeout-secs 2` gets 1,000 session-era answers of
//! 256 KiB, each on a connection whose client reads the head and nothing
//! more (a 4 KiB receive buffer): more than the kernel's buffers (about
//! 100 KB, up to 160 KB seen) and actix's 32 KiB write buffer take, so each answer's bytes wait for a
//! client that never takes them. Every one of those connections is reset
//! within a bounded time after the timeout, each counted once in
//! `mcp_sse_write_stalls_total{kind="request"}`; the node's resident memory
//! stays within what the stalled streams may hold (their answers, and the
//! closed streams it keeps for resumption); a new client is served at once;
//! and a stalled stream's missed events all come back, in order, when its
//! client resumes with `Last-Event-ID` after the reset. Before the timeout,
//! each such connection stayed open for as long as its client kept the
//! socket, with its answer in the node's buffers.

mod hostile_support;
mod stall_support;

use std::sync::mpsc;
use std::time::Duration;

use hostile_support::MIB;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{GUARD, metric, rss_bytes, within};
use serde_json::json;
use socket2::Socket;
use stall_support as st;
use tokio::time::Instant;

/// Streams whose clients never read.
const STALLED: usize = 1_000;
/// The node's write-stall timeout, in seconds.
const TIMEOUT_SECS: u64 = 2;
/// Bytes of each stalled stream's answer (an `echo` of that many).
const ANSWER_BYTES: usize = 256 * 1024;
/// Threads opening the stalled streams, one session each.
const OPENERS: usize = 16;
/// How long after its head a stalled stream may take to be reset: the
/// timeout, a quarter more for the scan, and a generous margin for a
/// loaded machine (the answer must first fill the buffers). A bound on a
/// wait, not a measure of speed.
const CLOSE_BOUND: Duration = Duration::from_secs(TIMEOUT_SECS * 5 / 4 + 20);
/// Pause between two looks at the stalled sockets and the node's memory.
const LOOK: Duration = Duration::from_millis(100);
/// What the node may hold for each stalled stream: its answer twice (in
/// actix's write buffer, and as the event the stream's follow read ahead,
/// which it keeps once the closed-stream budget drops it from the log) and
/// the connection's own buffers. The bound holds however many are stalled
/// at once: without the timeout all 1,000 were; with it, those of the last
/// few seconds only.
const PER_STALLED_STREAM: u64 = 2 * ANSWER_BYTES as u64 + 64 * 1024;
/// What it may hold besides: the closed streams it keeps for resumption
/// (`retention.closed_stream_bytes`, 64 MiB) and room for the allocator.
const BESIDES: u64 = 64 * MIB + 64 * MIB;
/// The stalled session-era stream that is resumed: progress notifications
/// (about 200 bytes each, 400 KB in all) over its run.
const STEPS: u64 = 2_000;
/// Its run, in milliseconds: the request still runs when its stream is
/// reset, and the resumption follows it live to its end.
const RUN_MS: u64 = 10_000;

/// One stalled stream as the monitor sees it.
struct Stalled {
    socket: Socket,
    /// When its head was read: from then on its client reads nothing.
    opened: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_never_read_are_reset_counted_and_cost_bounded_memory() {
    // The stalled sockets, the sessions' connections and a margin.
    rlimit::increase_nofile_limit(4 * STALLED as u64).unwrap();
    let node = hostile_support::node(&[
        "--response-mode",
        "sse",
        "--sse-write-stall-timeout-secs",
        &TIMEOUT_SECS.to_string(),
    ]);
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let addr = node.addr();
    let pid = node.pid();
    let stalls = "mcp_sse_write_stalls_total{kind=\"request\"}";
    assert_eq!(metric(&base, stalls).await, 0.0);
    // From 127.0.0.1, a trusted proxy's address: no per-address quota or
    // connection limit applies, so the node's own bounds are what holds.
    let mut sessions = Vec::new();
    for _ in 0..OPENERS {
        let client = hostile_support::session(&url, st::VERSION).await;
        sessions.push(client.session_id().unwrap().to_owned());
    }
    let before = node.rss_bytes();

    // Openers send the requests and read each answer's head; the monitor
    // watches every stalled socket for the node's reset, and the node's
    // memory meanwhile.
    let (opened, stalled) = mpsc::channel::<Stalled>();
    let openers: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(n, session)| {
            let opened = opened.clone();
            std::thread::spawn(move || {
                let message = "x".repeat(ANSWER_BYTES);
                for i in (n..STALLED).step_by(OPENERS) {
                    let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"message": message}}});
                    let mut socket = st::client(addr, st::SMALL_RECEIVE_BUFFER);
                    st::open_sse(&mut socket, &st::post(addr, &session, &body));
                    let opened_at = Instant::now();
                    let _ = opened.send(Stalled {
                        socket,
                        opened: opened_at,
                    });
                }
            })
        })
        .collect();
    drop(opened);
    let monitor = tokio::task::spawn_blocking(move || {
        let mut open: Vec<Stalled> = Vec::new();
        let mut closes = Vec::new();
        let mut received = 0;
        let mut peak_rss = 0;
        let mut peak_open = 0;
        let mut last_open = Instant::now();
        loop {
            while let Ok(one) = stalled.try_recv() {
                received += 1;
                last_open = one.opened;
                open.push(one);
            }
            open.retain(|one| {
                if st::was_reset(&one.socket) {
                    closes.push(one.opened.elapsed());
                    false
                } else {
                    true
                }
            });
            peak_open = peak_open.max(open.len());
            peak_rss = peak_rss.max(rss_bytes(pid).unwrap_or(0));
            let all_opened = received == STALLED;
            if all_opened && open.is_empty() {
                break;
            }
            if last_open.elapsed() > CLOSE_BOUND
                && open.iter().any(|one| one.opened.elapsed() > CLOSE_BOUND)
            {
                break; // some were never closed: the assertions say so
            }
            std::thread::sleep(LOOK);
        }
        (received, open.len(), closes, peak_rss, peak_open)
    });
    for opener in openers {
        opener.join().expect("an opener failed");
    }
    let (received, never_closed, mut closes, peak_rss, peak_open) = monitor.await.unwrap();
    assert!(!closes.is_empty(), "no stalled stream was reset");
    closes.sort();
    let ms = |d: Duration| d.as_millis();
    eprintln!(
        "{received} stalled streams of {ANSWER_BYTES} bytes: {} reset, {never_closed} not; \
         head to reset: min {} ms, median {} ms, max {} ms (timeout {TIMEOUT_SECS} s); \
         at most {peak_open} stalled at once; node RSS {} MiB before, peak {} MiB",
        closes.len(),
        ms(closes[0]),
        ms(closes[closes.len() / 2]),
        ms(closes[closes.len() - 1]),
        before / MIB,
        peak_rss / MIB,
    );
    assert_eq!(received, STALLED);
    assert_eq!(never_closed, 0, "every stalled stream is reset");
    assert!(closes[closes.len() - 1] <= CLOSE_BOUND, "{closes:?}");
    // Nothing is reset well before its bytes have waited the timeout (they
    // start waiting as the head leaves, a moment before it is read).
    assert!(
        closes[0] >= Duration::from_secs(TIMEOUT_SECS) * 3 / 4,
        "{closes:?}"
    );
    let bound = before + STALLED as u64 * PER_STALLED_STREAM + BESIDES;
    assert!(
        peak_rss <= bound,
        "node RSS peaked at {peak_rss} bytes, above {bound}"
    );

    // Counted once each, and nothing is left of them.
    assert_eq!(metric(&base, stalls).await, STALLED as f64);
    assert_eq!(
        metric(&base, "mcp_sse_streams_open{kind=\"request\"}").await,
        0.0
    );
    let connections = metric(&base, "mcp_connections_open").await;
    assert!(connections < 32.0, "{connections} connections still open");

    // A new client is served at once.
    let fresh = hostile_support::session(&url, st::VERSION).await;
    let (answer, _) = within("ping", fresh.request("ping", json!({})))
        .await
        .unwrap();
    assert_eq!(answer["result"], json!({}), "{answer}");
    let (answer, _) = within(
        "tools/call",
        fresh.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "still here"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"], "Echo: still here",
        "{answer}"
    );

    resumed_whole_after_its_reset(&url, addr).await;
    assert_eq!(metric(&base, stalls).await, STALLED as f64 + 1.0);
    eprintln!("node RSS at the end: {} MiB", node.rss_bytes() / MIB);
}

/// A session-era stream whose client stops reading after its priming
/// event is reset; resuming from that event gives every progress
/// notification of the run, in order, and then the response.
async fn resumed_whole_after_its_reset(url: &str, addr: std::net::SocketAddr) {
    let mut client = Client::new(url, st::VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let session = client.session_id().unwrap().to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "long_running_operation",
            "arguments": {"duration_ms": RUN_MS, "steps": STEPS},
            "_meta": {"progressToken": "stalled"}}});
    let (socket, priming) = tokio::task::spawn_blocking(move || {
        let mut socket = st::client(addr, st::SMALL_RECEIVE_BUFFER);
        let mut read = st::open_sse(&mut socket, &st::post(addr, &session, &body));
        if st::find(&read, b"data: \n\n").is_none() {
            read.extend(st::read_until(&mut socket, b"data: \n\n"));
        }
        let text = String::from_utf8_lossy(&read).into_owned();
        let id = text
            .split("id: ")
            .nth(1)
            .and_then(|rest| rest.split('\n').next())
            .expect("a priming event id")
            .to_owned();
        (socket, id)
    })
    .await
    .unwrap();
    // It reads nothing more: reset once its bytes have waited the timeout.
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + CLOSE_BOUND + Duration::from_millis(RUN_MS);
        while !st::was_reset(&socket) {
            assert!(
                Instant::now() < deadline,
                "the stalled stream was not reset"
            );
            std::thread::sleep(LOOK);
        }
    })
    .await
    .unwrap();

    let Reply::Sse(mut stream) = within("GET with Last-Event-ID", client.get(Some(&priming)))
        .await
        .unwrap()
    else {
        panic!("the resumption is not an SSE stream");
    };
    let mut progress = Vec::new();
    let mut response = None;
    let run = Duration::from_millis(RUN_MS) + GUARD;
    tokio::time::timeout(run, async {
        while let Some(message) = stream.next_message().await.unwrap() {
            if message["method"] == "notifications/progress" {
                progress.push(message["params"]["progress"].as_f64().unwrap() as u64);
            } else if message["id"] == 7 {
                response = Some(message);
            }
        }
    })
    .await
    .expect("the resumed stream ends with the response");
    assert_eq!(
        progress,
        (1..=STEPS).collect::<Vec<_>>(),
        "every progress notification once, in order"
    );
    let response = response.expect("the response");
    assert!(
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Long running operation completed"),
        "{response}"
    );
}
