//! Byte budgets of what a node keeps for its clients, each charged to the
//! client that owns it (its *owner*: the principal, else the client
//! address or its /64; see `proto-docs/limits.md`), never to a session:
//! a client opens as many sessions as it likes, and a share per session
//! would let one client take the whole node.
//!
//! - [`Ledger`]: what is kept after a client is done with it (closed
//!   streams, finished tasks), per node and per owner. Past an owner's
//!   share its own oldest items go; past the node's budget the oldest
//!   items of owners *above their floor* go. An owner at or under its
//!   floor loses nothing to anyone else: when only such owners are left,
//!   the node is [`Ledger::over_budget`] and refuses new work instead.
//! - [`InFlightBytes`]: what running work holds (request parameters held
//!   by running handlers, the events of open answer streams, the
//!   questions on them), per node and per owner. It drops nothing: new
//!   work that would go past an owner's share or the node's budget is
//!   refused before it runs.
//!
//! Both stores use the [`Ledger`]: the in-memory store for what it holds,
//! the Redis store for what this node wrote to Redis (each node answers
//! for its own writes, so Redis holds at most the nodes' budgets
//! together, with no shared counter on the request path). The runtime
//! holds the [`InFlightBytes`] of its node.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::time::Instant;

/// The owner of what a request whose client cannot be told apart keeps
/// (stdio; a trusted proxy's own request): one account, held to the
/// node's budget only (it has no share of its own: it may be many
/// clients), and whose floor, like any owner's, others cannot take.
pub const UNKNOWN_OWNER: &str = "-";

/// Bytes one kind of data may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteBudget {
    /// In all, on this node.
    pub per_node: u64,
    /// For one owner: past it, the owner's own oldest kept items go (for
    /// in-flight bytes: its new work is refused).
    pub per_client: u64,
    /// Bytes of one owner's kept items that no other owner can push out:
    /// past the node's budget, only owners above their floor lose their
    /// oldest items. Not used by [`InFlightBytes`], which drops nothing.
    pub floor: u64,
}

impl ByteBudget {
    /// No bound at all (for tests of other behaviour).
    pub const UNBOUNDED: Self = Self {
        per_node: u64::MAX,
        per_client: u64::MAX,
        floor: u64::MAX,
    };
}

#[derive(Debug)]
struct Item {
    owner: Arc<str>,
    /// What it is forgotten with ([`Ledger::forget_group`]): its session.
    group: Option<Arc<str>>,
    bytes: u64,
    seq: u64,
    /// When the store drops it by itself (its TTL): from then on the
    /// ledger forgets it, whether told or not.
    expires: Instant,
}

#[derive(Debug, Default)]
struct Owner {
    bytes: u64,
    /// The owner's items by age.
    order: BTreeSet<u64>,
    /// The sequence number it is listed under in `Books::above_floor`
    /// (its oldest item's when it was listed), while it is listed.
    listed: Option<u64>,
}

#[derive(Debug)]
struct Books<K> {
    budget: ByteBudget,
    items: HashMap<K, Item>,
    /// Every item by age: sequence number, key.
    order: BTreeMap<u64, K>,
    owners: HashMap<Arc<str>, Owner>,
    /// The owners above their floor, by their oldest item: whom the node's
    /// budget takes from, oldest first.
    above_floor: BTreeSet<(u64, Arc<str>)>,
    /// Items by group.
    groups: HashMap<Arc<str>, BTreeSet<u64>>,
    total: u64,
    next: u64,
}

/// The kept items of one kind, their bytes and their owners: decides which
/// to drop. Holds only keys and sizes, never the data.
#[derive(Debug)]
pub struct Ledger<K> {
    books: Mutex<Books<K>>,
    /// Its series of `mcp_retained_bytes` and
    /// `mcp_retention_evictions_total`, if it reports: looked up once (a
    /// lookup by label hashes the label and takes the family's lock).
    metrics: Option<(IntGauge, IntCounter)>,
}

impl<K: Hash + Eq + Clone> Ledger<K> {
    /// An empty ledger.
    pub fn new(budget: ByteBudget) -> Self {
        Self {
            books: Mutex::new(Books {
                budget,
                items: HashMap::new(),
                order: BTreeMap::new(),
                owners: HashMap::new(),
                above_floor: BTreeSet::new(),
                groups: HashMap::new(),
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
        let metrics = mcp_cluster_telemetry::metrics::metrics();
        self.metrics = Some((
            metrics.retained_bytes.with_label_values(&[held]),
            metrics.retention_evictions.with_label_values(&[dropped]),
        ));
        self
    }

    /// Publishes the bytes held (and `dropped` more drops).
    fn report(&self, total: u64, dropped: usize) {
        let Some((held, evicted)) = &self.metrics else {
            return;
        };
        held.set(i64::try_from(total).unwrap_or(i64::MAX));
        if dropped > 0 {
            evicted.inc_by(dropped as u64);
        }
    }

    /// The budget it keeps.
    pub fn budget(&self) -> ByteBudget {
        lock(&self.books).budget
    }

    /// Records `key`, `bytes` kept for `owner` (in `group`, if any) for at
    /// most `ttl` (an item already recorded is replaced and becomes the
    /// newest), and returns the items to drop so that the budgets hold
    /// again: the owner's own oldest down to its share, then, while the
    /// node is over its budget, the oldest item of whichever owner above
    /// its floor has the oldest. An owner at or under its floor loses
    /// nothing here to anyone else; when only such owners are left the
    /// node stays over its budget ([`Self::over_budget`]) until items
    /// expire or are forgotten. The new item itself is never dropped (it
    /// may still be on its way to its client): alone over a budget, it
    /// stays the only one of its owner. The caller drops every returned
    /// item, which the ledger has forgotten already.
    pub fn admit(
        &self,
        key: K,
        owner: &str,
        group: Option<&str>,
        bytes: u64,
        ttl: Duration,
    ) -> Vec<K> {
        let now = Instant::now();
        let mut books = lock(&self.books);
        books.remove(&key);
        books.forget_expired(now);
        let seq = books.next;
        books.next += 1;
        let owner: Arc<str> = books
            .owners
            .get_key_value(owner)
            .map_or_else(|| Arc::from(owner), |(k, _)| Arc::clone(k));
        let group: Option<Arc<str>> = group.map(|g| {
            books
                .groups
                .get_key_value(g)
                .map_or_else(|| Arc::from(g), |(k, _)| Arc::clone(k))
        });
        books.order.insert(seq, key.clone());
        let account = books.owners.entry(Arc::clone(&owner)).or_default();
        account.bytes += bytes;
        account.order.insert(seq);
        books.total += bytes;
        if let Some(group) = &group {
            books
                .groups
                .entry(Arc::clone(group))
                .or_default()
                .insert(seq);
        }
        books.items.insert(
            key,
            Item {
                owner: Arc::clone(&owner),
                group,
                bytes,
                seq,
                expires: now + ttl,
            },
        );
        books.relist(&owner);

        let mut dropped = Vec::new();
        // The owner's own oldest, down to its share (clients that cannot
        // be told apart have none).
        while &*owner != UNKNOWN_OWNER
            && let Some(account) = books.owners.get(&owner)
            && account.bytes > books.budget.per_client
            && let Some(&oldest) = account.order.first()
            && oldest != seq
        {
            let Some(k) = books.order.get(&oldest).cloned() else {
                break;
            };
            books.remove(&k);
            dropped.push(k);
        }
        // Then, down to the node's budget, the oldest of the owners above
        // their floor (an owner whose only item is the new one excepted).
        while books.total > books.budget.per_node {
            let Some(oldest) = books
                .above_floor
                .iter()
                .map(|(oldest, _)| *oldest)
                .find(|oldest| *oldest != seq)
            else {
                break;
            };
            let Some(k) = books.order.get(&oldest).cloned() else {
                break;
            };
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

    /// Forgets every item of `group` (its session ended, say).
    pub fn forget_group(&self, group: &str) {
        let mut books = lock(&self.books);
        let Some(seqs) = books.groups.get(group) else {
            return;
        };
        let keys: Vec<K> = seqs
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

    /// Whether the node holds more than its budget although nothing more
    /// can be dropped (every owner left is at or under its floor): new
    /// work that would add to it should be refused until it is not.
    pub fn over_budget(&self) -> bool {
        let mut books = lock(&self.books);
        books.forget_expired_now();
        books.total > books.budget.per_node
    }

    /// Bytes recorded in all.
    pub fn bytes(&self) -> u64 {
        let mut books = lock(&self.books);
        books.forget_expired_now();
        books.total
    }

    /// Bytes recorded for `owner`.
    pub fn bytes_of(&self, owner: &str) -> u64 {
        let mut books = lock(&self.books);
        books.forget_expired_now();
        books.owners.get(owner).map_or(0, |o| o.bytes)
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
    /// As [`Self::forget_expired`], reading the clock only when anything is
    /// kept (most requests ask an empty ledger whether it has room).
    fn forget_expired_now(&mut self) {
        if !self.order.is_empty() {
            self.forget_expired(Instant::now());
        }
    }

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

    /// Lists `owner` in `above_floor` under its oldest item while it holds
    /// more than the floor, and only then.
    fn relist(&mut self, owner: &Arc<str>) {
        let floor = self.budget.floor;
        let Some(account) = self.owners.get_mut(owner) else {
            return;
        };
        if let Some(listed) = account.listed.take() {
            self.above_floor.remove(&(listed, Arc::clone(owner)));
        }
        if account.bytes > floor
            && let Some(&oldest) = account.order.first()
        {
            account.listed = Some(oldest);
            self.above_floor.insert((oldest, Arc::clone(owner)));
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
        if let Some(group) = &item.group
            && let Some(seqs) = self.groups.get_mut(group)
        {
            seqs.remove(&item.seq);
            if seqs.is_empty() {
                self.groups.remove(group);
            }
        }
        if let Some(account) = self.owners.get_mut(&item.owner) {
            account.bytes -= item.bytes;
            account.order.remove(&item.seq);
        }
        self.relist(&item.owner);
        if self
            .owners
            .get(&item.owner)
            .is_some_and(|a| a.order.is_empty())
        {
            self.owners.remove(&item.owner);
        }
    }
}

/// Why new work was refused by [`InFlightBytes::try_hold`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HoldRefused {
    /// The owner holds its share already.
    #[error("the client holds its share of in-flight bytes")]
    Client,
    /// The node holds its budget already.
    #[error("the node holds its budget of in-flight bytes")]
    Node,
}

#[derive(Debug, Default)]
struct InFlightBooks {
    total: u64,
    owners: HashMap<Arc<str>, u64>,
}

/// The bytes a node's running work holds (request parameters held by
/// running handlers, the events of open answer streams and the questions
/// on them), per owner and in all, each held by a [`Hold`] that gives its
/// bytes back when dropped. New work asks first ([`Self::try_hold`]) and
/// is refused past an owner's share or the node's budget; bytes that work
/// already admitted goes on to make (its stream's events) are counted
/// ([`Hold::grow`]), never refused: the work that made them is answered.
#[derive(Debug)]
pub struct InFlightBytes {
    /// `per_node` and `per_client`; `floor` is not used.
    budget: ByteBudget,
    books: Mutex<InFlightBooks>,
    /// Its series `mcp_retained_bytes{kind="in_flight"}`, if it reports
    /// (every hold and release sets it).
    reporting: Option<IntGauge>,
}

impl InFlightBytes {
    /// An empty account within `budget`.
    pub fn new(budget: ByteBudget) -> Self {
        Self {
            budget,
            books: Mutex::new(InFlightBooks::default()),
            reporting: None,
        }
    }

    /// Reports its bytes as `mcp_retained_bytes{kind="in_flight"}`.
    #[must_use]
    pub fn reporting(mut self) -> Self {
        self.reporting = Some(
            mcp_cluster_telemetry::metrics::metrics()
                .retained_bytes
                .with_label_values(&["in_flight"]),
        );
        self
    }

    /// The budget it keeps.
    pub fn budget(&self) -> ByteBudget {
        self.budget
    }

    /// Holds `bytes` for `owner` (`None`: a client that cannot be told
    /// apart, counted against the node only) unless that takes the owner
    /// past its share or the node past its budget. An owner (or a node)
    /// holding nothing is always admitted, so that any one request can
    /// run.
    ///
    /// # Errors
    /// [`HoldRefused`]: nothing is held.
    pub fn try_hold(
        self: &Arc<Self>,
        owner: Option<&str>,
        bytes: u64,
    ) -> Result<Hold, HoldRefused> {
        let mut hold = self.empty_hold(owner);
        hold.try_grow(bytes)?;
        Ok(hold)
    }

    /// An empty hold for `owner`, to [`Hold::grow`] as its work makes
    /// bytes.
    pub fn empty_hold(self: &Arc<Self>, owner: Option<&str>) -> Hold {
        let owner = owner.map(|o| lock(&self.books).account(o));
        Hold {
            account: Arc::clone(self),
            owner,
            bytes: 0,
        }
    }

    /// Bytes held in all.
    pub fn bytes(&self) -> u64 {
        lock(&self.books).total
    }

    /// Bytes held for `owner`.
    pub fn bytes_of(&self, owner: &str) -> u64 {
        lock(&self.books).owners.get(owner).copied().unwrap_or(0)
    }

    /// Whether a hold of `own` bytes for `owner`, already counted, goes
    /// past a budget with `adding` bytes more: the owner's share, when the
    /// owner holds more than this hold, or the node's, when the node holds
    /// more than this hold (so that any one piece of work can run).
    fn refuses(
        &self,
        books: &InFlightBooks,
        owner: Option<&Arc<str>>,
        own: u64,
        adding: u64,
    ) -> Option<HoldRefused> {
        if let Some(owner) = owner {
            let held = books.owners.get(owner).copied().unwrap_or(0);
            if held > own && held.saturating_add(adding) > self.budget.per_client {
                return Some(HoldRefused::Client);
            }
        }
        (books.total > own && books.total.saturating_add(adding) > self.budget.per_node)
            .then_some(HoldRefused::Node)
    }

    /// Counts `bytes` more for `owner` in `books` and publishes the total.
    fn add(
        &self,
        mut books: std::sync::MutexGuard<'_, InFlightBooks>,
        owner: Option<&Arc<str>>,
        bytes: u64,
    ) {
        if let Some(owner) = owner
            && let Some(held) = books.owners.get_mut(owner)
        {
            *held += bytes;
        }
        books.total += bytes;
        let total = books.total;
        drop(books);
        self.report(total);
    }

    fn report(&self, total: u64) {
        if let Some(gauge) = &self.reporting {
            gauge.set(i64::try_from(total).unwrap_or(i64::MAX));
        }
    }
}

impl InFlightBooks {
    /// The key of `owner`'s account, made (holding nothing) if it has
    /// none, for one more holder (the count of holders lives in the
    /// `Arc`s: an account whose last hold goes is removed by [`Hold`]'s
    /// drop).
    fn account(&mut self, owner: &str) -> Arc<str> {
        if let Some((key, _)) = self.owners.get_key_value(owner) {
            return Arc::clone(key);
        }
        let key: Arc<str> = Arc::from(owner);
        self.owners.insert(Arc::clone(&key), 0);
        key
    }
}

/// Bytes held in an [`InFlightBytes`] account for one piece of running
/// work: given back when dropped.
#[derive(Debug)]
pub struct Hold {
    account: Arc<InFlightBytes>,
    owner: Option<Arc<str>>,
    bytes: u64,
}

impl Hold {
    /// Counts `bytes` more that the work made (never refused).
    pub fn grow(&mut self, bytes: u64) {
        self.bytes += bytes;
        let books = lock(&self.account.books);
        self.account.add(books, self.owner.as_ref(), bytes);
    }

    /// Counts `bytes` more unless that takes the owner past its share or
    /// the node past its budget (as [`InFlightBytes::try_hold`]: a hold
    /// that is all its owner holds always grows).
    ///
    /// # Errors
    /// [`HoldRefused`]: nothing more is counted.
    pub fn try_grow(&mut self, bytes: u64) -> Result<(), HoldRefused> {
        let books = lock(&self.account.books);
        if let Some(refused) = self
            .account
            .refuses(&books, self.owner.as_ref(), self.bytes, bytes)
        {
            return Err(refused);
        }
        self.bytes += bytes;
        self.account.add(books, self.owner.as_ref(), bytes);
        Ok(())
    }

    /// Whether this hold, already counted, would be refused as new work
    /// now: its owner past its share, or the node past its budget, with
    /// more than this hold counted.
    ///
    /// # Errors
    /// [`HoldRefused`].
    pub fn check(&self) -> Result<(), HoldRefused> {
        let books = lock(&self.account.books);
        match self
            .account
            .refuses(&books, self.owner.as_ref(), self.bytes, 0)
        {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    /// Moves up to `bytes` of this hold into a new hold of the same owner
    /// (a batch's body, shared out among its requests).
    #[must_use]
    pub fn split(&mut self, bytes: u64) -> Hold {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        let owner = self.owner.as_ref().map(|owner| {
            // Cloned under the lock, as every hold of an owner is made.
            let _books = lock(&self.account.books);
            Arc::clone(owner)
        });
        Hold {
            account: Arc::clone(&self.account),
            owner,
            bytes,
        }
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Who it is charged to (`None`: a client that cannot be told apart).
    pub fn owner(&self) -> Option<&Arc<str>> {
        self.owner.as_ref()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut books = lock(&self.account.books);
        books.total -= self.bytes.min(books.total);
        if let Some(owner) = self.owner.take() {
            if let Some(held) = books.owners.get_mut(&owner) {
                *held -= self.bytes.min(*held);
            }
            // The map's key and this one: no other hold of the owner is
            // left (holds are made under this lock), and it holds nothing.
            if Arc::strong_count(&owner) == 2 && books.owners.get(&owner) == Some(&0) {
                books.owners.remove(&owner);
            }
        }
        let total = books.total;
        drop(books);
        self.account.report(total);
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

    fn budget(per_node: u64, per_client: u64, floor: u64) -> ByteBudget {
        ByteBudget {
            per_node,
            per_client,
            floor,
        }
    }

    #[test]
    fn an_owner_over_its_share_loses_its_own_oldest() {
        let ledger = Ledger::new(budget(100, 30, 10));
        assert!(ledger.admit("b1", "b", None, 10, TTL).is_empty());
        assert!(ledger.admit("a1", "a", None, 10, TTL).is_empty());
        assert!(ledger.admit("a2", "a", None, 10, TTL).is_empty());
        assert!(ledger.admit("a3", "a", None, 10, TTL).is_empty());
        assert_eq!(ledger.admit("a4", "a", None, 10, TTL), vec!["a1"]);
        assert_eq!(ledger.bytes(), 40);
        // An item alone over the share stays, alone.
        assert_eq!(
            ledger.admit("a5", "a", None, 40, TTL),
            vec!["a2", "a3", "a4"]
        );
        assert_eq!(ledger.len(), 2);
        assert_eq!(ledger.bytes_of("a"), 40);
    }

    #[test]
    fn unknown_clients_have_no_share_but_the_nodes() {
        let ledger = Ledger::new(budget(100, 20, 10));
        for key in ["u1", "u2", "u3"] {
            assert!(ledger.admit(key, UNKNOWN_OWNER, None, 10, TTL).is_empty());
        }
        assert_eq!(ledger.bytes_of(UNKNOWN_OWNER), 30);
        ledger.admit("a1", "a", None, 10, TTL);
        // Past the node's budget, their oldest go like anyone's above a floor.
        assert_eq!(ledger.admit("u4", UNKNOWN_OWNER, None, 70, TTL), vec!["u1"]);
        assert_eq!(ledger.bytes_of(UNKNOWN_OWNER), 90);
        assert_eq!(ledger.bytes_of("a"), 10);
    }

    #[test]
    fn the_node_over_its_budget_takes_only_from_owners_above_their_floor() {
        let ledger = Ledger::new(budget(40, 30, 10));
        // The victim holds its floor, and holds it first.
        ledger.admit("v1", "victim", None, 10, TTL);
        // Attackers, each within its share, fill the node.
        ledger.admit("a1", "a", None, 15, TTL);
        ledger.admit("b1", "b", None, 15, TTL);
        assert!(!ledger.over_budget());
        // Past the budget, the oldest above its floor goes: a's, not the
        // victim's older one.
        assert_eq!(ledger.admit("c1", "c", None, 15, TTL), vec!["a1"]);
        assert_eq!(ledger.admit("a2", "a", None, 15, TTL), vec!["b1"]);
        assert_eq!(ledger.bytes_of("victim"), 10);
        assert!(ledger.admit("v2", "victim", None, 0, TTL).is_empty());
        assert!(!ledger.over_budget());
    }

    #[test]
    fn owners_at_their_floor_keep_everything_and_the_node_says_it_is_full() {
        let ledger = Ledger::new(budget(30, 30, 10));
        ledger.admit("a1", "a", None, 10, TTL);
        ledger.admit("b1", "b", None, 10, TTL);
        ledger.admit("c1", "c", None, 10, TTL);
        // d is above its floor, but its only item is the new one: kept.
        assert!(ledger.admit("d1", "d", None, 15, TTL).is_empty());
        assert!(ledger.over_budget());
        assert_eq!(ledger.bytes(), 45);
        // d's next item makes d's older one fair game.
        assert_eq!(ledger.admit("d2", "d", None, 5, TTL), vec!["d1"]);
        assert_eq!(ledger.bytes(), 35);
        assert!(ledger.over_budget());
        ledger.forget("c1");
        assert_eq!(ledger.bytes(), 25);
        assert!(!ledger.over_budget());
    }

    #[test]
    fn a_group_is_forgotten_whole_and_replacing_counts_the_new_size() {
        let ledger = Ledger::new(budget(100, 100, 10));
        ledger.admit("s1", "a", Some("session-1"), 10, TTL);
        ledger.admit("s2", "a", Some("session-1"), 10, TTL);
        ledger.admit("t1", "a", Some("session-2"), 10, TTL);
        ledger.forget_group("session-1");
        assert_eq!(ledger.bytes(), 10);
        assert_eq!(ledger.len(), 1);
        assert!(
            ledger
                .admit("t1", "a", Some("session-2"), 20, TTL)
                .is_empty()
        );
        assert_eq!(ledger.bytes(), 20);
        ledger.forget_group("session-2");
        assert!(ledger.is_empty());
        assert_eq!(ledger.bytes_of("a"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn items_past_their_ttl_are_forgotten() {
        let ledger = Ledger::new(budget(30, 30, 0));
        ledger.admit("a1", "a", None, 20, Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(ledger.bytes(), 0);
        assert!(ledger.admit("b1", "b", None, 20, TTL).is_empty());
    }

    #[test]
    fn in_flight_bytes_refuse_past_a_share_and_a_budget_and_come_back_when_dropped() {
        let account = Arc::new(InFlightBytes::new(budget(100, 40, 0)));
        // Alone, anything is admitted.
        let big = account.try_hold(Some("a"), 60).unwrap();
        assert_eq!(
            account.try_hold(Some("a"), 1).unwrap_err(),
            HoldRefused::Client
        );
        let b = account.try_hold(Some("b"), 30).unwrap();
        assert_eq!(
            account.try_hold(Some("c"), 20).unwrap_err(),
            HoldRefused::Node
        );
        // Unknown clients count against the node only.
        let unknown = account.try_hold(None, 10).unwrap();
        assert_eq!(account.bytes(), 100);
        drop(big);
        assert_eq!(account.bytes_of("a"), 0);
        let mut stream = account.empty_hold(Some("a"));
        stream.grow(70);
        assert_eq!(account.bytes_of("a"), 70);
        assert_eq!(account.bytes(), 110);
        drop((stream, b, unknown));
        assert_eq!(account.bytes(), 0);
        assert!(lock(&account.books).owners.is_empty());
    }

    #[test]
    fn a_body_read_in_chunks_grows_until_its_owner_holds_its_share() {
        let account = Arc::new(InFlightBytes::new(budget(100, 40, 0)));
        // Alone, a body grows past the share.
        let mut alone = account.empty_hold(Some("a"));
        alone.try_grow(30).unwrap();
        alone.try_grow(30).unwrap();
        assert!(alone.check().is_ok(), "all the owner holds");
        let mut second = account.empty_hold(Some("a"));
        assert_eq!(second.try_grow(1).unwrap_err(), HoldRefused::Client);
        second.grow(5);
        assert_eq!(second.check().unwrap_err(), HoldRefused::Client);
        drop(alone);
        assert!(second.check().is_ok());
        // A batch's body shared out: the parts add up to the body.
        let mut body = account.try_hold(Some("b"), 30).unwrap();
        let part = body.split(20);
        assert_eq!((part.bytes(), body.bytes()), (20, 10));
        assert_eq!(account.bytes_of("b"), 30);
        drop(body);
        assert_eq!(account.bytes_of("b"), 20);
        drop((part, second));
        assert_eq!(account.bytes(), 0);
        assert!(lock(&account.books).owners.is_empty());
    }
}
