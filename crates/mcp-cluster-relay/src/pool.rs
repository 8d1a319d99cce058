//! [`Pool`]: the idle children of 2026-07-28 requests, which have no
//! session to live in. A child is initialized once and then serves one
//! request at a time, for one principal and one set of client capabilities
//! only (its [`PoolKey`]): what a server keeps between requests never
//! crosses from one principal to another.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// Which requests a pooled child may serve: those of one principal (none
/// without authorization) whose client declares the same capabilities (the
/// child was initialized with them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    pub(crate) principal: Option<String>,
    /// The capabilities as canonical JSON text.
    pub(crate) capabilities: String,
}

/// Idle children by key, the oldest first: at most `per_key` per key, each
/// for at most `idle_for`.
#[derive(Debug)]
pub(crate) struct Pool<T> {
    idle: HashMap<PoolKey, Vec<(T, Instant)>>,
    per_key: usize,
    idle_for: Duration,
}

impl<T> Pool<T> {
    pub(crate) fn new(per_key: usize, idle_for: Duration) -> Self {
        Self {
            idle: HashMap::new(),
            per_key,
            idle_for,
        }
    }

    /// The most recently idle child of `key` that `alive` accepts; those it
    /// refuses come back in `dead` (to be counted out).
    pub(crate) fn take(
        &mut self,
        key: &PoolKey,
        alive: impl Fn(&T) -> bool,
        dead: &mut Vec<T>,
    ) -> Option<T> {
        let children = self.idle.get_mut(key)?;
        let mut found = None;
        while let Some((child, _)) = children.pop() {
            if alive(&child) {
                found = Some(child);
                break;
            }
            dead.push(child);
        }
        if children.is_empty() {
            self.idle.remove(key);
        }
        found
    }

    /// Keeps `child` idle under `key`; the child back when the key holds
    /// its most idle already (to be ended).
    pub(crate) fn put(&mut self, key: PoolKey, child: T, now: Instant) -> Option<T> {
        let children = self.idle.entry(key).or_default();
        if children.len() >= self.per_key {
            return Some(child);
        }
        children.push((child, now));
        None
    }

    /// Takes out the children idle for `idle_for` or more at `now`, and
    /// those `alive` refuses.
    pub(crate) fn expired(
        &mut self,
        now: Instant,
        alive: impl Fn(&T) -> bool,
    ) -> Vec<(PoolKey, T)> {
        let mut out = Vec::new();
        let idle_for = self.idle_for;
        self.idle.retain(|key, children| {
            let (keep, gone): (Vec<_>, Vec<_>) = std::mem::take(children)
                .into_iter()
                .partition(|(child, since)| now.duration_since(*since) < idle_for && alive(child));
            out.extend(gone.into_iter().map(|(child, _)| (key.clone(), child)));
            *children = keep;
            !children.is_empty()
        });
        out
    }

    /// Takes out every idle child.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.idle
            .drain()
            .flat_map(|(_, children)| children.into_iter().map(|(child, _)| child))
            .collect()
    }

    /// Idle children.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.idle.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(60);

    fn pool() -> Pool<u32> {
        Pool::new(2, IDLE)
    }

    fn key(principal: &str) -> PoolKey {
        PoolKey {
            principal: Some(principal.to_owned()),
            capabilities: "{}".to_owned(),
        }
    }

    #[test]
    fn a_child_serves_only_its_own_key_and_the_pool_keeps_two_per_key() {
        let mut pool = pool();
        let now = Instant::now();
        assert_eq!(pool.put(key("alice"), 1, now), None);
        assert_eq!(pool.put(key("alice"), 2, now), None);
        assert_eq!(pool.put(key("alice"), 3, now), Some(3), "two per key");
        let mut dead = Vec::new();
        assert_eq!(pool.take(&key("bob"), |_| true, &mut dead), None);
        let other_caps = PoolKey {
            capabilities: r#"{"roots":{}}"#.to_owned(),
            ..key("alice")
        };
        assert_eq!(pool.take(&other_caps, |_| true, &mut dead), None);
        assert_eq!(pool.take(&key("alice"), |c| *c != 2, &mut dead), Some(1));
        assert_eq!(dead, [2], "a dead child is handed back to be counted out");
        assert_eq!(pool.len(), 0);
    }

    #[test]
    fn idle_children_expire_and_all_drain() {
        let mut pool = pool();
        let start = Instant::now();
        pool.put(key("alice"), 1, start);
        pool.put(key("bob"), 2, start + IDLE / 2);
        let expired = pool.expired(start + IDLE, |_| true);
        assert_eq!(expired, [(key("alice"), 1)]);
        assert_eq!(pool.len(), 1);
        assert_eq!(pool.drain(), [2]);
        assert_eq!(pool.len(), 0);
    }
}
