//! [`TrustedProxies`]: who the client of a request is when it came through
//! proxies, as quotas count it.
//!
//! A request's TCP peer is its client unless the peer is a trusted proxy
//! (`HttpConfig::trusted_proxies`). From a trusted proxy, the client is
//! the rightmost address of `X-Forwarded-For` that is not itself a trusted
//! proxy: each proxy appends the address it received the request from, so
//! the entries right of the first untrusted one were written by trusted
//! proxies, and everything left of it may be the client's own invention.
//!
//! The walk reads the header's raw bytes, right to left across every
//! header line: a client's line may hold anything (obs-text, commas,
//! garbage), and a proxy such as nginx appends the client's address to
//! that very line, so a line is never dropped whole for what a client put
//! in it. An entry that is not an address stands where a trusted proxy
//! should have written one: that proxy did not (it passes the client's
//! header on, or it is itself the client), so the nearest trusted hop (the
//! entry right of it, or the TCP peer) is the client and is counted. The
//! same holds past sixteen trusted entries in a row. Only when every
//! hop is a readable trusted address (a proxy's own request, or a client
//! on a trusted address without the header) does the request have no
//! address of its own: a proxy carries many clients, so per-address quotas
//! do not apply to it. Only `X-Forwarded-For` is read (not RFC 7239
//! `Forwarded`): it is what nginx, HAProxy, Envoy and the cloud load
//! balancers write.

use std::net::{IpAddr, SocketAddr};

use actix_web::http::header::{HeaderMap, HeaderName};
use ipnet::IpNet;

use crate::HttpConfig;
use crate::connections::parse_net;

/// The header proxies append client addresses to (a name, not a `&str`:
/// looking a header up by a string that is no standard name allocates).
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Most `X-Forwarded-For` hops looked at, from the right: more trusted
/// proxies than this in a row is a misconfiguration, not a deployment.
const MAX_HOPS: usize = 16;

/// The proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// The proxies of `config.trusted_proxies`.
    ///
    /// # Errors
    /// An entry is neither an address nor a network.
    pub fn from_config(config: &HttpConfig) -> Result<Self, String> {
        let nets = config
            .trusted_proxies
            .iter()
            .map(|text| parse_net(text))
            .collect::<Result<_, _>>()?;
        Ok(Self { nets })
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for a request from `peer` with `headers`
    /// (see the module docs); `None` when the request comes from a
    /// trusted proxy itself.
    pub fn client_ip(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = peer?.to_canonical();
        if !self.trusts(peer) {
            return Some(peer);
        }
        // Several header lines form one list, in order; read from the end,
        // as raw bytes (a value need not be ASCII).
        let hops = headers
            .get_all(X_FORWARDED_FOR)
            .rev()
            .flat_map(|line| line.as_bytes().rsplit(|b| *b == b','));
        // The address of the nearest trusted hop: the proxy that should
        // have written the next entry.
        let mut nearest = peer;
        for (n, hop) in hops.enumerate() {
            if n == MAX_HOPS {
                return Some(nearest);
            }
            match parse_hop(hop) {
                Some(ip) if !self.trusts(ip) => return Some(ip),
                Some(ip) => nearest = ip,
                None => return Some(nearest),
            }
        }
        None
    }
}

/// One `X-Forwarded-For` entry: an address, perhaps with a port
/// (`192.0.2.1:4711`, `[2001:db8::1]:4711`) or in brackets; canonical (an
/// IPv4 address mapped into IPv6 is that IPv4 address).
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let hop = std::str::from_utf8(hop.trim_ascii()).ok()?;
    let ip = hop
        .parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| {
            hop.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .and_then(|h| h.parse().ok())
        })?;
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::HeaderValue;

    use super::*;

    fn proxies(list: &[&str]) -> TrustedProxies {
        TrustedProxies::from_config(&HttpConfig {
            trusted_proxies: list.iter().map(|s| (*s).to_owned()).collect(),
            ..HttpConfig::default()
        })
        .unwrap()
    }

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(X_FORWARDED_FOR, HeaderValue::from_str(line).unwrap());
        }
        map
    }

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let p = proxies(&["10.0.0.0/8"]);
        assert_eq!(
            p.client_ip(ip("203.0.113.9"), &headers(&["198.51.100.1"])),
            ip("203.0.113.9")
        );
        assert_eq!(p.client_ip(None, &headers(&[])), None);
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
        let p = proxies(&["10.0.0.0/8", "127.0.0.1"]);
        let peer = ip("10.0.0.5");
        // The client's own claim (left) is never reached.
        assert_eq!(
            p.client_ip(peer, &headers(&["127.0.0.1, 203.0.113.9, 10.1.1.1"])),
            ip("203.0.113.9")
        );
        // Several header lines are one list.
        assert_eq!(
            p.client_ip(peer, &headers(&["192.0.2.1", "203.0.113.9:4711, 10.2.2.2"])),
            ip("203.0.113.9")
        );
        assert_eq!(
            p.client_ip(peer, &headers(&["[2001:db8::7]:443"])),
            ip("2001:db8::7")
        );
        assert_eq!(
            p.client_ip(peer, &headers(&["[2001:db8::8]"])),
            ip("2001:db8::8")
        );
        // A mapped IPv4 address is that address.
        assert_eq!(
            p.client_ip(ip("::ffff:10.0.0.5"), &headers(&["::ffff:192.0.2.4"])),
            ip("192.0.2.4")
        );
    }

    #[test]
    fn no_client_of_its_own_when_every_hop_is_a_trusted_address() {
        let p = proxies(&["127.0.0.1", "::1"]);
        let local = ip("127.0.0.1");
        assert_eq!(p.client_ip(local, &headers(&[])), None);
        assert_eq!(p.client_ip(local, &headers(&["::1, 127.0.0.1"])), None);
        assert!(
            TrustedProxies::from_config(&HttpConfig {
                trusted_proxies: vec!["nonsense".into()],
                ..HttpConfig::default()
            })
            .is_err()
        );
    }

    fn raw_headers(lines: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(X_FORWARDED_FOR, HeaderValue::from_bytes(line).unwrap());
        }
        map
    }

    #[test]
    fn what_a_client_writes_never_hides_the_address_a_proxy_appended() {
        let p = proxies(&["127.0.0.1", "::1"]);
        let local = ip("127.0.0.1");
        // nginx appends the client's address to the client's own line.
        for line in [
            &b"\x80, 192.0.2.7"[..],
            b"\xff\xfe garbage, 192.0.2.7",
            b"unknown,192.0.2.7",
            b",,192.0.2.7",
            b"127.0.0.1, ::1, 192.0.2.7",
            b"192.0.2.7:51234",
        ] {
            assert_eq!(
                p.client_ip(local, &raw_headers(&[line])),
                ip("192.0.2.7"),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // Another line of garbage before the proxy's line.
        assert_eq!(
            p.client_ip(local, &raw_headers(&[b"\x80", b"203.0.113.1, 192.0.2.7"])),
            ip("192.0.2.7")
        );
    }

    #[test]
    fn an_entry_that_is_no_address_counts_the_nearest_trusted_hop() {
        let p = proxies(&["127.0.0.1", "::1", "10.0.0.0/8"]);
        let local = ip("127.0.0.1");
        // Garbage where the peer should have written an address: the peer.
        assert_eq!(
            p.client_ip(local, &raw_headers(&[b"\x80"])),
            ip("127.0.0.1")
        );
        assert_eq!(p.client_ip(local, &headers(&["unknown"])), ip("127.0.0.1"));
        assert_eq!(p.client_ip(local, &headers(&[""])), ip("127.0.0.1"));
        // Garbage left of a trusted hop: that hop.
        assert_eq!(
            p.client_ip(local, &headers(&["192.0.2.1, unknown, 10.1.2.3"])),
            ip("10.1.2.3")
        );
        assert_eq!(
            p.client_ip(local, &raw_headers(&[b"\x80", b"::1"])),
            ip("::1")
        );
        // More trusted hops than any deployment: the last one looked at.
        let long = vec!["10.9.9.9"; MAX_HOPS + 1].join(",");
        let spoofed = format!("192.0.2.1,{long}");
        assert_eq!(p.client_ip(local, &headers(&[&spoofed])), ip("10.9.9.9"));
    }
}
