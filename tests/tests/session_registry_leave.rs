//! A session that stops leaves the node's registry at once, so a stopped
//! session never counts against `max_sessions`. Before, a session that went
//! idle stopped its actor but stayed in the registry until the next sweep
//! (every 5 s), and a node at `max_sessions` refused new sessions with 503
//! meanwhile.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use mcp_cluster_client::{Client, ClientError};
use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use serde_json::json;

const VERSION: &str = "2025-11-25";

/// How soon after the idle session stops a new one must be admitted: far
/// below the sweep's 5 s, far above the moment the actor takes to stop.
const ADMITTED_WITHIN: Duration = Duration::from_millis(500);

async fn open(url: &str) -> Result<Client, ClientError> {
    let mut client = Client::new(url, VERSION);
    within("initialize", client.initialize(json!({}))).await?;
    Ok(client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_frees_its_place_as_it_stops() {
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &[
            "--max-sessions",
            "1",
            "--session-ttl-secs",
            "1",
            "--log",
            "warn,mcp_cluster_runtime::session=debug",
        ],
        &[],
    )
    .unwrap();
    let url = node.url().to_owned();
    let node = Arc::new(node);
    // Three rounds: a sweep that happened to fall just after the session
    // stopped cannot pass them all.
    let mut held = open(&url).await.unwrap();
    let stopped = "Session idle; evicted from this node.";
    for round in 1..=3 {
        match open(&url).await {
            Err(ClientError::Status { status, .. }) => assert_eq!(status.as_u16(), 503),
            other => panic!("round {round}: a second session on a full node: {other:?}"),
        }
        // The held session goes idle: its actor stops, and logs it.
        let seen = count(&node, stopped);
        let watcher = Arc::clone(&node);
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(15);
            while count(&watcher, stopped) == seen {
                assert!(Instant::now() < deadline, "the idle session did not stop");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .await
        .unwrap();
        let since = Instant::now();
        held = loop {
            match open(&url).await {
                Ok(client) => break client,
                Err(err) => assert!(
                    since.elapsed() < ADMITTED_WITHIN,
                    "round {round}: a new session still refused {:?} after the idle one stopped: {err}",
                    since.elapsed()
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
    }
    drop(held);
}

fn count(node: &NodeProcess, text: &str) -> usize {
    node.log().iter().filter(|line| line.contains(text)).count()
}
