//! The node's configuration, composed from each crate's own.
//!
//! Sources, lowest first: defaults, an optional TOML file, environment
//! variables and flags (the last two parsed by `mcp-node`). Values are
//! validated once, by [`NodeConfig::validate`].

use std::net::SocketAddr;

pub use mcp_cluster::RedisConfig;
use mcp_http::HttpConfig;
pub use mcp_runtime::{ResponseMode, RuntimeConfig};
use serde::{Deserialize, Serialize};

/// Event log retention, in file-friendly units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Most events kept per SSE stream. Default 10,000.
    pub max_events_per_stream: usize,
    /// Seconds a finished stream stays resumable. Default 300.
    pub closed_stream_ttl_secs: u64,
    /// Seconds an open stream with no new event is kept. Default 3600.
    pub idle_stream_ttl_secs: u64,
    /// Most streams an embedded store holds; beyond it the oldest closed
    /// ones are dropped first. Default 100,000.
    pub max_streams: usize,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        let r = mcp_store::memory::Retention::default();
        Self {
            max_events_per_stream: r.max_events_per_stream,
            closed_stream_ttl_secs: r.closed_stream_ttl.as_secs(),
            idle_stream_ttl_secs: r.idle_stream_ttl.as_secs(),
            max_streams: r.max_streams,
        }
    }
}

impl RetentionConfig {
    /// As the embedded store's type.
    pub fn to_retention(&self) -> mcp_store::memory::Retention {
        mcp_store::memory::Retention {
            max_events_per_stream: self.max_events_per_stream,
            closed_stream_ttl: std::time::Duration::from_secs(self.closed_stream_ttl_secs),
            idle_stream_ttl: std::time::Duration::from_secs(self.idle_stream_ttl_secs),
            max_streams: self.max_streams,
        }
    }
}

/// Everything a node needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Address to listen on. Default `127.0.0.1:8080`: loopback only.
    pub bind: SocketAddr,
    /// HTTP worker threads; 0 means one per core. Default 0.
    pub workers: usize,
    /// Seconds admitted requests get to finish once a draining node stops
    /// accepting connections (after `drain_delay_secs`), before they are
    /// stopped with -32603. Default 30. A drain takes at most
    /// `drain_delay_secs + drain_grace_secs` plus a few seconds.
    pub drain_grace_secs: u64,
    /// Seconds a draining node goes on serving as usual, its readiness
    /// failing, so that load balancers stop routing to it; then its
    /// listener refuses new connections (which a load balancer retries on
    /// another node) and every answer closes its connection. 0: at once
    /// (a lone node). Default 5: a few readiness probes.
    pub drain_delay_secs: u64,
    /// A second listener for `/healthz` and `/readyz` only (probes), not
    /// subject to the connection limits of the main one. Default none: the
    /// probes are served on the main listener too, always.
    pub admin_bind: Option<SocketAddr>,
    /// Items per page of every list method (`tools/list`, `resources/list`,
    /// `resources/templates/list`, `prompts/list`). Default 100: one page
    /// for most servers, a bounded answer for large catalogues.
    pub page_size: usize,
    /// HTTP transport settings.
    pub http: HttpConfig,
    /// Runtime settings.
    pub runtime: RuntimeConfig,
    /// Event log retention (embedded and Redis stores alike).
    pub retention: RetentionConfig,
    /// The Redis store: present, the node joins the cluster sharing it;
    /// absent, the node runs alone on the embedded store.
    pub redis: Option<RedisConfig>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            workers: 0,
            drain_grace_secs: 30,
            drain_delay_secs: 5,
            admin_bind: None,
            page_size: crate::server::DEFAULT_PAGE_SIZE,
            http: HttpConfig::default(),
            runtime: RuntimeConfig::default(),
            retention: RetentionConfig::default(),
            redis: None,
        }
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl NodeConfig {
    /// Reads a TOML file over the defaults.
    ///
    /// # Errors
    /// The file cannot be read or does not parse.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError(err.to_string()))
    }

    /// Applies `MCP_<SECTION>__<KEY>` variables over this configuration,
    /// e.g. `MCP_HTTP__MAX_BODY_BYTES=1048576` or
    /// `MCP_RUNTIME__RESPONSE_MODE=sse`; a top-level key has no section
    /// (`MCP__DRAIN_GRACE_SECS`). Values are TOML scalars, or text;
    /// comma-separated for lists. Other variables are ignored.
    ///
    /// # Errors
    /// A variable names no setting or holds a value of the wrong type.
    pub fn with_env_overrides(
        self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let mut this = self;
        // `[redis]` is optional; naming one of its keys turns it on.
        if this.redis.is_none() && vars.iter().any(|(name, _)| name.starts_with("MCP_REDIS__")) {
            this.redis = Some(RedisConfig::default());
        }
        let mut tree = toml::Value::try_from(&this).map_err(|err| ConfigError(err.to_string()))?;
        let mut applied = false;
        for (name, raw) in vars {
            // `MCP__KEY` is a top-level key, `MCP_SECTION__KEY` a nested one.
            let path = match name.strip_prefix("MCP__") {
                Some(top) => top,
                None => match name.strip_prefix("MCP_").filter(|p| p.contains("__")) {
                    Some(nested) => nested,
                    None => continue,
                },
            };
            let keys: Vec<String> = path
                .split("__")
                .filter(|k| !k.is_empty())
                .map(str::to_ascii_lowercase)
                .collect();
            let Some((leaf, sections)) = keys.split_last() else {
                continue;
            };
            let mut table = &mut tree;
            for section in sections {
                table = table
                    .get_mut(section.as_str())
                    .filter(|t| t.is_table())
                    .ok_or_else(|| ConfigError(format!("{name}: no section {section}")))?;
            }
            let table = table
                .as_table_mut()
                .ok_or_else(|| ConfigError(format!("{name}: not a section")))?;
            let value = match table.get(leaf.as_str()) {
                Some(toml::Value::Array(_)) => toml::Value::Array(
                    raw.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(|s| toml::Value::String(s.to_owned()))
                        .collect(),
                ),
                Some(toml::Value::String(_)) => toml::Value::String(raw.clone()),
                Some(_) => toml::from_str::<toml::Table>(&format!("v = {raw}"))
                    .ok()
                    .and_then(|mut t| t.remove("v"))
                    .ok_or_else(|| ConfigError(format!("{name}: {raw:?} is not a valid value")))?,
                None => return Err(ConfigError(format!("{name}: no setting {leaf}"))),
            };
            table.insert(leaf.clone(), value);
            applied = true;
        }
        if !applied {
            return Ok(this);
        }
        tree.try_into()
            .map_err(|err: toml::de::Error| ConfigError(err.to_string()))
    }

    /// Checks values that parse but cannot work.
    ///
    /// # Errors
    /// The first bad value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: &str| Err(ConfigError(what.to_owned()));
        if !self.http.endpoint.starts_with('/') {
            return bad("http.endpoint must start with '/'");
        }
        let h = &self.http;
        if h.request_header_timeout_secs == 0
            || h.request_body_timeout_secs == 0
            || h.keep_alive_secs == 0
        {
            return bad(
                "http.request_header_timeout_secs, request_body_timeout_secs and keep_alive_secs \
                 must be positive",
            );
        }
        if let Err(err) = h.exempt_networks() {
            return Err(ConfigError(format!("http.connection_limit_exempt: {err}")));
        }
        if self.page_size == 0 {
            return bad("page_size must be positive");
        }
        if self.http.max_body_bytes < 1024 {
            return bad("http.max_body_bytes must be at least 1024");
        }
        if self.http.allowed_hosts.is_empty() {
            return bad("http.allowed_hosts must not be empty (use \"*\" to allow any host)");
        }
        if self.runtime.max_sessions == 0 || self.runtime.max_in_flight_per_session == 0 {
            return bad(
                "runtime.max_sessions and runtime.max_in_flight_per_session must be positive",
            );
        }
        let r = &self.runtime;
        if [
            r.max_batch_items,
            r.max_client_info_bytes,
            r.max_client_capabilities_bytes,
            r.max_subscriptions_per_session,
            r.max_uri_bytes,
        ]
        .contains(&0)
        {
            return bad(
                "runtime.max_batch_items, max_client_info_bytes, max_client_capabilities_bytes, \
                 max_subscriptions_per_session and max_uri_bytes must be positive",
            );
        }
        if self.runtime.session_idle_ttl_secs == 0 || self.runtime.request_timeout_secs == 0 {
            return bad(
                "runtime.session_idle_ttl_secs and runtime.request_timeout_secs must be positive",
            );
        }
        if self.retention.max_events_per_stream == 0 || self.retention.max_streams == 0 {
            return bad(
                "retention.max_events_per_stream and retention.max_streams must be positive",
            );
        }
        if let Some(redis) = &self.redis {
            redis
                .validate()
                .map_err(|err| ConfigError(format!("redis: {err}")))?;
        }
        if self.retention.idle_stream_ttl_secs < self.runtime.session_idle_ttl_secs {
            // The standalone stream is renewed with the session: it must not
            // expire sooner than the session it belongs to.
            return bad(
                "retention.idle_stream_ttl_secs must be at least runtime.session_idle_ttl_secs",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_files_override_them() {
        NodeConfig::default().validate().unwrap();
        let c = NodeConfig::from_toml("bind = \"0.0.0.0:9000\"\n[runtime]\nmax_sessions = 5\n")
            .unwrap();
        assert_eq!(c.bind.port(), 9000);
        assert_eq!(c.runtime.max_sessions, 5);
        assert_eq!(c.http, HttpConfig::default());
        assert!(NodeConfig::from_toml("nonsense = 1").is_err());
        let short_streams =
            NodeConfig::from_toml("[retention]\nidle_stream_ttl_secs = 60\n").unwrap();
        assert!(short_streams.validate().is_err());
    }

    #[test]
    fn env_overrides_reach_nested_settings_and_reject_unknown_ones() {
        let vars = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>()
        };
        let c = NodeConfig::default()
            .with_env_overrides(vars(&[
                ("MCP_HTTP__MAX_BODY_BYTES", "2048"),
                ("MCP_HTTP__ALLOWED_HOSTS", "a.example:*, b.example"),
                ("MCP_RUNTIME__RESPONSE_MODE", "sse"),
                ("MCP__DRAIN_GRACE_SECS", "5"),
                ("MCP_BIND", "ignored: no section separator"),
                ("PATH", "/bin"),
            ]))
            .unwrap();
        assert_eq!(c.http.max_body_bytes, 2048);
        assert_eq!(
            c.http.allowed_hosts,
            vec!["a.example:*".to_owned(), "b.example".to_owned()]
        );
        assert_eq!(c.runtime.response_mode, ResponseMode::Sse);
        assert_eq!(c.drain_grace_secs, 5);
        assert!(
            NodeConfig::default()
                .with_env_overrides(vars(&[("MCP_HTTP__NOPE", "1")]))
                .is_err()
        );
        assert!(
            NodeConfig::default()
                .with_env_overrides(vars(&[("MCP_HTTP__MAX_BODY_BYTES", "big")]))
                .is_err()
        );
        assert!(
            NodeConfig::default()
                .with_env_overrides(vars(&[("MCP_NOPE__X", "1")]))
                .is_err()
        );
    }
}
