//! The Redis each fault needs, and three nodes behind nginx on it.

use std::time::Duration;

use anyhow::{Context, bail};
use mcp_cluster_testkit::{Cluster, RedisCluster, RedisServer, Sentinel, TcpProxy};

use crate::Fault;

/// Nodes in every run.
pub(crate) const NODES: usize = 3;

/// The Sentinels' name for the primary.
const MASTER: &str = "mcp-primary";

/// Longest wait for a Redis to reach the state a fault waits for.
const REDIS_PATIENCE: Duration = Duration::from_secs(30);

/// The Redis under the nodes.
#[derive(Debug)]
pub(crate) enum Redis {
    /// One `redis-server`.
    Single(RedisServer),
    /// A primary and its replica watched by three Sentinels (quorum 2).
    Sentinels(Box<Sentinels>),
    /// Three primaries with a replica each.
    Shards(RedisCluster),
    /// One `redis-server` that node 0 reaches through `proxy`.
    Proxied { redis: RedisServer, proxy: TcpProxy },
}

/// A primary, its replica, and the Sentinels watching them.
#[derive(Debug)]
pub(crate) struct Sentinels {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
}

/// A cluster on the Redis of one fault. The nodes go first on drop (field
/// order), Redis after them.
#[derive(Debug)]
pub(crate) struct Topology {
    pub(crate) cluster: Cluster,
    pub(crate) redis: Redis,
}

impl Topology {
    /// Starts what `fault` needs; every node gets `node_args`.
    pub(crate) fn start(fault: Fault, node_args: &[&str]) -> anyhow::Result<Self> {
        let redis = match fault {
            Fault::SentinelFailover => {
                let primary = RedisServer::start()?;
                let replica = RedisServer::start_replica_of(&primary)?;
                primary.wait_replicated(1)?;
                let sentinels = (0..3)
                    .map(|_| Sentinel::start(&primary, MASTER, 2))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Redis::Sentinels(Box::new(Sentinels {
                    primary,
                    replica,
                    sentinels,
                }))
            }
            Fault::ShardFailover => Redis::Shards(RedisCluster::start(3, 1)?),
            Fault::RedisPartition => {
                let redis = RedisServer::start_for_nodes()?;
                let proxy = TcpProxy::start(redis.addr())?;
                Redis::Proxied { redis, proxy }
            }
            _ => Redis::Single(RedisServer::start_for_nodes()?),
        };
        let urls = redis.node_urls();
        let cluster =
            Cluster::start_on_redis_per_node(&urls, node_args).context("starting the nodes")?;
        Ok(Self { cluster, redis })
    }
}

impl Redis {
    /// Each node's `--redis-url`.
    fn node_urls(&self) -> Vec<String> {
        match self {
            Redis::Single(redis) => vec![redis.node_url(); NODES],
            Redis::Sentinels(set) => {
                let sentinels = &set.sentinels;
                let hosts: Vec<String> = sentinels
                    .iter()
                    .map(|s| format!("127.0.0.1:{}", s.port()))
                    .collect();
                vec![format!("redis+sentinel://{}/{MASTER}", hosts.join(",")); NODES]
            }
            Redis::Shards(cluster) => vec![cluster.node_url(); NODES],
            Redis::Proxied { redis, proxy } => {
                let direct = redis.node_url();
                let through = direct.replace(
                    &format!("127.0.0.1:{}", redis.port()),
                    &format!("127.0.0.1:{}", proxy.addr().port()),
                );
                let mut urls = vec![direct; NODES];
                urls[0] = through;
                urls
            }
        }
    }

    /// Sentinels: kills the primary and waits until every Sentinel names
    /// the replica.
    pub(crate) fn fail_over_sentinel(&self) -> anyhow::Result<()> {
        let Redis::Sentinels(set) = self else {
            bail!("not behind Sentinels");
        };
        let Sentinels {
            primary,
            replica,
            sentinels,
        } = &**set;
        primary.kill();
        wait_for("the Sentinels to promote the replica", || {
            sentinels
                .iter()
                .all(|s| s.primary_port(MASTER).ok() == Some(replica.port()))
        })
    }

    /// Redis Cluster: kills the primary of the shard every node listens on
    /// (the control channel's) and waits until every member left says
    /// `cluster_state:ok` with its replica promoted.
    pub(crate) fn fail_over_shard(&self) -> anyhow::Result<()> {
        let Redis::Shards(cluster) = self else {
            bail!("not on a Redis Cluster");
        };
        let victim = cluster.primary_of("mcp:ctl")?;
        victim.kill();
        cluster.wait_ok(cluster.members().len())
    }

    /// One `redis-server`: stops it and starts it again, empty.
    pub(crate) fn restart_empty(&self) -> anyhow::Result<()> {
        let Redis::Single(redis) = self else {
            bail!("not on one redis-server");
        };
        redis.restart()
    }

    /// The proxy in front of node 0's Redis.
    pub(crate) fn proxy(&self) -> anyhow::Result<&TcpProxy> {
        match self {
            Redis::Proxied { proxy, .. } => Ok(proxy),
            _ => bail!("no proxy in front of Redis"),
        }
    }
}

/// Polls `done` until it holds, for [`REDIS_PATIENCE`] at most.
pub(crate) fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let pause = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while !done() {
        if waited >= REDIS_PATIENCE {
            bail!("waited {REDIS_PATIENCE:?} for {what}");
        }
        std::thread::sleep(pause);
        waited += pause;
    }
    Ok(())
}
