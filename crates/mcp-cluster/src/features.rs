//! What the cargo features `redis`, `tls`, `auth` and `otlp` add, and what a
//! build without one of them does when the configuration asks for it: it
//! refuses the configuration ([`check`], called by
//! [`NodeConfig::validate`]), so a binary started with `--redis-url`,
//! `[tls]` or `[auth]` it was not built for exits with the configuration
//! exit code and a line naming the feature. (`otlp`: the telemetry crate's
//! [`mcp_cluster_telemetry::OtelConfig::from_env`] refuses an endpoint.)
//!
//! The rest of the crate reaches the optional parts through here, so that
//! their absence is handled in one place.

use mcp_cluster_redis::{ClusterError, RedisConfig};
use mcp_cluster_store::Store;

use crate::NodeConfig;
use crate::config::ConfigError;

/// The first configured section this build has no feature for.
///
/// # Errors
/// A section is configured whose feature is off, naming the feature.
pub(crate) fn check(config: &NodeConfig) -> Result<(), ConfigError> {
    let missing = [
        (
            config.redis.is_some() && !cfg!(feature = "redis"),
            "redis is configured (--redis-url, [redis] or MCP_REDIS__*)",
            "redis",
        ),
        (
            config.tls.is_some() && !cfg!(feature = "tls"),
            "tls is configured ([tls] or MCP_TLS__*)",
            "tls",
        ),
        (
            config.auth.is_some() && !cfg!(feature = "auth"),
            "auth is configured ([auth] or MCP_AUTH__*)",
            "auth",
        ),
    ];
    match missing.iter().find(|(on, _, _)| *on) {
        Some((_, what, feature)) => Err(ConfigError(format!(
            "{what}, but this binary was built without the `{feature}` feature of mcp-cluster \
             (build it with `--features {feature}`, or `full`)"
        ))),
        None => Ok(()),
    }
}

/// The Redis store of `redis`.
#[cfg(feature = "redis")]
pub(crate) async fn connect(redis: &RedisConfig) -> Result<Store, ClusterError> {
    mcp_cluster_redis::connect(redis).await
}

/// Refuses: no Redis client in this build.
#[cfg(not(feature = "redis"))]
#[allow(clippy::unused_async)]
pub(crate) async fn connect(_: &RedisConfig) -> Result<Store, ClusterError> {
    Err(ClusterError::Config(
        "built without the `redis` feature of mcp-cluster".to_owned(),
    ))
}

/// Checks that Redis's files (password, CA, client certificate) read.
///
/// # Errors
/// A file cannot be read or is not what it should hold.
#[cfg(feature = "redis")]
pub(crate) fn check_redis_files(redis: &RedisConfig) -> Result<(), ClusterError> {
    redis.target().map(drop)
}

/// Nothing to check: a build without Redis refuses its configuration.
#[cfg(not(feature = "redis"))]
pub(crate) fn check_redis_files(_: &RedisConfig) -> Result<(), ClusterError> {
    Ok(())
}

/// The main listener's TLS configuration.
#[cfg(feature = "tls")]
pub(crate) type ServerTls = rustls::ServerConfig;

/// No TLS in this build: no value exists.
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub(crate) enum ServerTls {}
