//! [`IntrospectionBudget`]: which introspection calls a node makes, so that
//! made-up tokens cost their senders and never the other clients.
//!
//! A cache cannot stop made-up tokens (each is new), so each call is
//! counted, on this node and in memory, twice:
//! - against the client's address (IPv6: its /64): `calls_per_address` per
//!   window, as the quotas count (GCRA, [`MemoryQuotas`]);
//! - against the node's calls in all: one GCRA bucket of
//!   `calls_per_second`. Its last `reserved_calls_per_second` are a
//!   reserve: a call from an address in good standing may fill the bucket
//!   to the full bound, any other only to the bound less the reserve.
//!
//! An address is in good standing while it has presented no token found
//! inactive (or otherwise refused) within the window, and has taken fewer
//! than `reserved_calls_per_address` calls of the reserve in it (counted
//! only when the rest of the bucket is taken). So addresses flooding
//! made-up tokens, each within its own share, lose the reserve with their
//! first refused token and fill the bucket only to the bound less the
//! reserve, which stays for clients whose tokens are good; one address
//! with good tokens takes at most its share of the reserve.
//!
//! Everything is bounded: the address counts by [`MemoryQuotas`]' own
//! bound, the standings by [`MAX_STANDINGS`] (an entry is made only by a
//! refused token or a call of the reserve, each bounded by the node's
//! bound, and goes once it holds nothing).
//!
//! Alternatives not taken: a reserve as a second bucket (its burst would
//! add to the node's, and the authorization server would see both); a fair
//! share of the bound per address seen (it needs the number of addresses,
//! which a flood chooses).

use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use dashmap::DashMap;
use mcp_cluster_store::memory::MemoryQuotas;
use mcp_cluster_store::{QuotaKey, QuotaStore as _, Rate, Verdict};
use tokio::time::Instant;

use crate::config::CheckedIntrospection;

/// The name under which introspection calls are counted per client
/// address.
const INTROSPECTION_PER_ADDRESS: &str = "introspection_per_address";

/// Most addresses whose standing is kept (about 100 bytes each, so about
/// 10 MB). Entries are made by refused tokens and calls of the reserve,
/// both bounded by the node's bound: with the defaults at most
/// 50 a second × 60 s = 3,000 are live at once.
pub(crate) const MAX_STANDINGS: usize = 100_000;

/// How often the standings that hold nothing are swept, at most.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// How often they are swept, at most, while the map is full.
const FULL_SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// Why a call is not made now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Throttled {
    /// When a call may fit again.
    pub(crate) retry_after: Duration,
}

/// The node's introspection calls: per address, in all, and the reserve
/// of the bound in all. One per [`crate::Authenticator`].
#[derive(Debug)]
pub(crate) struct IntrospectionBudget {
    /// Calls per address, `None` when unbounded.
    per_address: Option<Rate>,
    /// The address counts (bounded by its own subject limit).
    address_calls: MemoryQuotas,
    /// The node's bound in all, `None` when unbounded.
    node: Option<NodeBucket>,
    /// An address's share of the reserve, `None` when unbounded.
    reserve_share: Option<Rate>,
    /// How long a refused token keeps its address off the reserve.
    standing_window: Duration,
    /// Standings by address subject: written by [`Self::admit`] (calls
    /// of the reserve) and [`Self::refused`]; at most [`MAX_STANDINGS`].
    standings: DashMap<String, Standing>,
    /// The last sweep of the standings.
    last_sweep: Mutex<Instant>,
}

/// The node's calls in all: one GCRA bucket, filled by all calls, of which
/// only the last `reserved` calls are for addresses in good standing.
#[derive(Debug)]
struct NodeBucket {
    /// The theoretical arrival time of the next call. Locked for a few
    /// comparisons, never across an await.
    tat: Mutex<Instant>,
    /// Time between two calls once the burst is spent (`1 s / limit`).
    interval: Duration,
    /// How far ahead of now the arrival time may go for a call of anyone:
    /// `limit - reserved` intervals.
    open_ahead: Duration,
    /// How far for a call of an address in good standing: `limit`
    /// intervals.
    full_ahead: Duration,
}

/// What the node remembers of one address.
#[derive(Debug, Clone, Copy)]
struct Standing {
    /// Until when it calls on the open part only: it presented a refused
    /// token.
    refused_until: Option<Instant>,
    /// The theoretical arrival time of its next call of the reserve (its
    /// share, GCRA).
    reserve_tat: Instant,
}

impl Standing {
    fn holds_nothing(&self, now: Instant) -> bool {
        self.refused_until.is_none_or(|until| until <= now) && self.reserve_tat <= now
    }
}

impl IntrospectionBudget {
    /// The budget of `config`.
    pub(crate) fn new(config: &CheckedIntrospection) -> Self {
        let node = config.in_all.map(|rate| {
            let limit = rate.limit.max(1);
            let reserved = config.reserved.min(limit - 1);
            let interval = rate.interval();
            NodeBucket {
                tat: Mutex::new(Instant::now()),
                interval,
                open_ahead: interval * (limit - reserved),
                full_ahead: interval * limit,
            }
        });
        Self {
            per_address: config.per_address,
            address_calls: MemoryQuotas::new(),
            reserve_share: config.reserved_per_address,
            node,
            standing_window: config.standing_window,
            standings: DashMap::new(),
            last_sweep: Mutex::new(Instant::now()),
        }
    }

    /// Counts one call for a token of `client` (its address, when known),
    /// or says when one may fit.
    ///
    /// # Errors
    /// [`Throttled`] when the address's share or the node's bound is
    /// reached; the address's count is taken even then (as the quotas do:
    /// a client retrying too early pushes its own wait out).
    pub(crate) async fn admit(&self, client: Option<IpAddr>) -> Result<(), Throttled> {
        let subject = client.map(mcp_cluster_store::quota::address_subject);
        if let (Some(subject), Some(rate)) = (&subject, self.per_address) {
            let key = QuotaKey::new(INTROSPECTION_PER_ADDRESS, subject.as_str());
            match self.address_calls.hit(&key, 1, rate).await {
                Ok(Verdict::Admitted) => {}
                Ok(Verdict::Limited { retry_after }) => return Err(Throttled { retry_after }),
                // The in-memory store never fails; were it to, the call is
                // refused rather than made unbounded.
                Err(_) => {
                    return Err(Throttled {
                        retry_after: Duration::from_secs(1),
                    });
                }
            }
        }
        let Some(node) = &self.node else {
            return Ok(());
        };
        let now = Instant::now();
        let mut tat = node.tat.lock().unwrap_or_else(PoisonError::into_inner);
        let next = (*tat).max(now) + node.interval;
        let ahead = next - now;
        if ahead <= node.open_ahead {
            *tat = next;
            return Ok(());
        }
        if ahead <= node.full_ahead
            && let Some(subject) = &subject
            && self.take_reserve(subject, now)
        {
            *tat = next;
            return Ok(());
        }
        // When the open part has room again (the reserve may free sooner,
        // but is not promised).
        Err(Throttled {
            retry_after: ahead - node.open_ahead,
        })
    }

    /// Remembers that `client` presented a token found inactive (or
    /// refused otherwise): its address is off the reserve for the window.
    pub(crate) fn refused(&self, client: Option<IpAddr>) {
        let Some(ip) = client else {
            return;
        };
        let now = Instant::now();
        let until = now + self.standing_window;
        self.with_standing(
            &mcp_cluster_store::quota::address_subject(ip),
            now,
            |standing| {
                standing.refused_until = Some(until);
            },
        );
    }

    /// Whether `subject`, in good standing, takes a call of the reserve
    /// (counted in its share).
    fn take_reserve(&self, subject: &str, now: Instant) -> bool {
        let share = self.reserve_share;
        let mut taken = false;
        let recorded = self.with_standing(subject, now, |standing| {
            if standing.refused_until.is_some_and(|until| until > now) {
                return;
            }
            match share {
                None => taken = true,
                Some(rate) => {
                    let next = standing.reserve_tat.max(now) + rate.interval();
                    if next - now <= rate.window {
                        standing.reserve_tat = next;
                        taken = true;
                    }
                }
            }
        });
        // No room to remember a new address (see `with_standing`): it has
        // presented no refused token this node remembers.
        taken || !recorded
    }

    /// Runs `change` on the standing of `subject` (a new one when it has
    /// none); `false` when there is no room for a new one even after a
    /// sweep, and nothing ran.
    fn with_standing(
        &self,
        subject: &str,
        now: Instant,
        change: impl FnOnce(&mut Standing),
    ) -> bool {
        self.maybe_sweep(now, self.standings.len() >= MAX_STANDINGS);
        // Counted before the entry is taken: `len` reads every shard.
        let full = self.standings.len() >= MAX_STANDINGS;
        match self.standings.entry(subject.to_owned()) {
            dashmap::Entry::Occupied(mut entry) => change(entry.get_mut()),
            dashmap::Entry::Vacant(_) if full => return false,
            dashmap::Entry::Vacant(entry) => {
                let mut standing = Standing {
                    refused_until: None,
                    reserve_tat: now,
                };
                change(&mut standing);
                entry.insert(standing);
            }
        }
        true
    }

    /// Drops the standings that hold nothing, at most every
    /// [`SWEEP_INTERVAL`] ([`FULL_SWEEP_INTERVAL`] when `full`).
    fn maybe_sweep(&self, now: Instant, full: bool) {
        {
            let mut last = self
                .last_sweep
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let wait = if full {
                FULL_SWEEP_INTERVAL
            } else {
                SWEEP_INTERVAL
            };
            if now.duration_since(*last) < wait {
                return;
            }
            *last = now;
        }
        self.standings
            .retain(|_, standing| !standing.holds_nothing(now));
    }

    /// Standings held now (for tests).
    #[cfg(test)]
    fn standings(&self) -> usize {
        self.standings.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(calls_per_second: u32, reserved: u32, share: Option<u32>) -> IntrospectionBudget {
        IntrospectionBudget::new(&CheckedIntrospection {
            endpoint: None,
            client_id: "rs".into(),
            client_secret: "s".into(),
            cache: Duration::from_secs(300),
            negative_cache: Duration::from_secs(10),
            per_address: Some(Rate {
                limit: 60,
                window: Duration::from_secs(60),
            }),
            in_all: Some(Rate {
                limit: calls_per_second,
                window: Duration::from_secs(1),
            }),
            reserved,
            reserved_per_address: share.map(|limit| Rate {
                limit,
                window: Duration::from_secs(60),
            }),
            standing_window: Duration::from_secs(60),
            negative_cache_entries: 100,
        })
    }

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([192, 0, 2, last]))
    }

    #[tokio::test(start_paused = true)]
    async fn addresses_that_presented_refused_tokens_leave_the_reserve_to_the_others() {
        let budget = budget(10, 2, Some(5));
        // Thirty attacking addresses, each with a refused token.
        for last in 100..130 {
            budget.refused(ip(last));
        }
        // Together they fill the bound up to its reserve, not beyond.
        let mut admitted = 0;
        for round in 0..3 {
            if round > 0 {
                tokio::time::advance(Duration::from_millis(800)).await;
            }
            for last in 100..130 {
                if budget.admit(ip(last)).await.is_ok() {
                    admitted += 1;
                }
            }
            assert_eq!(admitted, 8 * (round + 1), "round {round}");
        }
        // A client in good standing finds the reserve, and so does another.
        budget.admit(ip(1)).await.unwrap();
        budget.admit(ip(2)).await.unwrap();
        // The bound itself holds: nobody gets a third.
        let refused = budget.admit(ip(3)).await.unwrap_err();
        assert!(refused.retry_after > Duration::ZERO);
        assert!(budget.admit(ip(100)).await.is_err());
        // As the bucket drains, the attackers take the open part again,
        // and the reserve is there again for the client.
        tokio::time::advance(Duration::from_millis(300)).await;
        while budget.admit(ip(101)).await.is_ok() {}
        budget.admit(ip(1)).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn one_address_takes_at_most_its_share_of_the_reserve() {
        let budget = budget(10, 4, Some(2));
        // The open part, taken by anyone (here the client itself).
        for _ in 0..6 {
            budget.admit(ip(1)).await.unwrap();
        }
        // Its share of the reserve: 2 of 4.
        budget.admit(ip(1)).await.unwrap();
        budget.admit(ip(1)).await.unwrap();
        assert!(budget.admit(ip(1)).await.is_err());
        // Another address finds the rest.
        budget.admit(ip(2)).await.unwrap();
        budget.admit(ip(2)).await.unwrap();
        assert!(budget.admit(ip(2)).await.is_err());
        // Without an address, the open part only.
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(budget.admit(None).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_node_bound_in_all_is_the_same_with_a_reserve() {
        // A burst of the bound, then the bound a second, whoever calls.
        for reserved in [0, 3] {
            let budget = budget(10, reserved, None);
            let mut admitted = 0;
            for _ in 0..100 {
                for last in 1..=20 {
                    if budget.admit(ip(last)).await.is_ok() {
                        admitted += 1;
                    }
                }
                tokio::time::advance(Duration::from_millis(100)).await;
            }
            // 10 s: a burst of 10, then 10 a second.
            assert!(admitted <= 10 + 100, "{admitted} with reserve {reserved}");
            assert!(admitted >= 100, "{admitted} with reserve {reserved}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_token_keeps_its_address_off_the_reserve_for_the_window() {
        let budget = budget(5, 1, None);
        budget.refused(ip(9));
        for _ in 0..4 {
            budget.admit(ip(9)).await.unwrap();
        }
        assert!(budget.admit(ip(9)).await.is_err(), "the reserve is not its");
        tokio::time::advance(Duration::from_secs(61)).await;
        for _ in 0..5 {
            budget.admit(ip(9)).await.unwrap();
        }
        // Standings that hold nothing go with the next sweep.
        assert_eq!(budget.standings(), 1);
        tokio::time::advance(Duration::from_secs(61)).await;
        budget.refused(ip(10));
        assert_eq!(budget.standings(), 1);
    }
}
