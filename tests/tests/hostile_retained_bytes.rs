//! What a client leaves behind in a node is bounded in bytes, not only in
//! count: floods of large task results, of large SSE responses and of large
//! task answers leave the node within 256 MiB of where it started, and
//! other clients keep working. Before the byte budgets, 300 task results of
//! 2 MiB took a node from 53 to 729 MiB (kept for the task TTL, 1 h), 300
//! SSE responses of 2 MiB from 53 to 747 MiB (closed streams kept 300 s),
//! and every answer of up to 4 MiB given to a running task was kept.

mod hostile_support;
mod stateless_support;

use futures_util::StreamExt;
use hostile_support::MIB;
use mcp_cluster_client::Client;
use mcp_cluster_testkit::within;
use serde_json::json;
use stateless_support as sl;

/// How far above its starting point a flood may leave the node.
const BUDGET: u64 = 256 * MIB;

/// Floods run this many requests at once.
const CONCURRENCY: usize = 8;

/// These floods come from one address and measure what outlives their
/// requests: the bytes their requests hold while they run get a share
/// large enough for `CONCURRENCY` of them (the in-flight share is
/// `hostile_retained_owners.rs`'s).
const IN_FLIGHT_SHARE: [&str; 2] = ["--quota-in-flight-bytes-per-client", "67108864"];

/// A node with `args` and [`IN_FLIGHT_SHARE`].
fn node(args: &[&str]) -> mcp_cluster_testkit::NodeProcess {
    let mut all = IN_FLIGHT_SHARE.to_vec();
    all.extend_from_slice(args);
    hostile_support::node(&all)
}

/// One flood at a time: each measures its own node, and three at once on
/// a small machine only measure the machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The node's base URL (for `/metrics`).
fn base(url: &str) -> String {
    url.trim_end_matches("/mcp").to_owned()
}

/// The node says what it keeps of `kind` and that it dropped some.
async fn assert_budget_metrics(url: &str, kind: &str, evicted: &str) {
    let held = sl::metric(
        &base(url),
        &format!("mcp_retained_bytes{{kind=\"{kind}\"}}"),
    )
    .await;
    let dropped = sl::metric(
        &base(url),
        &format!("mcp_retention_evictions_total{{kind=\"{evicted}\"}}"),
    )
    .await;
    eprintln!("{kind}: {held} bytes held, {dropped} {evicted}s dropped");
    assert!(held > 0.0 && held <= 64.0 * 1024.0 * 1024.0, "{held}");
    assert!(dropped > 0.0, "the flood made the node drop old {evicted}s");
}

fn assert_within_budget(what: &str, before: u64, after: u64) {
    eprintln!("{what}: RSS {} MiB -> {} MiB", before / MIB, after / MIB);
    assert!(
        after < before + BUDGET,
        "{what}: RSS grew from {} MiB to {} MiB",
        before / MIB,
        after / MIB
    );
}

/// A stateless task call of `slow_compute` completes, and its result can
/// be fetched.
async fn assert_tasks_work(url: &str) {
    let created = sl::call(
        url,
        &sl::tool_call(
            1,
            "slow_compute",
            json!({"seconds": 0, "label": "small"}),
            json!({}),
            sl::task_caps(),
        ),
        &[],
    )
    .await
    .response;
    let task = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    let view = sl::poll_task(url, &task, |r| r["status"] == "completed").await;
    assert_eq!(
        view["result"]["result"]["content"][0]["text"], "Computed small in 0 s.",
        "{view}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_task_results_are_held_within_the_byte_budget() {
    let _serial = SERIAL.lock().await;
    let node = node(&[]);
    let url = node.url().to_owned();
    assert_tasks_work(&url).await;
    let before = node.rss_bytes();

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
                sl::call(&url, &body, &[]).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let mut last = None;
    for answer in &tasks {
        assert_eq!(answer.status, 200, "{answer:?}");
        let id = answer.response["result"]["taskId"].as_str();
        assert!(id.is_some(), "a task handle: {:?}", answer.response);
        last = id.map(str::to_owned);
    }
    // Let the last ones finish and be written.
    let last = last.unwrap();
    let view = sl::poll_task(&url, &last, |r| r["status"] != "working").await;
    assert!(view.get("result").is_some() || view.get("error").is_some());

    assert_within_budget("300 task results of 2 MiB", before, node.rss_bytes());
    assert_budget_metrics(&url, "finished_tasks", "task").await;
    assert_tasks_work(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_sse_responses_are_held_within_the_byte_budget() {
    let _serial = SERIAL.lock().await;
    let node = node(&["--response-mode", "sse"]);
    let url = node.url().to_owned();
    let before = node.rss_bytes();

    let message = "y".repeat(2 * 1024 * 1024);
    let echoed = futures_util::stream::iter(0..300)
        .map(|_| {
            let (url, message) = (url.clone(), message.clone());
            async move {
                let mut client = Client::new(&url, hostile_support::VERSION);
                within("initialize", client.initialize(json!({})))
                    .await
                    .unwrap();
                let (answer, _) = within(
                    "echo",
                    client.request(
                        "tools/call",
                        json!({"name": "echo", "arguments": {"message": message}}),
                    ),
                )
                .await
                .unwrap();
                answer["result"]["content"][0]["text"]
                    .as_str()
                    .map_or(0, str::len)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    assert!(
        echoed
            .iter()
            .all(|len| *len == message.len() + "Echo: ".len()),
        "every echo answered in full"
    );

    assert_within_budget("300 SSE responses of 2 MiB", before, node.rss_bytes());
    assert_budget_metrics(&url, "closed_streams", "stream").await;
    // Another client's session still works, its answer on a stream.
    let mut client = Client::new(&url, hostile_support::VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (answer, _) = within(
        "echo",
        client.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "still here"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_task_answers_are_refused_past_their_caps() {
    let _serial = SERIAL.lock().await;
    let node = node(&[]);
    let url = node.url().to_owned();
    assert_tasks_work(&url).await;
    let before = node.rss_bytes();

    // Two tasks waiting for an answer.
    let mut waiting = Vec::new();
    for i in 0..2 {
        let created = sl::call(
            &url,
            &sl::tool_call(
                10 + i,
                "confirm_delete",
                json!({"filename": format!("{i}.txt")}),
                json!({}),
                sl::task_caps(),
            ),
            &[],
        )
        .await
        .response;
        let task = created["result"]["taskId"].as_str().unwrap().to_owned();
        sl::poll_task(&url, &task, |r| r["status"] == "input_required").await;
        waiting.push(task);
    }

    // 64 answers of 3.5 MB under new keys to each: 448 MB if all were kept.
    let answer = json!({"action": "accept", "content": {"note": "z".repeat(3_500_000)}});
    let updates = futures_util::stream::iter(0..128u64)
        .map(|i| {
            let url = url.clone();
            let task = waiting[usize::try_from(i % 2).unwrap()].clone();
            let answer = answer.clone();
            async move {
                let body = sl::request(
                    100 + i,
                    "tasks/update",
                    json!({"taskId": task, "inputResponses": {format!("extra{i}"): answer}}),
                    sl::task_caps(),
                );
                sl::call(&url, &body, &[]).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let refused = updates
        .iter()
        .filter(|a| a.response.get("error").is_some())
        .collect::<Vec<_>>();
    assert!(
        refused.len() >= 120,
        "most large answers refused, {} were",
        refused.len()
    );
    let message = refused[0].response["error"]["message"].as_str().unwrap();
    assert!(message.contains("bytes"), "a clear refusal: {message}");

    assert_within_budget("128 task answers of 3.5 MB", before, node.rss_bytes());
    let refusals = sl::metric(
        &base(&url),
        "mcp_retention_refusals_total{kind=\"task_answer\"}",
    )
    .await;
    assert!(refusals >= 120.0, "refusals counted: {refusals}");
    // The tasks still take their real answer and finish.
    for (i, task) in waiting.iter().enumerate() {
        let body = sl::request(
            200,
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
            sl::task_caps(),
        );
        let ack = sl::call(&url, &body, &[]).await.response;
        assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
        let done = sl::poll_task(&url, task, |r| r["status"] == "completed").await;
        assert_eq!(
            done["result"]["result"]["content"][0]["text"],
            format!("Deleted {i}.txt."),
            "{done}"
        );
    }
    assert_tasks_work(&url).await;
}
