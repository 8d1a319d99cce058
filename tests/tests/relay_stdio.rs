//! Hosting a stdio MCP server (`[[upstreams]]`): `mcp-node` started the way
//! the README says, with a configuration file naming the program, serves
//! that program's tools at its endpoint, one child process per session.
//! The hosted server here is `mcp-node --stdio` itself (its built-in tools
//! ask questions, report progress and run long), and for the hostile
//! cases `tests/relay/hostile.py`.

mod relay_support;

use std::path::Path;
use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use relay_support::call;
use serde_json::{Value, json};

const VERSION: &str = "2025-06-18";

/// A node hosting `command` (argv) as upstream `name`, with `settings`
/// (more `key = value` lines of the upstream's table). The configuration
/// file goes in a directory of its own, removed with the returned guard.
fn hosting(name: &str, command: &[&str], settings: &str) -> (NodeProcess, Scratch) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mcp-relay-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.toml");
    let argv = serde_json::to_string(command).unwrap();
    std::fs::write(
        &config,
        format!("[[upstreams]]\nname = \"{name}\"\ncommand = {argv}\n{settings}\n"),
    )
    .unwrap();
    let node =
        NodeProcess::spawn_logged(&node_binary(), &["--config", config.to_str().unwrap()], &[])
            .unwrap();
    (node, Scratch(dir))
}

/// A directory removed when dropped.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn inner_node() -> Vec<String> {
    vec![node_binary().display().to_string(), "--stdio".into()]
}

fn hostile(mode: &str) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("relay/hostile.py");
    vec!["python3".into(), script.display().to_string(), mode.into()]
}

fn argv(command: &[String]) -> Vec<&str> {
    command.iter().map(String::as_str).collect()
}

async fn session(node: &NodeProcess, capabilities: Value) -> (Client, Value) {
    let mut client = Client::new(node.url(), VERSION);
    let result = within("initialize", client.initialize(capabilities))
        .await
        .unwrap();
    (client, result)
}

/// The processes whose parent is `pid` and that still run (not zombies).
fn children_of(pid: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|p| p.ppid == pid)
        .map(|p| p.pid)
        .collect()
}

/// The processes of process group `group` that still run.
fn group_members(group: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == group)
        .map(|p| p.pid)
        .collect()
}

struct Proc {
    pid: u32,
    ppid: u32,
    pgrp: u32,
}

fn processes() -> Vec<Proc> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() < 3 || fields[0] == "Z" || fields[0] == "X" {
            continue;
        }
        found.push(Proc {
            pid,
            ppid: fields[1].parse().unwrap_or(0),
            pgrp: fields[2].parse().unwrap_or(0),
        });
    }
    found
}

/// Waits until `check` holds, for at most `limit`.
async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn next(stream: &mut SseStream) -> Option<Value> {
    within("next message", stream.next_message()).await.unwrap()
}

#[tokio::test]
async fn a_hosted_server_answers_as_itself_with_its_progress_and_its_questions() {
    let (node, _dir) = hosting("inner", &argv(&inner_node()), "");
    let (client, init) = session(&node, json!({"elicitation": {}})).await;
    // The child's own answer: its name, its instructions, its version.
    assert_eq!(init["serverInfo"]["name"], "mcp-node", "{init}");
    assert_eq!(init["protocolVersion"], VERSION);
    assert!(
        init["instructions"]
            .as_str()
            .unwrap()
            .contains("Built-in tools")
    );
    assert_eq!(
        children_of(node.pid()).len(),
        1,
        "one child for the session"
    );

    let (listed, _) = within("tools/list", client.request("tools/list", json!({})))
        .await
        .unwrap();
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"long_running_operation"),
        "{names:?}"
    );

    let (echoed, _) = call(&client, "echo", json!({"message": "through the relay"})).await;
    assert_eq!(
        echoed["result"]["content"][0]["text"],
        "Echo: through the relay"
    );

    // Progress under the client's own token, in order, then the answer.
    let body = json!({"jsonrpc": "2.0", "id": 70, "method": "tools/call", "params": {
        "name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "mine"}}});
    let Reply::Sse(mut stream) = within("progress call", client.post(&body)).await.unwrap() else {
        panic!("progress comes on a stream");
    };
    let mut progress = Vec::new();
    let answer = loop {
        let message = next(&mut stream).await.expect("the stream ended early");
        if message["method"] == "notifications/progress" {
            assert_eq!(message["params"]["progressToken"], "mine", "{message}");
            progress.push(message["params"]["progress"].as_f64().unwrap());
        } else {
            break message;
        }
    };
    assert_eq!(progress, [0.0, 50.0, 100.0]);
    assert_eq!(answer["id"], 70);
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("successfully")
    );

    // The child's question goes to the client on the call's stream, and
    // the client's answer back to the child.
    let body = json!({"jsonrpc": "2.0", "id": 71, "method": "tools/call", "params": {
        "name": "test_elicitation", "arguments": {"message": "who?"}}});
    let Reply::Sse(mut stream) = within("elicit call", client.post(&body)).await.unwrap() else {
        panic!("a question comes on a stream");
    };
    let ask = next(&mut stream).await.unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "who?");
    let reply = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}});
    assert!(matches!(
        within("answer", client.post(&reply)).await.unwrap(),
        Reply::Accepted
    ));
    let result = next(&mut stream).await.unwrap();
    assert_eq!(result["id"], 71);
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("accept") && text.contains("ada"), "{text}");
}

#[tokio::test]
async fn the_child_s_own_notifications_reach_the_get_stream() {
    let (node, _dir) = hosting("inner", &argv(&inner_node()), "");
    let (client, _) = session(&node, json!({})).await;
    let Reply::Sse(mut get) = within("GET", client.get(None)).await.unwrap() else {
        panic!("the GET stream is a stream");
    };
    let uri = "test://watched-resource";
    let (subscribed, _) = within(
        "subscribe",
        client.request("resources/subscribe", json!({"uri": uri})),
    )
    .await
    .unwrap();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    // The child's tool marks the resource changed: the child tells its
    // client (the relay), outside any request of the session's client.
    let (touched, _) = call(&client, "touch_resource", json!({"uri": uri})).await;
    assert!(touched["result"].is_object(), "{touched}");
    let update = loop {
        let message = next(&mut get).await.expect("the GET stream ended");
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
    };
    assert_eq!(update["params"]["uri"], uri);
    // The session goes on (a notification outside a request is no fault).
    let (echoed, _) = call(&client, "echo", json!({"message": "after"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: after");
}

/// What the `roots` child (`hostile.py roots`) got for its `roots/list`,
/// once it got anything (its tool `act` says), within 10 s.
async fn roots_answer(client: &Client) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (acted, _) = call(client, "act", json!({})).await;
        let text = acted["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if text != "no answer yet" {
            return serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child got no answer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_question_outside_any_request_waits_for_the_get_stream_and_its_answer_reaches_the_child()
{
    let (node, _dir) = hosting("roots", &argv(&hostile("roots")), "");
    let (client, _) = session(&node, json!({"roots": {"listChanged": true}})).await;
    // The child asked at `notifications/initialized`, before any GET: the
    // question was held for the client's first reader, not lost.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Reply::Sse(mut get) = within("GET", client.get(None)).await.unwrap() else {
        panic!("the GET stream is a stream");
    };
    let question = next(&mut get).await.expect("the GET stream ended");
    assert_eq!(question["method"], "roots/list", "{question}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"roots": [{"uri": "file:///work", "name": "work"}]}});
    let posted = within("answer", client.post(&answer)).await.unwrap();
    assert!(matches!(posted, Reply::Accepted), "{posted:?}");
    // The child got the client's answer under its own id.
    let got = roots_answer(&client).await;
    assert_eq!(got["id"], "roots-1", "{got}");
    assert_eq!(got["result"]["roots"][0]["uri"], "file:///work", "{got}");
}

#[tokio::test]
async fn questions_held_for_a_client_that_never_reads_are_bounded() {
    // 20 questions at once, no GET stream: 16 are held, 4 refused at once.
    held_and_refused("roots-flood", 16, 4).await;
}

#[tokio::test]
async fn questions_held_for_a_client_that_never_reads_are_bounded_in_bytes() {
    // 8 questions of 300 kB at once: 3 fit in the session's 1 MiB, 5 are
    // refused at once.
    held_and_refused("roots-big", 3, 5).await;
}

/// A child in `mode` asks its questions as its session starts, before the
/// client opens its GET stream: `refused` of them are refused to the
/// child at once, `held` go out when the client reads, and no more.
async fn held_and_refused(mode: &str, held: usize, refused: usize) {
    let (node, _dir) = hosting("roots", &argv(&hostile(mode)), "");
    let (client, _) = session(&node, json!({"roots": {}})).await;
    // Every question read (the refused ones counted) before the first
    // call: a question read while a call runs is that call's.
    let base = node.url().trim_end_matches("/mcp").to_owned();
    let sample =
        r#"mcp_server_to_client_requests_total{method="roots/list",outcome="unavailable"}"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while mcp_cluster_testkit::metric(&base, sample).await < refused as f64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{refused} questions not refused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let answered = loop {
        let (acted, _) = call(&client, "act", json!({})).await;
        let text = acted["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("[]");
        let got: Vec<Value> = serde_json::from_str(text).unwrap_or_default();
        if got.len() >= refused || tokio::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answered.len(), refused, "{answered:?}");
    assert!(
        answered.iter().all(|r| r["error"]["code"] == -32603),
        "{answered:?}"
    );
    // The held ones go out once the client reads, and no more than them.
    let Reply::Sse(mut get) = within("GET", client.get(None)).await.unwrap() else {
        panic!("the GET stream is a stream");
    };
    for _ in 0..held {
        let question = next(&mut get).await.expect("the GET stream ended");
        assert_eq!(question["method"], "roots/list", "{question}");
    }
    let more = tokio::time::timeout(Duration::from_millis(500), next(&mut get)).await;
    assert!(
        !matches!(more, Ok(Some(ref m)) if m["method"] == "roots/list"),
        "more questions than were held: {more:?}"
    );
    let (acted, _) = call(&client, "act", json!({})).await;
    let text = acted["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("[]");
    let got: Vec<Value> = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(
        got.len(),
        refused,
        "none of the held questions was answered: {got:?}"
    );
}

#[tokio::test]
async fn a_question_for_a_capability_the_client_lacks_is_refused_to_the_child() {
    let (node, _dir) = hosting("roots", &argv(&hostile("roots")), "");
    let (client, _) = session(&node, json!({})).await;
    let got = roots_answer(&client).await;
    assert_eq!(got["error"]["code"], -32601, "{got}");
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("roots"),
        "{got}"
    );
}

#[tokio::test]
async fn a_cancel_stops_the_request_in_its_own_child_only() {
    // The children log at debug level, every line kept: the node's log
    // shows which child heard the cancel.
    let (node, _dir) = hosting(
        "inner",
        &argv(&inner_node()),
        "stderr_lines_per_sec = 10000\nenv = { MCP_LOG = \"debug\" }",
    );
    let (a, _) = session(&node, json!({})).await;
    let (b, _) = session(&node, json!({})).await;
    assert_eq!(children_of(node.pid()).len(), 2, "a child per session");

    let long = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "long_running_operation", "arguments": {"duration_ms": 3000, "steps": 30},
            "_meta": {"progressToken": id}}})
    };
    let Reply::Sse(mut a_stream) = within("a's call", a.post(&long(5))).await.unwrap() else {
        panic!("progress comes on a stream");
    };
    let Reply::Sse(mut b_stream) = within("b's call", b.post(&long(5))).await.unwrap() else {
        panic!("progress comes on a stream");
    };
    // Both run (the same request id in two sessions: two children).
    assert_eq!(
        next(&mut a_stream).await.unwrap()["method"],
        "notifications/progress"
    );
    assert_eq!(
        next(&mut b_stream).await.unwrap()["method"],
        "notifications/progress"
    );

    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 5, "reason": "changed my mind"}});
    assert!(matches!(
        within("cancel", a.post(&cancel)).await.unwrap(),
        Reply::Accepted
    ));
    // a's stream ends with no answer; b's request runs to its answer.
    loop {
        match next(&mut a_stream).await {
            None => break,
            Some(m) => assert_eq!(
                m["method"], "notifications/progress",
                "no answer after a cancel: {m}"
            ),
        }
    }
    let b_answer = loop {
        let m = next(&mut b_stream)
            .await
            .expect("b's stream ended without its answer");
        if m.get("id").is_some() {
            break m;
        }
    };
    assert_eq!(b_answer["id"], 5);
    assert!(
        b_answer["result"]["content"][0]["text"].as_str().is_some(),
        "{b_answer}"
    );
    // a's child lives on and answers.
    let (echoed, _) = call(&a, "echo", json!({"message": "still here"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "Echo: still here");
    // One child, a's, was told; b's never was.
    let told = node
        .log()
        .iter()
        .filter(|l| l.contains("upstream=inner") && l.contains("Request cancelled by the client"))
        .count();
    assert_eq!(told, 1, "the cancel reaches exactly one child");
}

#[tokio::test]
async fn a_session_ends_its_child_and_a_killed_node_leaves_none() {
    let (mut node, _dir) = hosting("inner", &argv(&inner_node()), "");
    let (client, _) = session(&node, json!({})).await;
    let child = children_of(node.pid());
    assert_eq!(child.len(), 1);
    // DELETE ends the child, and the session is gone.
    assert_eq!(within("delete", client.delete()).await.unwrap(), 200);
    eventually(
        "the child ends with its session",
        Duration::from_secs(10),
        || children_of(node.pid()).is_empty(),
    )
    .await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
    match within("after delete", client.post(&body)).await.unwrap() {
        Reply::Status(status, _, _) => assert_eq!(status, 404),
        other => panic!("a deleted session is gone: {other:?}"),
    }

    // Sessions whose node is killed: their children go with it.
    let (_c1, _) = session(&node, json!({})).await;
    let (_c2, _) = session(&node, json!({})).await;
    let children = children_of(node.pid());
    assert_eq!(children.len(), 2);
    kill_9(node.pid());
    let _ = node.terminate();
    eventually(
        "the children end with their node",
        Duration::from_secs(10),
        || processes().iter().all(|p| !children.contains(&p.pid)),
    )
    .await;
}

/// SIGKILL, as `kill -9`.
fn kill_9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn a_child_that_never_answers_initialize_is_ended_and_the_client_told() {
    let (node, _dir) = hosting(
        "mute",
        &argv(&hostile("silent")),
        "initialize_timeout_secs = 1\nend_grace_secs = 1\nmax_children = 1",
    );
    // Twice: the failed start gave its place back (max_children = 1).
    for _ in 0..2 {
        let mut client = Client::new(node.url(), VERSION);
        let err = within("initialize", client.initialize(json!({})))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("upstream mute did not answer initialize within 1 s"),
            "{text}"
        );
    }
    eventually("the mute child ends", Duration::from_secs(10), || {
        children_of(node.pid()).is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_child_flooding_stderr_is_read_and_serves() {
    let (node, _dir) = hosting(
        "chatty",
        &argv(&hostile("stderr-flood")),
        "stderr_lines_per_sec = 5",
    );
    let (client, init) = session(&node, json!({})).await;
    assert_eq!(init["serverInfo"]["name"], "hostile-stderr-flood");
    let (acted, _) = call(&client, "act", json!({})).await;
    assert_eq!(acted["result"]["content"][0]["text"], "acted");
    // At most the rate limit's worth of its 16,384 lines reached the log.
    let logged = node
        .log()
        .iter()
        .filter(|l| l.contains("upstream=chatty") && l.contains("stderr"))
        .count();
    assert!(logged < 100, "{logged} stderr lines logged");
}

#[tokio::test]
async fn a_line_over_the_limit_ends_the_child_with_an_error_and_its_session() {
    let (node, _dir) = hosting(
        "wide",
        &argv(&hostile("long-line")),
        "max_line_bytes = 1048576\nend_grace_secs = 1",
    );
    let (client, _) = session(&node, json!({})).await;
    let (answer, _) = call(&client, "act", json!({})).await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("upstream wide wrote a line over 1048576 bytes"),
        "{message}"
    );
    assert_session_gone(&client).await;
    eventually("the wide child ends", Duration::from_secs(10), || {
        children_of(node.pid()).is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_child_exiting_in_a_call_fails_the_call_and_ends_the_session() {
    let (node, _dir) = hosting("quitter", &argv(&hostile("exit-in-call")), "");
    let (client, _) = session(&node, json!({})).await;
    let (answer, _) = call(&client, "act", json!({})).await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("upstream quitter"), "{message}");
    assert_session_gone(&client).await;
}

#[tokio::test]
async fn a_child_ignoring_sigterm_goes_with_its_grandchild() {
    let (node, _dir) = hosting(
        "stubborn",
        &argv(&hostile("grandchild")),
        "end_grace_secs = 1",
    );
    let (client, _) = session(&node, json!({})).await;
    let child = children_of(node.pid());
    assert_eq!(child.len(), 1);
    // The child (the server's keeper) leads its own group; the server and
    // its grandchild are in it.
    eventually("the grandchild starts", Duration::from_secs(10), || {
        group_members(child[0]).len() == 3
    })
    .await;
    assert_eq!(within("delete", client.delete()).await.unwrap(), 200);
    // stdin closed (ignored), SIGTERM (ignored), then SIGKILL to the group.
    eventually("the whole group ends", Duration::from_secs(15), || {
        group_members(child[0]).is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_killed_node_leaves_no_grandchild_either() {
    let (mut node, _dir) = hosting("stubborn", &argv(&hostile("grandchild")), "");
    let (_client, _) = session(&node, json!({})).await;
    // The node's child is the server's keeper, leading the group; the
    // server and its grandchild (which ignores SIGTERM and stdin's end, as
    // a server left behind by `npx` may) are in it.
    let keeper = children_of(node.pid());
    assert_eq!(keeper.len(), 1);
    eventually("the grandchild starts", Duration::from_secs(10), || {
        group_members(keeper[0]).len() == 3
    })
    .await;
    let members = group_members(keeper[0]);
    kill_9(node.pid());
    let _ = node.terminate();
    eventually(
        "the whole group ends with its node",
        Duration::from_secs(10),
        || processes().iter().all(|p| !members.contains(&p.pid)),
    )
    .await;
}

#[tokio::test]
async fn children_past_the_node_limit_are_refused_with_a_clear_error() {
    let (node, _dir) = hosting("one", &argv(&inner_node()), "max_children = 1");
    let (_first, _) = session(&node, json!({})).await;
    let mut second = Client::new(node.url(), VERSION);
    let err = within("initialize", second.initialize(json!({})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("max_children"), "{err}");
    assert_eq!(children_of(node.pid()).len(), 1);
}

async fn assert_session_gone(client: &Client) {
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"});
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match within("after the child's end", client.post(&body))
            .await
            .unwrap()
        {
            Reply::Status(status, _, _) if status == 404 => return,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the session outlived its child: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
