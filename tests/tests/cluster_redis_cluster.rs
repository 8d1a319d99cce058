//! Nodes on a Redis Cluster (`redis+cluster://`): real `redis-server
//! --cluster-enabled yes` members on loopback, three primaries with a
//! replica each, the nodes logged in as the ACL user of
//! `proto-docs/redis-layout.md` (so nothing the managed services forbid is
//! sent, and nothing cross-slot).
//!
//! - The store's port suite passes on it, and what it writes spreads over
//!   every shard.
//! - Over TLS (`rediss+cluster://`: clients, the cluster bus and
//!   replication all TLS, client certificates required), two nodes serve
//!   the mixed scenario without a failure.
//! - After the failover of one shard (its primary killed, its replica
//!   promoted), the store connects no more to the dead member, and every
//!   shard answers two seconds after the cluster is ok again. Three nodes
//!   under load riding that failover are a fault of the chaos runner
//!   (`tests/tests/chaos.rs`).

use std::time::Duration;

use mcp_cluster_redis::RedisConfig;
use mcp_cluster_store::{SessionId, StoreError, StreamId};
use mcp_cluster_testkit::{Cluster, MixedLoad, RedisCluster, TestPki, within};

/// Keys on a member (its `DBSIZE`).
fn keys_on(member: &mcp_cluster_testkit::RedisServer) -> u64 {
    member.command(&["DBSIZE"]).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_the_port_suite_on_a_redis_cluster() {
    let (redis, store) = store_on_a_redis_cluster().await;
    mcp_cluster_store::suite::run_all(&store).await;
    // Sessions, streams and the bucketed indexes landed on every shard.
    let primaries: Vec<_> = redis.members().iter().filter(|m| is_primary(m)).collect();
    assert_eq!(primaries.len(), 3);
    for primary in primaries {
        assert!(keys_on(primary) > 0, "a shard holds nothing");
    }
}

fn is_primary(member: &mcp_cluster_testkit::RedisServer) -> bool {
    member
        .command(&["INFO", "replication"])
        .is_ok_and(|info| info.contains("role:master"))
}

/// A Redis Cluster of three primaries with a replica each, and a store on
/// it.
async fn store_on_a_redis_cluster() -> (RedisCluster, mcp_cluster_store::Store) {
    let redis = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1).unwrap())
        .await
        .unwrap();
    let store = mcp_cluster_redis::connect(&RedisConfig {
        url: redis.node_url(),
        ..RedisConfig::default()
    })
    .await
    .unwrap();
    (redis, store)
}

/// Streams spread over every slot range: one per session.
async fn streams(store: &mcp_cluster_store::Store, n: usize) -> Vec<(SessionId, StreamId)> {
    let mut made = Vec::with_capacity(n);
    for _ in 0..n {
        let session = SessionId::random();
        let stream = within("create a stream", store.events.create_stream(&session, &[]))
            .await
            .unwrap();
        made.push((session, stream));
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_shard_failover_the_store_forgets_the_dead_member_and_every_shard_answers() {
    let (redis, store) = store_on_a_redis_cluster().await;
    let made = streams(&store, 64).await;

    // One shard's primary dies; its replica takes over.
    let redis = std::sync::Arc::new(redis);
    let dead = {
        let redis = std::sync::Arc::clone(&redis);
        tokio::task::spawn_blocking(move || {
            let victim = redis.primary_of("mcp:ctl").unwrap();
            let addr = victim.addr();
            victim.kill();
            redis.wait_ok(6).unwrap();
            addr
        })
        .await
        .unwrap()
    };
    // Something listens where the dead member was: a client still
    // counting it as a member would connect there.
    let listener = std::net::TcpListener::bind(dead).unwrap();
    listener.set_nonblocking(true).unwrap();

    // The store follows a new layout once it read it twice, a second
    // apart; until then its old connections may still try the dead member
    // (each such connection is closed here at once). Five seconds is that
    // and a margin for a busy machine.
    let settled = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < settled {
        while let Ok((early, _)) = listener.accept() {
            drop(early);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every shard answers every command, including the promoted one (what
    // it holds was replicated before the kill: written seconds earlier).
    for round in 0..3 {
        for (session, stream) in &made {
            let tail = within("a tail read", store.events.tail(session, stream)).await;
            assert!(
                !matches!(tail, Err(StoreError::Unavailable(_))),
                "round {round}: {tail:?} from the stream of {session}"
            );
        }
    }
    // And nothing connects to the dead member's address any more: a client
    // that kept it would try again within this (its repair loop retries at
    // least every second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut reached = 0;
    while listener.accept().is_ok() {
        reached += 1;
    }
    assert_eq!(reached, 0, "connections to the dead member's address");
}

#[test]
fn nodes_serve_on_a_tls_redis_cluster_as_the_acl_user() {
    let pki = TestPki::new().unwrap();
    let redis = RedisCluster::start_tls(&pki, 3, 1).unwrap();
    let url = redis.node_url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let (ca, cert, key) = (
        pki.ca_cert().display().to_string(),
        pki.client_cert().display().to_string(),
        pki.client_key().display().to_string(),
    );
    let args = [
        "--redis-ca-file",
        &ca,
        "--redis-client-cert",
        &cert,
        "--redis-client-key",
        &key,
        "--log",
        "warn",
    ];
    let cluster = Cluster::start_on_redis(2, &url, &args).unwrap();
    let (_, report) = MixedLoad::start(&cluster.lb_url(), 10, 6).finish();
    let ok = report["total_ok"].as_u64().unwrap();
    assert!(ok > 0, "{report}");
    assert_eq!(report["total_failed"], 0, "{}", report["errors"]);
    assert_eq!(report["protocol_violations"], 0, "{}", report["errors"]);
    // Written over TLS to every shard.
    let primaries = redis.members().iter().filter(|m| is_primary(m)).count();
    assert_eq!(primaries, 3);
    assert!(
        redis
            .members()
            .iter()
            .filter(|m| is_primary(m))
            .all(|m| keys_on(m) > 0),
        "a shard holds nothing"
    );
}
