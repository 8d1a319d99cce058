//! Tasks in 2025-11-25 sessions, on the release path (`mcp-node` as
//! operators start it): declared in that revision only, a task-augmented
//! `tools/call` answered with its task, polled, waited for, cancelled and
//! asked questions on the session's GET stream, on one node and across a
//! cluster whose nodes share the session (and one of which dies).

mod cluster_support;
mod stateless_support;

use std::time::Duration;

use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{NodeProcess, node_binary, until_metric, within};
use serde_json::{Value, json};

use cluster_support::{client, event_within, expect_sse, message, next_event, priming, session};

/// Sends a request on `client`, returning its whole response.
async fn rpc(client: &Client, method: &str, params: Value) -> Value {
    within(method, client.request(method, params))
        .await
        .unwrap_or_else(|err| panic!("{method}: {err}"))
        .0
}

/// Calls `tool` as a task (`task`: `params.task`); returns the task.
async fn start(client: &Client, tool: &str, arguments: Value, task: Value) -> Value {
    let created = rpc(
        client,
        "tools/call",
        json!({"name": tool, "arguments": arguments, "task": task}),
    )
    .await;
    let task = created["result"]["task"].clone();
    assert!(task["taskId"].is_string(), "{created}");
    task
}

fn id(task: &Value) -> &str {
    task["taskId"].as_str().unwrap()
}

/// `tasks/get` until `done` holds.
async fn poll(client: &Client, task: &str, done: impl Fn(&Value) -> bool) -> Value {
    within("the task's status", async {
        loop {
            let got = rpc(client, "tasks/get", json!({"taskId": task})).await;
            if done(&got["result"]) {
                return got["result"].clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Every tool of `client`'s `tools/list`, all pages.
async fn tools(client: &Client) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let params = if cursor.is_null() {
            json!({})
        } else {
            json!({"cursor": cursor})
        };
        let page = rpc(client, "tools/list", params).await;
        all.extend(page["result"]["tools"].as_array().unwrap().iter().cloned());
        cursor = page["result"]["nextCursor"].clone();
        if cursor.is_null() {
            return all;
        }
    }
}

fn task_support<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    let tool = tools.iter().find(|t| t["name"] == name).unwrap();
    &tool["execution"]["taskSupport"]
}

/// A session of `version` on `url`.
async fn session_of(url: &str, version: &str) -> (Client, Value) {
    let mut client = Client::new(url, version);
    let result = within("initialize", client.initialize(json!({"elicitation": {}})))
        .await
        .unwrap();
    (client, result)
}

#[tokio::test]
async fn tasks_are_declared_in_2025_11_25_sessions_only() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let url = node.url();

    let (current, init) = session_of(url, "2025-11-25").await;
    assert_eq!(
        init["capabilities"]["tasks"],
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{init}"
    );
    let listed = tools(&current).await;
    assert_eq!(*task_support(&listed, "slow_compute"), "optional");
    assert_eq!(*task_support(&listed, "failing_job"), "required");
    assert!(
        listed.iter().find(|t| t["name"] == "echo").unwrap()["execution"].is_null(),
        "a tool that never runs as a task says nothing"
    );

    let (older, init) = session_of(url, "2025-06-18").await;
    assert!(init["capabilities"]["tasks"].is_null(), "{init}");
    assert!(
        tools(&older).await.iter().all(|t| t["execution"].is_null()),
        "execution is 2025-11-25's"
    );
    let get = rpc(&older, "tasks/get", json!({"taskId": "x"})).await;
    assert_eq!(get["error"]["code"], -32601, "{get}");
    // An older session runs a task-only tool as an ordinary call, its
    // params.task ignored.
    let ran = rpc(
        &older,
        "tools/call",
        json!({"name": "failing_job", "arguments": {}, "task": {}}),
    )
    .await;
    assert_eq!(ran["result"]["isError"], true, "{ran}");

    // 2026-07-28 has the tasks extension instead: no tool says execution.
    let stateless = stateless_support::call(
        url,
        &stateless_support::request(1, "tools/list", json!({}), json!({})),
        &[],
    )
    .await
    .response;
    let listed = stateless["result"]["tools"].as_array().unwrap();
    assert!(!listed.is_empty(), "{stateless}");
    assert!(listed.iter().all(|t| t["execution"].is_null()));
}

#[tokio::test]
async fn a_task_augmented_call_runs_as_a_task_of_its_session() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let url = node.url();
    let base = url.trim_end_matches("/mcp");
    let (c, _) = session_of(url, "2025-11-25").await;

    // Tool-level negotiation: -32601 both ways; a task must be an object.
    for (tool, task) in [("failing_job", Value::Null), ("echo", json!({}))] {
        let refused = rpc(
            &c,
            "tools/call",
            json!({"name": tool, "arguments": {"message": "x"}, "task": task}),
        )
        .await;
        assert_eq!(refused["error"]["code"], -32601, "{refused}");
    }
    let refused = rpc(
        &c,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "x"}, "task": 5}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // Created at once, working; its result waited for and named by task.
    let task = start(
        &c,
        "slow_compute",
        json!({"seconds": 0.5, "label": "sum"}),
        json!({"ttl": 20000}),
    )
    .await;
    assert_eq!(task["status"], "working", "{task}");
    assert_eq!(task["ttl"], 20000, "the TTL asked for is granted");
    assert!(task["pollInterval"].is_u64(), "{task}");
    assert!(task["createdAt"].is_string() && task["lastUpdatedAt"].is_string());
    let result = rpc(&c, "tasks/result", json!({"taskId": id(&task)})).await;
    assert_eq!(
        result["result"]["content"][0]["text"], "Computed sum in 0.5 s.",
        "{result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"],
        json!({"taskId": id(&task)})
    );
    let done = rpc(&c, "tasks/get", json!({"taskId": id(&task)})).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert!(done["result"]["_meta"].is_null(), "tasks/get names no task");
    let late = rpc(&c, "tasks/cancel", json!({"taskId": id(&task)})).await;
    assert_eq!(late["error"]["code"], -32602, "{late}");

    // The TTLs granted: at least 10 s, at most the node's.
    let short = start(
        &c,
        "slow_compute",
        json!({"seconds": 0, "label": "a"}),
        json!({"ttl": 1}),
    )
    .await;
    assert_eq!(short["ttl"], 10_000);
    let default = start(
        &c,
        "slow_compute",
        json!({"seconds": 0, "label": "b"}),
        json!({}),
    )
    .await;
    assert_eq!(default["ttl"], 3_600_000);

    // A tool that reports an error fails its task, whose result is that
    // answer; a JSON-RPC error is the result's error.
    let failing = start(&c, "failing_job", json!({}), json!({})).await;
    let result = rpc(&c, "tasks/result", json!({"taskId": id(&failing)})).await;
    assert_eq!(result["result"]["isError"], true, "{result}");
    let failed = rpc(&c, "tasks/get", json!({"taskId": id(&failing)})).await;
    assert_eq!(failed["result"]["status"], "failed", "{failed}");
    assert!(
        failed["result"]["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("the job failed")),
        "{failed}"
    );
    let broken = start(&c, "protocol_error_job", json!({}), json!({})).await;
    let result = rpc(&c, "tasks/result", json!({"taskId": id(&broken)})).await;
    assert_eq!(result["error"]["code"], -32603, "{result}");
    assert_eq!(
        result["error"]["message"],
        "the job failed with a protocol error"
    );

    // Cancelled before the answer; its handler stops.
    let slow = start(
        &c,
        "slow_compute",
        json!({"seconds": 60, "label": "x"}),
        json!({}),
    )
    .await;
    until_metric(base, "mcp_requests_in_flight", 1.0).await;
    let cancelled = rpc(&c, "tasks/cancel", json!({"taskId": id(&slow)})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["result"]["taskId"], id(&slow));
    let result = rpc(&c, "tasks/result", json!({"taskId": id(&slow)})).await;
    assert_eq!(result["error"]["code"], -32603, "{result}");
    let again = rpc(&c, "tasks/cancel", json!({"taskId": id(&slow)})).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
    until_metric(base, "mcp_requests_in_flight", 0.0).await;

    // Another session's task is as unknown as none.
    let (other, _) = session_of(url, "2025-11-25").await;
    for task in [id(&task), "no-such-task"] {
        let unknown = rpc(&other, "tasks/get", json!({"taskId": task})).await;
        assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    }
    let missing = rpc(&other, "tasks/result", json!({})).await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
}

#[tokio::test]
async fn a_task_asks_on_the_get_stream_and_waits_for_input() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let (c, _) = session_of(node.url(), "2025-11-25").await;
    let mut stream = expect_sse(within("GET", c.get(None)).await.unwrap());
    priming(&mut stream).await;

    let task = start(
        &c,
        "confirm_delete",
        json!({"filename": "a.txt"}),
        json!({}),
    )
    .await;
    // Not asked before the client polled the task: it learns the task its
    // questions name from the answer, which it may not have read yet.
    assert!(
        event_within(&mut stream, Duration::from_millis(300))
            .await
            .is_none(),
        "a question before the task was polled"
    );
    let working = rpc(&c, "tasks/get", json!({"taskId": id(&task)})).await;
    assert_eq!(working["result"]["status"], "working", "{working}");
    let question = message(&next_event(&mut stream).await.unwrap());
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"],
        json!({"taskId": id(&task)})
    );
    let waiting = poll(&c, id(&task), |t| t["status"] == "input_required").await;
    assert_eq!(waiting["taskId"], id(&task));
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}});
    cluster_support::post_accepted(&c, &answer).await;
    let result = rpc(&c, "tasks/result", json!({"taskId": id(&task)})).await;
    assert_eq!(
        result["result"]["content"][0]["text"], "Deleted a.txt.",
        "{result}"
    );
}

#[tokio::test]
async fn a_session_task_is_served_by_every_node_and_survives_none() {
    let mut cluster = cluster_support::start(3, &[]);
    let urls: Vec<String> = (0..3).map(|i| cluster.node_url(i)).collect();
    let first = session(&urls[0], json!({"elicitation": {}})).await;
    let session_id = first.session_id().unwrap().to_owned();
    let on = |i: usize| client(&urls[i], &session_id);

    // Asked on node 0, its question read on node 2, answered on node 1,
    // waited for on node 2.
    let mut stream = expect_sse(within("GET", on(2).get(None)).await.unwrap());
    priming(&mut stream).await;
    let task = start(
        &first,
        "confirm_delete",
        json!({"filename": "b.txt"}),
        json!({}),
    )
    .await;
    // Polled on node 1: its client knows it, and is asked.
    poll(&on(1), id(&task), |t| t["status"] == "input_required").await;
    let question = message(&next_event(&mut stream).await.unwrap());
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id(&task)
    );
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": false}}});
    cluster_support::post_accepted(&on(1), &answer).await;
    let result = rpc(&on(2), "tasks/result", json!({"taskId": id(&task)})).await;
    assert_eq!(
        result["result"]["content"][0]["text"], "Kept b.txt.",
        "{result}"
    );

    // Cancelled on node 1: its handler on node 0 stops.
    let base0 = urls[0].trim_end_matches("/mcp").to_owned();
    let slow = start(
        &first,
        "slow_compute",
        json!({"seconds": 60, "label": "x"}),
        json!({}),
    )
    .await;
    until_metric(&base0, "mcp_requests_in_flight", 1.0).await;
    let cancelled = rpc(&on(1), "tasks/cancel", json!({"taskId": id(&slow)})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    until_metric(&base0, "mcp_requests_in_flight", 0.0).await;
    let seen = rpc(&on(2), "tasks/get", json!({"taskId": id(&slow)})).await;
    assert_eq!(seen["result"]["status"], "cancelled", "{seen}");

    // Its node dies: failed once the lease lapsed, never working for ever.
    let doomed = start(
        &first,
        "slow_compute",
        json!({"seconds": 120, "label": "x"}),
        json!({}),
    )
    .await;
    drop(stream);
    cluster.kill_node(0);
    let survivor = on(1);
    // A lease lapses within 10 s of the node's last renewal.
    let lapsed = async {
        loop {
            let got = rpc(&survivor, "tasks/get", json!({"taskId": id(&doomed)})).await;
            if got["result"]["status"] != "working" {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let failed = tokio::time::timeout(Duration::from_secs(30), lapsed)
        .await
        .expect("the task still works 30 s after its node died");
    assert_eq!(failed["result"]["status"], "failed", "{failed}");
    let result = rpc(&survivor, "tasks/result", json!({"taskId": id(&doomed)})).await;
    assert_eq!(result["error"]["code"], -32603, "{result}");
}

#[tokio::test]
async fn a_session_task_takes_its_clients_share_of_the_running_tasks() {
    let node = NodeProcess::spawn(
        &node_binary(),
        &["--log", "warn", "--quota-tasks-per-address", "1"],
    )
    .unwrap();
    let url = node.url();
    let from = |ip: &str| {
        reqwest::Client::builder()
            .local_address(ip.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    let mut flooder = Client::with_http(from("127.0.0.2"), url, "2025-11-25");
    within("initialize", flooder.initialize(json!({})))
        .await
        .unwrap();
    let slow = json!({"seconds": 60, "label": "share"});
    let held = start(&flooder, "slow_compute", slow.clone(), json!({})).await;
    // Refused as the request it is: 429, nothing of it run.
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": {"name": "slow_compute", "arguments": slow, "task": {}}});
    match within("POST", flooder.post(&body)).await.unwrap() {
        Reply::Status(status, refused, headers) => {
            assert_eq!(status.as_u16(), 429, "{refused}");
            assert!(headers.contains_key("retry-after"), "{headers:?}");
            let refused: Value = serde_json::from_str(&refused).unwrap();
            assert_eq!(refused["id"], 99, "{refused}");
            assert_eq!(refused["error"]["code"], -32029, "{refused}");
            assert_eq!(refused["error"]["data"]["quota"], "tasks_per_address");
        }
        other => panic!("a task over the share was not refused: {other:?}"),
    }

    // One share for both eras: the address's 2026-07-28 task waits too.
    let modern = stateless_support::tool_call(
        1,
        "slow_compute",
        json!({"seconds": 0, "label": "modern"}),
        json!({}),
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    );
    let send_modern = || {
        let mut post = from("127.0.0.2")
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        for (name, value) in stateless_support::headers(&modern) {
            post = post.header(name, value);
        }
        post.body(modern.to_string()).send()
    };
    let status = within("POST", send_modern()).await.unwrap().status();
    assert_eq!(status, 429);

    // Another address still runs its tasks.
    let mut other = Client::with_http(from("127.0.0.3"), url, "2025-11-25");
    within("initialize", other.initialize(json!({})))
        .await
        .unwrap();
    start(&other, "slow_compute", slow.clone(), json!({})).await;

    // Cancelled, the session's task gives its share back.
    rpc(&flooder, "tasks/cancel", json!({"taskId": id(&held)})).await;
    within("the share given back", async {
        while within("POST", send_modern()).await.unwrap().status() == 429 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}
