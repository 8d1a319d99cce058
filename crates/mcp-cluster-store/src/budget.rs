//! Byte budgets of what a node keeps for its clients after they are done
//! with it (closed streams, finished tasks): the [`Ledger`] counts the bytes
//! of each kept item, per node and per client, and names the items to drop,
//! oldest first, when a budget is exceeded.
//!
//! Both stores use it: the in-memory store for what it holds, the Redis
//! store for what this node wrote to Redis (each node answers for its own
//! writes, so Redis holds at most the nodes' budgets together, with no
//! shared counter on the request path).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Bytes one kind of kept data may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteBudget {
    /// In all, on this node.
    pub per_node: u64,
    /// For one client (a principal, an address, or a session, as each kind
    /// documents).
    pub per_client: u64,
}

impl ByteBudget {
    /// No bound at all (for tests of other behaviour).
    pub const UNBOUNDED: Self = Self {
        per_node: u64::MAX,
        per_client: u64::MAX,
    };
}

#[derive(Debug)]
struct Item {
    client: Arc<str>,
    bytes: u64,
    seq: u64,
    /// When the store drops it by itself (its TTL): from then on the
    /// ledger forgets it, whether told or not.
    expires: Instant,
}

#[derive(Debug, Default)]
struct Client {
    bytes: u64,
    /// The client's items by age.
    order: BTreeSet<u64>,
}

#[derive(Debug)]
struct Books<K> {
    items: HashMap<K, Item>,
    /// Every item by age: sequence number, key.
    order: BTreeMap<u64, K>,
    clients: HashMap<Arc<str>, Client>,
    total: u64,
    next: u64,
}

/// The kept items of one kind, their bytes and their owners: decides which
/// to drop. Holds only keys and sizes, never the data.
#[derive(Debug)]
pub struct Ledger<K> {
    budget: ByteBudget,
    books: Mutex<Books<K>>,
    /// The `kind` labels of `mcp_retained_bytes` and
    /// `mcp_retention_evictions_total` it reports under, if any.
    metrics: Option<(&'static str, &'static str)>,
}

impl<K: Hash + Eq + Clone> Ledger<K> {
    /// An empty ledger.
    pub fn new(budget: ByteBudget) -> Self {
        Self {
            budget,
            books: Mutex::new(Books {
                items: HashMap::new(),
                order: BTreeMap::new(),
                clients: HashMap::new(),
                total: 0,
                next: 0,
            }),
            metrics: None,
        }
    }

    /// Reports its bytes as `mcp_retained_bytes{kind=held}` and its drops
    /// as `mcp_retention_evictions_total{kind=dropped}`, as they change.
    #[must_use]
    pub fn reporting(mut self, held: &'static str, dropped: &'static str) -> Self {
        self.metrics = Some((held, dropped));
        self
    }

    /// Publishes the bytes held (and `dropped` more drops).
    fn report(&self, total: u64, dropped: usize) {
        let Some((held, evicted)) = self.metrics else {
            return;
        };
        let metrics = mcp_cluster_telemetry::metrics::metrics();
        metrics
            .retained_bytes
            .with_label_values(&[held])
            .set(i64::try_from(total).unwrap_or(i64::MAX));
        if dropped > 0 {
            metrics
                .retention_evictions
                .with_label_values(&[evicted])
                .inc_by(dropped as u64);
        }
    }

    /// The budget it keeps.
    pub fn budget(&self) -> ByteBudget {
        self.budget
    }

    /// Records `key`, `bytes` kept for `client` for at most `ttl` (an item already recorded
    /// is replaced and becomes the newest), and returns the items to drop
    /// so that both budgets hold again: the client's oldest first, then the
    /// node's oldest. The new item itself is never dropped (it may still be
    /// on its way to its client): alone over a budget, it stays the only
    /// one of its client. The caller drops every returned item, which the
    /// ledger has forgotten already.
    pub fn admit(&self, key: K, client: &str, bytes: u64, ttl: Duration) -> Vec<K> {
        let now = Instant::now();
        let mut books = lock(&self.books);
        books.remove(&key);
        books.forget_expired(now);
        let seq = books.next;
        books.next += 1;
        let client: Arc<str> = books
            .clients
            .get_key_value(client)
            .map_or_else(|| Arc::from(client), |(k, _)| Arc::clone(k));
        books.order.insert(seq, key.clone());
        let account = books.clients.entry(Arc::clone(&client)).or_default();
        account.bytes += bytes;
        account.order.insert(seq);
        books.total += bytes;
        books.items.insert(
            key,
            Item {
                client: Arc::clone(&client),
                bytes,
                seq,
                expires: now + ttl,
            },
        );

        let mut dropped = Vec::new();
        // The client's own oldest, down to its share.
        while let Some(account) = books.clients.get(&client)
            && account.bytes > self.budget.per_client
            && let Some(&oldest) = account.order.first()
            && oldest != seq
        {
            let Some(k) = books.order.get(&oldest).cloned() else {
                break;
            };
            books.remove(&k);
            dropped.push(k);
        }
        // Then anyone's oldest, down to the node's budget.
        while books.total > self.budget.per_node {
            let Some((&oldest, k)) = books.order.first_key_value() else {
                break;
            };
            if oldest == seq {
                break;
            }
            let k = k.clone();
            books.remove(&k);
            dropped.push(k);
        }
        let total = books.total;
        drop(books);
        self.report(total, dropped.len());
        dropped
    }

    /// Forgets `key` (dropped for another reason: expired, deleted).
    pub fn forget<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut books = lock(&self.books);
        books.remove(key);
        let total = books.total;
        drop(books);
        self.report(total, 0);
    }

    /// Forgets every item of `client` (its session ended, say).
    pub fn forget_client(&self, client: &str) {
        let mut books = lock(&self.books);
        let Some(account) = books.clients.get(client) else {
            return;
        };
        let keys: Vec<K> = account
            .order
            .iter()
            .filter_map(|seq| books.order.get(seq).cloned())
            .collect();
        for k in keys {
            books.remove(&k);
        }
        let total = books.total;
        drop(books);
        self.report(total, 0);
    }

    /// Bytes recorded in all.
    pub fn bytes(&self) -> u64 {
        let mut books = lock(&self.books);
        books.forget_expired(Instant::now());
        books.total
    }

    /// Items recorded.
    pub fn len(&self) -> usize {
        lock(&self.books).items.len()
    }

    /// Whether none is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + Clone> Books<K> {
    /// Forgets the oldest items while they are past their TTL (items of one
    /// kind share a TTL, so they expire oldest first).
    fn forget_expired(&mut self, now: Instant) {
        while let Some((_, k)) = self.order.first_key_value()
            && self.items.get(k).is_some_and(|i| i.expires <= now)
        {
            let k = k.clone();
            self.remove(&k);
        }
    }

    fn remove<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(item) = self.items.remove(key) else {
            return;
        };
        self.order.remove(&item.seq);
        self.total -= item.bytes;
        if let Some(account) = self.clients.get_mut(&item.client) {
            account.bytes -= item.bytes;
            account.order.remove(&item.seq);
            if account.order.is_empty() {
                self.clients.remove(&item.client);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every mutation above completes before the guard is dropped; a panic
    // elsewhere leaves consistent books.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn a_client_over_its_share_loses_its_own_oldest() {
        let ledger = Ledger::new(ByteBudget {
            per_node: 100,
            per_client: 30,
        });
        assert!(ledger.admit("b1", "b", 10, TTL).is_empty());
        assert!(ledger.admit("a1", "a", 10, TTL).is_empty());
        assert!(ledger.admit("a2", "a", 10, TTL).is_empty());
        assert!(ledger.admit("a3", "a", 10, TTL).is_empty());
        assert_eq!(ledger.admit("a4", "a", 10, TTL), vec!["a1"]);
        assert_eq!(ledger.bytes(), 40);
        // An item alone over the share stays, alone.
        assert_eq!(ledger.admit("a5", "a", 40, TTL), vec!["a2", "a3", "a4"]);
        assert_eq!(ledger.len(), 2);
    }

    #[test]
    fn the_node_over_its_budget_loses_the_oldest_of_anyone() {
        let ledger = Ledger::new(ByteBudget {
            per_node: 30,
            per_client: 30,
        });
        ledger.admit("a1", "a", 10, TTL);
        ledger.admit("b1", "b", 10, TTL);
        ledger.admit("c1", "c", 10, TTL);
        assert_eq!(ledger.admit("d1", "d", 15, TTL), vec!["a1", "b1"]);
        ledger.forget("c1");
        assert_eq!(ledger.bytes(), 15);
        ledger.admit("e1", "e", 5, TTL);
        ledger.admit("e2", "e", 5, TTL);
        ledger.forget_client("e");
        assert_eq!(ledger.bytes(), 15);
        // Replacing an item counts its new size only.
        assert!(ledger.admit("d1", "d", 20, TTL).is_empty());
        assert_eq!(ledger.bytes(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn items_past_their_ttl_are_forgotten() {
        let ledger = Ledger::new(ByteBudget {
            per_node: 30,
            per_client: 30,
        });
        ledger.admit("a1", "a", 20, Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(ledger.bytes(), 0);
        assert!(ledger.admit("b1", "b", 20, TTL).is_empty());
    }
}
