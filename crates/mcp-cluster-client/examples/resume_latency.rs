//! Measures how long a resumption takes to replay missed events: a
//! `long_running_operation` with N progress steps runs on node A while the
//! client is away (it drops the stream after the priming event), then the
//! client resumes with `Last-Event-ID` on node B and times the replay up to
//! the response. Prints the median and worst of several rounds.
//!
//! `cargo run --release -p mcp-cluster-client --example resume_latency -- \
//!     http://127.0.0.1:8081/mcp http://127.0.0.1:8082/mcp 1000 5`

#![allow(clippy::disallowed_types, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mcp_cluster_client::{Client, Reply};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (a, b) = (
        args.first().expect("node A URL"),
        args.get(1).expect("node B URL"),
    );
    let steps: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let mut on_a = Client::new(a, "2025-11-25");
    on_a.initialize(json!({})).await.expect("initialize on A");
    let mut on_b = Client::new(b, "2025-11-25");
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let mut times = Vec::new();
    for round in 0..rounds {
        let id = on_a.next_id();
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "long_running_operation", "arguments": {"duration_ms": 0, "steps": steps},
            "_meta": {"progressToken": round}}});
        let Reply::Sse(mut stream) = on_a.post(&call).await.expect("POST on A") else {
            panic!("expected SSE")
        };
        let priming = stream.next_event().await.unwrap().expect("priming event");
        let last_event_id = priming.id.expect("priming id");
        drop(stream);
        // Let the call finish while the client is away: every event is
        // missed and waits in the log (the tool runs without pauses).
        tokio::time::sleep(Duration::from_millis(2000 + steps)).await;
        let start = Instant::now();
        let Reply::Sse(mut resumed) = on_b.get(Some(&last_event_id)).await.expect("GET on B")
        else {
            panic!("expected SSE")
        };
        let mut events = 0;
        loop {
            let message = resumed
                .next_message()
                .await
                .unwrap()
                .expect("stream ended before the response");
            events += 1;
            if message.get("id") == Some(&json!(id)) {
                break;
            }
        }
        let took = start.elapsed();
        assert_eq!(events, steps + 1, "every progress event then the response");
        println!(
            "round {round}: replayed {events} events in {:.1} ms",
            took.as_secs_f64() * 1e3
        );
        times.push(took);
    }
    times.sort();
    println!(
        "replay of {} events on another node: median {:.1} ms, worst {:.1} ms ({rounds} rounds)",
        steps + 1,
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
}
