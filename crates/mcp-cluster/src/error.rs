//! Errors: [`ClusterError`] for startup, and the mapping of Redis failures
//! onto [`StoreError`] for every port call.

use std::time::Duration;

use mcp_store::StoreError;

/// Why [`crate::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// A configuration value cannot work.
    #[error("invalid redis configuration: {0}")]
    Config(String),
    /// The URL does not parse.
    #[error("invalid redis url")]
    Url(#[source] redis::RedisError),
    /// Redis could not be reached or refused the connection.
    #[error("cannot connect to redis")]
    Connect(#[source] redis::RedisError),
    /// Redis did not answer in time.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// A Redis failure, as the ports report it: the request fails fast.
pub(crate) fn unavailable(err: &redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {err}"))
}

/// A command that outlived its timeout.
pub(crate) fn timed_out(timeout: Duration) -> StoreError {
    StoreError::Unavailable(format!(
        "redis did not answer within {} ms",
        timeout.as_millis()
    ))
}

/// Stored data that does not decode.
pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}
