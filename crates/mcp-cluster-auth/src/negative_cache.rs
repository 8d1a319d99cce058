//! [`NegativeCache`]: introspection answers that refused a token, so that
//! the same token sent again costs no call.
//!
//! Kept apart from the cache of accepted tokens: made-up tokens, however
//! many, never push an accepted one out, and an accepted one never keeps a
//! refusal from being remembered. Bounded in count
//! (`negative_cache_entries`) and so in bytes: an entry is the SHA-256 of
//! the token (never the token), until when it holds, and why the token was
//! refused, about 100 bytes with the map's own. Each lives
//! `negative_cache_secs`; an entry is made only by an introspection call,
//! so at most `calls_per_second` × `negative_cache_secs` are live at once.

use dashmap::DashMap;

use crate::error::Rejection;

/// Refused answers by SHA-256 of the token. One per
/// [`crate::Authenticator`], written after each refusing introspection
/// answer, read before each introspection call.
#[derive(Debug)]
pub(crate) struct NegativeCache {
    /// Why each token was refused, and until when (Unix seconds) that is
    /// reused.
    entries: DashMap<[u8; 32], (u64, Rejection)>,
    /// Most entries held.
    max: usize,
}

impl NegativeCache {
    /// An empty cache holding at most `max` answers (0: none).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            entries: DashMap::new(),
            max,
        }
    }

    /// Why the token of `digest` was refused, when that holds at `now`.
    pub(crate) fn get(&self, digest: &[u8; 32], now: u64) -> Option<Rejection> {
        let (until, rejection) = *self.entries.get(digest)?;
        if now <= until {
            return Some(rejection);
        }
        self.entries.remove_if(digest, |_, (until, _)| now > *until);
        None
    }

    /// Remembers that the token of `digest` was refused for `rejection`,
    /// until `until`. When full, answers past their time go first; when
    /// none has, this one is not remembered (the next time the token costs
    /// a call, within the node's bounds).
    pub(crate) fn insert(&self, digest: [u8; 32], rejection: Rejection, until: u64, now: u64) {
        if self.max == 0 {
            return;
        }
        if self.entries.len() >= self.max && !self.entries.contains_key(&digest) {
            self.entries.retain(|_, (until, _)| *until >= now);
            if self.entries.len() >= self.max {
                return;
            }
        }
        self.entries.insert(digest, (until, rejection));
    }

    /// Answers held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u32) -> [u8; 32] {
        let mut d = [0u8; 32];
        d[..4].copy_from_slice(&n.to_be_bytes());
        d
    }

    #[test]
    fn a_refusal_is_reused_until_its_time_then_forgotten() {
        let cache = NegativeCache::new(10);
        cache.insert(digest(1), Rejection::Inactive, 110, 100);
        assert_eq!(cache.get(&digest(1), 105), Some(Rejection::Inactive));
        assert_eq!(cache.get(&digest(1), 110), Some(Rejection::Inactive));
        assert_eq!(cache.get(&digest(2), 105), None);
        assert_eq!(cache.get(&digest(1), 111), None);
        assert_eq!(cache.len(), 0, "an answer past its time goes when read");
    }

    #[test]
    fn the_cache_never_holds_more_than_its_bound() {
        let cache = NegativeCache::new(3);
        for n in 0..3 {
            cache.insert(digest(n), Rejection::Inactive, 110, 100);
        }
        // Full of live answers: a new one is not remembered.
        cache.insert(digest(9), Rejection::Audience, 110, 100);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&digest(9), 101), None);
        // Once they are past their time, room is made.
        cache.insert(digest(9), Rejection::Audience, 130, 120);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&digest(9), 121), Some(Rejection::Audience));
        // Nothing remembered with a bound of 0.
        let none = NegativeCache::new(0);
        none.insert(digest(1), Rejection::Inactive, 110, 100);
        assert_eq!(none.len(), 0);
    }
}
