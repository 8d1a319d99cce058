//! Each client's share of a node's running tasks and listen streams
//! (2026-07-28), on a real node: a principal, or without authorization a
//! client address (sockets bound to 127.0.0.2, 127.0.0.3, …), at its
//! `tasks_per_*` or `listen_streams_per_address` share gets 429 with
//! -32029 naming the quota, while another principal or address still
//! starts tasks and opens listen streams; a slot freed by a cancelled task
//! is taken again. With two nodes on a real Redis the share is the
//! cluster's, and the node running a task keeps renewing its slot.

mod auth_support;
mod stateless_support;

use std::net::IpAddr;
use std::time::Duration;

use mcp_cluster_testkit::{Cluster, NodeProcess, TestIssuer, node_binary, within};
use serde_json::{Value, json};
use stateless_support::{Messages, headers, request, tool_call};

/// Each client's share in these tests.
const SHARE: u64 = 2;

fn caps() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// A task of 30 s (cancelled or left running when the node stops).
fn slow(id: u64) -> Value {
    tool_call(
        id,
        "slow_compute",
        json!({"seconds": 30, "label": "share"}),
        json!({}),
        caps(),
    )
}

fn listen(id: u64) -> Value {
    request(
        id,
        "subscriptions/listen",
        json!({"notifications": {}}),
        json!({}),
    )
}

/// A client: its connections come from `ip`, its requests carry `token`.
struct Caller {
    http: reqwest::Client,
    token: Option<String>,
}

impl Caller {
    fn from(ip: &str, token: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .local_address(ip.parse::<IpAddr>().unwrap())
            .build()
            .unwrap();
        Self { http, token }
    }

    async fn send(&self, url: &str, body: &Value) -> reqwest::Response {
        let mut builder = self
            .http
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        for (name, value) in headers(body) {
            builder = builder.header(name, value);
        }
        if let Some(token) = &self.token {
            builder = builder.bearer_auth(token);
        }
        within("POST", builder.body(body.to_string()).send())
            .await
            .unwrap()
    }

    /// POSTs `body`: the status and the response to it (JSON, or from the
    /// SSE stream).
    async fn call(&self, url: &str, body: &Value) -> (u16, Value) {
        let res = self.send(url, body).await;
        let status = res.status().as_u16();
        let sse = res
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if !sse {
            let text = within("body", res.text()).await.unwrap();
            return (status, serde_json::from_str(&text).unwrap_or(json!(text)));
        }
        let mut stream = Messages::new(res);
        loop {
            let message = stream.next().await.expect("a response");
            if message.get("id") == body.get("id") && message.get("method").is_none() {
                return (status, message);
            }
        }
    }

    /// Starts a task; its id.
    async fn start_task(&self, url: &str, id: u64) -> String {
        let (status, response) = self.call(url, &slow(id)).await;
        assert_eq!(status, 200, "{response}");
        assert_eq!(response["result"]["resultType"], "task", "{response}");
        response["result"]["taskId"].as_str().unwrap().to_owned()
    }

    /// Opens a listen stream, acknowledged; held while the value lives.
    async fn open_listen(&self, url: &str, id: u64) -> Messages {
        let res = self.send(url, &listen(id)).await;
        assert_eq!(res.status(), 200);
        let mut stream = Messages::new(res);
        let ack = stream.next().await.expect("acknowledgement");
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        stream
    }
}

/// A refusal by `quota`, answering request `id`.
fn assert_refused(status: u16, response: &Value, id: u64, quota: &str) {
    assert_eq!(status, 429, "{response}");
    assert_eq!(response["id"], id, "{response}");
    let error = &response["error"];
    assert_eq!(error["code"], -32029, "{response}");
    assert_eq!(error["data"]["quota"], quota, "{response}");
    assert!(error["data"]["retryAfterSeconds"].as_u64().unwrap() >= 1);
    assert!(
        error["message"].as_str().unwrap().contains(quota),
        "{response}"
    );
}

/// Starts a task as soon as the caller's freed slot is given back.
async fn start_again(caller: &Caller, url: &str) {
    within("a freed task slot is taken again", async {
        for id in 100.. {
            let (status, response) = caller.call(url, &slow(id)).await;
            match status {
                200 => {
                    assert_eq!(response["result"]["resultType"], "task", "{response}");
                    return;
                }
                429 => tokio::time::sleep(Duration::from_millis(100)).await,
                other => panic!("{other}: {response}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn one_address_at_its_share_leaves_tasks_and_listen_streams_to_the_others() {
    let share = SHARE.to_string();
    let node = NodeProcess::spawn(
        &node_binary(),
        &[
            "--log",
            "warn",
            "--quota-tasks-per-address",
            &share,
            "--quota-listen-streams-per-address",
            &share,
        ],
    )
    .unwrap_or_else(|err| panic!("{err:#}"));
    let url = node.url();
    let flooder = Caller::from("127.0.0.2", None);
    let other = Caller::from("127.0.0.3", None);

    let mut tasks = Vec::new();
    for id in 1..=SHARE {
        tasks.push(flooder.start_task(url, id).await);
    }
    let (status, response) = flooder.call(url, &slow(10)).await;
    assert_refused(status, &response, 10, "tasks_per_address");
    // Another address still runs its tasks.
    other.start_task(url, 11).await;

    let mut streams = Vec::new();
    for id in 20..20 + SHARE {
        streams.push(flooder.open_listen(url, id).await);
    }
    let (status, response) = flooder.call(url, &listen(30)).await;
    assert_refused(status, &response, 30, "listen_streams_per_address");
    let _others = other.open_listen(url, 31).await;

    // A cancelled task gives its slot back.
    let cancel = request(40, "tasks/cancel", json!({"taskId": tasks[0]}), caps());
    let (status, response) = flooder.call(url, &cancel).await;
    assert_eq!(status, 200, "{response}");
    start_again(&flooder, url).await;
    drop(streams);
}

#[tokio::test]
async fn one_principal_at_its_share_leaves_tasks_to_the_others() {
    let issuer = TestIssuer::start().await.unwrap();
    let config = auth_support::config_file(
        "task-share",
        &issuer,
        auth_support::RESOURCE,
        "",
        &format!("[quotas]\ntasks_per_principal = {SHARE}"),
    );
    let node = auth_support::node(&config);
    let url = node.url();
    let token = |subject: &str| {
        Some(
            issuer
                .token()
                .audience(auth_support::RESOURCE)
                .subject(subject)
                .sign(),
        )
    };
    // Both from the same address: principals are counted, not addresses.
    let greedy = Caller::from("127.0.0.1", token("greedy"));
    let other = Caller::from("127.0.0.1", token("other"));

    let mut tasks = Vec::new();
    for id in 1..=SHARE {
        tasks.push(greedy.start_task(url, id).await);
    }
    let (status, response) = greedy.call(url, &slow(10)).await;
    assert_refused(status, &response, 10, "tasks_per_principal");
    for id in 11..11 + SHARE {
        other.start_task(url, id).await;
    }

    let cancel = request(40, "tasks/cancel", json!({"taskId": tasks[1]}), caps());
    let (status, response) = greedy.call(url, &cancel).await;
    assert_eq!(status, 200, "{response}");
    start_again(&greedy, url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_share_holds_across_nodes_while_the_tasks_run() {
    // Slots lapse 3 s after their node's last renewal (every second).
    let config = std::env::temp_dir().join(format!("task-share-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "[quotas]\ntasks_per_address = 2\nstream_lease_secs = 3\n",
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let cluster = tokio::task::block_in_place(|| {
        Cluster::start(2, &["--config", &config]).unwrap_or_else(|err| panic!("{err:#}"))
    });
    let nodes = [cluster.node_url(0), cluster.node_url(1)];
    let flooder = Caller::from("127.0.0.4", None);
    // One task on each node: neither node alone is at 2, the cluster is.
    flooder.start_task(&nodes[0], 1).await;
    flooder.start_task(&nodes[1], 2).await;
    for (n, url) in nodes.iter().enumerate() {
        let id = 10 + n as u64;
        let (status, response) = flooder.call(url, &slow(id)).await;
        assert_refused(status, &response, id, "tasks_per_address");
    }
    // Past the lease, the running tasks' nodes have renewed their slots.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (status, response) = flooder.call(&nodes[0], &slow(20)).await;
    assert_refused(status, &response, 20, "tasks_per_address");
    Caller::from("127.0.0.5", None)
        .start_task(&nodes[1], 21)
        .await;
}
