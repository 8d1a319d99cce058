//! Configuration of the Redis store.

use std::fmt;
use std::time::Duration;

use mcp_store::memory::Retention;
use serde::{Deserialize, Serialize};

use crate::ClusterError;
use crate::keys::DEFAULT_PREFIX;

/// How a node reaches Redis and what it keeps there. `Debug` redacts the
/// URL's password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// Redis URL, `redis://[[user]:password@]host[:port][/db]`. Default
    /// `redis://127.0.0.1:6379`: a local Redis, nothing leaves the host
    /// unless configured to. May hold a password: redact it when logging.
    pub url: String,
    /// First part of every key and channel, so several clusters can share one
    /// Redis. Default `mcp`. Must be non-empty, without braces (they would
    /// change the hash tags) or whitespace.
    pub key_prefix: String,
    /// Milliseconds a command (or a connection attempt) may take before it
    /// fails with `StoreError::Unavailable`. Default 1000: a request fails
    /// fast with a clear error while Redis is away instead of hanging.
    pub command_timeout_ms: u64,
    /// Event log retention. Not read from configuration files: a node sets
    /// it from its `[retention]` section, which governs both stores.
    #[serde(skip)]
    pub retention: RedisRetention,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            key_prefix: DEFAULT_PREFIX.to_owned(),
            command_timeout_ms: 1000,
            retention: RedisRetention::default(),
        }
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("key_prefix", &self.key_prefix)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("retention", &self.retention)
            .finish()
    }
}

impl RedisConfig {
    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted_url(&self) -> String {
        let url = &self.url;
        let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
            return url.clone();
        };
        let authority_end = url[scheme_end..]
            .find('/')
            .map_or(url.len(), |i| scheme_end + i);
        let Some(at) = url[scheme_end..authority_end]
            .rfind('@')
            .map(|i| scheme_end + i)
        else {
            return url.clone();
        };
        let password_start = url[scheme_end..at]
            .find(':')
            .map_or(scheme_end, |i| scheme_end + i + 1);
        format!("{}***{}", &url[..password_start], &url[at..])
    }

    /// [`RedisConfig::command_timeout_ms`] as a duration.
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.command_timeout_ms)
    }

    /// Checks the values that cannot work.
    ///
    /// # Errors
    /// [`ClusterError::Config`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |what: &str| Err(ClusterError::Config(what.to_owned()));
        // Parsing only, no connection: a URL that does not parse is a
        // configuration error at startup, not a reason to retry. The
        // client's message never quotes the URL (it may hold a password).
        if let Err(err) = redis::Client::open(self.url.as_str()) {
            return Err(ClusterError::Config(format!(
                "url {}: {err}",
                self.redacted_url()
            )));
        }
        if self.key_prefix.is_empty()
            || !self
                .key_prefix
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
        {
            return bad("key_prefix must be non-empty visible ASCII without braces");
        }
        if self.command_timeout_ms == 0 {
            return bad("command_timeout_ms must be positive");
        }
        if self.retention.closed_stream_ttl_ms == 0 || self.retention.idle_stream_ttl_ms == 0 {
            return bad("retention TTLs must be positive");
        }
        Ok(())
    }
}

/// Event log retention in Redis: the same knobs as the in-memory
/// [`Retention`] except the stream cap (Redis bounds memory by TTL and its
/// own `maxmemory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisRetention {
    /// Most events kept per stream. Trimming is exact (`XTRIM MAXLEN`, not
    /// `~`), because a read must tell a gap from a clean resume at the
    /// newest dropped entry, as the in-memory log does. Default 10,000:
    /// enough to resume a long tool call's full progress history.
    pub max_events_per_stream: usize,
    /// Milliseconds a closed stream stays readable, for clients that resume
    /// after the response was written. Default 300,000 (5 minutes).
    pub closed_stream_ttl_ms: u64,
    /// Milliseconds an open stream with no append or touch is kept, as a
    /// bound on streams a vanished writer left behind. Default 3,600,000
    /// (1 hour).
    pub idle_stream_ttl_ms: u64,
}

impl Default for RedisRetention {
    fn default() -> Self {
        Self::from(Retention::default())
    }
}

impl From<Retention> for RedisRetention {
    fn from(r: Retention) -> Self {
        Self {
            max_events_per_stream: r.max_events_per_stream,
            closed_stream_ttl_ms: millis(r.closed_stream_ttl),
            idle_stream_ttl_ms: millis(r.idle_stream_ttl),
        }
    }
}

/// A duration in whole milliseconds, at least 1 (Redis refuses `PX 0`).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_loopback_and_match_the_memory_retention() {
        let c = RedisConfig::default();
        assert!(c.url.starts_with("redis://127.0.0.1"));
        assert_eq!(c.retention.max_events_per_stream, 10_000);
        assert_eq!(c.retention.closed_stream_ttl_ms, 300_000);
        assert_eq!(c.retention.idle_stream_ttl_ms, 3_600_000);
        c.validate().unwrap();
    }

    #[test]
    fn partial_config_fills_defaults_and_bad_values_are_refused() {
        let c: RedisConfig = serde_json::from_str(r#"{"key_prefix": "blue"}"#).unwrap();
        assert_eq!(c.key_prefix, "blue");
        assert_eq!(c.command_timeout_ms, 1000);
        assert!(serde_json::from_str::<RedisConfig>(r#"{"nope": 1}"#).is_err());
        // Retention is the node's `[retention]`, never read from here.
        let with_retention = r#"{"retention": {"max_events_per_stream": 5}}"#;
        assert!(serde_json::from_str::<RedisConfig>(with_retention).is_err());
        for url in [
            "",
            "redis//127.0.0.1",
            "http://127.0.0.1",
            "redis://127.0.0.1:port",
        ] {
            let c = RedisConfig {
                url: url.into(),
                ..RedisConfig::default()
            };
            assert!(
                matches!(c.validate(), Err(ClusterError::Config(_))),
                "{url:?}"
            );
        }
        for prefix in ["", "a{b", "a b"] {
            let c = RedisConfig {
                key_prefix: prefix.into(),
                ..RedisConfig::default()
            };
            assert!(c.validate().is_err(), "{prefix:?}");
        }
    }

    #[test]
    fn debug_output_redacts_the_password() {
        for (url, shown) in [
            (
                "redis://:s3cret@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            ("redis://me:s3cret@127.0.0.1", "redis://me:***@127.0.0.1"),
            ("redis://s3cret@127.0.0.1", "redis://***@127.0.0.1"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ] {
            let c = RedisConfig {
                url: url.into(),
                ..RedisConfig::default()
            };
            assert_eq!(c.redacted_url(), shown);
            let debug = format!("{c:?}");
            assert!(
                !debug.contains("s3cret") && debug.contains(shown),
                "{debug}"
            );
        }
    }
}
