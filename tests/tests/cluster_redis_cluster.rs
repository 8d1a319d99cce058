//! Nodes on a Redis Cluster (`redis+cluster://`): real `redis-server
//! --cluster-enabled yes` members on loopback, three primaries with a
//! replica each, the nodes logged in as the ACL user of
//! `proto-docs/redis-layout.md` (so nothing the managed services forbid is
//! sent, and nothing cross-slot).
//!
//! - The store's port suite passes on it, and what it writes spreads over
//!   every shard.
//! - Three nodes behind nginx under the load generator's mixed scenario
//!   ride the failover of one shard (its primary killed, its replica
//!   promoted): no protocol violation, no session lost, the failed
//!   operations few and clean.

use std::time::Duration;

use mcp_cluster_redis::RedisConfig;
use mcp_cluster_testkit::{Cluster, MixedLoad, RedisCluster};

/// Keys on a member (its `DBSIZE`).
fn keys_on(member: &mcp_cluster_testkit::RedisServer) -> u64 {
    member.command(&["DBSIZE"]).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_the_port_suite_on_a_redis_cluster() {
    let redis = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1).unwrap())
        .await
        .unwrap();
    let store = mcp_cluster_redis::connect(&RedisConfig {
        url: redis.node_url(),
        ..RedisConfig::default()
    })
    .await
    .unwrap();
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

#[test]
fn three_nodes_under_load_ride_a_shard_failover_without_a_protocol_violation() {
    let redis = RedisCluster::start(3, 1).unwrap();
    let cluster = Cluster::start_on_redis(3, &redis.node_url(), &["--log", "warn"]).unwrap();
    let load = MixedLoad::start(&cluster.lb_url(), 100, 24);

    std::thread::sleep(Duration::from_secs(6));
    // The shard of the control channel: every node listens there.
    let victim = redis.primary_of("mcp:ctl").unwrap();
    victim.kill();
    redis.wait_ok(6).unwrap();
    let (_, report) = load.finish();
    let ok = report["total_ok"].as_u64().unwrap();
    let failed = report["total_failed"].as_u64().unwrap();
    let seconds: Vec<String> = report["series"]["points"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("{}/{}", p["all"]["ok"], p["all"]["failed"]))
        .collect();
    eprintln!("ok/failed per second: {}", seconds.join(" "));
    eprintln!(
        "shard failover under load: {ok} operations ok, {failed} failed, {} protocol violations, errors {}",
        report["protocol_violations"], report["errors"]
    );
    assert_eq!(report["protocol_violations"], 0, "{}", report["errors"]);
    let errors = report["errors"].as_object().cloned().unwrap_or_default();
    assert!(
        !errors.contains_key("http_status:404"),
        "a session was lost: {errors:?}"
    );
    assert!(
        ok > 0 && failed * 5 < ok + failed,
        "{failed} of {} failed",
        ok + failed
    );
    let unclean: Vec<_> = errors
        .keys()
        .filter(|k| *k != "http_status:503" && !k.starts_with("jsonrpc:"))
        .collect();
    assert!(unclean.is_empty(), "{errors:?}");
}
