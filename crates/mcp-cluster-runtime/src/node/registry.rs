//! The registry of both eras: what this node holds open for its clients
//! and hands the server's events to. The session era registers its session
//! actors (`Runtime`'s sessions), the 2026-07-28 era its
//! `subscriptions/listen` streams; both are this one type.
//!
//! - **Bounded**: a place is reserved before the member is made (the
//!   session stored, the stream's quota slot taken), so concurrent
//!   admissions cannot overshoot the node's maximum.
//! - **Left on stop**: a member takes itself out when it ends (a session
//!   actor in `stopped`, a listen stream when its client goes), so an ended
//!   member never counts against the maximum.
//! - **One fan-out**: an event reaches every member; one that can take no
//!   more (a client that does not keep up) leaves then and there.
//! - **Swept**: the [`Sweeper`] only backs up members that went without
//!   leaving (their thread died).
//!
//! Owner: [`crate::runtime::Runtime`] holds one registry per era and the
//! sweeper. Stop path: dropped with the runtime; the sweeper stops with
//! the actix system.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::*;
use dashmap::DashMap;

/// How often the registries are swept for members that went without
/// taking themselves out.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// What a registry holds.
pub(crate) trait Member: Send + Sync + 'static {
    /// What the node hands its members.
    type Event;

    /// Hands it an event, for it to decide whether its client hears it.
    /// `false`: it can take no more and leaves the registry.
    fn hear(&self, event: &Self::Event) -> bool;

    /// `false` once it ended without leaving; the sweep takes it out.
    fn is_alive(&self) -> bool;
}

/// A node's members of one kind, under a maximum.
#[derive(Debug)]
pub(crate) struct Registry<K: Eq + Hash, M> {
    /// What the members are, for logs: "sessions", "listen streams".
    what: &'static str,
    max: usize,
    members: DashMap<K, M>,
    /// Members plus places reserved and not yet filled or given back: one
    /// count, so that a member being filled is never counted twice (a
    /// spurious refusal at the maximum) nor not at all (an overshoot).
    occupied: AtomicUsize,
}

impl<K, M> Registry<K, M>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    M: Member,
{
    pub(crate) fn new(what: &'static str, max: usize) -> Self {
        Self {
            what,
            max,
            members: DashMap::new(),
            occupied: AtomicUsize::new(0),
        }
    }

    /// Members registered (reservations not counted).
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// A place for one more member, held until it is filled or dropped;
    /// `None` when the members and the places already reserved reach the
    /// maximum.
    pub(crate) fn reserve(&self) -> Option<Reservation<'_, K, M>> {
        self.occupied
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Reservation {
                registry: self,
                filled: false,
            })
    }

    /// Counts a member out.
    fn left(&self, member: Option<M>) -> Option<M> {
        if member.is_some() {
            self.occupied.fetch_sub(1, Ordering::AcqRel);
        }
        member
    }

    /// The member under `key`.
    pub(crate) fn get(&self, key: &K) -> Option<M>
    where
        M: Clone,
    {
        self.members.get(key).map(|m| m.clone())
    }

    /// Whether a live member is under `key`.
    pub(crate) fn holds_live(&self, key: &K) -> bool {
        self.members.get(key).is_some_and(|m| m.is_alive())
    }

    /// The live member under `key`, or a new one from `make` in its place
    /// (`true`): a member the node holds again, outside the maximum (a
    /// session rehydrated from the store must be served).
    pub(crate) fn get_or_replace(&self, key: K, make: impl FnOnce() -> M) -> (M, bool)
    where
        M: Clone,
    {
        match self.members.entry(key) {
            dashmap::Entry::Occupied(e) if e.get().is_alive() => (e.get().clone(), false),
            dashmap::Entry::Occupied(mut dead) => {
                let member = make();
                dead.insert(member.clone());
                (member, true)
            }
            dashmap::Entry::Vacant(vacant) => {
                let member = make();
                vacant.insert(member.clone());
                self.occupied.fetch_add(1, Ordering::AcqRel);
                (member, true)
            }
        }
    }

    /// Every member now.
    pub(crate) fn all(&self) -> Vec<M>
    where
        M: Clone,
    {
        self.members.iter().map(|m| m.value().clone()).collect()
    }

    /// Puts `member` under `key` in place of the one there (returned): a
    /// member the node holds again, outside the maximum, as in
    /// [`Self::get_or_replace`].
    pub(crate) fn replace(&self, key: K, member: M) -> Option<M> {
        match self.members.entry(key) {
            dashmap::Entry::Occupied(mut e) => Some(e.insert(member)),
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(member);
                self.occupied.fetch_add(1, Ordering::AcqRel);
                None
            }
        }
    }

    /// Puts `member` under `key` unless one is there (`false`): a member
    /// the node holds again, outside the maximum, as in
    /// [`Self::get_or_replace`].
    pub(crate) fn insert_if_vacant(&self, key: K, member: M) -> bool {
        match self.members.entry(key) {
            dashmap::Entry::Occupied(_) => false,
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(member);
                self.occupied.fetch_add(1, Ordering::AcqRel);
                true
            }
        }
    }

    /// Takes the member under `key` out.
    pub(crate) fn remove(&self, key: &K) -> Option<M> {
        self.left(self.members.remove(key).map(|(_, m)| m))
    }

    /// Takes the member under `key` out if it is the one `which` accepts
    /// (not one that already took its place).
    pub(crate) fn remove_if(&self, key: &K, which: impl FnOnce(&M) -> bool) -> Option<M> {
        self.left(self.members.remove_if(key, |_, m| which(m)).map(|(_, m)| m))
    }

    /// Hands `event` to every member; those that can take no more leave.
    pub(crate) fn fan_out(&self, event: &M::Event) {
        let mut full = Vec::new();
        for entry in &self.members {
            if !entry.value().hear(event) {
                full.push(entry.key().clone());
            }
        }
        for key in full {
            tracing::debug!(
                what = self.what,
                "A member that did not keep up left the registry."
            );
            self.remove(&key);
        }
    }
}

/// A place in a registry, counted against its maximum until filled or
/// dropped.
#[derive(Debug)]
pub(crate) struct Reservation<'a, K: Eq + Hash, M> {
    registry: &'a Registry<K, M>,
    filled: bool,
}

impl<K, M> Reservation<'_, K, M>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    M: Member,
{
    /// Registers the member in the reserved place.
    pub(crate) fn fill(mut self, key: K, member: M) {
        self.filled = true;
        // The place is the member's now; one replaced under the same key
        // gives its place back.
        if self.registry.members.insert(key, member).is_some() {
            self.registry.occupied.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<K: Eq + Hash, M> Drop for Reservation<'_, K, M> {
    fn drop(&mut self) {
        if !self.filled {
            self.registry.occupied.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Room for members a registry keeps however few it holds: below four
/// times its members and this, it gives no room back.
const SHRINK_FLOOR: usize = 256;

/// A registry the [`Sweeper`] looks after.
pub(crate) trait Swept: Send + Sync + std::fmt::Debug {
    /// Takes out the members that ended without leaving; how many.
    fn sweep(&self) -> usize;

    /// What the members are.
    fn what(&self) -> &'static str;
}

impl<K, M> Swept for Registry<K, M>
where
    K: Eq + Hash + Clone + Send + Sync + std::fmt::Debug + 'static,
    M: Member + std::fmt::Debug,
{
    fn sweep(&self) -> usize {
        let mut swept = 0;
        self.members.retain(|_, m| {
            let alive = m.is_alive();
            swept += usize::from(!alive);
            alive
        });
        self.occupied.fetch_sub(swept, Ordering::AcqRel);
        // A table keeps the room its busiest moment needed: after most
        // members left (idle sessions passivated, a burst of streams
        // over), the room goes back too.
        if self.members.capacity() > 4 * (self.members.len() + SHRINK_FLOOR) {
            self.members.shrink_to_fit();
        }
        swept
    }

    fn what(&self) -> &'static str {
        self.what
    }
}

/// Sweeps the node's registries now and then: the backstop for members
/// that could not take themselves out.
#[derive(Debug)]
pub(crate) struct Sweeper {
    registries: Vec<Arc<dyn Swept>>,
}

impl Sweeper {
    pub(crate) fn new(registries: Vec<Arc<dyn Swept>>) -> Self {
        Self { registries }
    }
}

impl Actor for Sweeper {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(SWEEP_INTERVAL, |act, _| {
            for registry in &act.registries {
                let swept = registry.sweep();
                if swept > 0 {
                    tracing::debug!(
                        swept,
                        what = registry.what(),
                        "Ended members removed from the registry."
                    );
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A member that hears up to `room` events, and can be ended.
    #[derive(Debug, Clone)]
    struct Probe {
        heard: Arc<AtomicUsize>,
        room: usize,
        alive: Arc<AtomicBool>,
    }

    impl Probe {
        fn new(room: usize) -> Self {
            Self {
                heard: Arc::default(),
                room,
                alive: Arc::new(AtomicBool::new(true)),
            }
        }
    }

    impl Member for Probe {
        type Event = u32;

        fn hear(&self, _event: &u32) -> bool {
            self.heard.fetch_add(1, Ordering::Relaxed) < self.room
        }

        fn is_alive(&self) -> bool {
            self.alive.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn the_sweep_gives_back_the_room_of_members_that_left() {
        let registry = Registry::<u32, Probe>::new("probes", 100_000);
        for key in 0..20_000 {
            registry.reserve().unwrap().fill(key, Probe::new(0));
        }
        let busiest = registry.members.capacity();
        assert!(busiest >= 20_000);
        for key in 0..19_990 {
            registry.remove(&key);
        }
        assert!(
            registry.members.capacity() > busiest / 2,
            "removal keeps the room"
        );
        assert_eq!(registry.sweep(), 0);
        assert!(
            registry.members.capacity() < busiest / 4,
            "{} of {busiest}",
            registry.members.capacity()
        );
        assert_eq!(registry.len(), 10);
        assert!(registry.get(&19_995).is_some(), "members kept");
        // A registry near its busiest keeps its room.
        let room = registry.members.capacity();
        assert_eq!(registry.sweep(), 0);
        assert_eq!(registry.members.capacity(), room);
    }

    #[test]
    fn reservations_count_against_the_maximum_until_filled_or_dropped() {
        let registry = Registry::<u32, Probe>::new("probes", 2);
        let first = registry.reserve().unwrap();
        let second = registry.reserve().unwrap();
        assert!(registry.reserve().is_none(), "two places held");
        drop(second);
        first.fill(1, Probe::new(9));
        assert_eq!(registry.len(), 1);
        registry.reserve().unwrap().fill(2, Probe::new(9));
        assert!(registry.reserve().is_none(), "two members");
        assert!(registry.remove(&1).is_some());
        assert!(registry.reserve().is_some(), "a member left");
        // A filled place counts once: with one member of two, exactly one
        // more place.
        let one = registry.reserve().unwrap();
        assert!(registry.reserve().is_none());
        one.fill(3, Probe::new(9));
        assert!(registry.reserve().is_none(), "full");
        assert!(registry.remove_if(&3, |_| true).is_some());
        registry.get_or_replace(4, || Probe::new(9));
        assert!(registry.reserve().is_none(), "a member held again counts");
    }

    #[test]
    fn a_member_that_takes_no_more_leaves_at_the_fan_out_and_the_ended_at_the_sweep() {
        let registry = Registry::<u32, Probe>::new("probes", 10);
        let slow = Probe::new(1);
        let ended = Probe::new(9);
        registry.reserve().unwrap().fill(1, slow.clone());
        registry.reserve().unwrap().fill(2, ended.clone());
        registry.fan_out(&7);
        assert_eq!(registry.len(), 2);
        registry.fan_out(&7);
        assert!(registry.get(&1).is_none(), "full: left");
        assert_eq!(slow.heard.load(Ordering::Relaxed), 2);
        assert_eq!(ended.heard.load(Ordering::Relaxed), 2);

        ended.alive.store(false, Ordering::Relaxed);
        assert_eq!(registry.sweep(), 1);
        assert_eq!(registry.len(), 0);
    }

    #[test]
    fn a_dead_member_is_replaced_and_a_live_one_kept() {
        let registry = Registry::<u32, Probe>::new("probes", 1);
        let live = Probe::new(9);
        registry.reserve().unwrap().fill(1, live.clone());
        let (kept, made) = registry.get_or_replace(1, || Probe::new(0));
        assert!(!made);
        assert!(Arc::ptr_eq(&kept.alive, &live.alive));
        live.alive.store(false, Ordering::Relaxed);
        let (_, made) = registry.get_or_replace(1, || Probe::new(0));
        assert!(made);
        // Only the member a predicate names is removed.
        assert!(registry.remove_if(&1, |m| m.room == 5).is_none());
        assert!(registry.remove_if(&1, |m| m.room == 0).is_some());
    }
}
