//! A hosted MCP server (`[[upstreams]]`) in a cluster: the node that
//! started a session's child owns it, and every other node serves the
//! session by forwarding its requests there over the control bus, their
//! answers coming back through the event log. The load balancer needs no
//! stickiness: each step below goes to a node chosen on purpose. The
//! hosted server is `mcp-node --stdio` itself.

mod cluster_support;
mod relay_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{node_binary, within};
use relay_support::{Scratch, config_file};
use serde_json::{Value, json};

/// A configuration file hosting `mcp-node --stdio`, in a directory removed
/// with the returned guard.
fn hosting_config() -> (String, Scratch) {
    hosting_config_of(&[node_binary().display().to_string(), "--stdio".into()])
}

/// A configuration file hosting `command` (argv).
fn hosting_config_of(command: &[String]) -> (String, Scratch) {
    let argv = serde_json::to_string(command).unwrap();
    config_file(
        "mcp-relay-cluster",
        &format!("[[upstreams]]\nname = \"inner\"\ncommand = {argv}\n"),
    )
}

/// The live (not zombie) processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if is_running_child(child, Some(pid)) {
            found.push(child);
        }
    }
    found
}

/// Whether `pid` runs (not a zombie), and has parent `parent` if given.
fn is_running_child(pid: u32, parent: Option<u32>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // pid (comm) state ppid ...; comm may hold spaces.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields.len() > 1
        && fields[0] != "Z"
        && fields[0] != "X"
        && parent.is_none_or(|p| fields[1] == p.to_string())
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

async fn request(client: &Client, method: &str, params: Value) -> Value {
    within(method, client.request(method, params))
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn every_node_serves_a_hosted_session_whose_child_runs_on_one() {
    let (config, _dir) = hosting_config();
    let cluster = start(3, &["--config", &config]);
    let pids: Vec<u32> = (0..3).map(|i| cluster.node(i).unwrap().pid()).collect();
    let owner = session(&cluster.node_url(0), json!({"elicitation": {}})).await;
    let id = owner.session_id().unwrap().to_owned();
    let b = client(&cluster.node_url(1), &id);
    let c = client(&cluster.node_url(2), &id);
    assert_eq!(children_of(pids[0]).len(), 1, "the child runs on node 0");

    // Every node answers as the child does, and starts no child of its own.
    let here = tool_names(&request(&owner, "tools/list", json!({})).await);
    assert!(here.iter().any(|n| n == "echo"), "{here:?}");
    assert_eq!(
        tool_names(&request(&b, "tools/list", json!({})).await),
        here
    );
    let echoed = request(
        &c,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "from node 2"}}),
    )
    .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: from node 2");
    assert!(children_of(pids[1]).is_empty() && children_of(pids[2]).is_empty());

    // Progress under the client's token, through node 1.
    let mut stream = post_sse(
        &b,
        &call_with_progress(30, "test_tool_with_progress", json!({}), "mine"),
    )
    .await;
    priming(&mut stream).await;
    let seen = read_to_end(&mut stream).await;
    assert_eq!(seen.progress, [0.0, 50.0, 100.0], "{seen:?}");
    assert_eq!(seen.responses.len(), 1, "{seen:?}");
    assert!(text(&seen.responses[0]["result"]).contains("successfully"));

    // The child's question reaches the client through node 1; the answer,
    // POSTed to node 2, reaches the child on node 0.
    let mut stream = post_sse(
        &b,
        &call(31, "test_elicitation", json!({"message": "who?"})),
    )
    .await;
    priming(&mut stream).await;
    let ask = message(&next_event(&mut stream).await.expect("the question"));
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    post_accepted(
        &c,
        &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
            "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}}),
    )
    .await;
    let seen = read_to_end(&mut stream).await;
    assert_eq!(seen.responses.len(), 1, "{seen:?}");
    assert!(
        text(&seen.responses[0]["result"]).contains("ada"),
        "{seen:?}"
    );

    // A forwarded call's stream, dropped on node 1, resumed on node 2.
    let mut stream = post_sse(&b, &long_running(32, 1500, 5, "resumed")).await;
    priming(&mut stream).await;
    let first = next_event(&mut stream).await.expect("the first progress");
    assert_eq!(message(&first)["method"], "notifications/progress");
    drop(stream);
    let mut resumed = resume(&c, first.id.as_deref().unwrap()).await;
    let seen = read_to_end(&mut resumed).await;
    assert_eq!(seen.responses.len(), 1, "{seen:?}");
    assert_eq!(seen.responses[0]["id"], 32);
    assert!(
        seen.progress.len() >= 3,
        "the rest of the progress: {seen:?}"
    );

    // A cancel POSTed to node 2 stops the call forwarded from node 1.
    let mut stream = post_sse(&b, &long_running(33, 60_000, 600, "cancelled")).await;
    priming(&mut stream).await;
    next_event(&mut stream).await.expect("progress");
    post_accepted(
        &c,
        &notification(
            "notifications/cancelled",
            json!({"requestId": 33, "reason": "test"}),
        ),
    )
    .await;
    let seen = read_to_end(&mut stream).await;
    assert!(seen.responses.is_empty(), "a cancelled call: {seen:?}");

    // The child's own notifications reach a GET stream on node 2.
    let Reply::Sse(mut get) = within("GET", c.get(None)).await.unwrap() else {
        panic!("the GET stream is a stream");
    };
    let uri = "test://watched-resource";
    let subscribed = request(&b, "resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    let touched = request(
        &b,
        "tools/call",
        json!({"name": "touch_resource", "arguments": {"uri": uri}}),
    )
    .await;
    assert!(touched["result"].is_object(), "{touched}");
    let update = loop {
        let event = next_event(&mut get).await.expect("the GET stream ended");
        if event.data.is_empty() {
            continue;
        }
        let m = message(&event);
        if m["method"] == "notifications/resources/updated" {
            break m;
        }
    };
    assert_eq!(update["params"]["uri"], uri);
    drop(get);

    // DELETE on node 2 ends the child on node 0; the session is gone
    // everywhere.
    assert_eq!(within("DELETE", c.delete()).await.unwrap(), 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !children_of(pids[0]).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for node in [&owner, &b] {
        let body = json!({"jsonrpc": "2.0", "id": 40, "method": "tools/list"});
        match within("after DELETE", node.post(&body)).await.unwrap() {
            Reply::Status(status, _, _) if status == 404 => {}
            other => panic!("a deleted session is gone: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_child_s_question_outside_any_request_reaches_a_get_stream_on_another_node() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("relay/hostile.py");
    let (config, _dir) = hosting_config_of(&[
        "python3".into(),
        script.display().to_string(),
        "roots".into(),
    ]);
    let cluster = start(3, &["--config", &config]);
    let owner = session(&cluster.node_url(0), json!({"roots": {}})).await;
    let id = owner.session_id().unwrap().to_owned();
    let b = client(&cluster.node_url(1), &id);
    let c = client(&cluster.node_url(2), &id);
    // The child asked when the session was initialized, on node 0; the
    // client's first reader opens on node 1.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Reply::Sse(mut get) = within("GET", b.get(None)).await.unwrap() else {
        panic!("the GET stream is a stream");
    };
    let question = within("question", get.next_message())
        .await
        .unwrap()
        .expect("the GET stream ended");
    assert_eq!(question["method"], "roots/list", "{question}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"roots": [{"uri": "file:///elsewhere"}]}});
    assert!(matches!(
        within("answer", c.post(&answer)).await.unwrap(),
        Reply::Accepted
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let acted = request(&b, "tools/call", json!({"name": "act", "arguments": {}})).await;
        let text = acted["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if text != "no answer yet" {
            let got: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
            assert_eq!(
                got["result"]["roots"][0]["uri"], "file:///elsewhere",
                "{got}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the answer never reached the child"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_killed_owner_s_sessions_answer_404_elsewhere_and_leave_no_child() {
    let (config, _dir) = hosting_config();
    let mut cluster = start(2, &["--config", &config]);
    let owner_pid = cluster.node(0).unwrap().pid();
    let owner = session(&cluster.node_url(0), json!({})).await;
    let other = client(&cluster.node_url(1), owner.session_id().unwrap());
    let children = children_of(owner_pid);
    assert_eq!(children.len(), 1);
    let echo = |n: i64| call(n, "echo", json!({"message": "still?"}));
    let before = request(&other, "tools/call", echo(1)["params"].clone()).await;
    assert_eq!(before["result"]["content"][0]["text"], "Echo: still?");

    cluster.kill_node(0);
    // Until the survivor knows the owner dead (its heartbeat lapses), a
    // request may be forwarded and answered with an error; then the
    // session is over: 404, and never a 5xx or a fresh child's answer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut n = 2;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still not 404 after 30 s"
        );
        match within("after the kill", other.post(&echo(n)))
            .await
            .unwrap()
        {
            Reply::Status(status, _, _) if status == 404 => break,
            Reply::Json(response, _) => {
                assert!(response["error"].is_object(), "{response}");
            }
            Reply::Sse(mut stream) => {
                let seen = read_to_end(&mut stream).await;
                assert_eq!(seen.responses.len(), 1, "{seen:?}");
                assert!(seen.responses[0]["error"].is_object(), "{seen:?}");
            }
            other => panic!("neither an error nor 404: {other:?}"),
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The dead node's child went with it (its parent-death signal).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while children.iter().any(|&pid| is_running_child(pid, None)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child outlived its node"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A new session works, on the survivor.
    let fresh = session(&cluster.node_url(1), json!({})).await;
    let echoed = request(&fresh, "tools/call", echo(1)["params"].clone()).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: still?");
}

/// `tools/call` params of the echo tool `name`.
fn echo(name: &str) -> Value {
    json!({"name": name, "arguments": {"message": "still here"}})
}

/// Calls `tool` (an echo) through `other` until it answers as before the
/// owner was killed. Until `other` knows the owner dead (its heartbeat
/// lapses), a request may be forwarded there and fail; then `other` takes
/// the session over: never a 404 meanwhile.
async fn until_taken_over(other: &Client, tool: &str) {
    let killed = tokio::time::Instant::now();
    let deadline = killed + Duration::from_secs(30);
    for n in 2.. {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not taken over after 30 s"
        );
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": echo(tool)});
        let answer = match within("after the kill", other.post(&body)).await.unwrap() {
            Reply::Json(response, _) => response,
            Reply::Sse(mut stream) => {
                let seen = read_to_end(&mut stream).await;
                assert_eq!(seen.responses.len(), 1, "{seen:?}");
                seen.responses[0].clone()
            }
            other => panic!("neither an answer nor an error: {other:?}"),
        };
        if answer["result"]["content"][0]["text"] == "Echo: still here" {
            eprintln!(
                "taken over {:?} after the kill, at request {n}",
                killed.elapsed()
            );
            return;
        }
        assert!(answer["error"].is_object(), "{answer}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// An `mcp-node` replica of its own, for an HTTP upstream; its base URL.
fn http_replica() -> (mcp_cluster_testkit::NodeProcess, String) {
    let replica = mcp_cluster_testkit::NodeProcess::spawn_bound(
        &node_binary(),
        &["--log", "warn"],
        &format!("127.0.0.1:{}", mcp_cluster_testkit::free_port().unwrap()),
    )
    .unwrap();
    let base = replica.url().trim_end_matches("/mcp").to_owned();
    (replica, base)
}

/// Sessions a replica opened.
const OPENED: &str = "mcp_sessions_created_total{transport=\"streamable_http\"}";

/// An HTTP server's session outlives the node that opened it: killed,
/// its session is taken over by the node the client reaches next, which
/// goes on with the same upstream session at the same replica (no second
/// `initialize` there), its requests, progress and DELETE included.
#[tokio::test]
async fn a_killed_owner_s_http_session_goes_on_at_its_replica_through_another_node() {
    let (replica, replica_base) = http_replica();
    let urls = serde_json::to_string(&[replica.url()]).unwrap();
    let (config, _dir) = config_file(
        "mcp-relay-cluster-http",
        &format!("[[upstreams]]\nname = \"replicas\"\nurls = {urls}\n"),
    );
    let mut cluster = start(2, &["--config", &config]);
    let owner = session(&cluster.node_url(0), json!({})).await;
    let other = client(&cluster.node_url(1), owner.session_id().unwrap());
    let before = request(&other, "tools/call", echo("echo")).await;
    assert_eq!(before["result"]["content"][0]["text"], "Echo: still here");
    let opened = "mcp_sessions_created_total{transport=\"streamable_http\"}";
    assert_eq!(
        mcp_cluster_testkit::metric(&replica_base, OPENED).await,
        1.0
    );

    cluster.kill_node(0);
    until_taken_over(&other, "echo").await;
    let survivor = cluster.node_url(1).trim_end_matches("/mcp").to_owned();
    assert_eq!(
        mcp_cluster_testkit::metric(&survivor, "mcp_sessions_adopted_total").await,
        1.0
    );
    assert_eq!(
        mcp_cluster_testkit::metric(&replica_base, opened).await,
        1.0,
        "the replica's session goes on: no second initialize"
    );

    // Progress streams through the node that took it over.
    let body = call_with_progress(
        100,
        "long_running_operation",
        json!({"duration_ms": 200, "steps": 2}),
        "after",
    );
    let Reply::Sse(mut stream) = within("POST", other.post(&body)).await.unwrap() else {
        panic!("progress comes on a stream");
    };
    let seen = read_to_end(&mut stream).await;
    assert_eq!(seen.responses.len(), 1, "{seen:?}");
    assert!(seen.responses[0]["result"].is_object(), "{seen:?}");
    assert_eq!(seen.progress.len(), 2, "{seen:?}");

    // DELETE ends the upstream session too.
    within("DELETE", other.delete()).await.unwrap();
    let ended = "mcp_sessions_ended_total{reason=\"deleted\"}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while mcp_cluster_testkit::metric(&replica_base, ended).await < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica's session was not ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A node drained (SIGTERM, as a rolling deploy stops it) leaves its HTTP
/// servers' sessions to the cluster instead of ending them: no DELETE
/// reaches the replica, and the next request, on another node, is answered
/// by the same upstream session.
#[tokio::test]
async fn a_drained_owner_leaves_its_http_session_to_another_node() {
    let (replica, replica_base) = http_replica();
    let urls = serde_json::to_string(&[replica.url()]).unwrap();
    let (config, _dir) = config_file(
        "mcp-relay-cluster-drain",
        &format!("[[upstreams]]\nname = \"replicas\"\nurls = {urls}\n"),
    );
    let mut cluster = start(2, &["--config", &config]);
    let owner = session(&cluster.node_url(0), json!({})).await;
    let other = client(&cluster.node_url(1), owner.session_id().unwrap());
    let before = request(&owner, "tools/call", echo("echo")).await;
    assert_eq!(before["result"]["content"][0]["text"], "Echo: still here");

    let status = cluster.terminate_node(0).unwrap().expect("node 0 was up");
    assert!(status.success(), "{status:?}");
    let after = request(&other, "tools/call", echo("echo")).await;
    assert_eq!(
        after["result"]["content"][0]["text"], "Echo: still here",
        "{after}"
    );
    assert_eq!(
        mcp_cluster_testkit::metric(&replica_base, OPENED).await,
        1.0
    );
    assert_eq!(
        mcp_cluster_testkit::metric(
            &replica_base,
            "mcp_sessions_ended_total{reason=\"deleted\"}"
        )
        .await,
        0.0,
        "no DELETE reached the replica"
    );
    let survivor = cluster.node_url(1).trim_end_matches("/mcp").to_owned();
    assert_eq!(
        mcp_cluster_testkit::metric(&survivor, "mcp_sessions_adopted_total").await,
        1.0
    );
}

/// An owner that was only away (stopped past its heartbeat, then going on)
/// finds its session taken over by another node: it lets the upstream
/// session go without ending it and forwards the session's requests to
/// the new host; no DELETE, no second initialize at the replica.
#[tokio::test]
async fn an_owner_back_from_a_pause_leaves_its_taken_over_session_to_the_new_host() {
    let (replica, replica_base) = http_replica();
    let urls = serde_json::to_string(&[replica.url()]).unwrap();
    let (config, _dir) = config_file(
        "mcp-relay-cluster-pause",
        &format!("[[upstreams]]\nname = \"replicas\"\nurls = {urls}\n"),
    );
    let cluster = start(2, &["--config", &config]);
    let owner = session(&cluster.node_url(0), json!({})).await;
    let other = client(&cluster.node_url(1), owner.session_id().unwrap());
    let pid = cluster.node(0).unwrap().pid().to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {name}");
    };
    signal("-STOP");
    until_taken_over(&other, "echo").await;
    signal("-CONT");
    // Its timers run late: the idle keep-alive connection the client holds
    // to it is closed first (a client reusing it at that moment would see
    // the connection end, and retry).
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Back, the old owner answers through the new host.
    let back = request(&owner, "tools/call", echo("echo")).await;
    assert_eq!(
        back["result"]["content"][0]["text"], "Echo: still here",
        "{back}"
    );
    let again = request(&other, "tools/call", echo("echo")).await;
    assert_eq!(
        again["result"]["content"][0]["text"], "Echo: still here",
        "{again}"
    );
    assert_eq!(
        mcp_cluster_testkit::metric(&replica_base, OPENED).await,
        1.0
    );
    assert_eq!(
        mcp_cluster_testkit::metric(
            &replica_base,
            "mcp_sessions_ended_total{reason=\"deleted\"}"
        )
        .await,
        0.0,
        "no DELETE reached the replica"
    );
}

/// A federation of two HTTP servers: its session is taken over whole, each
/// part at its own replica; each tool answers under its prefixed name.
#[tokio::test]
async fn a_killed_owner_s_federated_http_session_goes_on_through_another_node() {
    let (a, a_base) = http_replica();
    let (b, b_base) = http_replica();
    let (config, _dir) = config_file(
        "mcp-relay-cluster-federation",
        &format!(
            "[[upstreams]]\nname = \"a\"\nurls = [\"{}\"]\n\n[[upstreams]]\nname = \"b\"\nurls = [\"{}\"]\n",
            a.url(),
            b.url()
        ),
    );
    let mut cluster = start(2, &["--config", &config]);
    let owner = session(&cluster.node_url(0), json!({})).await;
    let other = client(&cluster.node_url(1), owner.session_id().unwrap());
    for tool in ["a_echo", "b_echo"] {
        let answer = request(&other, "tools/call", echo(tool)).await;
        assert_eq!(answer["result"]["content"][0]["text"], "Echo: still here");
    }
    // Each node's start opened (and ended) sessions of its own to read
    // the upstreams' names: counted from here.
    let opened = [
        mcp_cluster_testkit::metric(&a_base, OPENED).await,
        mcp_cluster_testkit::metric(&b_base, OPENED).await,
    ];
    cluster.kill_node(0);
    until_taken_over(&other, "a_echo").await;
    let answer = request(&other, "tools/call", echo("b_echo")).await;
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: still here");
    for (base, before) in [&a_base, &b_base].into_iter().zip(opened) {
        assert_eq!(mcp_cluster_testkit::metric(base, OPENED).await, before);
    }
    let survivor = cluster.node_url(1).trim_end_matches("/mcp").to_owned();
    assert_eq!(
        mcp_cluster_testkit::metric(&survivor, "mcp_sessions_adopted_total").await,
        1.0
    );
}

/// A child that writes a log line while its question is still on its way
/// to the client (the question's write to Redis not yet done): the line
/// waits its turn behind the question, and neither holds up the other.
/// Each round asks one padded question (a slower write) and logs 0 to 4
/// ms after it; every round must end with the child's answer.
#[tokio::test]
async fn a_log_line_written_behind_a_question_holds_up_neither() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("relay/hostile.py");
    let (config, _dir) = hosting_config_of(&[
        "python3".into(),
        script.display().to_string(),
        "elicit".into(),
    ]);
    let cluster = tokio::task::spawn_blocking(move || start(1, &["--config", &config]))
        .await
        .unwrap();
    let client = session(&cluster.node_url(0), json!({"elicitation": {}})).await;
    for round in 0..20_i64 {
        let arguments = json!({"pad": 200_000, "log_after_ms": round % 5});
        let mut stream = post_sse(&client, &call(100 + round, "act", arguments)).await;
        priming(&mut stream).await;
        let ask = loop {
            let event = next_event(&mut stream).await.expect("the question");
            let m = message(&event);
            if m["method"] == "elicitation/create" {
                break m;
            }
        };
        post_accepted(
            &client,
            &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
                "action": "accept", "content": {"name": "ada"}}}),
        )
        .await;
        // Held up, the stream would wait for ever: `next_event` gives up.
        let rest = read_to_end(&mut stream).await;
        assert_eq!(rest.responses.len(), 1, "round {round}: {rest:?}");
        assert!(
            text(&rest.responses[0]["result"]).contains("ada"),
            "{rest:?}"
        );
    }
}
