//! [`connect`]: the node's two Redis connections and the [`Store`] built on
//! them; [`Redis`], the command handle every port shares.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_cluster_store::{Store, StoreError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, ScriptInvocation, Value};

use crate::bus::RedisBus;
use crate::error::{connect_failed, timed_out, unavailable};
use crate::event_log::RedisEventLog;
use crate::keys::Keys;
use crate::nodes::RedisNodes;
use crate::pubsub::PubSub;
use crate::quota::RedisQuotas;
use crate::session_store::RedisSessionStore;
use crate::tasks::RedisTasks;
use crate::{ClusterError, RedisConfig};

/// First delay before the command connection retries a lost connection.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(50);
/// Longest delay between two attempts of one reconnection round.
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);
/// Attempts in one reconnection round; when they all fail, the next command
/// starts another round (and fails fast meanwhile).
const RECONNECT_RETRIES: usize = 4;

/// Set when a command found the commands connection lost, cleared (and a
/// reconnection counted) by the next command that succeeds. One node, one
/// commands connection.
static COMMANDS_LOST: AtomicBool = AtomicBool::new(false);

/// Connects a node to Redis and returns its [`Store`].
///
/// Opens the pub/sub connection (and subscribes to the control bus) and the
/// command connection; both reconnect by themselves afterwards, so the store
/// is built once per process and survives Redis restarts. Must run inside a
/// tokio runtime, which then hosts the pub/sub task until the store is
/// dropped.
///
/// # Errors
/// [`ClusterError::Config`] for values that cannot work (files that cannot
/// be read included), [`ClusterError::Url`], [`ClusterError::Connect`] or
/// [`ClusterError::Timeout`] when Redis cannot be reached now,
/// [`ClusterError::Rejected`] when it refuses the node as configured.
pub async fn connect(config: &RedisConfig) -> Result<Store, ClusterError> {
    // Both connections (commands and pub/sub) come from this one client:
    // the same credentials and TLS for both.
    let client = config.client()?;
    let tls = config.is_tls();
    let timeout = config.command_timeout();
    let keys = Keys::new(&config.key_prefix);
    // The pub/sub connection first: one plain attempt whose error says why.
    let pubsub = PubSub::start(client.clone(), keys.ctl(), timeout).await?;
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_min_delay(RECONNECT_MIN_DELAY)
        .set_max_delay(RECONNECT_MAX_DELAY)
        .set_number_of_retries(RECONNECT_RETRIES);
    let manager = tokio::time::timeout(
        timeout,
        ConnectionManager::new_with_config(client, manager_config),
    )
    .await
    .map_err(|_| ClusterError::Timeout(timeout))?
    .map_err(|err| connect_failed(err, tls))?;
    let redis = Redis { manager, timeout };
    Ok(Store {
        sessions: Arc::new(RedisSessionStore::new(
            redis.clone(),
            keys.clone(),
            pubsub.clone(),
        )),
        events: Arc::new(RedisEventLog::new(
            redis.clone(),
            keys.clone(),
            config.retention,
            pubsub.clone(),
        )),
        bus: Arc::new(RedisBus::new(redis.clone(), keys.clone(), pubsub)),
        nodes: Arc::new(RedisNodes::new(redis.clone(), keys.clone())),
        quotas: Arc::new(RedisQuotas::new(redis.clone(), keys.clone())),
        tasks: Arc::new(RedisTasks::new(
            redis,
            keys,
            config.retention.finished_tasks,
        )),
        shared: true,
    })
}

/// The command connection: one multiplexed connection shared by every port
/// and every task of the node, reconnecting in the background. Every call is
/// bounded by the command timeout and maps failures to
/// [`StoreError::Unavailable`].
#[derive(Clone)]
pub(crate) struct Redis {
    /// Cloning is cheap (an `Arc`); all clones share one connection.
    manager: ConnectionManager,
    /// Bound on each call, connection wait included.
    timeout: Duration,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The manager's own Debug prints the connection info (with any
        // password).
        f.debug_struct("Redis")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// Runs one command.
    /// One command; `op` names it in the Redis metrics.
    pub(crate) async fn cmd(&self, op: &'static str, cmd: &Cmd) -> Result<Value, StoreError> {
        let mut con = self.manager.clone();
        self.bounded(op, cmd.query_async::<Value>(&mut con)).await
    }

    /// One pipeline (one round trip); `op` names it in the Redis metrics.
    pub(crate) async fn pipe(
        &self,
        op: &'static str,
        pipe: &Pipeline,
    ) -> Result<Value, StoreError> {
        let mut con = self.manager.clone();
        self.bounded(op, pipe.query_async::<Value>(&mut con)).await
    }

    /// One script; `op` names it in the Redis metrics.
    pub(crate) async fn script(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<Value, StoreError> {
        let mut con = self.manager.clone();
        self.bounded(op, invocation.invoke_async::<Value>(&mut con))
            .await
    }

    async fn bounded(
        &self,
        op: &'static str,
        call: impl Future<Output = redis::RedisResult<Value>>,
    ) -> Result<Value, StoreError> {
        let m = mcp_cluster_telemetry::metrics::metrics();
        let started = tokio::time::Instant::now();
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => {
                m.redis_duration
                    .with_label_values(&[op])
                    .observe(started.elapsed().as_secs_f64());
                if COMMANDS_LOST.swap(false, Ordering::AcqRel) {
                    // The first answer since the connection was lost.
                    m.redis_reconnects.with_label_values(&["commands"]).inc();
                }
                Ok(value)
            }
            Ok(Err(err)) => {
                let kind = if err.is_connection_dropped() || err.is_io_error() {
                    // The connection manager reconnects for the next one.
                    COMMANDS_LOST.store(true, Ordering::Release);
                    "connection"
                } else {
                    "other"
                };
                m.redis_errors.with_label_values(&[op, kind]).inc();
                Err(unavailable(&err))
            }
            Err(_) => {
                m.redis_errors.with_label_values(&[op, "timeout"]).inc();
                Err(timed_out(self.timeout))
            }
        }
    }
}
