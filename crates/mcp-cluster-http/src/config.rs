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
    /// Seconds a new connection has to bring its first request's headers,
    /// and a kept-alive one the next request's after the keep-alive time
    /// from the end of the previous response; slower is closed without an
    /// answer ([`crate::request_head`]). Default 5.
    pub request_header_timeout_secs: u64,
    /// Seconds a client has to send a request's whole body once its headers
    /// arrived; slower gets 408 and the connection is closed. Default 30:
    /// 4 MiB over a slow link, while a client that stalls mid-body cannot
    /// hold a connection for long.
    pub request_body_timeout_secs: u64,
    /// Seconds an idle keep-alive connection stays open. Default 5. A load
    /// balancer's idle timeout towards the nodes must be shorter (nginx:
    /// `keepalive_timeout` in the upstream block), so that it never sends a
    /// request on a connection the node is closing.
    pub keep_alive_secs: u64,
    /// Seconds an SSE stream may hold bytes its client does not make room
    /// for (actix's 32 KiB write buffer full, the socket not writable);
    /// then the node resets the connection and counts it in
    /// `mcp_sse_write_stalls_total`. A stream with nothing to send is not
    /// stalled, however long it stays quiet. The kernel says a socket is
    /// writable again once its client has taken about a third of the
    /// socket's send buffer (some 30 KB to 1 MB, as the kernel sizes it for
    /// the path), so a client that has a backlog and takes less than that
    /// per timeout counts as stalled too. Must be positive. Default 30:
    /// a client that reads at all, even over a slow link, takes that much
    /// in far less; a client that never reads holds a connection, its
    /// buffers and, for a 2026-07-28 request, its running handler for half
    /// a minute rather than for ever. A session-era client loses nothing:
    /// the events wait in the event log and it resumes with
    /// `Last-Event-ID` ([`crate::write_stall`]).
    pub sse_write_stall_timeout_secs: u64,
    /// Most connections the node holds; beyond it a new connection is
    /// closed at once. Each connection holds two descriptors (its socket,
    /// and the write-stall watch's handle on it). 0 (default): half of the
    /// open-file limit less a reserve (64, plus 32 per worker for
    /// connections being refused), so that the node never runs out of
    /// descriptors.
    pub max_connections: usize,
    /// Most connections one client address holds; beyond it its new
    /// connections are closed at once. Never more than a quarter of the
    /// node's connection limit (0: that quarter), so that one address
    /// cannot fill the node. Default 512.
    pub max_connections_per_peer: usize,
    /// Addresses or networks (`10.0.0.0/8`) the per-address limit does not
    /// apply to: load balancers, ingress controllers and sidecar proxies,
    /// which carry many clients' connections. Default: `127.0.0.1` and
    /// `::1` (a local proxy; a client on the node's own host).
    pub connection_limit_exempt: Vec<String>,
    /// Addresses or networks of the proxies whose `X-Forwarded-For` is
    /// believed: behind them, quotas count a request's client as the
    /// rightmost forwarded address that is not itself one of them
    /// ([`crate::forwarded`]). List the load balancers and ingress
    /// controllers in front of the node (usually the same as
    /// `connection_limit_exempt`). A request whose every hop is trusted has
    /// no address of its own and no per-address quota. Default: `127.0.0.1`
    /// and `::1`, a proxy on the node's own host (a client there is trusted
    /// anyway); a client that reaches the node directly cannot claim
    /// another address.
    pub trusted_proxies: Vec<String>,
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
            request_header_timeout_secs: 5,
            request_body_timeout_secs: 30,
            keep_alive_secs: 5,
            sse_write_stall_timeout_secs: 30,
            max_connections: 0,
            max_connections_per_peer: 512,
            connection_limit_exempt: vec!["127.0.0.1".to_owned(), "::1".to_owned()],
            trusted_proxies: vec!["127.0.0.1".to_owned(), "::1".to_owned()],
        }
    }
}

impl HttpConfig {
    /// The body timeout.
    pub fn request_body_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.request_body_timeout_secs)
    }

    /// The write-stall timeout of SSE streams.
    pub fn sse_write_stall_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.sse_write_stall_timeout_secs)
    }

    /// The exempt networks, parsed.
    ///
    /// # Errors
    /// An entry is neither an address nor a network.
    pub fn exempt_networks(&self) -> Result<Vec<ipnet::IpNet>, String> {
        self.connection_limit_exempt
            .iter()
            .map(|text| crate::connections::parse_net(text))
            .collect()
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
