//! Through one Redis a node alone in the cluster sends nothing that only
//! other nodes need, once the node set counts as whole and its heartbeat
//! found it alone in it: a session's life
//! (`initialize`, `initialized`, `DELETE`) logs and publishes no
//! `session_changed` or `session_ended`, and counts them as unsent. A node the cluster counted out (its entry in
//! the node set gone: declared dead and claimed, or lost in a failover)
//! joins again at its next heartbeat, and its session actors read their
//! records again: what nobody sent meanwhile, they catch up on. The release
//! binary, on a real `redis-server`.

use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{NodeProcess, RedisServer, metric, node_binary, within};
use serde_json::{Value, json};
use tokio::time::{Instant, sleep, timeout};

const VERSION: &str = "2025-11-25";
const NODES: &str = "mcp:{nodes}:all";
/// A resource the listening session subscribes to behind its actor's back.
const WATCHED: &str = "test://watched-by-the-record";

async fn open(url: &str) -> Client {
    let mut client = Client::new(url, VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    client
}

/// `touch_resource` of `uri` through `client`: subscribers hear of it.
async fn touch(client: &Client, uri: &str) {
    let (response, _) = within(
        "tools/call",
        client.request(
            "tools/call",
            json!({"name": "touch_resource", "arguments": {"uri": uri}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(response["result"]["isError"], false, "{response}");
}

fn series(name: &str, kind: &str) -> String {
    format!("{name}{{type=\"{kind}\"}} ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_node_sends_nothing_for_others_and_catches_up_when_it_joins_again() {
    let redis = RedisServer::start().unwrap();
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--redis-url", &redis.url(), "--log", "warn"],
        &[],
    )
    .unwrap();
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    // A member of the node set before it served anything: the one.
    assert_eq!(redis.command(&["SCARD", NODES]).unwrap(), "1");
    let me = redis.command(&["SRANDMEMBER", NODES]).unwrap();

    // Whole lives, each announced until the set counts as whole (a
    // heartbeat TTL, 6 s, after the node's first heartbeat on this Redis:
    // others may still have to add themselves again) and the node's next
    // heartbeat names it alone in it, then announced no more: nothing for
    // the others, in the log or on the channel.
    let unsent = "mcp_bus_messages_unsent_total";
    let published = "mcp_bus_messages_published_total";
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&base, &series(unsent, "session_ended")).await == 0.0 {
        assert!(Instant::now() < deadline, "every life still announced");
        let passing = open(&url).await;
        assert_eq!(
            within("DELETE", passing.delete()).await.unwrap().as_u16(),
            200
        );
        sleep(Duration::from_millis(200)).await;
    }
    let logged = redis.command(&["XLEN", "mcp:{ctl}:log"]).unwrap();
    assert_ne!(logged, "0", "lives were announced before");
    let kinds = ["session_changed", "session_ended"];
    let mut before = Vec::new();
    for kind in kinds {
        before.push((
            metric(&base, &series(unsent, kind)).await,
            metric(&base, &series(published, kind)).await,
        ));
    }
    let passing = open(&url).await;
    assert_eq!(
        within("DELETE", passing.delete()).await.unwrap().as_u16(),
        200
    );
    for (kind, (left_out, sent)) in kinds.into_iter().zip(before) {
        assert_eq!(metric(&base, &series(unsent, kind)).await, left_out + 1.0);
        assert_eq!(metric(&base, &series(published, kind)).await, sent);
    }
    assert_eq!(redis.command(&["XLEN", "mcp:{ctl}:log"]).unwrap(), logged);

    // A listening session, and a subscription written into its record
    // behind its actor's back (as a save whose announcement nobody sent):
    // the actor does not know it, so the update does not reach the stream.
    let listening = open(&url).await;
    let mut stream: SseStream = match within("GET", listening.get(None)).await.unwrap() {
        Reply::Sse(stream) => stream,
        other => panic!("expected the standalone stream, got {other:?}"),
    };
    let session = listening.session_id().unwrap().to_owned();
    redis
        .command(&["SADD", &format!("mcp:{{{session}}}:subs"), WATCHED])
        .unwrap();
    let toucher = open(&url).await;
    touch(&toucher, WATCHED).await;
    let early = timeout(Duration::from_millis(1500), stream.next_message()).await;
    assert!(early.is_err(), "heard before its actor knew: {early:?}");

    // Counted out, then back at the next heartbeat: the actor reads its
    // record again and hears the update.
    assert_eq!(redis.command(&["SREM", NODES, &me]).unwrap(), "1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis.command(&["SISMEMBER", NODES, &me]).unwrap() != "1" {
        assert!(Instant::now() < deadline, "the node did not join again");
        sleep(Duration::from_millis(100)).await;
    }
    let node = std::sync::Arc::new(node);
    let watcher = std::sync::Arc::clone(&node);
    tokio::task::spawn_blocking(move || watcher.wait_for_log("joined it again"))
        .await
        .unwrap()
        .unwrap();
    // The reload is applied before the actor's next message: poll until the
    // update arrives (each touch is one more event).
    let deadline = Instant::now() + Duration::from_secs(10);
    let update: Value = loop {
        touch(&toucher, WATCHED).await;
        if let Ok(next) = timeout(Duration::from_millis(500), stream.next_message()).await {
            break next.unwrap().expect("the standalone stream stays open");
        }
        assert!(
            Instant::now() < deadline,
            "the update never reached the stream"
        );
    };
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], WATCHED, "{update}");
    drop(stream);
}
