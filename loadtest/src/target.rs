//! Which servers the load generator may hit: loopback only, unless the
//! operator names another host with `--allow-target`. A load test against
//! someone else's server is an attack; this makes it a deliberate choice.

use anyhow::{bail, ensure};

/// Hosts that are always allowed.
const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

/// Checks that `url` is http(s) on a loopback host or on one of `allowed`.
///
/// # Errors
/// The URL does not parse, is not http(s), or names another host.
pub(crate) fn check(url: &str, allowed: &[String]) -> anyhow::Result<()> {
    let parsed = reqwest::Url::parse(url)?;
    ensure!(
        matches!(parsed.scheme(), "http" | "https"),
        "--url must be http:// or https://, got {url}"
    );
    let Some(host) = parsed.host_str() else {
        bail!("--url has no host: {url}");
    };
    // IPv6 hosts come bracketed ("[::1]").
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let listed = |h: &str| h.eq_ignore_ascii_case(host);
    if LOOPBACK_HOSTS.iter().copied().any(listed)
        || allowed
            .iter()
            .map(|h| h.trim_matches(['[', ']']))
            .any(listed)
    {
        return Ok(());
    }
    bail!(
        "refusing to load {host}: only 127.0.0.1, ::1 and localhost are targets unless `--allow-target {host}` is given"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only_unless_allowed() {
        for ok in [
            "http://127.0.0.1:18400/mcp",
            "http://[::1]:8080/mcp",
            "http://LOCALHOST/mcp",
        ] {
            check(ok, &[]).unwrap();
        }
        for refused in [
            "http://10.0.0.1/mcp",
            "http://example.com/mcp",
            "http://127.0.0.2/mcp",
            "http://localhost.example.com/mcp",
            "ftp://127.0.0.1/",
        ] {
            assert!(check(refused, &[]).is_err(), "{refused}");
        }
        check("http://mcp.lab:80/mcp", &["mcp.lab".to_owned()]).unwrap();
        check("http://[fd00::1]/mcp", &["fd00::1".to_owned()]).unwrap();
        assert!(check("http://other.lab/mcp", &["mcp.lab".to_owned()]).is_err());
    }
}
