//! On Redis, what a node's clients leave behind is bounded in bytes too: a
//! flood of large SSE responses leaves Redis `used_memory` within the
//! node's closed-stream budget (64 MiB by default; before the budget the
//! closed streams of 300 responses of 2 MiB stayed 300 s, 600 MB). And
//! when Redis is full (`maxmemory` reached, `noeviction`), a request that
//! must write is refused with a clear error, Redis evicts nothing (no
//! session is lost), and the node serves again once Redis has room. Large
//! task results stay within the finished-task budget, large task answers
//! are refused, and a task waiting for an answer does not make Redis send
//! every answer it holds at each poll (before: 16 answers of 3.5 MB, 67 MB
//! per `tasks/get`).

mod hostile_support;
mod stateless_support;

use futures_util::StreamExt;
use hostile_support::{MIB, node};
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{RedisServer, within};
use serde_json::{Value, json};
use stateless_support as sl;

/// One flood at a time: each measures its own Redis.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Redis with `noeviction` and a node on it. The node's Redis calls may
/// take 10 s instead of 1 s: a debug build that parses and writes eight
/// 2 MiB bodies at once on a busy 2-core machine once held a small write
/// past 1 s, and these tests measure bytes, not Redis latency.
fn redis_and_node(args: &[&str]) -> (RedisServer, mcp_cluster_testkit::NodeProcess) {
    let redis = RedisServer::start().unwrap();
    redis
        .command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .unwrap();
    let dir = std::env::temp_dir().join(format!("mcp-retained-bytes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join(format!("redis-{}.toml", redis.port()));
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = \"{}\"\ncommand_timeout_ms = 10000\n",
            redis.url()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    // These floods come from one address and measure what outlives their
    // requests: the bytes their requests hold while they run get a share
    // large enough for eight at once (the in-flight share is
    // `hostile_retained_owners.rs`'s).
    let mut all = vec![
        "--config",
        config.as_str(),
        "--quota-in-flight-bytes-per-client",
        "67108864",
    ];
    all.extend_from_slice(args);
    let node = node(&all);
    (redis, node)
}

/// Redis may grow by the node's closed-stream budget (64 MiB) and the
/// streams still open, plus its own overhead.
const REDIS_BUDGET: u64 = 96 * MIB;

fn info_field(redis: &RedisServer, section: &str, field: &str) -> u64 {
    let info = redis.command(&["INFO", section]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
}

async fn echo(client: &Client, message: &str) -> Result<Value, String> {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": message}}});
    match within("echo", client.post(&body)).await.unwrap() {
        Reply::Sse(mut stream) => {
            while let Some(m) = stream.next_message().await.map_err(|e| e.to_string())? {
                if m.get("id") == Some(&json!(7)) {
                    return Ok(m);
                }
            }
            Err("stream ended without the response".into())
        }
        Reply::Json(v, _) => Ok(v),
        Reply::Status(status, body, _) => Err(format!("{status}: {body}")),
        Reply::Accepted => Err("202".into()),
    }
}

async fn session(url: &str) -> Client {
    let mut client = Client::new(url, hostile_support::VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_sse_responses_stay_within_the_budget_and_a_full_redis_refuses_cleanly() {
    let _serial = SERIAL.lock().await;
    let (redis, node) = redis_and_node(&["--response-mode", "sse"]);
    let url = node.url().to_owned();
    let keeper = session(&url).await;
    assert!(echo(&keeper, "before").await.is_ok());
    let before = info_field(&redis, "memory", "used_memory");

    let message = "y".repeat(2 * 1024 * 1024);
    let answered = futures_util::stream::iter(0..300)
        .map(|_| {
            let (url, message) = (url.clone(), message.clone());
            async move {
                let client = session(&url).await;
                echo(&client, &message).await.map(|m| {
                    m["result"]["content"][0]["text"]
                        .as_str()
                        .map_or(0, str::len)
                })
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    assert!(
        answered
            .iter()
            .all(|a| *a.as_ref().unwrap() == message.len() + "Echo: ".len()),
        "every echo answered in full"
    );
    let after = info_field(&redis, "memory", "used_memory");
    eprintln!(
        "300 SSE responses of 2 MiB: Redis used_memory {} MiB -> {} MiB",
        before / MIB,
        after / MIB
    );
    assert!(
        after < before + REDIS_BUDGET,
        "Redis grew from {} MiB to {} MiB",
        before / MIB,
        after / MIB
    );

    // Redis full: below what it holds, nothing that grows it is accepted.
    let full = info_field(&redis, "memory", "used_memory") - MIB;
    redis
        .command(&["CONFIG", "SET", "maxmemory", &full.to_string()])
        .unwrap();
    let refused = echo(&keeper, &message).await;
    let refusal = refused
        .as_ref()
        .map_or_else(Clone::clone, ToString::to_string);
    eprintln!("with Redis full: {refusal}");
    assert!(
        refused.as_ref().is_err_and(|e| e.starts_with("503"))
            || refused.as_ref().is_ok_and(|m| m.get("error").is_some()),
        "a request that must write is refused: {refusal}"
    );
    assert_eq!(
        info_field(&redis, "stats", "evicted_keys"),
        0,
        "noeviction: nothing evicted"
    );
    redis.command(&["CONFIG", "SET", "maxmemory", "0"]).unwrap();

    // Redis fills up while a call runs: its stream exists, its response
    // cannot be written. The client gets an error on the stream, at once,
    // rather than waiting for a response that will never come.
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "long_running_operation",
        "arguments": {"duration_ms": 3000, "steps": 3},
        "_meta": {"progressToken": "p"}}});
    let Reply::Sse(mut stream) = within("POST", keeper.post(&body)).await.unwrap() else {
        panic!("an SSE answer");
    };
    let first = within("first progress", stream.next_message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first["method"], "notifications/progress", "{first}");
    let full = info_field(&redis, "memory", "used_memory") - MIB;
    redis
        .command(&["CONFIG", "SET", "maxmemory", &full.to_string()])
        .unwrap();
    let answer = loop {
        let message = within("the end of the stream", stream.next_message())
            .await
            .unwrap()
            .expect("an answer before the stream ends");
        if message.get("id") == Some(&json!(8)) {
            break message;
        }
    };
    eprintln!("a response Redis refused: {answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be kept"), "{message}");
    assert_eq!(info_field(&redis, "stats", "evicted_keys"), 0);
    redis.command(&["CONFIG", "SET", "maxmemory", "0"]).unwrap();

    // The session lived through it, and the node serves again.
    let again = echo(&keeper, "after").await.unwrap();
    assert_eq!(
        again["result"]["content"][0]["text"], "Echo: after",
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_task_results_stay_within_the_budget() {
    let _serial = SERIAL.lock().await;
    let (redis, node) = redis_and_node(&[]);
    let url = node.url().to_owned();
    let before = info_field(&redis, "memory", "used_memory");

    let label = "x".repeat(2 * 1024 * 1024);
    let tasks = futures_util::stream::iter(0..300u64)
        .map(|i| {
            let (url, label) = (url.clone(), label.clone());
            async move {
                let body = sl::tool_call(
                    i,
                    "slow_compute",
                    json!({"seconds": 0, "label": label}),
                    json!({}),
                    sl::task_caps(),
                );
                let response = sl::call(&url, &body, &[]).await.response;
                response["result"]["taskId"]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or(response)
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let not_tasks: Vec<_> = tasks.iter().filter_map(|t| t.as_ref().err()).collect();
    assert!(not_tasks.is_empty(), "every call is a task: {not_tasks:?}");
    let last = tasks.iter().flatten().last().unwrap().clone();
    let view = sl::poll_task(&url, &last, |r| r["status"] == "completed").await;
    assert_eq!(view["result"]["status"], "completed", "{view}");

    let after = info_field(&redis, "memory", "used_memory");
    eprintln!(
        "300 task results of 2 MiB: Redis used_memory {} MiB -> {} MiB",
        before / MIB,
        after / MIB
    );
    assert!(
        after < before + REDIS_BUDGET,
        "Redis grew from {} MiB to {} MiB",
        before / MIB,
        after / MIB
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_answers_are_bounded_and_a_waiting_task_reads_only_its_own() {
    let _serial = SERIAL.lock().await;
    let (redis, node) = redis_and_node(&[]);
    let url = node.url().to_owned();
    let before = info_field(&redis, "memory", "used_memory");

    let created = sl::call(
        &url,
        &sl::tool_call(
            1,
            "confirm_delete",
            json!({"filename": "a.txt"}),
            json!({}),
            sl::task_caps(),
        ),
        &[],
    )
    .await
    .response;
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    sl::poll_task(&url, &task, |r| r["status"] == "input_required").await;

    // Large answers under new keys: refused, each.
    let big = json!({"action": "accept", "content": {"note": "z".repeat(3_500_000)}});
    for i in 0..16 {
        let body = sl::request(
            10 + i,
            "tasks/update",
            json!({"taskId": task, "inputResponses": {format!("big{i}"): big}}),
            sl::task_caps(),
        );
        let answer = sl::call(&url, &body, &[]).await.response;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }
    // Answers within the caps, 800 KB in all, that the task does not wait for.
    let fair = json!({"action": "accept", "content": {"note": "w".repeat(200_000)}});
    for i in 0..4 {
        let body = sl::request(
            40 + i,
            "tasks/update",
            json!({"taskId": task, "inputResponses": {format!("extra{i}"): fair}}),
            sl::task_caps(),
        );
        let answer = sl::call(&url, &body, &[]).await.response;
        assert_eq!(
            answer["result"],
            json!({"resultType": "complete"}),
            "{answer}"
        );
    }
    let held = info_field(&redis, "memory", "used_memory");
    eprintln!(
        "16 answers of 3.5 MB and 4 of 200 KB: Redis used_memory {} MiB -> {} MiB",
        before / MIB,
        held / MIB
    );
    assert!(held < before + 8 * MIB, "Redis grew to {} MiB", held / MIB);

    // The waiting task polls for its answer every 200 ms: 5 s of that
    // (and 10 tasks/get) must not move the 800 KB each time.
    let sent = info_field(&redis, "stats", "total_net_output_bytes");
    for i in 0..10 {
        let body = sl::request(
            60 + i,
            "tasks/get",
            json!({"taskId": task}),
            sl::task_caps(),
        );
        let view = sl::call(&url, &body, &[]).await.response;
        assert_eq!(view["result"]["status"], "input_required", "{view}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let moved = info_field(&redis, "stats", "total_net_output_bytes") - sent;
    eprintln!(
        "Redis sent {} KiB in 5 s of waiting and polling",
        moved / 1024
    );
    assert!(
        moved < 4 * MIB,
        "Redis sent {} KiB: every answer re-read",
        moved / 1024
    );

    // The task still takes its real answer and finishes.
    let body = sl::request(
        90,
        "tasks/update",
        json!({"taskId": task, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
        sl::task_caps(),
    );
    let ack = sl::call(&url, &body, &[]).await.response;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = sl::poll_task(&url, &task, |r| r["status"] == "completed").await;
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "Deleted a.txt.",
        "{done}"
    );
}
