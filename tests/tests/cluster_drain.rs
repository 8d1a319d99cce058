//! SIGTERM drains a node: readiness fails at once while everything is
//! still served, then the listener refuses new connections, SSE
//! connections end with `retry` (clients resume elsewhere), running
//! requests finish and answer on their streams, and the node exits 0. A
//! rolling restart behind the load balancer fails no call, loses no
//! response and duplicates no event.

mod cluster_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cluster_support::*;
use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{Cluster, GUARD, within};
use reqwest::StatusCode;
use serde_json::{Value, json};

const GRACE: &[&str] = &["--drain-grace-secs", "5"];
/// The node registry's set of live nodes (the Redis store's key layout).
const NODE_SET: &str = "mcp:{nodes}:all";
/// Concurrent client loops (sessions) during the rolling restart.
const CLIENTS: usize = 4;

#[tokio::test]
async fn a_draining_node_serves_until_its_listener_closes_and_finishes_running_requests() {
    let mut cluster = start(3, GRACE);
    let url = cluster.node_url(0);
    let other = cluster.node_url(1);
    let addr = cluster.node_addr(0);
    let readyz = format!("http://{addr}/readyz");
    within("every node registered", async {
        while cluster.redis().command(&["SCARD", NODE_SET]).unwrap() != "3" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let a = session(&url, json!({})).await;
    let mut stream = post_sse(&a, &long_running(5, 9000, 10, "drain")).await;
    priming(&mut stream).await;
    let mut seen = Seen::default();
    record(&mut seen, next_event(&mut stream).await.expect("progress"));

    // SIGTERM, and wait for the exit in the background.
    let terminated = tokio::task::spawn_blocking(move || {
        let status = cluster.terminate_node(0);
        (cluster, status)
    });

    within("readyz turns 503", async {
        loop {
            let status = reqwest::get(&readyz).await.map(|r| r.status());
            match status {
                Ok(StatusCode::SERVICE_UNAVAILABLE) => break,
                Ok(StatusCode::OK) => tokio::time::sleep(Duration::from_millis(20)).await,
                other => panic!("/readyz while draining: {other:?}"),
            }
        }
    })
    .await;

    // A load balancer that has not caught up still gets served, a new
    // session included (it lives in Redis; its next requests go anywhere).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "late", "version": "0"}}});
    match within(
        "initialize while draining",
        Client::new(&url, VERSION).post(&init),
    )
    .await
    .unwrap()
    {
        Reply::Json(response, headers) => {
            assert!(
                response["result"]["protocolVersion"].is_string(),
                "{response}"
            );
            assert!(headers.contains_key("mcp-session-id"), "{headers:?}");
        }
        other => panic!("initialize on a draining node: {other:?}"),
    }

    // After the drain delay the listener refuses: a load balancer retries
    // the connection on another node, nothing having been sent.
    within("the listener refuses new connections", async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // The SSE connection ends with `retry` (every event the log holds sent
    // first); the client resumes on another node, where the request,
    // still running on the draining node, completes.
    let rest = read_to_end(&mut stream).await;
    assert!(rest.retried, "{rest:?}");
    assert!(rest.responses.is_empty(), "{rest:?}");
    let last = rest
        .ids
        .last()
        .or(seen.ids.last())
        .expect("an event to resume after")
        .clone();
    let elsewhere = client(&other, a.session_id().unwrap());
    let mut resumed = resume(&elsewhere, &last).await;
    let after = read_to_end(&mut resumed).await;
    let progress: Vec<f64> = seen
        .progress
        .iter()
        .chain(&rest.progress)
        .chain(&after.progress)
        .copied()
        .collect();
    assert_eq!(progress, (1..=10).map(f64::from).collect::<Vec<_>>());
    assert_eq!(after.responses.len(), 1, "{after:?}");
    assert_eq!(after.responses[0]["id"], 5);
    assert_eq!(after.responses[0]["result"]["isError"], false, "{after:?}");

    let (cluster, status) = within("node exit", terminated).await.unwrap();
    let status = status.unwrap().expect("node 0 was running");
    assert!(status.success(), "exit status {status}");
    // It left the cluster on its way out (proto-docs/redis-layout.md), so
    // no survivor takes it for dead.
    let members = cluster.redis().command(&["SCARD", NODE_SET]).unwrap();
    assert_eq!(members, "2", "nodes registered after node 0 left");
}

/// The calls of the client loop, by id.
enum Kind {
    /// `echo`: a JSON answer.
    Echo,
    /// `long_running_operation` with progress: an SSE answer.
    Progress,
    /// `test_reconnection`: the server closes the SSE answer mid-call, so
    /// the client resumes with `Last-Event-ID` through the load balancer,
    /// on whichever node it lands.
    Reconnect,
}

impl Kind {
    fn of(id: i64) -> Self {
        match id % 3 {
            0 => Self::Echo,
            1 => Self::Progress,
            _ => Self::Reconnect,
        }
    }
}

/// What the client loop saw of one call.
#[derive(Debug, Default)]
struct Outcome {
    responses: Vec<Value>,
    progress: Vec<f64>,
    resumes: usize,
}

/// Reads a call's stream, resuming through the load balancer whenever it
/// ends without the response.
async fn follow_call(client: &Client, mut stream: SseStream, outcome: &mut Outcome) {
    loop {
        let mut seen = Seen::default();
        loop {
            match within("next event", stream.next_event()).await {
                Ok(Some(event)) => record(&mut seen, event),
                Ok(None) => break,
                // A connection cut by a stopping node: resume as on a close.
                Err(_) => break,
            }
        }
        outcome.progress.extend(&seen.progress);
        outcome.responses.extend(seen.responses);
        if !outcome.responses.is_empty() {
            return;
        }
        let last = stream
            .last_event_id
            .clone()
            .expect("an event id to resume from");
        outcome.resumes += 1;
        assert!(outcome.resumes < 50, "no progress resuming: {outcome:?}");
        stream = match within("GET resume", client.get(Some(&last))).await {
            Ok(Reply::Sse(s)) => s,
            other => panic!("resume answered {other:?}"),
        };
        // The resumed stream's ids continue from `last`.
        stream.last_event_id = Some(last);
    }
}

/// Calls echo, long_running_operation and test_reconnection through the
/// load balancer until `stop`; returns every call's outcome by id, and the
/// calls that got no response.
async fn client_loop(lb: String, stop: Arc<AtomicBool>) -> (BTreeMap<i64, Outcome>, Vec<String>) {
    let client = session(&lb, json!({})).await;
    let mut outcomes = BTreeMap::new();
    let mut errors = Vec::new();
    let mut id = 100;
    while !stop.load(Ordering::Acquire) {
        id += 1;
        let mut outcome = Outcome::default();
        let body = match Kind::of(id) {
            Kind::Echo => call(id, "echo", json!({"message": format!("m{id}")})),
            Kind::Progress => long_running(id, 500, 5, &format!("p{id}")),
            Kind::Reconnect => call(id, "test_reconnection", json!({})),
        };
        // Sent once: a drain behind the load balancer refuses nothing.
        match within("POST", client.post(&body)).await {
            Ok(Reply::Json(response, _)) => outcome.responses.push(response),
            Ok(Reply::Sse(stream)) => follow_call(&client, stream, &mut outcome).await,
            Ok(other) => errors.push(format!("call {id}: {other:?}")),
            Err(err) => errors.push(format!("call {id}: {err}")),
        }
        outcomes.insert(id, outcome);
    }
    (outcomes, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_loses_no_response() {
    let cluster = start(3, GRACE);
    let lb = cluster.lb_url();
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(client_loop(lb.clone(), Arc::clone(&stop))))
        .collect();

    let rolled = tokio::task::spawn_blocking(move || {
        let mut cluster: Cluster = cluster;
        std::thread::sleep(Duration::from_millis(500));
        for i in 0..cluster.len() {
            let status = cluster.terminate_node(i).unwrap().expect("running");
            assert!(status.success(), "node {i} exit status {status}");
            cluster.restart_node(i).unwrap();
            // Traffic reaches the restarted node before the next goes.
            std::thread::sleep(Duration::from_millis(1000));
        }
        cluster
    });
    let cluster = tokio::time::timeout(GUARD * 6, rolled)
        .await
        .expect("rolling restart")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Release);
    let mut calls = 0;
    let mut resumed = 0;
    for client in loops {
        let (outcomes, errors) = within("client loop", client).await.unwrap();
        assert!(
            errors.is_empty(),
            "failed calls: {errors:#?}\n{}",
            cluster.nginx().access_log()
        );
        check(&outcomes);
        calls += outcomes.len();
        resumed += outcomes.values().filter(|o| o.resumes > 0).count();
    }
    assert!(calls >= 10 * CLIENTS, "too few calls: {calls}");
    // Each old node left on its way out; the new ones joined.
    let members = cluster.redis().command(&["SCARD", NODE_SET]).unwrap();
    assert_eq!(members, "3", "nodes registered after the rolling restart");
    eprintln!("rolling restart: {calls} calls, {resumed} resumed with Last-Event-ID");
}

/// Every call got exactly one response, with its id, and every progress
/// value once, in order.
fn check(outcomes: &BTreeMap<i64, Outcome>) {
    for (id, outcome) in outcomes {
        assert_eq!(outcome.responses.len(), 1, "call {id}: {outcome:?}");
        let response = &outcome.responses[0];
        assert_eq!(response["id"], *id, "call {id}: {response}");
        assert!(response.get("error").is_none(), "call {id}: {response}");
        match Kind::of(*id) {
            Kind::Echo => assert_eq!(text(&response["result"]), format!("Echo: m{id}")),
            Kind::Progress => assert_eq!(
                outcome.progress,
                vec![1.0, 2.0, 3.0, 4.0, 5.0],
                "call {id}: every progress once, in order: {outcome:?}"
            ),
            Kind::Reconnect => {
                assert_eq!(
                    text(&response["result"]),
                    "Reconnection test completed successfully"
                );
                assert!(outcome.resumes > 0, "call {id}: {outcome:?}");
            }
        }
    }
}
