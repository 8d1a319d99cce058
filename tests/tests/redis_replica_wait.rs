//! What a primary acknowledged but no replica holds (replication is
//! asynchronous) is gone when a replica takes over. The writes a failover
//! must not lose wait for a replica (`WAIT`, `[redis] replica_acks`): real
//! `redis-server`s on loopback, a primary and its replica, the store
//! connected to the primary.
//!
//! - With the wait, a write whose primary dies before any replica has it
//!   is reported failed (the runtime writes it again on the new primary);
//!   without it, the same write is acknowledged and then missing on the
//!   promoted replica.
//! - A replica that does not answer in time costs one wait, not one per
//!   write: the write stands on the primary, and the next ones go
//!   unwaited for a while.
//! - On a Redis Cluster the wait goes to every primary, and holds a write
//!   up only where the node wrote: a hung replica of its own shard delays
//!   it, one of another shard does not.

use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_redis::Keys;
use mcp_cluster_redis::RedisConfig;
use mcp_cluster_store::{Position, SessionId, Store, StoreError, StreamId};
use mcp_cluster_testkit::{RedisCluster, RedisServer, within};

/// A primary, its replica (in sync), and a store on the primary that waits
/// for `acks` replicas up to `ack_timeout`.
async fn primary_with_replica(
    acks: u32,
    ack_timeout: Duration,
) -> (RedisServer, RedisServer, Store) {
    let primary = RedisServer::start().unwrap();
    let replica = RedisServer::start_replica_of(&primary).unwrap();
    primary.wait_replicated(1).unwrap();
    let config = RedisConfig {
        url: primary.url(),
        replica_acks: Some(acks),
        replica_ack_timeout_ms: millis(ack_timeout),
        command_timeout_ms: millis(ack_timeout) + 1000,
        ..RedisConfig::default()
    };
    let store = mcp_cluster_redis::connect(&config).await.unwrap();
    (primary, replica, store)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap()
}

/// Clients blocked on `server` (a `WAIT` among them).
fn blocked_clients(server: &RedisServer) -> u64 {
    let info = server.command(&["INFO", "clients"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// A session's stream with one event, on the replica too.
async fn stream_in_sync(primary: &RedisServer, store: &Store) -> (SessionId, StreamId) {
    let session = SessionId::random();
    let stream = store.events.create_stream(&session, &[]).await.unwrap();
    store
        .events
        .append(&session, &stream, Arc::from("first"))
        .await
        .unwrap();
    primary.wait_replicated(1).unwrap();
    (session, stream)
}

/// Appends an answer while the replica is cut off and kills the primary
/// once the write is in:
/// with a wait, while the store waits for the replica. Returns what the
/// append answered, and the events the promoted replica holds.
async fn append_as_the_primary_dies(acks: u32) -> (Result<(), StoreError>, Vec<String>) {
    let (primary, replica, store) = primary_with_replica(acks, Duration::from_secs(4)).await;
    let (session, stream) = stream_in_sync(&primary, &store).await;
    let baseline = blocked_clients(&primary);
    // Frozen, and its connection cut: nothing written from now on reaches
    // it (a frozen replica alone would still find the writes in its socket).
    replica.pause().unwrap();
    let cut = primary
        .command(&["CLIENT", "KILL", "TYPE", "replica"])
        .unwrap();
    assert_eq!(cut, "1", "the replica's connection");

    let store = Arc::new(store);
    let append = {
        let (store, session, stream) = (Arc::clone(&store), session.clone(), stream.clone());
        tokio::spawn(async move {
            store
                .events
                .append(&session, &stream, Arc::from("answer"))
                .await
                .map(drop)
        })
    };
    if acks > 0 {
        within("the write waiting for the replica", async {
            while blocked_clients(&primary) <= baseline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
    let appended = if acks > 0 {
        primary.kill();
        within("the append", append).await.unwrap()
    } else {
        let appended = within("the append", append).await.unwrap();
        primary.kill();
        appended
    };

    // The replica takes over with what it had.
    replica.resume().unwrap();
    replica.command(&["REPLICAOF", "NO", "ONE"]).unwrap();
    let on_replica = RedisConfig {
        url: replica.url(),
        ..RedisConfig::default()
    };
    let promoted = mcp_cluster_redis::connect(&on_replica).await.unwrap();
    let events = promoted
        .events
        .read(&session, &stream, Position::START, 100)
        .await
        .unwrap()
        .events
        .into_iter()
        .map(|event| event.data.to_string())
        .collect();
    (appended, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_replica_holds_is_reported_failed_when_its_primary_dies() {
    let (appended, events) = append_as_the_primary_dies(1).await;
    assert!(
        matches!(appended, Err(StoreError::Unavailable(_))),
        "the append must not be acknowledged: {appended:?}"
    );
    // It was indeed not kept: what the failure said.
    assert_eq!(events, ["first"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_wait_the_same_write_is_acknowledged_and_then_lost() {
    let (appended, events) = append_as_the_primary_dies(0).await;
    appended.unwrap();
    assert_eq!(events, ["first"], "the acknowledged answer is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_hangs_costs_one_wait_and_the_writes_stand() {
    let timeout = Duration::from_secs(1);
    let (primary, replica, store) = primary_with_replica(1, timeout).await;
    let (session, stream) = stream_in_sync(&primary, &store).await;
    replica.pause().unwrap();

    // The first write waits the whole timeout and stands; the next ones
    // go unwaited (a failover now could lose them: the price of staying
    // up with a replica away).
    let mut took = Vec::new();
    for n in 0..20 {
        let started = tokio::time::Instant::now();
        store
            .events
            .append(&session, &stream, Arc::from(format!("{n}")))
            .await
            .unwrap();
        took.push(started.elapsed());
    }
    replica.resume().unwrap();
    assert!(took[0] >= timeout, "the first write waited: {took:?}");
    assert!(
        took[1..].iter().all(|t| *t < timeout),
        "one wait, not one per write: {took:?}"
    );
    let held = store
        .events
        .read(&session, &stream, Position::START, 100)
        .await
        .unwrap();
    assert_eq!(held.events.len(), 21);
}

/// The member replicating `primary` on `cluster`.
fn replica_of<'a>(
    cluster: &'a RedisCluster,
    primary: &mcp_cluster_testkit::RedisServer,
) -> &'a mcp_cluster_testkit::RedisServer {
    let port = format!("master_port:{}", primary.port());
    cluster
        .members()
        .iter()
        .find(|m| {
            m.command(&["INFO", "replication"])
                .unwrap()
                .lines()
                .any(|l| l.trim() == port)
        })
        .expect("every primary has a replica")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_write_waits_for_the_replica_of_its_own_shard() {
    let cluster = RedisCluster::start(3, 1).unwrap();
    let timeout = Duration::from_millis(1500);
    let config = RedisConfig {
        url: cluster.node_url(),
        replica_ack_timeout_ms: millis(timeout),
        command_timeout_ms: millis(timeout) + 1000,
        ..RedisConfig::default()
    };
    // One replica by default on a Redis Cluster.
    let store = mcp_cluster_redis::connect(&config).await.unwrap();
    let session = SessionId::random();
    let stream = store.events.create_stream(&session, &[]).await.unwrap();
    let home = cluster
        .primary_of(&Keys::new("mcp").streams(&session))
        .unwrap();
    let other = cluster
        .members()
        .iter()
        .find(|m| {
            m.port() != home.port()
                && m.command(&["INFO", "replication"])
                    .unwrap()
                    .contains("role:master")
        })
        .unwrap();

    // Every replica answers: a write waits a round trip, not the timeout.
    let took = append_timed(&store, &session, &stream, "a").await;
    assert!(took < timeout, "{took:?}");

    // Its own shard's replica hangs: it waits the whole timeout, and stands.
    let own = replica_of(&cluster, home);
    own.pause().unwrap();
    let took = append_timed(&store, &session, &stream, "b").await;
    own.resume().unwrap();
    assert!(took >= timeout, "did not wait for its own shard: {took:?}");

    // Once the pause that follows a short wait is over, another shard's
    // hung replica does not hold it up: the wait goes to every primary,
    // and each answers at once for a connection that wrote nothing there
    // since.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let elsewhere = replica_of(&cluster, other);
    elsewhere.pause().unwrap();
    let took = append_timed(&store, &session, &stream, "c").await;
    elsewhere.resume().unwrap();
    assert!(took < timeout, "waited for another shard: {took:?}");
    let held = store
        .events
        .read(&session, &stream, Position::START, 10)
        .await
        .unwrap();
    assert_eq!(held.events.len(), 3);
}

/// Appends `data`; how long that took.
async fn append_timed(
    store: &Store,
    session: &SessionId,
    stream: &StreamId,
    data: &str,
) -> Duration {
    let started = tokio::time::Instant::now();
    store
        .events
        .append(session, stream, Arc::from(data))
        .await
        .unwrap();
    started.elapsed()
}
