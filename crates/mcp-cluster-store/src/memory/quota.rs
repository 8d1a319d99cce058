//! [`MemoryQuotas`]: the in-memory [`QuotaStore`] of a node running alone.
//!
//! Bounded: entries that no longer hold anything (a rate whose subject has
//! been quiet for its window, a lease set whose leases all ran out) are
//! swept at most every [`SWEEP_INTERVAL`] by the calls that add entries,
//! and each map holds at most [`MAX_QUOTA_KEYS`] subjects. When live
//! subjects alone fill a map, a new subject is admitted without being
//! counted (and a sweep is tried again at most every
//! [`CAP_SWEEP_INTERVAL`]): failing open for subjects never seen is the
//! lesser harm, as refusing them would let whoever filled the map lock
//! every newcomer out; subjects already counted stay counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use tokio::time::Instant;

use super::lock;
use crate::{QuotaKey, QuotaStore, Rate, StoreError, Verdict};

/// How long sweeps wait between runs.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// How long sweeps forced by a full map wait between runs.
const CAP_SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// Most subjects per map (rates, lease sets). A rate entry is about 100
/// bytes with its key, so the rates stay under about 10 MB; with the
/// default one-minute windows, filling it takes more than 1,600 new
/// subjects a second.
pub const MAX_QUOTA_KEYS: usize = 100_000;

/// In-memory [`QuotaStore`]. Time is tokio's, so tests can pause it.
#[derive(Debug)]
pub struct MemoryQuotas {
    /// Theoretical arrival time of the next unit, per rate subject.
    rates: DashMap<QuotaKey, Instant>,
    /// Lease expiry per member, per lease-set subject.
    leases: DashMap<QuotaKey, HashMap<Box<str>, Instant>>,
    max_keys: usize,
    last_sweep: Mutex<Instant>,
}

impl Default for MemoryQuotas {
    fn default() -> Self {
        Self::with_max_keys(MAX_QUOTA_KEYS)
    }
}

impl MemoryQuotas {
    /// An empty store holding at most [`MAX_QUOTA_KEYS`] subjects per map.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store holding at most `max_keys` subjects per map.
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self {
            rates: DashMap::new(),
            leases: DashMap::new(),
            max_keys: max_keys.max(1),
            last_sweep: Mutex::new(Instant::now()),
        }
    }

    /// Subjects held: rates, lease sets (for tests).
    pub fn len(&self) -> (usize, usize) {
        (self.rates.len(), self.leases.len())
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.rates.is_empty() && self.leases.is_empty()
    }

    /// Drops what holds nothing any more, at most every
    /// [`SWEEP_INTERVAL`] ([`CAP_SWEEP_INTERVAL`] when a map is full).
    fn maybe_sweep(&self, now: Instant) {
        let full = self.rates.len() >= self.max_keys || self.leases.len() >= self.max_keys;
        {
            let mut last = lock(&self.last_sweep);
            let wait = if full {
                CAP_SWEEP_INTERVAL
            } else {
                SWEEP_INTERVAL
            };
            if now.duration_since(*last) < wait {
                return;
            }
            *last = now;
        }
        self.rates.retain(|_, tat| *tat > now);
        self.leases.retain(|_, members| {
            members.retain(|_, expiry| *expiry > now);
            !members.is_empty()
        });
    }

    /// Whether a map with `len` subjects may take a new one.
    fn has_room(&self, len: usize) -> bool {
        len < self.max_keys
    }
}

#[async_trait]
impl QuotaStore for MemoryQuotas {
    async fn hit(&self, key: &QuotaKey, cost: u32, rate: Rate) -> Result<Verdict, StoreError> {
        let now = Instant::now();
        if cost == 0 {
            return Ok(Verdict::Admitted);
        }
        if cost > rate.limit {
            return Ok(Verdict::Limited {
                retry_after: rate.window,
            });
        }
        self.maybe_sweep(now);
        let room = self.has_room(self.rates.len());
        let step = rate.interval() * cost;
        match self.rates.entry(key.clone()) {
            dashmap::Entry::Occupied(mut e) => {
                let tat = (*e.get()).max(now) + step;
                // Conformant when the new arrival time is at most a window
                // ahead: a burst of `limit`, then one per interval.
                let allowed_at = tat.checked_sub(rate.window).unwrap_or(now);
                if allowed_at > now {
                    return Ok(Verdict::Limited {
                        retry_after: allowed_at - now,
                    });
                }
                e.insert(tat);
            }
            dashmap::Entry::Vacant(e) => {
                if room {
                    e.insert(now + step);
                }
            }
        }
        Ok(Verdict::Admitted)
    }

    async fn claim_once(&self, key: &QuotaKey, ttl: Duration) -> Result<bool, StoreError> {
        let now = Instant::now();
        self.maybe_sweep(now);
        let room = self.has_room(self.rates.len());
        // Kept with the rates: an instant that the sweep drops once past.
        match self.rates.entry(key.clone()) {
            dashmap::Entry::Occupied(mut e) => {
                if *e.get() > now {
                    return Ok(false);
                }
                e.insert(now + ttl);
            }
            dashmap::Entry::Vacant(e) => {
                if room {
                    e.insert(now + ttl);
                }
            }
        }
        Ok(true)
    }

    async fn acquire(
        &self,
        key: &QuotaKey,
        member: &str,
        max: u32,
        lease: Duration,
    ) -> Result<Verdict, StoreError> {
        let now = Instant::now();
        self.maybe_sweep(now);
        let room = self.has_room(self.leases.len());
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        match self.leases.entry(key.clone()) {
            dashmap::Entry::Occupied(mut e) => {
                let members = e.get_mut();
                members.retain(|_, expiry| *expiry > now);
                if !members.contains_key(member) && members.len() >= max {
                    let first = members.values().min().copied().unwrap_or(now);
                    return Ok(Verdict::Limited {
                        retry_after: first.saturating_duration_since(now),
                    });
                }
                members.insert(member.into(), now + lease);
            }
            dashmap::Entry::Vacant(e) => {
                if max == 0 {
                    return Ok(Verdict::Limited { retry_after: lease });
                }
                if room {
                    e.insert(HashMap::from([(member.into(), now + lease)]));
                }
            }
        }
        Ok(Verdict::Admitted)
    }

    async fn renew(
        &self,
        key: &QuotaKey,
        members: &[Arc<str>],
        lease: Duration,
    ) -> Result<(), StoreError> {
        if members.is_empty() {
            return Ok(());
        }
        let expiry = Instant::now() + lease;
        let room = self.has_room(self.leases.len());
        match self.leases.entry(key.clone()) {
            dashmap::Entry::Occupied(mut e) => {
                let held = e.get_mut();
                for member in members {
                    held.insert(Box::from(&**member), expiry);
                }
            }
            dashmap::Entry::Vacant(e) => {
                if room {
                    e.insert(
                        members
                            .iter()
                            .map(|member| (Box::from(&**member), expiry))
                            .collect(),
                    );
                }
            }
        }
        Ok(())
    }

    async fn release(&self, key: &QuotaKey, member: &str) -> Result<(), StoreError> {
        if let Some(mut held) = self.leases.get_mut(key) {
            held.remove(member);
        }
        self.leases.remove_if(key, |_, held| held.is_empty());
        Ok(())
    }
}
