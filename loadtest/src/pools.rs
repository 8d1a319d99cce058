//! The connection pools sessions are spread over: one shared pool, or one
//! per `--source-address`.
//!
//! A TCP connection is named by its four addresses and ports, so one source
//! address reaches one server port at most once per local port (about
//! 28,000 on Linux's default `ip_local_port_range`). Holding more streams
//! than that takes several source addresses; on Linux all of 127.0.0.0/8 is
//! local, so `127.0.0.2`, `127.0.0.3`, … need no set-up.

use std::net::IpAddr;

use anyhow::{Context, bail};

/// One `reqwest::Client` (its own connection pool) per source address, or
/// one for the system's choice of address.
#[derive(Debug)]
pub(crate) struct Pools(Vec<reqwest::Client>);

impl Pools {
    /// A pool per address of `sources` (one pool bound to none if empty),
    /// each built by `builder`.
    ///
    /// # Errors
    /// A source address of the other family than the target's address, or a
    /// client that does not build.
    pub(crate) fn new(
        url: &str,
        sources: &[IpAddr],
        builder: impl Fn() -> anyhow::Result<reqwest::ClientBuilder>,
    ) -> anyhow::Result<Self> {
        if sources.is_empty() {
            let client = builder()?.build().context("building the HTTP client")?;
            return Ok(Self(vec![client]));
        }
        let target = target_ip(url);
        let mut clients = Vec::with_capacity(sources.len());
        for &source in sources {
            if let Some(target) = target
                && target.is_ipv4() != source.is_ipv4()
            {
                bail!(
                    "--source-address {source} cannot reach {target}: give addresses of the target's family"
                );
            }
            let client = builder()?.local_address(source).build().with_context(|| {
                format!("building the HTTP client for --source-address {source}")
            })?;
            clients.push(client);
        }
        Ok(Self(clients))
    }

    /// The pool of the `i`-th session: addresses taken in turn.
    pub(crate) fn for_session(&self, i: usize) -> &reqwest::Client {
        &self.0[i % self.0.len()]
    }
}

/// The target's address when the URL names one (not a host name).
fn target_ip(url: &str) -> Option<IpAddr> {
    let parsed = reqwest::Url::parse(url).ok()?;
    // IPv6 hosts come bracketed ("[::1]").
    parsed.host_str()?.trim_matches(['[', ']']).parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> anyhow::Result<reqwest::ClientBuilder> {
        Ok(reqwest::Client::builder())
    }

    #[test]
    fn sessions_take_the_addresses_in_turn() {
        let sources: Vec<IpAddr> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
            .iter()
            .map(|a| a.parse().expect("address"))
            .collect();
        let pools = Pools::new("http://127.0.0.1:1/mcp", &sources, builder).expect("pools");
        assert_eq!(pools.0.len(), 3);
        assert!(std::ptr::eq(pools.for_session(1), pools.for_session(4)));
        assert!(!std::ptr::eq(pools.for_session(1), pools.for_session(2)));
        let one = Pools::new("http://127.0.0.1:1/mcp", &[], builder).expect("pool");
        assert!(std::ptr::eq(one.for_session(0), one.for_session(7)));
    }

    #[test]
    fn a_source_of_the_other_family_is_refused() {
        let v6: IpAddr = "::1".parse().expect("address");
        let err = Pools::new("http://127.0.0.1:1/mcp", &[v6], builder).expect_err("refused");
        assert!(err.to_string().contains("--source-address ::1"), "{err}");
        // A host name may resolve to either family: not checked.
        Pools::new("http://localhost:1/mcp", &[v6], builder).expect("allowed");
    }
}
