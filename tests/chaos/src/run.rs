//! One run: the topology, the load, the fault, the verdict.

use std::time::Duration;

use anyhow::Context;

use crate::fault::{AFTERMATH, NODE_DOWN, ORPHANS_FINALIZED, PARTITION};
use crate::load::Load;
use crate::slow::SlowReaders;
use crate::topology::Topology;
use crate::verdict::Window;
use crate::{Fault, Verdict, now_unix_ms};

/// How a run is made.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Virtual clients of the load generator (half of each era).
    pub sessions: u32,
    /// How long the load runs, in seconds; by default the warm-up, what
    /// the fault is expected to take ([`Fault::expected`]) and `calm`.
    pub duration_secs: Option<u32>,
    /// Load after the fault, by default.
    pub calm: Duration,
    /// Load before the fault strikes.
    pub warmup: Duration,
    /// The scenario, a file of `loadtest/scenarios/`.
    pub scenario: String,
    /// Streams nobody reads, for [`Fault::SlowReader`].
    pub slow_readers: usize,
    /// Extra arguments for every node.
    pub node_args: Vec<String>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            sessions: 100,
            duration_secs: None,
            calm: Duration::from_secs(10),
            warmup: Duration::from_secs(6),
            scenario: "chaos.toml".to_owned(),
            slow_readers: 100,
            node_args: vec!["--log".to_owned(), "warn".to_owned()],
        }
    }
}

/// Runs `fault` once and judges it; a run that could not be set up is a
/// failed verdict saying why.
pub fn run(fault: Fault, options: &RunOptions) -> Verdict {
    match run_inner(fault, options) {
        Ok(verdict) => verdict,
        Err(err) => Verdict::broken(fault, format!("{err:#}")),
    }
}

fn run_inner(fault: Fault, options: &RunOptions) -> anyhow::Result<Verdict> {
    let node_args: Vec<&str> = options.node_args.iter().map(String::as_str).collect();
    let mut topology = Topology::start(fault, &node_args)?;
    let duration = options.duration_secs.unwrap_or_else(|| {
        let secs = (options.warmup + fault.expected() + options.calm).as_secs();
        u32::try_from(secs).unwrap_or(u32::MAX)
    });
    let load = Load::start(
        &topology.cluster.lb_url(),
        &options.scenario,
        options.sessions,
        duration,
    )?;
    std::thread::sleep(options.warmup);
    // Held until the load has ended.
    let mut slow = None;
    let window = strike(fault, &mut topology, options, &mut slow)
        .with_context(|| format!("injecting {fault}"))?;
    let report = load.finish()?;
    drop(slow);
    let mut verdict = Verdict::judge(fault, &report, window);
    for i in topology.cluster.exited() {
        verdict.problems.push(format!("node {i} exited on its own"));
    }
    Ok(verdict)
}

/// Injects `fault` and waits for its recovery; returns its window.
fn strike(
    fault: Fault,
    topology: &mut Topology,
    options: &RunOptions,
    slow: &mut Option<SlowReaders>,
) -> anyhow::Result<Window> {
    let from_ms = now_unix_ms();
    let cluster = &mut topology.cluster;
    let redis = &topology.redis;
    let until = |recovered_ms: u64, aftermath: Duration| Window {
        from_ms,
        recovered_ms,
        until_ms: recovered_ms + millis(aftermath),
    };
    Ok(match fault {
        Fault::NodeKill => {
            cluster.kill_node(1);
            std::thread::sleep(NODE_DOWN);
            cluster.restart_node(1)?;
            let recovered = now_unix_ms();
            // The survivors answer the dead node's requests within
            // ORPHANS_FINALIZED of the kill.
            let finalized = from_ms + millis(ORPHANS_FINALIZED);
            until(recovered.max(finalized), AFTERMATH)
        }
        Fault::RollingRestart => {
            for i in 0..cluster.len() {
                let status = cluster.terminate_node(i)?.context("the node runs")?;
                anyhow::ensure!(status.success(), "node {i} drained with {status}");
                cluster.restart_node(i)?;
                std::thread::sleep(Duration::from_secs(2));
            }
            until(now_unix_ms(), Duration::ZERO)
        }
        Fault::SentinelFailover => {
            redis.fail_over_sentinel()?;
            until(now_unix_ms(), AFTERMATH)
        }
        Fault::ShardFailover => {
            redis.fail_over_shard()?;
            until(now_unix_ms(), AFTERMATH)
        }
        Fault::RedisRestartEmpty => {
            redis.restart_empty()?;
            until(now_unix_ms(), AFTERMATH)
        }
        Fault::RedisPartition => {
            let proxy = redis.proxy()?;
            proxy.partition();
            std::thread::sleep(PARTITION);
            proxy.heal();
            until(now_unix_ms(), AFTERMATH)
        }
        Fault::SlowReader => {
            *slow = Some(SlowReaders::open(
                cluster.nginx().addr(),
                options.slow_readers,
                10_000,
                20_000,
            )?);
            until(now_unix_ms(), Duration::ZERO)
        }
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
