//! Transport settings.

use serde::{Deserialize, Serialize};

/// Settings of the HTTP transports. Defaults are safe for a laptop: loopback
/// origins and hosts only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Path of the Streamable HTTP endpoint. Default `/mcp`.
    pub endpoint: String,
    /// Serve the legacy HTTP+SSE transport at `/sse` and `/messages`.
    /// Default true.
    pub legacy_sse: bool,
    /// Largest accepted request body, in bytes; larger gets HTTP 413.
    /// Default 4 MiB: ample for tool arguments, small enough to bound memory.
    pub max_body_bytes: usize,
    /// Allowed `Origin` values: `scheme://host[:port]`, a port of `*`
    /// matching any, or `*` for all. A request with another Origin gets 403
    /// (DNS rebinding protection). Default: http(s) on localhost, 127.0.0.1
    /// and `[::1]`, any port.
    pub allowed_origins: Vec<String>,
    /// Allowed `Host` values: `host[:port]`, a port of `*` matching any, or
    /// `*` for all. Default: localhost, 127.0.0.1 and `[::1]`, any port.
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        let hosts = ["localhost", "127.0.0.1", "[::1]"];
        Self {
            endpoint: "/mcp".to_owned(),
            legacy_sse: true,
            max_body_bytes: 4 * 1024 * 1024,
            allowed_origins: hosts
                .iter()
                .flat_map(|h| [format!("http://{h}:*"), format!("https://{h}:*")])
                .collect(),
            allowed_hosts: hosts.iter().map(|h| format!("{h}:*")).collect(),
        }
    }
}

/// Whether `value` (`host[:port]` or `scheme://host[:port]`) is allowed by
/// one of `patterns`.
pub(crate) fn allowed(patterns: &[String], value: &str) -> bool {
    // Allocation-free: this runs on every request.
    patterns.iter().any(|p| {
        if p == "*" || p.eq_ignore_ascii_case(value) {
            return true;
        }
        match p.strip_suffix(":*") {
            // `host:*` matches `host` and `host:<digits>`.
            Some(base) => {
                // Bytes, so that no input can split a character.
                let value = value.as_bytes();
                let Some((head, rest)) = value.split_at_checked(base.len()) else {
                    return false;
                };
                head.eq_ignore_ascii_case(base.as_bytes())
                    && match rest.split_first() {
                        None => true,
                        Some((b':', port)) => {
                            !port.is_empty() && port.iter().all(u8::is_ascii_digit)
                        }
                        Some(_) => false,
                    }
            }
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_allows_loopback_only() {
        let c = HttpConfig::default();
        assert!(allowed(&c.allowed_hosts, "127.0.0.1:8080"));
        assert!(allowed(&c.allowed_hosts, "localhost"));
        assert!(allowed(&c.allowed_hosts, "[::1]:9"));
        assert!(!allowed(&c.allowed_hosts, "evil.example.com"));
        assert!(!allowed(&c.allowed_hosts, "127.0.0.1.evil.com:80"));
        assert!(!allowed(&c.allowed_hosts, "localhost:80x"));
        assert!(!allowed(&c.allowed_hosts, "localhost:"));
        assert!(allowed(&c.allowed_hosts, "LocalHost:8080"));
        assert!(!allowed(&c.allowed_hosts, "localhos\u{e9}:1"));
        assert!(!allowed(
            &c.allowed_hosts,
            "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}"
        ));
        assert!(allowed(&c.allowed_origins, "http://localhost:3000"));
        assert!(!allowed(&c.allowed_origins, "http://evil.example.com"));
        assert!(!allowed(&c.allowed_origins, "null"));
    }
}
