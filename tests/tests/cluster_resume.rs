//! Resumption across nodes: a stream started on node A, dropped, resumed
//! with `Last-Event-ID` on node B, gets exactly the missed events, then the
//! live ones A goes on producing, then the response; a finished stream
//! replays its tail on node C. And tailing streams costs no Redis
//! connection per stream.

mod cluster_support;

use cluster_support::*;
use mcp_cluster_testkit::within;
use serde_json::json;

const STEPS: u64 = 30;
/// Progress events read on A before dropping the stream.
const READ_ON_A: usize = 5;

#[tokio::test]
async fn a_stream_dropped_on_one_node_resumes_on_another_then_replays_on_a_third() {
    let cluster = start(3, &[]);
    let a = session(&cluster.node_url(0), json!({})).await;
    let id = a.session_id().unwrap().to_owned();
    let b = client(&cluster.node_url(1), &id);
    let c = client(&cluster.node_url(2), &id);

    let mut first = post_sse(&a, &long_running(7, 3000, STEPS, "resume")).await;
    let priming_id = priming(&mut first).await;
    let mut on_a = Seen::default();
    while on_a.progress.len() < READ_ON_A {
        let event = next_event(&mut first).await.expect("progress on A");
        record(&mut on_a, event);
    }
    assert!(
        on_a.other.is_empty() && on_a.responses.is_empty(),
        "{on_a:?}"
    );
    let last_read = on_a.ids.last().unwrap().clone();
    drop(first);

    // B replays what A wrote meanwhile, then tails A's appends live.
    let mut resumed = resume(&b, &last_read).await;
    let on_b = read_to_end(&mut resumed).await;
    assert!(
        !on_b.retried,
        "the resumed stream ends with the response: {on_b:?}"
    );
    assert!(on_b.other.is_empty(), "{on_b:?}");
    let all: Vec<f64> = on_a
        .progress
        .iter()
        .chain(&on_b.progress)
        .copied()
        .collect();
    let expected: Vec<f64> = (1..=STEPS).map(|p| p as f64).collect();
    assert_eq!(
        all, expected,
        "progress over A then B: no gap, no duplicate"
    );
    assert_eq!(on_b.responses.len(), 1, "{on_b:?}");
    let response = &on_b.responses[0];
    assert_eq!(response["id"], 7, "{response}");
    assert_eq!(
        text(&response["result"]),
        format!("Long running operation completed: {STEPS} steps in 3000 ms"),
        "{response}"
    );
    assert!(
        on_b.ids.iter().all(|i| !on_a.ids.contains(i)),
        "{on_a:?} {on_b:?}"
    );
    let unique: std::collections::HashSet<&String> = on_b.ids.iter().collect();
    assert_eq!(unique.len(), on_b.ids.len(), "event ids are distinct");

    // The finished stream, resumed on C from the last event A delivered:
    // the same tail, then the stream ends.
    let mut tail = resume(&c, &last_read).await;
    let on_c = read_to_end(&mut tail).await;
    assert_eq!(on_c.progress, on_b.progress);
    assert_eq!(on_c.responses, on_b.responses);
    assert_eq!(on_c.ids, on_b.ids);
    assert!(!on_c.retried, "{on_c:?}");

    // From the priming event: everything, once.
    let mut whole = resume(&c, &priming_id).await;
    let replay = read_to_end(&mut whole).await;
    assert_eq!(replay.progress, expected);
    assert_eq!(replay.responses, on_b.responses);
    let ids: Vec<String> = on_a.ids.iter().chain(&on_b.ids).cloned().collect();
    assert_eq!(replay.ids, ids);

    // After the response itself: nothing left.
    let mut empty = resume(&c, on_b.ids.last().unwrap()).await;
    assert!(next_event(&mut empty).await.is_none());
}

#[tokio::test]
async fn open_streams_hold_no_redis_connection_each() {
    const STREAMS: usize = 100;
    let cluster = start(3, &[]);
    let url = cluster.node_url(0);
    let http = reqwest::Client::new();
    let mut sessions = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let mut client = mcp_cluster_client::Client::with_http(http.clone(), &url, VERSION);
        within("initialize", client.initialize(json!({})))
            .await
            .unwrap();
        sessions.push(client);
    }
    let before = cluster.redis().client_count().unwrap();

    let mut streams = Vec::with_capacity(STREAMS);
    for client in &sessions {
        let mut stream = expect_sse(within("GET", client.get(None)).await.unwrap());
        // The priming event comes once the node follows the stream.
        priming(&mut stream).await;
        streams.push(stream);
    }
    let during = cluster.redis().client_count().unwrap();
    // A node opens a command connection per thread that sends commands
    // (HTTP workers and handler threads, one each per CPU by default, and
    // the main thread), on first use: a thread may open its own during the
    // GETs, but no stream holds one.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let per_thread = cluster.len() * (2 * cpus + 1);
    assert!(per_thread < STREAMS, "the bound tells threads from streams");
    assert!(
        during <= before + per_thread,
        "Redis connections: {during} with {STREAMS} open streams, {before} with none"
    );

    // The streams are live: a resource update reaches a subscribed one.
    let last = sessions.last().unwrap();
    let uri = "test://watched-resource";
    within(
        "subscribe",
        last.request("resources/subscribe", json!({"uri": uri})),
    )
    .await
    .unwrap();
    within(
        "touch",
        last.request(
            "tools/call",
            json!({"name": "touch_resource", "arguments": {"uri": uri}}),
        ),
    )
    .await
    .unwrap();
    let event = next_event(streams.last_mut().unwrap())
        .await
        .expect("the stream is open");
    assert_eq!(message(&event)["method"], "notifications/resources/updated");
    assert!(cluster.redis().client_count().unwrap() <= before + per_thread);
}
