//! Control messages published while a node's pub/sub connection is down
//! reach it once it is back: each is also logged (`mcp:{ctl}:log`), and a
//! node whose connection came back replays what it missed, and nothing it
//! already had. Real `redis-server` on loopback; node B reaches it through
//! a proxy that stops forwarding (a partition neither side can tell from a
//! hang). The log itself holds about 2,048 messages of at most 16 KiB each
//! and goes 60 s after the last.

use std::time::Duration;

use mcp_cluster_redis::RedisConfig;
use mcp_cluster_store::{ControlMessage, NodeId, SessionId};
use mcp_cluster_testkit::{RedisServer, TcpProxy, within};
use tokio::sync::broadcast;

fn changed(session: &SessionId, origin: &NodeId) -> ControlMessage {
    ControlMessage::SessionChanged {
        session: session.clone(),
        origin: origin.clone(),
    }
}

/// The next message of `rx` about `session` within `wait`, if any.
async fn next_about(
    rx: &mut broadcast::Receiver<ControlMessage>,
    session: &SessionId,
    wait: Duration,
) -> Option<ControlMessage> {
    tokio::time::timeout(wait, async {
        loop {
            match rx.recv().await {
                Ok(message @ ControlMessage::SessionChanged { .. })
                    if matches!(&message, ControlMessage::SessionChanged { session: s, .. } if s == session) =>
                {
                    return message;
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    })
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_published_while_a_node_was_cut_off_reaches_it_once_it_is_back() {
    let redis = RedisServer::start().unwrap();
    let proxy = TcpProxy::start(redis.addr()).unwrap();
    let config = |port: u16| RedisConfig {
        url: format!("redis://127.0.0.1:{port}/"),
        command_timeout_ms: 500,
        ..RedisConfig::default()
    };
    let a = mcp_cluster_redis::connect(&config(redis.port()))
        .await
        .unwrap();
    let b = mcp_cluster_redis::connect(&config(proxy.addr().port()))
        .await
        .unwrap();
    let mut heard = b.bus.subscribe();
    let origin = NodeId::random();

    // Live, before the cut: heard once.
    let before = SessionId::random();
    a.bus.publish(&changed(&before, &origin)).await.unwrap();
    let live = next_about(&mut heard, &before, Duration::from_secs(5)).await;
    assert_eq!(live, Some(changed(&before, &origin)));

    // B is cut off; A publishes; B cannot hear it.
    proxy.partition();
    let during = SessionId::random();
    a.bus.publish(&changed(&during, &origin)).await.unwrap();
    assert_eq!(
        next_about(&mut heard, &during, Duration::from_secs(1)).await,
        None,
        "nothing goes through a partition"
    );

    // B notices (its pings go unanswered), the partition heals, B
    // reconnects: the message published meanwhile arrives, and the one it
    // had heard before the cut does not arrive again.
    within("B's pub/sub connection to notice the cut", async {
        while b.sessions.ping().await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    proxy.heal();
    let replayed = next_about(&mut heard, &during, Duration::from_secs(15)).await;
    assert_eq!(replayed, Some(changed(&during, &origin)));
    assert_eq!(
        next_about(&mut heard, &before, Duration::from_secs(1)).await,
        None,
        "what B heard live is not replayed"
    );

    // A message published after it is back arrives once.
    let after = SessionId::random();
    a.bus.publish(&changed(&after, &origin)).await.unwrap();
    assert!(
        next_about(&mut heard, &after, Duration::from_secs(5))
            .await
            .is_some()
    );
    assert_eq!(
        next_about(&mut heard, &after, Duration::from_secs(1)).await,
        None,
        "once"
    );
    let log: u64 = redis
        .command(&["XLEN", "mcp:{ctl}:log"])
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(log, 3, "each message logged once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_log_is_bounded_in_entries_in_bytes_and_in_time() {
    let redis = RedisServer::start().unwrap();
    let store = mcp_cluster_redis::connect(&RedisConfig {
        url: redis.url(),
        ..RedisConfig::default()
    })
    .await
    .unwrap();
    let origin = NodeId::random();
    // A message over 16 KiB (a client's long answer) goes out, unlogged.
    let long = ControlMessage::Deliver {
        session: SessionId::random(),
        message: "x".repeat(20 * 1024),
        origin: origin.clone(),
        trace: None,
    };
    store.bus.publish(&long).await.unwrap();
    assert_eq!(redis.command(&["EXISTS", "mcp:{ctl}:log"]).unwrap(), "0");
    for _ in 0..3_000 {
        store
            .bus
            .publish(&changed(&SessionId::random(), &origin))
            .await
            .unwrap();
    }
    // MAXLEN ~ 2048 trims whole macro-nodes: a little over 2,048 at most.
    let kept: u64 = redis
        .command(&["XLEN", "mcp:{ctl}:log"])
        .unwrap()
        .parse()
        .unwrap();
    assert!((2_048..=2_200).contains(&kept), "{kept} entries");
    let stored: u64 = redis
        .command(&["MEMORY", "USAGE", "mcp:{ctl}:log"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(stored < 2 * 1024 * 1024, "{stored} bytes for the log");
    // And the log goes by itself once the bus is quiet.
    let ttl: i64 = redis
        .command(&["PTTL", "mcp:{ctl}:log"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
}

/// A replica takes a bare `PUBLISH` (a Redis Cluster replica a bare
/// `SPUBLISH`) and answers as if it had been delivered; during a failover
/// it reaches nobody. A node whose connection still points at one (a
/// primary demoted while the node's view was stale, or a cluster client
/// that tried the dead primary's replica) must see its publish fail, so
/// that it publishes again on the new primary, not count it as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_a_control_message_instead_of_swallowing_it() {
    let primary = RedisServer::start().unwrap();
    let replica = RedisServer::start_replica_of(&primary).unwrap();
    primary.wait_replicated(1).unwrap();
    let config = |url: String| RedisConfig {
        url,
        command_timeout_ms: 500,
        ..RedisConfig::default()
    };
    let listener = mcp_cluster_redis::connect(&config(primary.url()))
        .await
        .unwrap();
    let mut heard = listener.bus.subscribe();
    let stale = mcp_cluster_redis::connect(&config(replica.url()))
        .await
        .unwrap();
    let origin = NodeId::random();

    let lost = SessionId::random();
    let published = stale.bus.publish(&changed(&lost, &origin)).await;
    assert!(published.is_err(), "a replica took it: {published:?}");
    assert_eq!(
        next_about(&mut heard, &lost, Duration::from_secs(1)).await,
        None
    );
    assert_eq!(
        replica.command(&["EXISTS", "mcp:{ctl}:log"]).unwrap(),
        "0",
        "nothing half-done"
    );

    // The same message on the primary goes out, logged.
    stale
        .bus
        .publish(&changed(&lost, &origin))
        .await
        .unwrap_err();
    listener
        .bus
        .publish(&changed(&lost, &origin))
        .await
        .unwrap();
    assert!(
        next_about(&mut heard, &lost, Duration::from_secs(5))
            .await
            .is_some()
    );
    assert_eq!(primary.command(&["XLEN", "mcp:{ctl}:log"]).unwrap(), "1");
}
