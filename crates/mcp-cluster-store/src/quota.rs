//! The quota port: rate counters and leases shared by every node, so that
//! an abuse limit holds across the cluster and not per node.
//!
//! Two shapes cover every quota:
//! - a **rate** ([`QuotaStore::hit`]): at most `limit` units per `window`
//!   for one subject, as a generic cell rate algorithm (GCRA): a burst of
//!   `limit` at once, then one unit every `window / limit`. One value per
//!   subject (the theoretical arrival time), gone once the subject has been
//!   quiet for a window;
//! - a **lease set** ([`QuotaStore::acquire`]): at most `max` members held
//!   at once for one subject (the sessions or streams of a principal). Each
//!   member is held for a lease that its holder renews
//!   ([`QuotaStore::renew`]) and gives back ([`QuotaStore::release`]);
//!   a holder that dies stops renewing, and its members lapse with their
//!   lease, so no slot is held forever.
//!
//! What is counted (and for whom) is the runtime's business: this port
//! only counts, under names it is given. Time is the store's own (Redis's
//! clock for the Redis store), so nodes with skewed clocks agree.

use std::fmt::{self, Debug};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::StoreError;

/// Whose quota: the quota's name and the subject it is counted for.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct QuotaKey {
    /// The quota: a constant of lowercase ASCII letters and underscores
    /// (it is part of store keys and of a metric label).
    pub quota: &'static str,
    /// Whom it is counted for (a client address, a principal's key); any
    /// text.
    pub subject: Arc<str>,
}

impl QuotaKey {
    /// The key of `quota` for `subject`.
    pub fn new(quota: &'static str, subject: impl Into<Arc<str>>) -> Self {
        Self {
            quota,
            subject: subject.into(),
        }
    }
}

impl Debug for QuotaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.quota, self.subject)
    }
}

/// A rate: at most `limit` units per `window`, in bursts of up to `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Units per window; at least 1.
    pub limit: u32,
    /// The window; at least a millisecond.
    pub window: Duration,
}

impl Rate {
    /// Time between two units once the burst is spent (`window / limit`),
    /// at least a microsecond.
    pub fn interval(&self) -> Duration {
        (self.window / self.limit.max(1)).max(Duration::from_micros(1))
    }
}

/// What a quota decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the quota (and counted).
    Admitted,
    /// Over the quota; nothing was counted.
    Limited {
        /// When trying again may succeed at the soonest: for a rate, when
        /// enough of the window has passed; for a lease set, when its
        /// oldest lease runs out if not renewed (a holder giving a member
        /// back frees a slot sooner).
        retry_after: Duration,
    },
}

impl Verdict {
    /// Whether it admitted.
    pub fn admitted(self) -> bool {
        matches!(self, Self::Admitted)
    }
}

/// The subject an address is counted as: itself (IPv4, or an IPv4 address
/// mapped into IPv6), or its /64 network (IPv6: one host commonly holds a
/// whole /64, so counting single addresses would count nothing).
pub fn address_subject(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// Rate counters and lease sets, shared by the nodes of a cluster.
#[async_trait]
pub trait QuotaStore: Send + Sync + Debug + 'static {
    /// Counts `cost` units against `key` if that keeps it within `rate`:
    /// admitted (and counted) or limited (and not counted), atomically, so
    /// that nodes counting the same key concurrently never overshoot. A
    /// `cost` above `rate.limit` is never admitted (it is limited with a
    /// `retry_after` of the whole window).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn hit(&self, key: &QuotaKey, cost: u32, rate: Rate) -> Result<Verdict, StoreError>;

    /// Holds `member` in `key`'s lease set for `lease`, if the set holds
    /// fewer than `max` live members or already holds this one (which then
    /// gets a fresh lease). Atomic, as [`Self::hit`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn acquire(
        &self,
        key: &QuotaKey,
        member: &str,
        max: u32,
        lease: Duration,
    ) -> Result<Verdict, StoreError>;

    /// Gives each of `members` a fresh `lease` in `key`'s set, adding any
    /// that lapsed meanwhile (a renewal is never refused: what it renews is
    /// held).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn renew(
        &self,
        key: &QuotaKey,
        members: &[Arc<str>],
        lease: Duration,
    ) -> Result<(), StoreError>;

    /// Gives `member` back; nothing when it is not held.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn release(&self, key: &QuotaKey, member: &str) -> Result<(), StoreError>;

    /// Marks `key` used for `ttl`: `true` the first time, `false` while
    /// it is still marked (a request state presented twice). A store
    /// that has no room left to remember says `true`.
    async fn claim_once(&self, key: &QuotaKey, ttl: Duration) -> Result<bool, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_count_per_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_subject(a), "2001:db8:1:2::/64");
        assert_eq!(address_subject(a), address_subject(b));
        assert_ne!(address_subject(a), address_subject(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(address_subject(mapped), "192.0.2.7");
    }

    #[test]
    fn the_interval_spreads_the_window_over_the_limit() {
        let rate = Rate {
            limit: 60,
            window: Duration::from_secs(60),
        };
        assert_eq!(rate.interval(), Duration::from_secs(1));
        let tiny = Rate {
            limit: u32::MAX,
            window: Duration::from_millis(1),
        };
        assert_eq!(tiny.interval(), Duration::from_micros(1));
        assert_eq!(
            format!("{:?}", QuotaKey::new("requests", "a#b")),
            "requests[a#b]"
        );
    }
}
