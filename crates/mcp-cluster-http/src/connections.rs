//! [`ConnectionGate`]: how many TCP connections the node holds, in all and
//! per client address.
//!
//! Every connection costs a file descriptor and buffers; a client that
//! opens thousands (or sends its headers and then a trickle of body) could
//! use every descriptor, and the node would stop answering probes and new
//! clients. The gate runs when a connection is accepted, before anything
//! is read: beyond a limit the socket is shut down at once, so a refused
//! connection costs nothing after its accept. Admitted connections carry a
//! [`Admitted`] guard in their connection data; its drop, when the
//! connection ends, gives the slot back.
//!
//! The time a connection may hold its slot without sending a request is
//! bounded by the header timeout ([`crate::request_head`], for every
//! request of the connection), a request's body by the body timeout
//! (`streamable::read_body`), and an idle keep-alive connection by the
//! keep-alive timeout.

use std::any::Any;
use std::net::{IpAddr, Shutdown};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;
use dashmap::DashMap;
use ipnet::IpNet;

/// The gate of one listener. Cheap to share: one per node, used by every
/// worker.
#[derive(Debug)]
pub struct ConnectionGate {
    /// Most connections in all.
    max: usize,
    /// Most connections per client address (0: no limit).
    max_per_peer: usize,
    /// Addresses the per-address limit does not apply to (a load balancer
    /// or a sidecar proxy carries many clients' connections).
    exempt: Vec<IpNet>,
    /// Connections held now. Written by `admit` and by [`Admitted`]'s drop.
    open: AtomicUsize,
    /// Connections held now per limited address; an entry goes with its
    /// last connection, so the map holds at most `max` entries.
    per_peer: DashMap<IpAddr, usize>,
    /// Connections refused so far (over either limit).
    refused: AtomicU64,
    /// Whether `mcp_connections_open` and `mcp_connections_refused_total`
    /// count this gate's connections: they describe the main listener, so
    /// the admin listener's gate does not.
    metered: bool,
}

/// One admitted connection; dropped with the connection's data.
#[derive(Debug)]
pub struct Admitted {
    gate: Arc<ConnectionGate>,
    /// The address counted per peer, if it was.
    peer: Option<IpAddr>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.gate.open.fetch_sub(1, Ordering::AcqRel);
        if self.gate.metered {
            mcp_cluster_telemetry::metrics::metrics()
                .connections_open
                .dec();
        }
        if let Some(peer) = self.peer {
            self.gate.release_peer(peer);
        }
    }
}

impl ConnectionGate {
    /// A gate admitting at most `max` connections, and per address outside
    /// `exempt` at most `max_per_peer` (0: no limit of its own) and never
    /// more than a quarter of `max`: one address cannot fill the node.
    pub fn new(max: usize, max_per_peer: usize, exempt: Vec<IpNet>) -> Arc<Self> {
        Self::build(max, max_per_peer, exempt, true)
    }

    /// As [`Self::new`], for a listener the connection metrics do not
    /// describe (the admin listener's probes and scrapes): its connections
    /// and refusals are not counted in `mcp_connections_open` and
    /// `mcp_connections_refused_total`.
    pub fn new_unmetered(max: usize, max_per_peer: usize, exempt: Vec<IpNet>) -> Arc<Self> {
        Self::build(max, max_per_peer, exempt, false)
    }

    fn build(max: usize, max_per_peer: usize, exempt: Vec<IpNet>, metered: bool) -> Arc<Self> {
        let max = max.max(1);
        let quarter = (max / 4).max(1);
        let max_per_peer = match max_per_peer {
            0 => quarter,
            n => n.min(quarter),
        };
        Arc::new(Self {
            max,
            max_per_peer,
            exempt,
            open: AtomicUsize::new(0),
            per_peer: DashMap::new(),
            refused: AtomicU64::new(0),
            metered,
        })
    }

    /// Connections held now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The most connections in all.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The most connections per address that is not exempt.
    pub fn max_per_peer(&self) -> usize {
        self.max_per_peer
    }

    /// Connections kept from long-lived streams: 1/32 of the limit, 4 to
    /// 256.
    pub fn stream_headroom(&self) -> usize {
        (self.max / 32).clamp(4, 256)
    }

    /// Whether a new long-lived stream (a GET, a resumption, a legacy
    /// `/sse`, a `subscriptions/listen`) may start: the connections open
    /// leave [`Self::stream_headroom`] free. Beyond that a stream is
    /// refused with an answer (503, `Retry-After`) on the connection it
    /// came on, while requests still find connections to be answered on;
    /// past the limit itself a connection is closed before anything is
    /// read.
    pub fn stream_room(&self) -> bool {
        self.open() + self.stream_headroom() <= self.max
    }

    /// Admits a connection from `peer`, or says why not. An admitted one is
    /// counted until the returned guard drops.
    ///
    /// # Errors
    /// [`Refused`] when a limit is reached; nothing is counted then.
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Admitted, Refused> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(self.refuse(Refused::NodeFull));
        }
        let limited = peer.filter(|ip| !self.exempt.iter().any(|net| net.contains(ip)));
        if let Some(ip) = limited {
            let mut count = self.per_peer.entry(ip).or_insert(0);
            if *count >= self.max_per_peer {
                drop(count);
                self.open.fetch_sub(1, Ordering::AcqRel);
                return Err(self.refuse(Refused::PeerFull));
            }
            *count += 1;
        }
        if self.metered {
            mcp_cluster_telemetry::metrics::metrics()
                .connections_open
                .inc();
        }
        Ok(Admitted {
            gate: Arc::clone(self),
            peer: limited,
        })
    }

    /// The `on_connect` hook of an actix-web server: admits the connection
    /// (its guard goes into the connection data) or shuts its socket down,
    /// so the server reads end-of-stream and drops it at once.
    pub fn on_connect(self: &Arc<Self>, connection: &dyn Any, data: &mut Extensions) {
        let Some(stream) = connection.downcast_ref::<TcpStream>() else {
            return;
        };
        let peer = stream.peer_addr().ok().map(|addr| addr.ip());
        match self.admit(peer) {
            Ok(admitted) => {
                data.insert(admitted);
            }
            Err(why) => {
                tracing::debug!(?peer, reason = why.as_str(), "Connection refused.");
                let _ = socket2::SockRef::from(stream).shutdown(Shutdown::Both);
            }
        }
    }

    fn refuse(&self, why: Refused) -> Refused {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if self.metered {
            mcp_cluster_telemetry::metrics::metrics()
                .connections_refused
                .with_label_values(&[why.as_str()])
                .inc();
        }
        why
    }

    fn release_peer(&self, peer: IpAddr) {
        if let dashmap::Entry::Occupied(mut entry) = self.per_peer.entry(peer) {
            *entry.get_mut() -= 1;
            if *entry.get() == 0 {
                entry.remove();
            }
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The node holds its maximum of connections.
    NodeFull,
    /// The client's address holds its maximum.
    PeerFull,
}

impl Refused {
    /// A label for logs (and metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeFull => "node_connection_limit",
            Self::PeerFull => "peer_connection_limit",
        }
    }
}

/// Parses `1.2.3.4`, `::1` or `10.0.0.0/8`.
///
/// # Errors
/// Neither an address nor a network.
pub fn parse_net(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{text:?} is neither an IP address nor a network (a.b.c.d/n)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn per_peer_and_total_limits_hold_and_slots_come_back() {
        let gate = ConnectionGate::new(4, 2, vec![parse_net("10.0.0.0/8").unwrap()]);
        // A quarter of 4: one per address.
        assert_eq!(gate.max_per_peer(), 1);
        let gate = ConnectionGate::new(8, 2, vec![parse_net("10.0.0.0/8").unwrap()]);
        assert_eq!(gate.max_per_peer(), 2);
        let a1 = gate.admit(ip("192.0.2.1")).unwrap();
        let a2 = gate.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(gate.admit(ip("192.0.2.1")).unwrap_err(), Refused::PeerFull);
        // Other addresses, and an exempt one beyond the per-peer limit.
        let b = gate.admit(ip("192.0.2.2")).unwrap();
        let c = gate.admit(ip("192.0.2.3")).unwrap();
        let lb: Vec<_> = (0..4)
            .map(|_| gate.admit(ip("10.1.2.3")).unwrap())
            .collect();
        assert_eq!(gate.open(), 8);
        assert_eq!(gate.admit(ip("10.1.2.3")).unwrap_err(), Refused::NodeFull);
        assert_eq!(gate.refused(), 2);
        drop(a1);
        let a3 = gate.admit(ip("192.0.2.1")).unwrap();
        drop((a2, a3, b, c, lb));
        assert_eq!(gate.open(), 0);
        assert!(
            gate.per_peer.is_empty(),
            "entries go with their last connection"
        );
        // No limit of its own: a quarter of the node's.
        assert_eq!(ConnectionGate::new(400, 0, Vec::new()).max_per_peer(), 100);
        assert_eq!(
            ConnectionGate::new(400_000, 512, Vec::new()).max_per_peer(),
            512
        );
    }

    #[test]
    fn an_unmetered_gate_holds_the_same_limits() {
        let gate = ConnectionGate::new_unmetered(16, 0, Vec::new());
        assert_eq!((gate.max(), gate.max_per_peer()), (16, 4));
        let held: Vec<_> = (0..4)
            .map(|_| gate.admit(ip("192.0.2.1")).unwrap())
            .collect();
        assert_eq!(gate.admit(ip("192.0.2.1")).unwrap_err(), Refused::PeerFull);
        drop(held);
        assert_eq!(gate.open(), 0);
    }

    #[test]
    fn exempt_entries_parse_as_addresses_or_networks() {
        assert!(
            parse_net("127.0.0.1")
                .unwrap()
                .contains(&"127.0.0.1".parse::<IpAddr>().unwrap())
        );
        assert!(
            !parse_net("127.0.0.1")
                .unwrap()
                .contains(&"127.0.0.2".parse::<IpAddr>().unwrap())
        );
        assert!(parse_net("::1").is_ok());
        assert!(parse_net("fd00::/8").is_ok());
        assert!(parse_net("localhost").is_err());
        assert!(parse_net("10.0.0.0/33").is_err());
    }
}
