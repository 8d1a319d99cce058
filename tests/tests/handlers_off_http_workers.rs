//! A provider's handler cannot stall anyone else: handlers run on the
//! node's request executor, never on the HTTP workers, in both eras.
//!
//! The provider program is `crates/mcp-cluster/examples/slow_tools.rs`,
//! started with one HTTP worker (the smallest setting) and the executor's
//! default size. Before the executor, every handler ran on the HTTP worker
//! that accepted its request: one tool blocking its thread for 2 s held
//! every connection and session of that worker for 2 s.
//!
//! Three loads, one after the other: four calls at once of a tool declared
//! blocking that sleeps 2 s; a call of an undeclared tool that blocks its
//! thread 2 s; a call of an undeclared tool that spins a CPU 2 s.
//! Throughout each, `echo` on 16 other sessions (each in a loop) keeps its
//! p99 under 50 ms, a new `initialize` is answered, and a standalone GET
//! stream keeps its keep-alive comments (one a second); then the same for
//! 2026-07-28 requests (`echo` and `server/discover` without a session).
//! Each slow call must still answer as it should after its 2 s.

#[path = "stateless_support/mod.rs"]
mod stateless;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::StreamExt;
use mcp_cluster_client::Client;
use mcp_cluster_testkit::{NodeProcess, example_binary, within};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const VERSION: &str = "2025-11-25";
/// Sessions calling `echo` throughout.
const OTHERS: usize = 16;
/// Pause between two `echo` calls of one session: a busy but not
/// saturating load on a 2-core machine running a debug build.
const THINK: Duration = Duration::from_millis(20);
/// The slow calls' duration.
const SLOW_MS: u64 = 2000;
/// The bound on `echo`'s p99 while a slow call runs.
const P99_BOUND: Duration = Duration::from_millis(50);
/// The keep-alive interval of the test node, and the longest gap allowed
/// between two keep-alive comments.
const KEEP_ALIVE_SECS: u64 = 1;
const KEEP_ALIVE_GAP: Duration = Duration::from_millis(1800);

fn start() -> NodeProcess {
    NodeProcess::spawn_logged(
        &example_binary("slow_tools"),
        &["--workers", "1", "--log", "warn"],
        &[("MCP_RUNTIME__SSE_KEEP_ALIVE_SECS", "1")],
    )
    .unwrap_or_else(|err| panic!("slow_tools: {err:#}"))
}

async fn session(url: &str) -> Client {
    let mut client = Client::new(url, VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    client
}

fn text(result: &Value) -> &str {
    result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {result}"))
}

/// `echo` latencies of the other sessions while the flag is up.
#[derive(Default)]
struct Recorder {
    running: AtomicBool,
    /// The loops end.
    stopped: AtomicBool,
    latencies: Mutex<Vec<Duration>>,
}

impl Recorder {
    async fn take(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.latencies.lock().await)
    }
}

fn p99(mut latencies: Vec<Duration>) -> (Duration, Duration, usize) {
    assert!(!latencies.is_empty(), "no echo answered during the load");
    latencies.sort();
    let n = latencies.len();
    (latencies[(n * 99).div_ceil(100) - 1], latencies[n - 1], n)
}

/// Keep-alive comments of a standalone GET stream, with their arrival
/// times.
async fn watch_keep_alives(client: &Client, url: &str, seen: Arc<Mutex<Vec<Instant>>>) {
    let res = reqwest::Client::new()
        .get(url)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", client.session_id().unwrap())
        .header("MCP-Protocol-Version", VERSION)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.bytes_stream();
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = body.next().await {
            if String::from_utf8_lossy(&chunk).contains("keep-alive") {
                seen.lock().await.push(Instant::now());
            }
        }
    });
}

fn longest_gap(times: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut points: Vec<Instant> = vec![from];
    points.extend(times.iter().copied().filter(|t| *t > from && *t < to));
    points.push(to);
    points
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// The era the other clients speak.
#[derive(Clone, Copy, Debug)]
enum Era {
    Session,
    Stateless,
}

/// Starts `OTHERS` loops calling `echo` (sessions, or stateless requests),
/// recording latencies while `recorder.running` is up.
async fn start_echo_loops(url: &str, era: Era, recorder: &Arc<Recorder>) {
    for i in 0..OTHERS {
        let recorder = Arc::clone(recorder);
        let url = url.to_owned();
        let client = match era {
            Era::Session => Some(session(&url).await),
            Era::Stateless => None,
        };
        // One HTTP client per loop, its connection kept alive, as a real
        // client does (a new client per call would measure its own setup).
        let http = reqwest::Client::new();
        tokio::spawn(async move {
            let mut n: u64 = 0;
            while !recorder.stopped.load(Ordering::Acquire) {
                n += 1;
                let message = format!("{i}-{n}");
                let started = Instant::now();
                let answered = match &client {
                    Some(client) => {
                        let (result, _) = client
                            .request(
                                "tools/call",
                                json!({"name": "echo", "arguments": {"message": message}}),
                            )
                            .await
                            .unwrap();
                        text(&result).to_owned()
                    }
                    None => {
                        let body = stateless::tool_call(
                            n,
                            "echo",
                            json!({"message": message}),
                            json!({}),
                            json!({}),
                        );
                        text(&stateless_post(&http, &url, &body).await).to_owned()
                    }
                };
                let took = started.elapsed();
                assert_eq!(answered, message, "echo answered another message");
                if recorder.running.load(Ordering::Acquire) {
                    recorder.latencies.lock().await.push(took);
                }
                tokio::time::sleep(THINK).await;
            }
        });
    }
}

/// A 2026-07-28 request on `http`'s kept-alive connection; its JSON
/// answer (`echo` emits nothing before its result).
async fn stateless_post(http: &reqwest::Client, url: &str, body: &Value) -> Value {
    let mut request = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    for (name, value) in stateless::headers(body) {
        request = request.header(name, value);
    }
    let res = request.body(body.to_string()).send().await.unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// One load: `calls` calls of `tool` at once, each for `SLOW_MS`; checks
/// the others while they run, then their answers.
async fn load(
    url: &str,
    era: Era,
    tool: &str,
    calls: usize,
    answer: &str,
    recorder: &Arc<Recorder>,
    keep_alives: &Arc<Mutex<Vec<Instant>>>,
) {
    let slow = session(url).await;
    let slow = Arc::new(slow);
    recorder.take().await;
    recorder.running.store(true, Ordering::Release);
    let began = Instant::now();
    let mut running = Vec::new();
    for _ in 0..calls {
        let slow = Arc::clone(&slow);
        let tool = tool.to_owned();
        running.push(tokio::spawn(async move {
            let started = Instant::now();
            let (result, _) = slow
                .request(
                    "tools/call",
                    json!({"name": tool, "arguments": {"ms": SLOW_MS}}),
                )
                .await
                .unwrap();
            (text(&result).to_owned(), started.elapsed())
        }));
    }
    // While they run: a newcomer is served at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newcomer = Instant::now();
    match era {
        Era::Session => {
            session(url).await;
        }
        Era::Stateless => {
            let body = stateless::request(1, "server/discover", json!({}), json!({}));
            let answer = stateless::call(url, &body, &[]).await;
            assert!(
                answer.response["result"]["supportedVersions"].is_array(),
                "server/discover: {}",
                answer.response
            );
        }
    }
    let newcomer = newcomer.elapsed();
    for call in running {
        let (text, took) = within("the slow call", call).await.unwrap();
        assert_eq!(text, answer, "{tool} answered otherwise");
        assert!(
            took >= Duration::from_millis(SLOW_MS),
            "{tool} answered after {took:?}: it did not run its {SLOW_MS} ms"
        );
    }
    let ended = Instant::now();
    recorder.running.store(false, Ordering::Release);
    let (p99, max, n) = p99(recorder.take().await);
    let gap = longest_gap(&keep_alives.lock().await, began, ended);
    eprintln!(
        "{era:?} era, {calls} x {tool}: echo p99 {p99:?} (max {max:?}, {n} calls), \
         newcomer answered in {newcomer:?}, longest keep-alive gap {gap:?}"
    );
    assert!(
        p99 < P99_BOUND,
        "{era:?} era, {tool}: echo p99 {p99:?} (max {max:?}, {n} calls) while it ran"
    );
    assert!(
        newcomer < Duration::from_secs(1),
        "{era:?} era, {tool}: a newcomer waited {newcomer:?}"
    );
    assert!(
        gap < KEEP_ALIVE_GAP,
        "{era:?} era, {tool}: no keep-alive for {gap:?} (every {KEEP_ALIVE_SECS} s expected)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handlers_delay_no_one_else_in_either_era() {
    let node = start();
    let url = node.url().to_owned();
    let watcher = session(&url).await;
    let keep_alives = Arc::new(Mutex::new(Vec::new()));
    watch_keep_alives(&watcher, &url, Arc::clone(&keep_alives)).await;
    for era in [Era::Session, Era::Stateless] {
        let recorder = Arc::new(Recorder::default());
        start_echo_loops(&url, era, &recorder).await;
        let loads: [(&str, usize, &str); 3] = [
            ("sleep_blocking", 4, "slept 2000 ms"),
            ("block_thread", 1, "blocked 2000 ms"),
            ("spin", 1, "spun 2000 ms"),
        ];
        for (tool, calls, answer) in loads {
            load(&url, era, tool, calls, answer, &recorder, &keep_alives).await;
        }
        // The loops of this era end; the next era's start.
        recorder.stopped.store(true, Ordering::Release);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_limit_refuses_the_call_beyond_it_and_stops_one_past_its_time() {
    let node = start();
    let url = node.url().to_owned();
    let client = Arc::new(session(&url).await);
    let first = {
        let client = Arc::clone(&client);
        tokio::spawn(async move {
            client
                .request(
                    "tools/call",
                    json!({"name": "limited", "arguments": {"ms": 600}}),
                )
                .await
                .unwrap()
                .0
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (second, _) = within(
        "the second call",
        client.request(
            "tools/call",
            json!({"name": "limited", "arguments": {"ms": 10}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(second["error"]["code"], -32603, "{second}");
    assert_eq!(
        second["error"]["message"],
        "tool limited is busy: 1 calls already running"
    );
    let first = within("the first call", first).await.unwrap();
    assert_eq!(text(&first), "waited 600 ms");

    let started = Instant::now();
    let (stopped, _) = within(
        "a call past the limit",
        client.request(
            "tools/call",
            json!({"name": "limited", "arguments": {"ms": 5000}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(stopped["error"]["code"], -32603, "{stopped}");
    assert_eq!(
        stopped["error"]["message"],
        "tool limited stopped: it ran longer than its time limit of 1s"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // Its place is free again.
    let (again, _) = client
        .request(
            "tools/call",
            json!({"name": "limited", "arguments": {"ms": 10}}),
        )
        .await
        .unwrap();
    assert_eq!(text(&again), "waited 10 ms");
}
