//! Tasks (the 2026-07-28 tasks extension) across a cluster: a task created
//! on one node is polled, answered, cancelled and fetched on the others,
//! and a task whose node dies ends `failed` within the lease, never stuck
//! in `working`.

mod cluster_support;
mod stateless_support;

use std::time::Duration;

use tokio::time::Instant;

use serde_json::{Value, json};
use stateless_support::*;

async fn task_request(url: &str, id: u64, method: &str, params: Value) -> Value {
    call(url, &request(id, method, params, task_caps()), &[])
        .await
        .response
}

#[tokio::test]
async fn a_task_created_on_one_node_is_answered_cancelled_and_fetched_on_others() {
    let cluster = cluster_support::start(3, &[]);
    let node = |i: usize| cluster.node_url(i);

    let created = call(
        &node(0),
        &tool_call(
            1,
            "confirm_delete",
            json!({"filename": "a.txt"}),
            json!({}),
            task_caps(),
        ),
        &[],
    )
    .await;
    let result = &created.response["result"];
    assert_eq!(result["resultType"], "task", "{created:?}");
    assert_eq!(result["status"], "working");
    let task = result["taskId"].as_str().unwrap().to_owned();

    let waiting = poll_task(&node(1), &task, |r| r["status"] == "input_required").await;
    let questions = waiting["result"]["inputRequests"].as_object().unwrap();
    assert_eq!(
        questions["confirm"]["method"], "elicitation/create",
        "{waiting}"
    );
    let ack = call(
        &node(2),
        &request(
            2,
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
            task_caps(),
        ),
        &[],
    )
    .await;
    assert_eq!(ack.response["result"], json!({"resultType": "complete"}));
    let done = poll_task(&node(1), &task, |r| r["status"] == "completed").await;
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "Deleted a.txt.",
        "{done}"
    );

    // Cancelled through another node.
    let slow = call(
        &node(0),
        &tool_call(
            3,
            "slow_compute",
            json!({"seconds": 60, "label": "x"}),
            json!({}),
            task_caps(),
        ),
        &[],
    )
    .await;
    let slow = slow.response["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let ack = call(
        &node(2),
        &request(4, "tasks/cancel", json!({"taskId": slow}), task_caps()),
        &[],
    )
    .await;
    assert_eq!(ack.response["result"]["resultType"], "complete");
    let ended = poll_task(&node(1), &slow, |r| r["status"] != "working").await;
    assert_eq!(ended["result"]["status"], "cancelled", "{ended}");

    // Unknown tasks, and clients without the extension.
    let unknown = task_request(&node(1), 5, "tasks/get", json!({"taskId": "no-such-task"})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let gated = call(
        &node(1),
        &request(6, "tasks/get", json!({"taskId": slow}), json!({})),
        &[],
    )
    .await;
    assert_eq!(
        (gated.status, gated.response["error"]["code"].as_i64()),
        (400, Some(-32021))
    );
}

#[tokio::test]
async fn a_task_whose_node_dies_ends_failed_within_the_lease() {
    let mut cluster = cluster_support::start(2, &[]);
    let created = call(
        &cluster.node_url(0),
        &tool_call(
            1,
            "slow_compute",
            json!({"seconds": 120, "label": "doomed"}),
            json!({}),
            task_caps(),
        ),
        &[],
    )
    .await;
    let task = created.response["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created:?}"))
        .to_owned();
    let survivor = cluster.node_url(1);
    let working = poll_task(&survivor, &task, |r| r["status"].is_string()).await;
    assert_eq!(working["result"]["status"], "working");
    cluster.kill_node(0);
    let killed = Instant::now();
    let ended = poll_task(&survivor, &task, |r| r["status"] != "working").await;
    assert_eq!(ended["result"]["status"], "failed", "{ended}");
    assert!(
        ended["result"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped"),
        "{ended}"
    );
    // The lease (10 s) bounds it; a poll a little after.
    assert!(
        killed.elapsed() < Duration::from_secs(13),
        "{:?}",
        killed.elapsed()
    );
}

/// The next `notifications/tasks` of a listen stream (others skipped).
async fn next_task_note(stream: &mut Messages) -> Value {
    loop {
        let message = stream.next().await.expect("the listen stream ended");
        if message["method"] == "notifications/tasks" {
            return message;
        }
    }
}

#[tokio::test]
async fn a_listen_stream_follows_a_task_running_on_another_node() {
    let cluster = cluster_support::start(3, &[]);
    let node = |i: usize| cluster.node_url(i);

    let created = call(
        &node(0),
        &tool_call(
            1,
            "confirm_delete",
            json!({"filename": "b.txt"}),
            json!({}),
            task_caps(),
        ),
        &[],
    )
    .await;
    let task = created.response["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created:?}"))
        .to_owned();

    // Without the extension, following tasks is refused.
    let refused = call(
        &node(1),
        &request(
            2,
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [task]}}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert_eq!(refused.response["error"]["code"], -32021, "{refused:?}");

    // On another node than the task's: only the known task is agreed to.
    let listen = request(
        3,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [task, "no-such-task"]}}),
        task_caps(),
    );
    let mut stream = Messages::new(send(&node(1), &listen, &[]).await);
    let ack = stream.next().await.expect("acknowledgement");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([task]),
        "{ack}"
    );

    // A second stream on the same node follows the same task (one read of
    // the store serves both).
    let second = request(
        5,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [task]}}),
        task_caps(),
    );
    let mut other = Messages::new(send(&node(1), &second, &[]).await);
    let ack = other.next().await.expect("acknowledgement");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([task]),
        "{ack}"
    );

    // Its state as tasks/get gives it, until it waits for the answer.
    let waiting = loop {
        let note = next_task_note(&mut stream).await;
        let params = &note["params"];
        assert_eq!(params["taskId"], task.as_str(), "{note}");
        assert_eq!(
            params["_meta"]["io.modelcontextprotocol/subscriptionId"], 3,
            "{note}"
        );
        assert!(params.get("resultType").is_none(), "{note}");
        if params["status"] == "input_required" {
            break note;
        }
        assert_eq!(params["status"], "working", "{note}");
    };
    assert_eq!(
        waiting["params"]["inputRequests"]["confirm"]["method"], "elicitation/create",
        "{waiting}"
    );

    let ack = call(
        &node(2),
        &request(
            4,
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
            task_caps(),
        ),
        &[],
    )
    .await;
    assert_eq!(ack.response["result"], json!({"resultType": "complete"}));
    let done = loop {
        let note = next_task_note(&mut stream).await;
        if note["params"]["status"] != "working" {
            break note;
        }
    };
    assert_eq!(done["params"]["status"], "completed", "{done}");
    assert_eq!(
        done["params"]["result"]["content"][0]["text"], "Deleted b.txt.",
        "{done}"
    );
    let also = loop {
        let note = next_task_note(&mut other).await;
        assert_eq!(
            note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 5,
            "{note}"
        );
        if note["params"]["status"] == "completed" {
            break note;
        }
    };
    assert_eq!(also["params"]["result"], done["params"]["result"], "{also}");
    // An ended task is followed no more: nothing else comes.
    assert!(
        stream.next_within(Duration::from_secs(2)).await.is_err(),
        "a message after the task's end"
    );
}
