//! [`connect`]: the node's two Redis connections and the [`Store`] built on
//! them; [`Redis`], the command handle every port shares.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::thread::ThreadId;
use std::time::Duration;

use mcp_cluster_store::{Store, StoreError};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisFuture, ScriptInvocation, ServerErrorKind, Value};
use tracing::{info, warn};

use crate::bus::{Publisher, RedisBus};
use crate::error::{connect_failed, timed_out, unavailable};
use crate::event_log::RedisEventLog;
use crate::keys::Keys;
use crate::layout::{self, ClusterCommands};
use crate::lease::Leases;
use crate::nodes::RedisNodes;
use crate::pubsub::PubSub;
use crate::quota::RedisQuotas;
use crate::replica_wait::{Barrier, ReplicaWait};
use crate::session_store::RedisSessionStore;
use crate::target::Target;
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
    // Both connections (commands and pub/sub) go where this one target
    // says (one Redis, or the Sentinels' primary), with the same
    // credentials and TLS.
    let target = config.target()?;
    let tls = target.is_tls();
    let timeout = config.command_timeout();
    let keys = Keys::new(&config.key_prefix);
    let wait = ReplicaWait::configured(config, &target);
    // The pub/sub connection first: one plain attempt whose error says why
    // (the command connection's manager retries, and would only time out).
    let trouble = Arc::new(AtomicU64::new(0));
    let pubsub = PubSub::start(target.clone(), &keys, timeout, Arc::clone(&trouble)).await?;
    let redis = if let Some(seeds) = target.cluster_seeds() {
        // A Redis Cluster: one client routes every command by its keys.
        let client = seeds.client(None)?;
        let connection = tokio::time::timeout(timeout, client.get_async_connection())
            .await
            .map_err(|_| ClusterError::Timeout(timeout))?
            .map_err(|err| connect_failed(err, tls))?;
        let commands = Arc::new(ClusterCommands::new(connection));
        // The layout the connections were made for, followed from now on.
        if let Some(layout) = layout::read(&commands, timeout).await {
            seeds.follow(&layout);
        }
        layout::spawn(
            Arc::downgrade(&commands),
            Arc::clone(seeds),
            timeout,
            Arc::clone(&trouble),
        );
        Redis {
            conn: Conn::Cluster(commands),
            timeout,
            trouble,
            wait,
        }
    } else {
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_min_delay(RECONNECT_MIN_DELAY)
            .set_max_delay(RECONNECT_MAX_DELAY)
            .set_number_of_retries(RECONNECT_RETRIES);
        let opened = async { open_manager(target.primary().await?, &manager_config).await };
        let current = tokio::time::timeout(timeout, opened)
            .await
            .map_err(|_| ClusterError::Timeout(timeout))?
            .map_err(|err| connect_failed(err, tls))?;
        Redis {
            conn: Conn::Primary(Arc::new(Primary {
                target,
                manager_config,
                current: RwLock::new(current),
                asking: AtomicBool::new(false),
                known: AtomicBool::new(true),
                trouble: Arc::clone(&trouble),
                locals: Mutex::new(Vec::new()),
                opening: Mutex::new(Vec::new()),
            })),
            timeout,
            trouble,
            wait,
        }
    };
    mcp_cluster_telemetry::metrics::metrics()
        .redis_primary_known
        .set(1);
    pubsub.replay_with(redis.clone());
    let publisher = Publisher::new(redis.clone(), &keys);
    let leases = Arc::new(Leases::new(redis.clone(), keys.clone()));
    Leases::start(&leases, &pubsub);
    let closed = crate::event_log::closed_streams(&config.retention);
    Ok(Store {
        sessions: Arc::new(RedisSessionStore::new(
            redis.clone(),
            keys.clone(),
            pubsub.clone(),
            leases,
            publisher.clone(),
            config.retention.idle_stream_ttl_ms.max(1),
            Arc::clone(&closed),
        )),
        events: Arc::new(RedisEventLog::new(
            redis.clone(),
            keys.clone(),
            config.retention,
            closed,
            pubsub.clone(),
        )),
        bus: Arc::new(RedisBus::new(publisher, pubsub)),
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

/// The address a client connects to, as the Sentinels gave it.
fn addr_of(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

/// A connection manager to `client`'s server, and that server's address.
async fn open_manager(
    client: redis::Client,
    config: &ConnectionManagerConfig,
) -> redis::RedisResult<Current> {
    let addr = addr_of(&client);
    let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
    Ok(Current {
        manager,
        barrier: Arc::default(),
        addr,
        client,
        generation: 0,
    })
}

thread_local! {
    /// This thread's own command connections, one per primary (a process
    /// normally has one store; tests have several). See [`Primary::local`].
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

/// Marks, until dropped (the opening may be cancelled, or finish on
/// another thread of a multi-thread runtime), that one thread is opening
/// its connection to a primary.
struct Opening<'a> {
    primary: &'a Primary,
    thread: ThreadId,
}

impl<'a> Opening<'a> {
    /// `None` when the calling thread is opening one to `primary` already.
    fn begin(primary: &'a Primary) -> Option<Self> {
        let thread = std::thread::current().id();
        let mut opening = primary
            .opening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if opening.contains(&thread) {
            return None;
        }
        opening.push(thread);
        Some(Self { primary, thread })
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.primary
            .opening
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|t| *t != self.thread);
    }
}

/// A command connection opened on, and driven by, one thread; the
/// [`Primary`] owns it (in [`Primary::locals`]), so that it closes with the
/// store or when the primary moves.
struct Local {
    primary: Weak<Primary>,
    /// The [`Current::generation`] it was opened for.
    generation: u64,
    manager: Weak<ConnectionManager>,
}

/// The command connection: one multiplexed connection shared by every port
/// and every task of the node (on a Redis Cluster, one per member),
/// reconnecting in the background. Every call is bounded by the command
/// timeout and maps failures to [`StoreError::Unavailable`].
#[derive(Clone)]
pub(crate) struct Redis {
    /// Cloning is cheap; all clones share the connections.
    conn: Conn,
    /// Bound on each call, connection wait included.
    timeout: Duration,
    /// Counts the calls that found the connection in trouble (lost, timed
    /// out, a primary demoted) and the failovers followed: a session lease
    /// granted before is no longer trusted (see the `lease` module).
    trouble: Arc<AtomicU64>,
    /// Sent after the writes a failover must not lose; `None`: no wait.
    wait: Option<Arc<ReplicaWait>>,
}

#[derive(Clone)]
enum Conn {
    /// One Redis, or the Sentinels' primary.
    Primary(Arc<Primary>),
    /// A Redis Cluster: the client routes each command to the shard of its
    /// keys and follows `MOVED` and `ASK`; the `layout` task replaces it
    /// when a failover changed the layout.
    Cluster(Arc<ClusterCommands>),
}

/// The connection one call goes out on: a clone of the manager or of the
/// cluster connection (cheap: both share their sockets).
#[derive(Clone)]
enum Connection {
    One(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::One(con) => con.req_packed_command(cmd),
            Self::Cluster(con) => con.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::One(con) => con.req_packed_commands(pipeline, offset, count),
            Self::Cluster(con) => con.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::One(con) => con.get_db(),
            Self::Cluster(con) => con.get_db(),
        }
    }
}

/// Where commands go. With one Redis, always the same connection manager
/// (it reconnects by itself). Behind Sentinels, a command that finds the
/// primary gone (connection lost, timed out) or demoted (`READONLY`,
/// `MASTERDOWN`) makes the node ask the Sentinels again; when they name
/// another primary, a manager connected to it replaces the old one. Until
/// then commands fail fast with the store's usual unavailable error.
struct Primary {
    target: Target,
    manager_config: ConnectionManagerConfig,
    /// Read for each command (a clone of the manager, no await under the
    /// lock); written when the primary moved.
    current: RwLock<Current>,
    /// Set while a task asks the Sentinels: one question at a time.
    asking: AtomicBool,
    /// Cleared when a command found the primary gone or demoted (Sentinels
    /// only), set again when the Sentinels name a primary the node reaches:
    /// the node is not ready in between.
    known: AtomicBool,
    /// The [`Redis::trouble`] count, bumped when the primary moved.
    trouble: Arc<AtomicU64>,
    /// The threads' own connections (see [`Primary::local`]): one per
    /// thread that sent a command, emptied when the primary moved.
    locals: Mutex<Vec<Arc<ConnectionManager>>>,
    /// The threads opening their own connection now (one opening each).
    opening: Mutex<Vec<ThreadId>>,
}

struct Current {
    manager: ConnectionManager,
    /// The group commit of the kept writes sent on `manager`.
    barrier: Arc<Barrier>,
    /// The primary's address, as the Sentinels gave it.
    addr: String,
    /// Opens more connections to it (each thread's own).
    client: redis::Client,
    /// Bumped each time the primary moved: threads' own connections to an
    /// earlier one are replaced.
    generation: u64,
}

impl Primary {
    fn manager(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .manager
            .clone()
    }

    /// The calling thread's own connection to the primary, opened on first
    /// use: its driver task runs on this thread's runtime, so a command
    /// and its answer never wake another thread (on a one-core node, each
    /// such wake-up is a context switch). The shared connection serves
    /// while one cannot be opened. One per thread that sends commands (the
    /// HTTP workers, the handler threads, the main thread): bounded by the
    /// node's threads, not by its load.
    async fn local(self: &Arc<Self>, timeout: Duration) -> ConnectionManager {
        let (client, generation) = {
            let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
            (current.client.clone(), current.generation)
        };
        let found = LOCAL.with(|local| {
            local
                .borrow()
                .iter()
                .find(|l| {
                    l.generation == generation && Weak::as_ptr(&l.primary) == Arc::as_ptr(self)
                })
                .and_then(|l| l.manager.upgrade())
        });
        if let Some(manager) = found {
            return ConnectionManager::clone(&manager);
        }
        // One opening per thread: the other tasks of this thread use the
        // shared connection meanwhile (at start, a burst of requests on one
        // thread would otherwise open a connection each).
        let Some(_opening) = Opening::begin(self) else {
            return self.manager();
        };
        let opened = tokio::time::timeout(
            timeout,
            ConnectionManager::new_with_config(client, self.manager_config.clone()),
        )
        .await;
        let Ok(Ok(manager)) = opened else {
            return self.manager();
        };
        let owned = Arc::new(manager.clone());
        {
            let mut locals = self.locals.lock().unwrap_or_else(PoisonError::into_inner);
            if self.generation() != generation {
                // The primary moved meanwhile: this one is not kept.
                return manager;
            }
            locals.push(Arc::clone(&owned));
        }
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            // Entries of stores gone, of connections closed, and this
            // thread's earlier one to this primary.
            local.retain(|l| {
                l.manager.strong_count() > 0 && Weak::as_ptr(&l.primary) != Arc::as_ptr(self)
            });
            local.push(Local {
                primary: Arc::downgrade(self),
                generation,
                manager: Arc::downgrade(&owned),
            });
        });
        manager
    }

    fn generation(&self) -> u64 {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .generation
    }

    /// Forgets the calling thread's own connection (it failed: its runtime
    /// may be gone); the next command opens another.
    fn drop_local(self: &Arc<Self>) {
        let dropped = LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            let at = local
                .iter()
                .position(|l| Weak::as_ptr(&l.primary) == Arc::as_ptr(self))?;
            Some(local.swap_remove(at).manager)
        });
        if let Some(dropped) = dropped {
            self.locals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|owned| !std::ptr::eq(Arc::as_ptr(owned), dropped.as_ptr()));
        }
    }

    fn set_known(&self, known: bool) {
        self.known.store(known, Ordering::Release);
        mcp_cluster_telemetry::metrics::metrics()
            .redis_primary_known
            .set(i64::from(known));
    }

    /// Asks the Sentinels for the primary in the background (once at a
    /// time), and moves the commands to it when it is another one.
    fn recheck(self: &Arc<Self>, timeout: Duration) {
        if !self.target.follows_failovers() {
            return;
        }
        self.set_known(false);
        if self.asking.swap(true, Ordering::AcqRel) {
            return;
        }
        let primary = Arc::clone(self);
        tokio::spawn(async move {
            primary.follow(timeout).await;
            primary.asking.store(false, Ordering::Release);
        });
    }

    async fn follow(&self, timeout: Duration) {
        let m = mcp_cluster_telemetry::metrics::metrics();
        let client = match tokio::time::timeout(timeout, self.target.primary()).await {
            Ok(Ok(client)) => client,
            Ok(Err(err)) => {
                warn!(error = %err, "The Sentinels name no reachable Redis primary.");
                return;
            }
            Err(_) => {
                warn!(
                    ?timeout,
                    "The Sentinels did not name a Redis primary in time."
                );
                return;
            }
        };
        let same = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .addr
            == addr_of(&client);
        if same {
            // Still the primary: its manager reconnects by itself.
            self.set_known(true);
            return;
        }
        let addr = addr_of(&client);
        let opened =
            tokio::time::timeout(timeout, open_manager(client, &self.manager_config)).await;
        match opened {
            Ok(Ok(mut next)) => {
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                info!(from = %current.addr, to = %next.addr, "Following a Redis failover: commands go to the new primary.");
                next.generation = current.generation + 1;
                *current = next;
                drop(current);
                // Every thread opens its own to the new primary (after the
                // lock: `local` takes these two locks the other way round).
                self.locals
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                self.set_known(true);
                self.trouble.fetch_add(1, Ordering::AcqRel);
                m.redis_reconnects.with_label_values(&["failover"]).inc();
            }
            Ok(Err(err)) => {
                warn!(%addr, error = %err, "The new Redis primary could not be reached.")
            }
            Err(_) => warn!(%addr, ?timeout, "The new Redis primary did not answer in time."),
        }
    }
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
    /// Whether the node knows a primary to write to (with one Redis or a
    /// Redis Cluster, always: the readiness ping tells whether it answers).
    pub(crate) fn primary_known(&self) -> bool {
        match &self.conn {
            Conn::Primary(primary) => primary.known.load(Ordering::Acquire),
            Conn::Cluster(_) => true,
        }
    }

    /// How many calls found the connection in trouble so far (see
    /// [`Redis::trouble`]'s field).
    pub(crate) fn trouble(&self) -> u64 {
        self.trouble.load(Ordering::Acquire)
    }

    /// Whether commands go to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The command that publishes on a channel of a session's keys' slot:
    /// `SPUBLISH` on a Redis Cluster (sharded pub/sub: the message stays on
    /// the shard of its channel instead of reaching every member), else
    /// `PUBLISH`.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// Where the next call goes: this thread's own connection to the one
    /// Redis or the Sentinels' primary, or the cluster connection.
    async fn connection(&self) -> Connection {
        match &self.conn {
            Conn::Primary(primary) => Connection::One(primary.local(self.timeout).await),
            Conn::Cluster(cluster) => Connection::Cluster(cluster.get()),
        }
    }

    /// One command; `op` names it in the Redis metrics.
    pub(crate) async fn cmd(&self, op: &'static str, cmd: &Cmd) -> Result<Value, StoreError> {
        self.bounded(op, async {
            cmd.query_async(&mut self.connection().await).await
        })
        .await
    }

    /// One pipeline (one round trip); `op` names it in the Redis metrics.
    /// On a Redis Cluster its keys must share one slot; see [`Self::each`]
    /// for commands on keys of several.
    pub(crate) async fn pipe(
        &self,
        op: &'static str,
        pipe: &Pipeline,
    ) -> Result<Value, StoreError> {
        self.bounded(op, async {
            pipe.query_async(&mut self.connection().await).await
        })
        .await
    }

    /// Commands whose keys may sit in different slots, each answer in
    /// order: one pipeline (one round trip) on one Redis; on a Redis
    /// Cluster, each command sent at once to its own shard. Not atomic
    /// either way.
    pub(crate) async fn each(
        &self,
        op: &'static str,
        cmds: &[Cmd],
    ) -> Result<Vec<Value>, StoreError> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let call = async {
            let con = self.connection().await;
            self.send_each(&con, cmds).await.map(Value::Array)
        };
        crate::reply::array(self.bounded(op, call).await?)
    }

    /// `cmds` on `con`, each answer in order: one pipeline on one Redis;
    /// on a Redis Cluster, each command at once to its own shard.
    async fn send_each(&self, con: &Connection, cmds: &[Cmd]) -> redis::RedisResult<Vec<Value>> {
        if self.is_cluster() {
            let calls = cmds.iter().map(|cmd| {
                let mut con = con.clone();
                async move { cmd.query_async::<Value>(&mut con).await }
            });
            futures_util::future::try_join_all(calls).await
        } else {
            let mut pipe = redis::pipe();
            for cmd in cmds {
                pipe.add_command(cmd.clone());
            }
            pipe.query_async(&mut con.clone()).await
        }
    }

    /// The replica wait kept writes get now; `None`: none configured, or
    /// paused.
    fn waiting(&self) -> Option<&ReplicaWait> {
        self.wait.as_deref().filter(|wait| !wait.paused())
    }

    /// Where kept writes go, and the group commit of their waits there: the
    /// primary's shared connection (each thread's own serve the other
    /// commands, which a wait in flight would hold up), or the cluster
    /// connection.
    fn kept_connection(&self) -> (Connection, Arc<Barrier>) {
        match &self.conn {
            Conn::Primary(primary) => {
                let current = primary
                    .current
                    .read()
                    .unwrap_or_else(PoisonError::into_inner);
                (
                    Connection::One(current.manager.clone()),
                    Arc::clone(&current.barrier),
                )
            }
            Conn::Cluster(cluster) => {
                let (connection, barrier) = cluster.get_kept();
                (Connection::Cluster(connection), barrier)
            }
        }
    }

    /// After a kept write answered on `con`: waits until a `WAIT` sent after
    /// it on `con` ended (on a Redis Cluster, sent to every primary).
    async fn cover(
        wait: &ReplicaWait,
        mut con: Connection,
        barrier: &Barrier,
    ) -> redis::RedisResult<()> {
        let ticket = barrier.answered();
        let command = wait.command();
        wait.cover(barrier, ticket, move || async move {
            command.query_async::<u32>(&mut con).await
        })
        .await
    }

    /// [`Self::each`] for writes a failover must not lose: answered once
    /// the replicas [`RedisConfig::replica_acks`] asks for have them.
    pub(crate) async fn each_kept(
        &self,
        op: &'static str,
        cmds: &[Cmd],
    ) -> Result<Vec<Value>, StoreError> {
        let Some(wait) = self.waiting() else {
            return self.each(op, cmds).await;
        };
        let call = async {
            let (con, barrier) = self.kept_connection();
            let replies = self.send_each(&con, cmds).await?;
            Self::cover(wait, con, &barrier).await?;
            Ok(Value::Array(replies))
        };
        crate::reply::array(self.bounded(op, call).await?)
    }

    /// [`Self::script`] for a write a failover must not lose: answered once
    /// the replicas [`RedisConfig::replica_acks`] asks for have it.
    pub(crate) async fn script_kept(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<Value, StoreError> {
        let Some(wait) = self.waiting() else {
            return self.script(op, invocation).await;
        };
        self.bounded(op, async {
            let (mut con, barrier) = self.kept_connection();
            let value = invocation.invoke_async(&mut con).await?;
            Self::cover(wait, con, &barrier).await?;
            Ok(value)
        })
        .await
    }

    /// One script; `op` names it in the Redis metrics.
    pub(crate) async fn script(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<Value, StoreError> {
        self.bounded(op, async {
            invocation.invoke_async(&mut self.connection().await).await
        })
        .await
    }

    /// After a failure that may mean the primary moved: behind Sentinels,
    /// ask them again. A Redis Cluster client follows its layout itself.
    fn recheck(&self) {
        if let Conn::Primary(primary) = &self.conn {
            primary.recheck(self.timeout);
        }
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
                    if let Conn::Primary(primary) = &self.conn {
                        primary.drop_local();
                    }
                    self.trouble.fetch_add(1, Ordering::AcqRel);
                    // The connection manager reconnects for the next one.
                    COMMANDS_LOST.store(true, Ordering::Release);
                    self.recheck();
                    "connection"
                } else if matches!(
                    err.kind(),
                    ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
                ) {
                    // A primary demoted to a replica, or one that lost its own.
                    self.trouble.fetch_add(1, Ordering::AcqRel);
                    self.recheck();
                    "readonly"
                } else {
                    "other"
                };
                m.redis_errors.with_label_values(&[op, kind]).inc();
                Err(unavailable(&err))
            }
            Err(_) => {
                self.trouble.fetch_add(1, Ordering::AcqRel);
                self.recheck();
                m.redis_errors.with_label_values(&[op, "timeout"]).inc();
                Err(timed_out(self.timeout))
            }
        }
    }
}
