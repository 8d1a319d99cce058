//! On Redis, what a node's clients leave behind is bounded in bytes too: a
//! flood of large SSE responses leaves Redis `used_memory` within the
//! node's closed-stream budget (64 MiB by default; before the budget the
//! closed streams of 300 responses of 2 MiB stayed 300 s, 600 MB). And
//! when Redis is full (`maxmemory` reached, `noeviction`), a request that
//! must write is refused with a clear error, Redis evicts nothing (no
//! session is lost), and the node serves again once Redis has room.

mod hostile_support;

use futures_util::StreamExt;
use hostile_support::{MIB, node};
use mcp_client::{Client, Reply};
use mcp_testkit::{RedisServer, within};
use serde_json::{Value, json};

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
        Reply::Status(status, body) => Err(format!("{status}: {body}")),
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
    let redis = RedisServer::start().unwrap();
    redis
        .command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .unwrap();
    let redis_url = redis.url();
    let node = node(&["--redis-url", &redis_url, "--response-mode", "sse"]);
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
    // The session lived through it, and the node serves again.
    let again = echo(&keeper, "after").await.unwrap();
    assert_eq!(
        again["result"]["content"][0]["text"], "Echo: after",
        "{again}"
    );
}
