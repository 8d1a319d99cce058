//! What a node keeps for a client is charged to the client (its principal,
//! else its address), not to a session it opened: one client, or five,
//! cannot push out another client's unread answers or finished task
//! results while that client is within its floor (4 MiB), and the bytes a
//! client's running requests may hold is its share (8 MiB) however many
//! connections it drops.
//!
//! Before (96b2635), the share of closed streams was per session: five
//! sessions of one address reading 20 answers of 3.5 MB evicted another
//! address's unread answer (its `Last-Event-ID` then got 400 "unknown
//! Last-Event-ID"), five addresses evicted another's finished task
//! ("unknown task"), and 32 calls of 3.5 MB from one session, their
//! connections dropped at once, grew the node by over 200 MiB and Redis by
//! over 100 MB, in no budget.

mod address_support;
mod hostile_support;
mod stateless_support;

use std::time::Duration;

use address_support::client_from;
use futures_util::StreamExt;
use hostile_support::{MIB, VERSION};
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{NodeProcess, RedisServer, node_binary, within};
use serde_json::{Value, json};
use stateless_support as sl;

/// Bytes of each large message: about what the attacks of the issue sent.
const LARGE: usize = 3_500_000;

/// The victim's address; the attackers' are 127.0.0.10 and up.
const VICTIM: &str = "127.0.0.2";

/// One flood at a time: each measures its own node.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The store a node runs on.
#[derive(Clone, Copy, Debug)]
enum Backing {
    Embedded,
    Redis,
}

/// A node on `backing` with `args` (blocking: call it before the first
/// await), and its Redis if any. On Redis, commands may take 10 s: a debug
/// build writing several 3.5 MB events at once on a busy 2-core machine
/// may hold a small write past the default second, and these tests
/// measure bytes, not latency.
fn node(backing: Backing, args: &[&str]) -> (Option<RedisServer>, NodeProcess) {
    let mut all = vec!["--log", "warn"];
    all.extend_from_slice(args);
    let redis = match backing {
        Backing::Embedded => None,
        Backing::Redis => Some(RedisServer::start().unwrap()),
    };
    let config;
    if let Some(redis) = &redis {
        let path = std::env::temp_dir().join(format!(
            "mcp-retained-owners-{}-{}.toml",
            std::process::id(),
            redis.port()
        ));
        std::fs::write(
            &path,
            format!(
                "[redis]\nurl = \"{}\"\ncommand_timeout_ms = 10000\n",
                redis.url()
            ),
        )
        .unwrap();
        config = path.to_str().unwrap().to_owned();
        all.extend(["--config", config.as_str()]);
    }
    let node = NodeProcess::spawn(&node_binary(), &all).unwrap_or_else(|err| panic!("{err:#}"));
    (redis, node)
}

/// The address of attacker `i`.
fn attacker(i: usize) -> String {
    format!("127.0.0.{}", 10 + i)
}

fn base(url: &str) -> String {
    url.trim_end_matches("/mcp").to_owned()
}

/// A new session of a client at `ip`.
async fn session(url: &str, ip: &str, capabilities: Value) -> Client {
    let mut client = Client::with_http(client_from(ip), url, VERSION);
    within("initialize", client.initialize(capabilities))
        .await
        .unwrap();
    client
}

/// Calls `echo` with `message` on a node that answers on a stream; waits
/// and tries again while the node refuses for its budgets (429, 503).
/// Returns the stream's first event id and the echoed text.
async fn echo(client: &Client, message: &str) -> (String, String) {
    let body = json!({"jsonrpc": "2.0", "id": client.next_id(), "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": message}}});
    for _ in 0..60 {
        match within("echo", client.post(&body)).await.unwrap() {
            Reply::Sse(mut stream) => {
                let mut first = None;
                while let Some(event) = within("an event", stream.next_event()).await.unwrap() {
                    if first.is_none() {
                        first.clone_from(&event.id);
                    }
                    let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                        continue;
                    };
                    if message.get("id") == body.get("id") {
                        let text = message["result"]["content"][0]["text"]
                            .as_str()
                            .unwrap_or_else(|| panic!("no text in {}", short(&message)))
                            .to_owned();
                        return (first.expect("the stream's events have ids"), text);
                    }
                }
                panic!("the stream ended before the answer");
            }
            Reply::Status(status, _, _) if status == 429 || status == 503 => {
                // Retry-After is 1 s for both refusals.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => panic!("unexpected answer to echo: {other:?}"),
        }
    }
    panic!("echo refused for a minute");
}

/// A message (or its start) for a failure text.
fn short(value: &Value) -> String {
    value.to_string().chars().take(300).collect()
}

/// `answers` echo calls of `LARGE` bytes from each address of `ips`,
/// spread over `sessions` sessions per address, every answer read.
async fn flood(url: &str, ips: &[String], sessions: usize, answers: usize) {
    let message = "a".repeat(LARGE);
    let per_session = answers.div_ceil(sessions);
    let clients = futures_util::future::join_all(
        ips.iter()
            .flat_map(|ip| (0..sessions).map(move |_| ip))
            .map(|ip| session(url, ip, json!({}))),
    )
    .await;
    futures_util::future::join_all(clients.iter().map(|client| {
        let message = &message;
        async move {
            for _ in 0..per_session {
                let (_, text) = echo(client, message).await;
                assert_eq!(text.len(), "Echo: ".len() + LARGE);
            }
        }
    }))
    .await;
}

/// The victim resumes its answer's stream from its first event: the whole
/// answer comes back.
async fn assert_victim_resumes(victim: &Client, first: &str, what: &str) {
    let reply = within("resume", victim.get(Some(first))).await.unwrap();
    let Reply::Sse(mut stream) = reply else {
        panic!("{what}: the victim's Last-Event-ID was refused: {reply:?}");
    };
    while let Some(message) = within("a resumed event", stream.next_message())
        .await
        .unwrap()
    {
        if let Some(text) = message["result"]["content"][0]["text"].as_str() {
            assert_eq!(text.len(), "Echo: ".len() + LARGE, "{what}");
            return;
        }
    }
    panic!("{what}: the resumed stream ended without the answer");
}

/// The victim's unread answer survives a flood from one address (five
/// sessions, 20 answers) and from five addresses (six answers each), and
/// the node dropped the attackers' own.
async fn unread_answers_survive_floods(backing: Backing) {
    let _serial = SERIAL.lock().await;
    let (_redis, node) = node(backing, &["--response-mode", "sse"]);
    let url = node.url().to_owned();
    let victim = session(&url, VICTIM, json!({})).await;
    let (first, text) = echo(&victim, &"v".repeat(LARGE)).await;
    assert_eq!(text.len(), "Echo: ".len() + LARGE);

    flood(&url, &[attacker(0)], 5, 20).await;
    assert_victim_resumes(&victim, &first, "one address, five sessions").await;

    let five: Vec<String> = (1..=5).map(attacker).collect();
    flood(&url, &five, 2, 6).await;
    assert_victim_resumes(&victim, &first, "five addresses").await;

    let dropped = sl::metric(
        &base(&url),
        "mcp_retention_evictions_total{kind=\"stream\"}",
    )
    .await;
    assert!(dropped > 0.0, "the attackers' own answers were dropped");
    let held = sl::metric(&base(&url), "mcp_retained_bytes{kind=\"closed_streams\"}").await;
    assert!(held <= 64.0 * MIB as f64 + 2.0 * LARGE as f64, "{held}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_evicts_another_clients_unread_answer() {
    unread_answers_survive_floods(Backing::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_evicts_another_clients_unread_answer_on_redis() {
    unread_answers_survive_floods(Backing::Redis).await;
}

/// Creates a task of `slow_compute` labelled with `LARGE` bytes from `http`
/// and waits for it to complete; returns its id.
async fn finished_task(http: &reqwest::Client, url: &str, id: u64) -> String {
    let label = "t".repeat(LARGE);
    let body = sl::tool_call(
        id,
        "slow_compute",
        json!({"seconds": 0, "label": label}),
        json!({}),
        sl::task_caps(),
    );
    let mut created = None;
    for _ in 0..60 {
        let answer = sl::call_with(http, url, &body, &[]).await;
        if answer.status == 429 || answer.status == 503 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        created = Some(answer);
        break;
    }
    let created = created.expect("a task created within a minute");
    let task = created.response["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {}", short(&created.response)))
        .to_owned();
    let view = sl::poll_task(url, &task, |r| r["status"] != "working").await;
    assert_eq!(view["result"]["status"], "completed", "{}", short(&view));
    task
}

/// The victim's finished task survives five addresses finishing six large
/// tasks each.
async fn finished_tasks_survive_five_clients(backing: Backing) {
    let _serial = SERIAL.lock().await;
    let (_redis, node) = node(backing, &[]);
    let url = node.url().to_owned();
    let victim = finished_task(&client_from(VICTIM), &url, 1).await;

    futures_util::stream::iter(1..=5)
        .for_each_concurrent(5, |i| {
            let (http, url) = (client_from(&attacker(i)), url.clone());
            async move {
                for n in 0..6 {
                    finished_task(&http, &url, 100 * i as u64 + n).await;
                }
            }
        })
        .await;

    let view = sl::poll_task(&url, &victim, |r| r["status"] == "completed").await;
    let text = view["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("the victim's task is gone: {}", short(&view)));
    assert!(text.len() > LARGE, "the victim's whole result");
    let dropped = sl::metric(&base(&url), "mcp_retention_evictions_total{kind=\"task\"}").await;
    assert!(dropped > 0.0, "the attackers' own tasks were dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_evicts_another_clients_finished_task() {
    finished_tasks_survive_five_clients(Backing::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_evicts_another_clients_finished_task_on_redis() {
    finished_tasks_survive_five_clients(Backing::Redis).await;
}

/// How far the node's memory may grow under the drop: its running
/// requests' share (8 MiB) held in a few copies (body, parsed parameters,
/// the question on the stream), and the allocator's slack.
const NODE_GROWTH: u64 = 64 * MIB;

/// How far Redis may grow: the events of the admitted requests' streams,
/// within the client's share (8 MiB), and Redis's own overhead.
const REDIS_GROWTH: u64 = 24 * MIB;

/// 32 calls of `test_elicitation` with a 3.5 MB question, sent at once
/// from one session, each connection dropped once its stream has the
/// question (the handlers wait 300 s for answers): at most the client's
/// share runs, the rest get 429 with `Retry-After` naming the quota, and
/// the node and Redis grow by that share, not by every call.
async fn dropped_connections_hold_a_share(backing: Backing) {
    let _serial = SERIAL.lock().await;
    let (redis, node) = node(backing, &[]);
    let url = node.url().to_owned();
    let client = session(&url, VICTIM, json!({"elicitation": {}})).await;
    // Warm up what every call allocates once, a large call included (its
    // transient copies are the allocator's to reuse, not growth), from
    // another address.
    hostile_support::assert_serving(&url).await;
    let warm = session(&url, "127.0.0.4", json!({})).await;
    for _ in 0..2 {
        hostile_support::call(
            &warm,
            &hostile_support::request(
                1,
                "tools/call",
                json!({"name": "echo", "arguments": {"message": "w".repeat(LARGE)}}),
            ),
        )
        .await;
    }
    let used = |redis: &RedisServer| {
        let info = redis.command(&["INFO", "memory"]).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap()
    };
    let redis_before = redis.as_ref().map(used);
    let before = node.rss_bytes();

    let session_id = client.session_id().unwrap().to_owned();
    let http = client_from(VICTIM);
    let message = "q".repeat(LARGE);
    let outcomes = futures_util::stream::iter(0..32)
        .map(|i| {
            let (http, url, session_id, message) =
                (http.clone(), url.clone(), session_id.clone(), &message);
            async move {
                let body = json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call",
                    "params": {"name": "test_elicitation", "arguments": {"message": message}}});
                let response = within(
                    "POST",
                    http.post(&url)
                        .header("Content-Type", "application/json")
                        .header("Accept", "application/json, text/event-stream")
                        .header("Mcp-Session-Id", &session_id)
                        .header("MCP-Protocol-Version", VERSION)
                        .body(body.to_string())
                        .send(),
                )
                .await
                .unwrap();
                let status = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if status == 200 {
                    // Read until the question is on the stream, then drop
                    // the connection.
                    let mut stream = mcp_cluster_client::SseStream::new(response);
                    while let Some(m) = within("the question", stream.next_message()).await.unwrap()
                    {
                        if m["method"] == "elicitation/create" {
                            break;
                        }
                    }
                    return (status, retry_after, Value::Null);
                }
                let body = within("body", response.text()).await.unwrap();
                (status, retry_after, serde_json::from_str(&body).unwrap())
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;

    let admitted = outcomes.iter().filter(|(s, _, _)| *s == 200).count();
    let refused: Vec<_> = outcomes.iter().filter(|(s, _, _)| *s == 429).collect();
    eprintln!(
        "{backing:?}: {admitted} admitted, {} refused",
        refused.len()
    );
    assert!(
        (1..=2).contains(&admitted),
        "a share of 8 MiB runs at most two: {admitted}"
    );
    assert_eq!(admitted + refused.len(), 32, "every other call refused");
    for (_, retry_after, body) in &refused {
        assert!(retry_after.is_some(), "429 with Retry-After");
        assert_eq!(
            body["error"]["data"]["quota"],
            "in_flight_bytes_per_client",
            "{}",
            short(body)
        );
    }
    // What the flood's requests passed through (bodies read and dropped,
    // answers read back from Redis) may take the allocator a moment to
    // give back: the node is measured once it has, or after 10 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut after = node.rss_bytes();
    while after >= before + NODE_GROWTH && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = node.rss_bytes();
    }
    eprintln!(
        "{backing:?}: node RSS {} MiB -> {} MiB",
        before / MIB,
        after / MIB
    );
    assert!(
        after < before + NODE_GROWTH,
        "the node grew from {} MiB to {} MiB",
        before / MIB,
        after / MIB
    );
    if let (Some(redis), Some(redis_before)) = (&redis, redis_before) {
        let redis_after = used(redis);
        eprintln!(
            "{backing:?}: Redis used_memory {} MiB -> {} MiB",
            redis_before / MIB,
            redis_after / MIB
        );
        assert!(
            redis_after < redis_before + REDIS_GROWTH,
            "Redis grew from {} MiB to {} MiB",
            redis_before / MIB,
            redis_after / MIB
        );
    }
    // The admitted bodies (at most the share), and the question each put
    // on its stream (counted, never refused: the request was admitted).
    let held = sl::metric(&base(&url), "mcp_retained_bytes{kind=\"in_flight\"}").await;
    assert!(
        held > 0.0 && held <= 2.0 * (8.0 * MIB as f64) + MIB as f64,
        "in-flight bytes in the metric: {held}"
    );
    // Another client is served meanwhile.
    let other = session(&url, "127.0.0.3", json!({})).await;
    let answer = hostile_support::call(
        &other,
        &hostile_support::request(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "still here"}}),
        ),
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_hold_only_a_clients_share() {
    dropped_connections_hold_a_share(Backing::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_hold_only_a_clients_share_on_redis() {
    dropped_connections_hold_a_share(Backing::Redis).await;
}
