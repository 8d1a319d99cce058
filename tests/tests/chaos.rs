//! Every fault of the chaos runner (`tests/chaos`, `mcp-chaos`) once, under
//! the load generator's chaos scenario (both eras: calls, streams resumed
//! with `Last-Event-ID`, tasks, subscriptions) against three nodes behind
//! nginx: no response lost, no protocol violation, no error outside the
//! fault's own window. `mcp-chaos --fault all --repeat 20` runs them twenty
//! times each (README, "Chaos").
//!
//! One run at a time: each starts its own cluster and load.

use std::sync::{Mutex, PoisonError};

use mcp_chaos::{Fault, RunOptions, run};

/// Held by the running test: two clusters under load at once would judge
/// each other's slowness.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn rides(fault: Fault) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let verdict = run(fault, &RunOptions::default());
    eprintln!("{verdict}");
    assert!(verdict.passed(), "{verdict}");
}

#[test]
fn a_node_killed_under_load_loses_nothing() {
    rides(Fault::NodeKill);
}

#[test]
fn a_rolling_restart_under_load_shows_no_error() {
    rides(Fault::RollingRestart);
}

#[test]
fn a_sentinel_failover_under_load_loses_nothing() {
    rides(Fault::SentinelFailover);
}

#[test]
fn a_shard_failover_under_load_loses_nothing() {
    rides(Fault::ShardFailover);
}

#[test]
fn redis_restarted_empty_under_load_loses_nothing_silently() {
    rides(Fault::RedisRestartEmpty);
}

#[test]
fn a_node_partitioned_from_redis_under_load_loses_nothing() {
    rides(Fault::RedisPartition);
}

#[test]
fn readers_that_never_read_cost_other_clients_nothing() {
    rides(Fault::SlowReader);
}
