//! Faults injected into a real cluster under load, one at a time and as
//! often as asked, and what the clients made of each: the chaos runner
//! behind `mcp-chaos` and `tests/tests/chaos.rs`.
//!
//! A run starts three `mcp-node` processes behind nginx on the Redis the
//! fault needs (one `redis-server`, a primary with a replica and three
//! Sentinels, a Redis Cluster of three primaries with a replica each, or
//! one `redis-server` that one node reaches through a proxy that can stop
//! forwarding), drives them with the load generator's chaos scenario
//! (`loadtest/scenarios/chaos.toml`: both eras, calls, streams resumed with
//! `Last-Event-ID`, tasks, subscriptions), injects the fault once the load
//! is steady, and reads the load generator's report: responses lost,
//! protocol violations, errors by kind and when they happened, and whether
//! each error told the client when to retry. A run fails on one lost
//! response or violation, or on one error outside the fault's own window.
//!
//! # Layout
//! - [`Fault`] (`fault`): the faults, their names, and each one's window.
//! - `topology`: the Redis each fault needs and the cluster on it.
//! - `slow`: clients that open SSE streams and never read them.
//! - `load`: the load generator as a child process and its report.
//! - [`Verdict`] (`verdict`): one run judged, and many summed up.
//! - [`run`] (`run`): one run, start to verdict.

mod fault;
mod load;
mod run;
mod slow;
mod topology;
mod verdict;

pub use fault::{AFTERMATH, Fault, NODE_DOWN, ORPHANS_FINALIZED, PARTITION};
pub use run::{RunOptions, run};
pub use verdict::{Summary, Verdict};

/// Milliseconds since the Unix epoch: the clock the load generator's
/// report stamps its errors with, shared by every process on the machine.
pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
