//! The faults, one at a time, and the window each may show errors in.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How long after a fault's recovery point its errors may still show: a
/// request that started before it ends after it.
pub const AFTERMATH: Duration = Duration::from_secs(2);

/// How long a node partitioned from Redis stays cut off.
pub const PARTITION: Duration = Duration::from_secs(10);

/// How long a killed node stays down before it is started again, as a
/// supervisor (Kubernetes) would.
pub const NODE_DOWN: Duration = Duration::from_secs(3);

/// When a dead node's requests have been answered by a survivor at the
/// latest (`proto-docs/cluster.md`, node death: the heartbeat's 6 s TTL
/// plus the 3 s reaping interval), counted from the kill.
pub const ORPHANS_FINALIZED: Duration = Duration::from_secs(9);

/// One fault, injected once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// One node killed with SIGKILL (no drain), started again after
    /// [`NODE_DOWN`]. Window: the kill to [`ORPHANS_FINALIZED`] after it.
    NodeKill,
    /// Every node in turn sent SIGTERM (it drains), then started again.
    /// Window: none; a client sees no error.
    RollingRestart,
    /// The Redis primary behind three Sentinels killed; the Sentinels
    /// promote its replica. Window: the kill to the promotion.
    SentinelFailover,
    /// The primary of one Redis Cluster shard (the one holding the control
    /// channel every node listens on) killed; its replica takes over.
    /// Window: the kill to every member saying `cluster_state:ok`.
    ShardFailover,
    /// The one `redis-server` stopped and started again with nothing in it.
    /// Window: the stop to the moment it answers again.
    RedisRestartEmpty,
    /// One node cut off from Redis for [`PARTITION`] (a proxy that stops
    /// forwarding: its connections stay open and go unanswered). Window:
    /// the cut to the moment it is healed.
    RedisPartition,
    /// Clients that open SSE streams with much to send and never read
    /// them. Window: none; no other client sees an error.
    SlowReader,
}

impl Fault {
    /// Every fault, in the order `--fault all` runs them.
    pub const ALL: [Fault; 7] = [
        Fault::NodeKill,
        Fault::RollingRestart,
        Fault::SentinelFailover,
        Fault::ShardFailover,
        Fault::RedisRestartEmpty,
        Fault::RedisPartition,
        Fault::SlowReader,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::NodeKill => "node-kill",
            Fault::RollingRestart => "rolling-restart",
            Fault::SentinelFailover => "sentinel-failover",
            Fault::ShardFailover => "shard-failover",
            Fault::RedisRestartEmpty => "redis-restart-empty",
            Fault::RedisPartition => "redis-partition",
            Fault::SlowReader => "slow-reader",
        }
    }

    /// About how long the fault takes to strike and be over, so that the
    /// load outlasts it.
    pub fn expected(self) -> Duration {
        Duration::from_secs(match self {
            Fault::NodeKill => 12,
            // Three drains (a 5 s delay each, then the requests admitted
            // before it and up to 5 s for standalone streams to resume
            // elsewhere) and the restarts between them.
            Fault::RollingRestart => 42,
            Fault::SentinelFailover | Fault::ShardFailover => 10,
            Fault::RedisRestartEmpty => 4,
            Fault::RedisPartition => PARTITION.as_secs() + 3,
            Fault::SlowReader => 6,
        })
    }

    /// Whether clients may see errors at all (inside the window).
    pub fn errors_allowed(self) -> bool {
        !matches!(self, Fault::RollingRestart | Fault::SlowReader)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Fault::ALL
            .into_iter()
            .find(|fault| fault.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
                format!("unknown fault {s:?}; one of: {}, all", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_parses_from_its_name() {
        for fault in Fault::ALL {
            assert_eq!(fault.name().parse::<Fault>(), Ok(fault));
        }
        let err = "meteor".parse::<Fault>().unwrap_err();
        assert!(err.contains("node-kill") && err.contains("meteor"), "{err}");
    }
}
