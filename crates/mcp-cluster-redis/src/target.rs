//! [`Target`]: where a node's Redis connections go. One Redis
//! (`redis://`, `rediss://`), or the primary its Sentinels name
//! (`redis+sentinel://`, `rediss+sentinel://`), asked again whenever a
//! connection finds the primary gone or demoted to a replica.

use std::fmt;
use std::sync::Arc;

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{IntoConnectionInfo, TlsMode};

use crate::ClusterError;
use crate::config::SentinelUrl;

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
        let scheme = if url.tls { "rediss" } else { "redis" };
        let sentinels = url
            .sentinels
            .iter()
            .map(|(host, port)| {
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.clone()
                };
                format!("{scheme}://{host}:{port}")
                    .into_connection_info()
                    .map(|info| info.addr().clone())
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| ClusterError::Config(format!("sentinel address: {err}")))?;
        let bad = |err: redis::RedisError| ClusterError::Config(format!("sentinel: {err}"));
        let mut builder =
            SentinelClientBuilder::new(sentinels, &url.master, SentinelServerType::Master)
                .map_err(bad)?
                .set_client_to_redis_db(url.db);
        if let Some(user) = &url.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = password.or(url.password) {
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
        }
    }

    /// The one Redis's client; `None` behind Sentinels.
    pub(crate) fn into_direct(self) -> Option<redis::Client> {
        match self.0 {
            Kind::Direct(client) => Some(*client),
            Kind::Sentinel { .. } => None,
        }
    }
}
