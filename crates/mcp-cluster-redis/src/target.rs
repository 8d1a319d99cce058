//! [`Target`]: where a node's Redis connections go. One Redis
//! (`redis://`, `rediss://`); the primary its Sentinels name
//! (`redis+sentinel://`, `rediss+sentinel://`), asked again whenever a
//! connection finds the primary gone or demoted to a replica; or a Redis
//! Cluster (`redis+cluster://`, `rediss+cluster://`), whose client routes
//! each command to the shard of its keys and follows `MOVED`, `ASK` and
//! failovers itself.

use std::fmt;
use std::sync::Arc;

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionInfo, IntoConnectionInfo, TlsMode};

use crate::ClusterError;
use crate::config::{ClusterUrl, SentinelUrl};
use crate::layout::Layout;

/// Where a node's connections go. Cloning is cheap; clones ask the same
/// Sentinels.
#[derive(Clone)]
pub struct Target(Kind);

#[derive(Clone)]
enum Kind {
    /// One Redis, always the same (boxed: a client is large beside the
    /// other variant, and targets are cloned per connection).
    Direct(Box<redis::Client>),
    /// The primary the Sentinels name now. The client caches its
    /// connections to the Sentinels; a lock because asking takes it
    /// mutably (one question at a time per node, and questions are rare:
    /// at a connection and after a failure).
    Sentinel {
        client: Arc<tokio::sync::Mutex<SentinelClient>>,
        master: String,
        tls: bool,
    },
    /// A Redis Cluster: what its clients are built from (the pub/sub
    /// client differs from the commands' one by its push channel).
    Cluster(Arc<ClusterSeeds>),
}

/// What a Redis Cluster client is built from.
pub(crate) struct ClusterSeeds {
    /// The members a client connects to first: those of the URL, then
    /// those of the layout last followed ([`Self::follow`]), so that a
    /// member that left the cluster is not asked again.
    seeds: std::sync::RwLock<Vec<ConnectionInfo>>,
    /// The layout the connections were made for; `None` before the first
    /// read. Written by the layout task only.
    layout: std::sync::Mutex<Option<Layout>>,
    /// Bumped when the layout changed: the pub/sub connection replaces
    /// itself. Receivers from [`Self::layout_changes`].
    changes: tokio::sync::watch::Sender<u64>,
    username: Option<String>,
    password: Option<String>,
    certificates: Option<redis::TlsCertificates>,
    tls: bool,
    timeout: Duration,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Neither client's Debug is safe to print: they hold the password.
        match &self.0 {
            Kind::Direct(client) => f
                .debug_struct("Target::Direct")
                .field("addr", &client.get_connection_info().addr().to_string())
                .finish_non_exhaustive(),
            Kind::Sentinel { master, tls, .. } => f
                .debug_struct("Target::Sentinel")
                .field("master", master)
                .field("tls", tls)
                .finish_non_exhaustive(),
            Kind::Cluster(seeds) => f
                .debug_struct("Target::Cluster")
                .field(
                    "seeds",
                    &seeds
                        .seeds
                        .read()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .iter()
                        .map(|s| s.addr().to_string())
                        .collect::<Vec<_>>(),
                )
                .field("tls", &seeds.tls)
                .finish_non_exhaustive(),
        }
    }
}

impl Target {
    pub(crate) fn direct(client: redis::Client) -> Self {
        Self(Kind::Direct(Box::new(client)))
    }

    /// The Sentinels of `url`; `password` (from `password_file`) wins over
    /// the URL's, and `certificates` are presented to the Sentinels and the
    /// primary alike.
    ///
    /// # Errors
    /// [`ClusterError::Config`] when the client cannot be built from them.
    pub(crate) fn sentinel(
        url: SentinelUrl,
        password: Option<String>,
        certificates: Option<redis::TlsCertificates>,
    ) -> Result<Self, ClusterError> {
        let sentinels = url
            .sentinels
            .iter()
            .map(|(host, port)| {
                connection_info(url.tls, host, *port).map(|info| info.addr().clone())
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| ClusterError::Config(format!("sentinel address: {err}")))?;
        let bad = |err: redis::RedisError| ClusterError::Config(format!("sentinel: {err}"));
        let mut builder =
            SentinelClientBuilder::new(sentinels, &url.master, SentinelServerType::Master)
                .map_err(bad)?
                .set_client_to_redis_db(url.db)
                .set_client_to_redis_tcp_settings(tcp_settings())
                .set_client_to_sentinel_tcp_settings(tcp_settings());
        if let Some(user) = &url.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = password.or(url.password.map(|p| p.expose().to_owned())) {
            builder = builder.set_client_to_redis_password(password);
        }
        if url.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(certificates) = certificates {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        }
        Ok(Self(Kind::Sentinel {
            client: Arc::new(tokio::sync::Mutex::new(builder.build().map_err(bad)?)),
            master: url.master,
            tls: url.tls,
        }))
    }

    /// The members of a Redis Cluster named by `url`; `password` (from
    /// `password_file`) wins over the URL's, and `certificates` are
    /// presented to every member. `timeout` bounds each connection attempt
    /// and each answer.
    ///
    /// # Errors
    /// [`ClusterError::Config`] when a seed address does not parse.
    pub(crate) fn cluster(
        url: ClusterUrl,
        password: Option<String>,
        certificates: Option<redis::TlsCertificates>,
        timeout: Duration,
    ) -> Result<Self, ClusterError> {
        let seeds = url
            .seeds
            .iter()
            .map(|(host, port)| connection_info(url.tls, host, *port))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| ClusterError::Config(format!("cluster member address: {err}")))?;
        let seeds = ClusterSeeds {
            seeds: std::sync::RwLock::new(seeds),
            layout: std::sync::Mutex::new(None),
            changes: tokio::sync::watch::channel(0).0,
            username: url.username,
            password: password.or(url.password.map(|p| p.expose().to_owned())),
            certificates,
            tls: url.tls,
            timeout,
        };
        // Built once now, so a configuration the client refuses fails at
        // startup.
        seeds.client(None)?;
        Ok(Self(Kind::Cluster(Arc::new(seeds))))
    }

    /// The Redis Cluster's members, `None` for one Redis or Sentinels.
    pub(crate) fn cluster_seeds(&self) -> Option<&Arc<ClusterSeeds>> {
        match &self.0 {
            Kind::Cluster(seeds) => Some(seeds),
            _ => None,
        }
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.0, Kind::Cluster(_))
    }

    /// The client of the primary: the one Redis, or the one the Sentinels
    /// name now (it answered `ROLE` as a primary). Behind Sentinels, ask
    /// again after a failover: the client keeps the address it was made for.
    ///
    /// # Errors
    /// No Sentinel answered, or none named a primary that answers as one.
    pub async fn primary(&self) -> redis::RedisResult<redis::Client> {
        match &self.0 {
            Kind::Direct(client) => Ok(client.as_ref().clone()),
            Kind::Sentinel { client, .. } => client.lock().await.async_get_client().await,
            Kind::Cluster(_) => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "a Redis Cluster has no one primary",
            ))),
        }
    }

    /// Whether the primary can move (Sentinels): a connection that finds it
    /// gone or read-only asks again.
    pub(crate) fn follows_failovers(&self) -> bool {
        matches!(self.0, Kind::Sentinel { .. })
    }

    /// Whether the connections speak TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match &self.0 {
            Kind::Direct(client) => matches!(
                client.get_connection_info().addr(),
                redis::ConnectionAddr::TcpTls { .. }
            ),
            Kind::Sentinel { tls, .. } => *tls,
            Kind::Cluster(seeds) => seeds.tls,
        }
    }

    /// The one Redis's client; `None` behind Sentinels.
    pub(crate) fn into_direct(self) -> Option<redis::Client> {
        match self.0 {
            Kind::Direct(client) => Some(*client),
            Kind::Sentinel { .. } | Kind::Cluster(_) => None,
        }
    }
}

/// Times a Redis Cluster command is retried (a `MOVED` or `ASK`, a
/// member's connection lost, a layout refresh) within its timeout.
const CLUSTER_RETRIES: u32 = 8;
/// Shortest pause before a Redis Cluster command is retried, in ms.
const CLUSTER_MIN_RETRY_WAIT_MS: u64 = 25;
/// Longest pause before a Redis Cluster command is retried, in ms.
const CLUSTER_MAX_RETRY_WAIT_MS: u64 = 250;

/// Every connection's TCP settings: `TCP_NODELAY`, which the client
/// library leaves off. With Nagle's algorithm, a command written while an
/// earlier one is unanswered waits for that answer's ACK: concurrent
/// requests of a node wait on one another.
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// The connection info of `host:port` (an IPv6 host in brackets), over
/// TLS when `tls`.
fn connection_info(tls: bool, host: &str, port: u16) -> redis::RedisResult<ConnectionInfo> {
    let scheme = if tls { "rediss" } else { "redis" };
    if host.contains(':') {
        format!("{scheme}://[{host}]:{port}").into_connection_info()
    } else {
        format!("{scheme}://{host}:{port}").into_connection_info()
    }
}

impl ClusterSeeds {
    /// Records `layout` as the one to follow: `true` when it differs from
    /// the one recorded before, after which the seeds are its members and
    /// the pub/sub connection is told. The first layout read is recorded
    /// as it is (the connections were just made for it).
    pub(crate) fn follow(&self, layout: &Layout) -> bool {
        let mut current = self
            .layout
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.as_ref() == Some(layout) {
            return false;
        }
        let first = current.is_none();
        *current = Some(layout.clone());
        drop(current);
        let members: Result<Vec<ConnectionInfo>, _> = layout
            .members()
            .iter()
            .map(|(host, port)| connection_info(self.tls, host, *port))
            .collect();
        if let Ok(members) = members
            && !members.is_empty()
        {
            *self
                .seeds
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = members;
        }
        if first {
            return false;
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        true
    }

    /// Whether `layout` is the one followed now (or none is yet).
    pub(crate) fn is_followed(&self, layout: &Layout) -> bool {
        self.layout
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_none_or(|current| current == layout)
    }

    /// Forgets the layout followed, when the connections could not be made
    /// for it: the next read counts as a change again.
    pub(crate) fn unfollow(&self) {
        *self
            .layout
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Layout(Vec::new()));
    }

    /// A receiver bumped each time the layout changed.
    pub(crate) fn layout_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// A client of the cluster; with `push`, RESP3 and the channel that
    /// receives its pub/sub messages (`SSUBSCRIBE`).
    ///
    /// # Errors
    /// [`ClusterError::Config`] when the client refuses the settings.
    pub(crate) fn client(
        &self,
        push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    ) -> Result<ClusterClient, ClusterError> {
        let seeds = self
            .seeds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut builder = ClusterClientBuilder::new(seeds)
            .connection_timeout(self.timeout)
            .response_timeout(self.timeout)
            // The library's default pause before retrying a command whose
            // shard moved is 1.28 s at least, longer than a command may
            // take (`self.timeout`, 1 s by default, bounds the whole
            // command with its retries): every command caught by a
            // failover timed out, also the ones the new layout could have
            // answered a moment later. Short pauses let them through.
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(CLUSTER_MIN_RETRY_WAIT_MS)
            .max_retry_wait(CLUSTER_MAX_RETRY_WAIT_MS)
            .tcp_settings(tcp_settings());
        if let Some(user) = &self.username {
            builder = builder.username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password);
        }
        if self.tls {
            builder = builder.tls(TlsMode::Secure);
            if let Some(certificates) = &self.certificates {
                builder = builder.certs(certificates.clone());
            }
        }
        if let Some(push) = push {
            builder = builder
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(push);
        }
        builder
            .build()
            .map_err(|err| ClusterError::Config(format!("redis cluster: {err}")))
    }
}
