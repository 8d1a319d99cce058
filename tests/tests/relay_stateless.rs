//! A hosted session-era server served to 2026-07-28 clients, which have no
//! session: `server/discover` answers with the child's own capabilities and
//! `serverInfo`; requests run on initialized children kept per principal and
//! client capabilities (never shared between them); a child's question
//! during a call becomes the call's `input_required` result, and the
//! client's retry gives the answer to the child that asked (which waited;
//! `relay_rounds.rs` has it across nodes). The hosted server is
//! `mcp-node --stdio`.

mod relay_support;
mod stateless_support;

use std::time::Duration;

use mcp_cluster_testkit::{NodeProcess, node_binary};
use relay_support::children_of;
use serde_json::{Value, json};
use stateless_support::*;

fn hosting() -> (NodeProcess, std::path::PathBuf) {
    hosting_with("")
}

/// A node hosting `mcp-node --stdio`, with `settings` (more lines of the
/// upstream's table).
fn hosting_with(settings: &str) -> (NodeProcess, std::path::PathBuf) {
    let argv =
        serde_json::to_string(&[node_binary().display().to_string(), "--stdio".into()]).unwrap();
    hosting_table(&format!("name = \"inner\"\ncommand = {argv}\n{settings}\n"))
}

/// A node hosting the upstream of `table` (its `[[upstreams]]` lines).
fn hosting_table(table: &str) -> (NodeProcess, std::path::PathBuf) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mcp-relay-stateless-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.toml");
    std::fs::write(&config, format!("[[upstreams]]\n{table}")).unwrap();
    let node =
        NodeProcess::spawn_logged(&node_binary(), &["--config", config.to_str().unwrap()], &[])
            .unwrap();
    (node, dir)
}

#[tokio::test]
async fn discover_answers_with_the_child_s_capabilities_and_calls_run_on_pooled_children() {
    let (node, dir) = hosting();
    let url = node.url();
    let discovered = call(
        url,
        &request(1, "server/discover", json!({}), json!({})),
        &[],
    )
    .await;
    let result = &discovered.response["result"];
    assert!(
        result["capabilities"]["tools"].is_object(),
        "{discovered:?}"
    );
    assert!(
        result["capabilities"]["prompts"].is_object(),
        "{discovered:?}"
    );
    let info = &result["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_ne!(
        info["name"], "inner",
        "the child's own serverInfo: {discovered:?}"
    );
    assert!(info["name"].is_string(), "{discovered:?}");

    let listed = call(url, &request(2, "tools/list", json!({}), json!({})), &[]).await;
    let tools = listed.response["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "echo"), "{listed:?}");
    for id in 3..6 {
        let echoed = call(
            url,
            &tool_call(
                id,
                "echo",
                json!({"message": "pooled"}),
                json!({}),
                json!({}),
            ),
            &[],
        )
        .await;
        assert_eq!(text(&echoed.response), "Echo: pooled", "{echoed:?}");
    }
    // One child served them all, one request at a time; the probe that
    // learnt the capabilities is gone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while children_of(node.pid()) != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "children: {}",
            children_of(node.pid())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Another set of client capabilities gets a child of its own (the child
    // was initialized with the capabilities of its first client).
    let other = call(
        url,
        &tool_call(
            6,
            "echo",
            json!({"message": "other"}),
            json!({}),
            all_caps(),
        ),
        &[],
    )
    .await;
    assert_eq!(text(&other.response), "Echo: other", "{other:?}");
    assert_eq!(children_of(node.pid()), 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_child_s_question_becomes_input_required_and_the_retry_answers_it() {
    let (node, dir) = hosting();
    let url = node.url();
    let first = call(
        url,
        &tool_call(
            1,
            "test_elicitation",
            json!({"message": "who?"}),
            json!({}),
            all_caps(),
        ),
        &[],
    )
    .await;
    let result = &first.response["result"];
    assert_eq!(result["resultType"], "input_required", "{first:?}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first:?}");
    let (key, question) = requests.iter().next().unwrap();
    assert_eq!(question["method"], "elicitation/create", "{first:?}");
    assert_eq!(question["params"]["message"], "who?", "{first:?}");
    let state = result["requestState"].as_str().unwrap();

    let answer: Value = json!({ key.as_str(): {"action": "accept",
        "content": {"username": "ada", "email": "ada@example.com"}}});
    let retried = call(
        url,
        &tool_call(
            2,
            "test_elicitation",
            json!({"message": "who?"}),
            json!({"inputResponses": answer, "requestState": state}),
            all_caps(),
        ),
        &[],
    )
    .await;
    let done = text(&retried.response);
    assert!(
        done.contains("accept") && done.contains("ada@example.com"),
        "{retried:?}"
    );
    assert_eq!(retried.response["result"]["resultType"], "complete");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn mirrored_arguments_are_checked_against_their_headers_before_any_listing() {
    let (node, dir) = hosting();
    let url = node.url();
    // No client listed the tools: the relay learnt them with the child's
    // capabilities, and the transport checks the header before the call.
    let body = tool_call(
        1,
        "test_header_param",
        json!({"region": "eu"}),
        json!({}),
        json!({}),
    );
    let mismatch = call(url, &body, &[("Mcp-Param-Region", Some("us"))]).await;
    assert_eq!(mismatch.status, 400, "{mismatch:?}");
    assert_eq!(mismatch.response["error"]["code"], -32020, "{mismatch:?}");
    let matching = call(url, &body, &[("Mcp-Param-Region", Some("eu"))]).await;
    assert_eq!(text(&matching.response), "Region: eu", "{matching:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_tool_the_operator_marks_for_tasks_runs_as_one_for_clients_of_the_extension() {
    let (node, dir) = hosting_with("tool_tasks = { slow_compute = \"optional\" }");
    let url = node.url();
    let args = json!({"seconds": 0.2, "label": "hosted"});
    let created = call(
        url,
        &tool_call(1, "slow_compute", args.clone(), json!({}), task_caps()),
        &[],
    )
    .await;
    assert_eq!(
        created.response["result"]["resultType"], "task",
        "{created:?}"
    );
    let task = created.response["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = poll_task(url, &task, |r| r["status"] == "completed").await;
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "Computed hosted in 0.2 s.",
        "{done}"
    );
    // Without the extension, the same tool answers at once; another tool
    // never runs as a task.
    let sync = call(
        url,
        &tool_call(2, "slow_compute", args, json!({}), json!({})),
        &[],
    )
    .await;
    assert_eq!(
        text(&sync.response),
        "Computed hosted in 0.2 s.",
        "{sync:?}"
    );
    let echo = call(
        url,
        &tool_call(3, "echo", json!({"message": "m"}), json!({}), task_caps()),
        &[],
    )
    .await;
    assert_eq!(
        echo.response["result"]["resultType"], "complete",
        "{echo:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_pooled_child_s_list_change_reaches_a_listen_stream() {
    let (node, dir) = hosting();
    let url = node.url();
    let listen = request(
        1,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
        json!({}),
    );
    let mut stream = Messages::new(send(url, &listen, &[]).await);
    let ack = stream.next().await.expect("acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    // The child changes its tool list during a call and says so outside
    // the call: the relay passes it to the node's listen streams.
    let changed = call(
        url,
        &tool_call(
            2,
            "test_trigger_tool_change",
            json!({}),
            json!({}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert!(changed.response["result"].is_object(), "{changed:?}");
    let change = stream.next().await.expect("the tools list change");
    assert_eq!(
        change["method"], "notifications/tools/list_changed",
        "{change}"
    );
    assert_eq!(
        change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 1,
        "{change}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// An HTTP server that speaks 2026-07-28 (`urls` with `stateless = true`),
/// here an `mcp-node` replica: no session opened there; every request goes
/// as the client sent it, with the standard headers the server requires
/// (a mirrored argument's too, base64 when it is not plain ASCII); its own
/// input round and its refusals pass through.
#[tokio::test]
async fn an_http_server_of_2026_07_28_gets_each_request_with_its_headers_and_no_session() {
    let replica = NodeProcess::spawn_bound(
        &node_binary(),
        &["--log", "warn"],
        &format!("127.0.0.1:{}", mcp_cluster_testkit::free_port().unwrap()),
    )
    .unwrap();
    let replica_base = replica.url().trim_end_matches("/mcp").to_owned();
    let (node, dir) = hosting_table(&format!(
        "name = \"modern\"\nurls = [\"{}\"]\nstateless = true\n",
        replica.url()
    ));
    let url = node.url();

    let discovered = call(
        url,
        &request(1, "server/discover", json!({}), json!({})),
        &[],
    )
    .await;
    let result = &discovered.response["result"];
    assert!(
        result["capabilities"]["tools"].is_object(),
        "{discovered:?}"
    );
    assert!(
        result["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28")),
        "{discovered:?}"
    );
    let echoed = call(
        url,
        &tool_call(
            2,
            "echo",
            json!({"message": "modern"}),
            json!({}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert_eq!(text(&echoed.response), "Echo: modern", "{echoed:?}");

    // The replica requires Mcp-Param-Region: the node sends it, as the
    // client did (plain, then base64 for a non-ASCII value).
    for (region, header) in [("eu", "eu"), ("Zürich", "=?base64?WsO8cmljaA==?=")] {
        let body = tool_call(
            3,
            "test_header_param",
            json!({"region": region}),
            json!({}),
            json!({}),
        );
        let answered = call(url, &body, &[("Mcp-Param-Region", Some(header))]).await;
        assert_eq!(
            text(&answered.response),
            format!("Region: {region}"),
            "{answered:?}"
        );
    }

    // The replica's own input round, both ways.
    let ask = |id, extra| {
        tool_call(
            id,
            "test_elicitation",
            json!({"message": "who?"}),
            extra,
            all_caps(),
        )
    };
    let first = call(url, &ask(4, json!({})), &[]).await;
    let result = &first.response["result"];
    assert_eq!(result["resultType"], "input_required", "{first:?}");
    let (key, question) = result["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(question["method"], "elicitation/create", "{first:?}");
    let state = result["requestState"].as_str().unwrap();
    let answer = json!({ key.as_str(): {"action": "accept",
        "content": {"username": "ada", "email": "ada@example.com"}}});
    let retried = call(
        url,
        &ask(5, json!({"inputResponses": answer, "requestState": state})),
        &[],
    )
    .await;
    assert!(
        text(&retried.response).contains("ada@example.com"),
        "{retried:?}"
    );

    // A refusal of the replica's own (400, its JSON-RPC error in the body)
    // is the client's answer.
    let node_base = url.trim_end_matches("/mcp").to_owned();
    let relayed = "mcp_upstream_requests_total{mcp_method_name=\"tools/call\",upstream=\"modern\"}";
    let relayed_before = mcp_cluster_testkit::metric(&node_base, relayed).await;
    let unknown = call(
        url,
        &tool_call(
            6,
            "test_elicitation",
            json!({"message": "who?"}),
            json!({}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    assert_eq!(unknown.response["error"]["code"], -32021, "{unknown:?}");
    assert_eq!(
        mcp_cluster_testkit::metric(&node_base, relayed).await,
        relayed_before + 1.0,
        "relayed, and refused by the replica"
    );

    // A stream the client closes is closed at the replica too: its
    // handler stops (the revision's cancellation).
    let mut m = meta(json!({}));
    m["progressToken"] = json!("p");
    let long = request(
        7,
        "tools/call",
        json!({"name": "long_running_operation",
               "arguments": {"duration_ms": 60_000, "steps": 600},
               "_meta": m}),
        json!({}),
    );
    let mut stream = Messages::new(send(url, &long, &[]).await);
    let first = stream.next().await.expect("progress");
    assert_eq!(first["method"], "notifications/progress", "{first}");
    let running = "mcp_requests_in_flight";
    assert_eq!(
        mcp_cluster_testkit::metric(&replica_base, running).await,
        1.0
    );
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while mcp_cluster_testkit::metric(&replica_base, running).await > 0.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica's handler still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    assert_eq!(
        mcp_cluster_testkit::metric(
            &replica_base,
            "mcp_sessions_created_total{transport=\"streamable_http\"}"
        )
        .await,
        0.0,
        "no session opened at the replica"
    );

    // A session-era client gets an upstream session of its own there.
    let mut client = mcp_cluster_client::Client::new(url, "2025-11-25");
    mcp_cluster_testkit::within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (echoed, _) = mcp_cluster_testkit::within(
        "tools/call",
        client.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "session"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: session");
    assert_eq!(
        mcp_cluster_testkit::metric(
            &replica_base,
            "mcp_sessions_created_total{transport=\"streamable_http\"}"
        )
        .await,
        1.0
    );
    let _ = std::fs::remove_dir_all(dir);
}
