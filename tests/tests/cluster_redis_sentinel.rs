//! Nodes behind Redis Sentinels (`redis+sentinel://`) find the primary
//! through them and follow a failover without a restart: real processes on
//! loopback, a primary, a replica and three Sentinels. The primary is
//! killed (SIGKILL); the Sentinels promote the replica.
//!
//! - One node, one session calling through the failover: it goes on, and
//!   the calls that failed meanwhile failed cleanly (503 with a JSON-RPC
//!   error).
//! - Three nodes behind nginx under load riding the failover: a fault of
//!   the chaos runner (`tests/tests/chaos.rs`).
//! - What asynchronous replication loses when no replica takes the writes
//!   (the first write waits `replica_ack_timeout_ms` for one, the next ones
//!   go unwaited): events the primary acknowledged while the replica was not
//!   receiving are gone after the failover, and a resumption from one of
//!   them is refused with 400 rather than answered with other events; a
//!   stream read live through the failover ends with the call's error
//!   saying its events were lost. (With the replica there, what is waited
//!   for is not lost: `tests/tests/redis_replica_wait.rs`.)

mod cluster_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{NodeProcess, RedisServer, Sentinel, metric, node_binary, within};
use reqwest::StatusCode;
use serde_json::{Value, json};

const MASTER: &str = "mcp-primary";

/// Longest wait for the Sentinels to promote the replica and the node to
/// follow: down after 1 s, then an election and the promotion.
const FAILOVER: Duration = Duration::from_secs(30);

/// A primary, its replica, and three Sentinels watching it (quorum 2).
struct Sentinels {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
}

impl Sentinels {
    fn start() -> Self {
        let primary = RedisServer::start().unwrap();
        let replica = RedisServer::start_replica_of(&primary).unwrap();
        primary.wait_replicated(1).unwrap();
        let sentinels = (0..3)
            .map(|_| Sentinel::start(&primary, MASTER, 2).unwrap())
            .collect();
        Self {
            primary,
            replica,
            sentinels,
        }
    }

    /// The nodes' `--redis-url`.
    fn url(&self) -> String {
        let hosts = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect::<Vec<_>>()
            .join(",");
        format!("redis+sentinel://{hosts}/{MASTER}")
    }

    /// Freezes the replica and has the primary cut its replication
    /// connection: nothing written from now on reaches it.
    fn cut_off_replica(&self) {
        self.replica.pause().unwrap();
        let cut = self
            .primary
            .command(&["CLIENT", "KILL", "TYPE", "replica"])
            .unwrap();
        assert_eq!(cut, "1", "the replica's connection");
    }

    /// Whether every Sentinel names the replica as the primary.
    fn replica_promoted(&self) -> bool {
        self.sentinels
            .iter()
            .all(|s| s.primary_port(MASTER).ok() == Some(self.replica.port()))
    }
}

/// The text of an `echo` answer, or why there is none.
fn echoed(reply: Reply) -> Result<String, String> {
    match reply {
        Reply::Json(body, _) => body["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no text: {body}")),
        Reply::Status(StatusCode::SERVICE_UNAVAILABLE, body, _) => {
            let body: Value = serde_json::from_str(&body)
                .unwrap_or_else(|err| panic!("a 503 without a JSON-RPC body ({err}): {body}"));
            assert!(body["error"]["code"].is_i64(), "{body}");
            Err(format!("503: {}", body["error"]["message"]))
        }
        other => panic!("neither an answer nor a clean 503: {other:?}"),
    }
}

/// `echo` of `message` as request `id` in `client`'s session: its text, or
/// why there is none (a clean 503).
async fn echo(client: &Client, id: i64, message: &str) -> Result<String, String> {
    let reply = within(
        "echo",
        client.post(&call(id, "echo", json!({"message": message}))),
    )
    .await
    .unwrap();
    echoed(reply)
}

#[tokio::test]
async fn a_node_behind_sentinels_follows_a_failover_and_its_sessions_go_on() {
    let redis = Sentinels::start();
    let url = redis.url();
    let node = NodeProcess::spawn(&node_binary(), &["--redis-url", &url, "--log", "warn"]).unwrap();

    let client = session(node.url(), json!({})).await;
    assert_eq!(echo(&client, 1, "a").await.unwrap(), "Echo: a");
    // What the session wrote is on the replica before the primary dies:
    // this test is about following the failover, not about what an
    // asynchronous replica may miss.
    redis.primary.wait_replicated(1).unwrap();

    redis.primary.kill();

    // Calls go on being made through the failover; each either answers or
    // fails cleanly, until one answers after the replica took over.
    let mut failed = 0;
    let mut id = 2;
    let started = tokio::time::Instant::now();
    let recovered = loop {
        assert!(
            started.elapsed() < FAILOVER,
            "the node did not follow the failover within {FAILOVER:?} ({failed} calls failed)"
        );
        match echo(&client, id, &id.to_string()).await {
            Ok(text) if redis.replica_promoted() => {
                assert_eq!(text, format!("Echo: {id}"));
                break id;
            }
            Ok(_) => {}
            Err(_) => failed += 1,
        }
        id += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // At 10 calls a second, the calls that failed span the window between
    // the primary's death and the node's move: at most the failover's
    // length.
    assert!(
        failed < 300,
        "{failed} calls failed before call {recovered} answered"
    );
    // The replica is the primary now, for every Sentinel (the others learn
    // it from the one that led the failover).
    assert!(redis.replica_promoted());

    // Every call after that answers, a new session opens, the node is
    // ready, and it says it followed a failover.
    for n in 0..20 {
        let text = echo(&client, 1000 + n, &n.to_string()).await.unwrap();
        assert_eq!(text, format!("Echo: {n}"));
    }
    let fresh = session(node.url(), json!({})).await;
    assert_eq!(echo(&fresh, 1, "new").await.unwrap(), "Echo: new");
    within("ready again", async {
        loop {
            let status = reqwest::get(format!("http://{}/readyz", node.addr()))
                .await
                .map(|r| r.status().as_u16())
                .ok();
            if status == Some(200) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let base = format!("http://{}", node.addr());
    let failovers = metric(
        &base,
        "mcp_redis_reconnects_total{connection=\"failover\"} ",
    )
    .await;
    assert!(failovers >= 1.0, "{failovers}");
    assert_eq!(metric(&base, "mcp_redis_primary_known ").await, 1.0);
}

#[tokio::test]
async fn what_the_replica_never_received_is_lost_and_resuming_past_it_is_refused() {
    let redis = Sentinels::start();
    let node = NodeProcess::spawn(
        &node_binary(),
        &["--redis-url", &redis.url(), "--log", "warn"],
    )
    .unwrap();
    let client = session(node.url(), json!({})).await;
    redis.primary.wait_replicated(1).unwrap();

    // The replica stops receiving (frozen, and its replication connection
    // cut by the primary, so nothing written from now on reaches it); the
    // primary goes on acknowledging. A call's events (its progress and its
    // answer) go to the primary only.
    redis.cut_off_replica();
    let reply = within(
        "a call while the replica hangs",
        client.post(&long_running(2, 300, 3, "lost")),
    )
    .await
    .unwrap();
    let Reply::Sse(mut stream) = reply else {
        panic!("expected an SSE answer: {reply:?}");
    };
    let mut messages = 0;
    while within("read the call", stream.next_message())
        .await
        .unwrap()
        .is_some()
    {
        messages += 1;
    }
    assert_eq!(messages, 4, "3 progress notifications and the answer");
    let last = stream.last_event_id.clone().expect("events carry ids");

    // The primary crashes before the replica got them; the replica is
    // promoted with what it had.
    redis.primary.kill();
    redis.replica.resume().unwrap();
    let started = tokio::time::Instant::now();
    while !redis.replica_promoted() {
        assert!(
            started.elapsed() < FAILOVER,
            "no promotion within {FAILOVER:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The session was replicated before the replica hung: it goes on once
    // the node follows.
    let mut id = 10;
    loop {
        assert!(started.elapsed() < FAILOVER, "the session did not go on");
        if echo(&client, id, "on").await.is_ok() {
            break;
        }
        id += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The call's events never reached the new primary: resuming after the
    // last one the client saw is refused, not answered with other events
    // (a 503 meanwhile: the node's pub/sub connection may still be coming
    // back to the new primary).
    loop {
        assert!(
            started.elapsed() < FAILOVER,
            "the resumption never got an answer"
        );
        match within("resume from a lost event", client.get(Some(&last)))
            .await
            .unwrap()
        {
            Reply::Status(StatusCode::BAD_REQUEST, body, _) => {
                assert!(body.contains("unknown Last-Event-ID"), "{body}");
                break;
            }
            Reply::Status(StatusCode::SERVICE_UNAVAILABLE, _, _) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("resuming from a lost event: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_stream_open_through_a_failover_that_lost_its_events_ends_with_an_error() {
    let redis = Sentinels::start();
    let node = NodeProcess::spawn(
        &node_binary(),
        &["--redis-url", &redis.url(), "--log", "warn"],
    )
    .unwrap();
    let client = session(node.url(), json!({})).await;

    // A call with a progress step every second; its first step reaches the
    // replica.
    let reply = within(
        "a long call",
        client.post(&long_running(2, 20_000, 20, "through")),
    )
    .await
    .unwrap();
    let mut stream = expect_sse(reply);
    priming(&mut stream).await;
    let mut progress = vec![progress_of(&message(
        &next_event(&mut stream).await.expect("progress"),
    ))];
    redis.primary.wait_replicated(1).unwrap();

    // Then the replica stops receiving (well before the next step); the
    // primary goes on acknowledging the next steps, which the client reads,
    // and dies.
    redis.cut_off_replica();
    while progress.len() < 3 {
        let event = next_event(&mut stream).await.expect("progress");
        progress.push(progress_of(&message(&event)));
    }
    redis.primary.kill();
    redis.replica.resume().unwrap();
    within("the promotion", async {
        while !redis.replica_promoted() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // The same connection goes on, and ends: not in silence, and not with
    // a `retry` that would lead the client to resume from an event the
    // store no longer has, but with an error for the call saying its
    // events were lost. Nothing after a gap before that.
    let mut rest = Vec::new();
    let ending = tokio::time::timeout(FAILOVER, async {
        while let Some(event) = stream.next_event().await.unwrap() {
            if event.has_data && !event.data.is_empty() {
                rest.push(message(&event));
            }
        }
    })
    .await;
    assert!(ending.is_ok(), "the stream did not end: {rest:?}");
    assert_eq!(rest.len(), 1, "only the error after {progress:?}: {rest:?}");
    assert_eq!(rest[0]["id"], 2, "{rest:?}");
    let error = rest[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        rest[0]["error"]["code"] == -32603 && error.contains("no longer in the store"),
        "the call's answer says its events were lost: {rest:?}"
    );
}
