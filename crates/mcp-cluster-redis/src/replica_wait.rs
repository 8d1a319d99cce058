//! Waiting for replicas after the writes a failover must not lose
//! ([`crate::RedisConfig::replica_acks`]).
//!
//! Replication is asynchronous: what a primary acknowledged and had not
//! sent to its replica when it died is missing from the replica promoted in
//! its place. `WAIT n timeout` answers once `n` replicas acknowledged every
//! write its own connection sent before it, so a kept write goes out on one
//! connection and a `WAIT` follows it there.
//!
//! A `WAIT` blocks its connection on the server until it answers: one per
//! write would queue behind each other (with the replica away, each for the
//! whole timeout). So the writes of one connection commit as a group
//! ([`Barrier`]): at most one `WAIT` is in flight per connection, and it
//! covers every write answered before it was sent; writes answered
//! meanwhile wait for it to end and share the next one.
//!
//! A wait that comes back short (no replica, or one far behind) lets the
//! write stand on the primary and pauses the waits for [`PAUSE`]: a primary
//! without replicas (just after a failover) costs one timeout per pause,
//! not one per write. A wait that fails (the primary died under it) fails
//! the writes it covered: whether they survive is not known.
//!
//! Owner: the command connection ([`crate::connection`]); one [`Barrier`]
//! per connection it sends kept writes on, replaced with the connection.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::warn;

use crate::RedisConfig;
use crate::target::Target;

/// How long writes go unwaited after a wait came back short.
pub(crate) const PAUSE: Duration = Duration::from_secs(5);

/// Finished waits a barrier remembers, for writes that look up theirs
/// late (each wait takes a round trip to a replica: a writer woken by one
/// looks long before this many more ended).
const HISTORY: usize = 64;

/// The `WAIT` a node sends after its kept writes.
#[derive(Debug)]
pub(crate) struct ReplicaWait {
    acks: u32,
    timeout_ms: u64,
    /// Until when writes go unwaited: the last wait came back short.
    paused_until: Mutex<Option<Instant>>,
}

impl ReplicaWait {
    /// The wait `config` asks for on `target`: by default one replica
    /// behind Sentinels and on a Redis Cluster, none on one Redis.
    pub(crate) fn configured(config: &RedisConfig, target: &Target) -> Option<Arc<Self>> {
        let replicated = target.follows_failovers() || target.is_cluster();
        let acks = config.replica_acks.unwrap_or(u32::from(replicated));
        (acks > 0).then(|| {
            Arc::new(Self {
                acks,
                timeout_ms: config.replica_ack_timeout_ms,
                paused_until: Mutex::new(None),
            })
        })
    }

    /// The command: `WAIT <acks> <timeout>`.
    pub(crate) fn command(&self) -> redis::Cmd {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.acks).arg(self.timeout_ms);
        wait
    }

    /// Whether writes go unwaited now (counted as such).
    pub(crate) fn paused(&self) -> bool {
        let mut until = self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match *until {
            Some(at) if Instant::now() < at => {
                count("unwaited");
                true
            }
            Some(_) => {
                *until = None;
                false
            }
            None => false,
        }
    }

    /// Waits until the write that took `ticket` on `barrier` is covered by a
    /// `WAIT`, sending one with `send` when none is in flight.
    ///
    /// # Errors
    /// The wait that covered it failed (or was abandoned): the write may be
    /// lost, so it fails too.
    pub(crate) async fn cover<F>(
        &self,
        barrier: &Barrier,
        ticket: u64,
        send: impl FnOnce() -> F,
    ) -> redis::RedisResult<()>
    where
        F: Future<Output = redis::RedisResult<u32>>,
    {
        let outcome = match barrier.join(ticket).await {
            Joined::Covered(outcome) => outcome,
            // A wait that came back short meanwhile paused the waits: this
            // write goes unwaited like the ones after it (and lets the next
            // writer check the same).
            Joined::Lead(_) if self.paused() => return Ok(()),
            Joined::Lead(lead) => {
                let sent = Instant::now();
                let outcome = match send().await {
                    Ok(acked) if acked >= self.acks => Outcome::Replicated,
                    Ok(acked) => {
                        self.short(acked, sent.elapsed());
                        Outcome::Short
                    }
                    Err(err) => Outcome::Failed(Arc::from(err.to_string())),
                };
                lead.finish(outcome.clone());
                outcome
            }
        };
        match outcome {
            Outcome::Replicated => {
                count("replicated");
                Ok(())
            }
            Outcome::Short => {
                count("short");
                Ok(())
            }
            Outcome::Failed(reason) => {
                count("failed");
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    format!("the wait for a replica failed: {reason}"),
                )))
            }
        }
    }

    /// A wait came back with `acked` replicas only: pause the waits.
    fn short(&self, acked: u32, waited: Duration) {
        let mut until = self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if until.is_none() {
            *until = Some(Instant::now() + PAUSE);
            warn!(
                asked = self.acks,
                acked,
                timeout_ms = self.timeout_ms,
                ?waited,
                pause = ?PAUSE,
                "A write did not reach its replicas in time: writes go unwaited for a while (a failover now can lose them)."
            );
        }
    }
}

fn count(outcome: &str) {
    mcp_cluster_telemetry::metrics::metrics()
        .redis_replica_waits
        .with_label_values(&[outcome])
        .inc();
}

/// How one `WAIT` ended, for every write it covered.
#[derive(Debug, Clone)]
enum Outcome {
    Replicated,
    /// Fewer replicas than asked within the timeout: the writes stand.
    Short,
    /// The wait failed or was abandoned.
    Failed(Arc<str>),
}

/// Group commit on one connection: numbers the kept writes it answered and
/// lets one `WAIT` at a time cover them.
#[derive(Debug, Default)]
pub(crate) struct Barrier {
    state: Mutex<BarrierState>,
    ended: Notify,
}

#[derive(Debug, Default)]
struct BarrierState {
    /// Kept writes answered on the connection so far.
    answered: u64,
    /// Writes up to this one are covered by a wait that ended.
    covered: u64,
    /// A wait is in flight.
    waiting: bool,
    /// The last waits: the writes each covered (after `.0`, up to `.1`)
    /// and how it ended.
    history: VecDeque<(u64, u64, Outcome)>,
}

enum Joined<'a> {
    Covered(Outcome),
    /// The caller sends the next wait, and reports how it ended.
    Lead(Lead<'a>),
}

/// The writes the wait being sent covers. A sender dropped before it
/// reports (its future cancelled, or the writes paused) covers none of
/// them: the next writer sends one.
struct Lead<'a> {
    barrier: &'a Barrier,
    from: u64,
    to: u64,
    reported: bool,
}

impl Lead<'_> {
    fn finish(mut self, outcome: Outcome) {
        self.reported = true;
        self.barrier.ended(self.from, self.to, outcome);
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.reported {
            self.barrier.released();
        }
    }
}

impl Barrier {
    fn lock(&self) -> std::sync::MutexGuard<'_, BarrierState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers a kept write the connection just answered: its ticket.
    pub(crate) fn answered(&self) -> u64 {
        let mut state = self.lock();
        state.answered += 1;
        state.answered
    }

    /// Waits until `ticket` is covered, or until no wait is in flight: the
    /// caller then sends one.
    async fn join(&self, ticket: u64) -> Joined<'_> {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let mut state = self.lock();
                if state.covered >= ticket {
                    let outcome = state
                        .history
                        .iter()
                        .find(|(from, to, _)| *from < ticket && ticket <= *to)
                        .map_or_else(
                            || Outcome::Failed(Arc::from("its outcome is no longer known")),
                            |(_, _, outcome)| outcome.clone(),
                        );
                    return Joined::Covered(outcome);
                }
                if !state.waiting {
                    state.waiting = true;
                    return Joined::Lead(Lead {
                        barrier: self,
                        from: state.covered,
                        to: state.answered,
                        reported: false,
                    });
                }
            }
            ended.await;
        }
    }

    /// The wait in flight was not sent after all: nothing is covered.
    fn released(&self) {
        self.lock().waiting = false;
        self.ended.notify_waiters();
    }

    fn ended(&self, from: u64, to: u64, outcome: Outcome) {
        {
            let mut state = self.lock();
            state.covered = state.covered.max(to);
            state.waiting = false;
            if state.history.len() == HISTORY {
                state.history.pop_front();
            }
            state.history.push_back((from, to, outcome));
        }
        self.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(acks: u32) -> ReplicaWait {
        ReplicaWait {
            acks,
            timeout_ms: 100,
            paused_until: Mutex::new(None),
        }
    }

    #[tokio::test]
    async fn one_wait_covers_the_writes_answered_before_it_and_the_rest_share_the_next() {
        let barrier = Arc::new(Barrier::default());
        let wait = Arc::new(wait(1));
        let sent = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (release, gate) = tokio::sync::watch::channel(false);
        let first = barrier.answered();
        // The first write's wait is in flight until released.
        let leader = {
            let (barrier, wait, sent, mut gate) = (
                Arc::clone(&barrier),
                Arc::clone(&wait),
                Arc::clone(&sent),
                gate.clone(),
            );
            tokio::spawn(async move {
                wait.cover(&barrier, first, || async move {
                    sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = gate.wait_for(|open| *open).await;
                    Ok(1)
                })
                .await
            })
        };
        tokio::task::yield_now().await;
        // Ten more writes answered meanwhile: they wait, then one of them
        // sends one wait for all ten.
        let followers: Vec<_> = (0..10)
            .map(|_| {
                let ticket = barrier.answered();
                let (barrier, wait, sent) =
                    (Arc::clone(&barrier), Arc::clone(&wait), Arc::clone(&sent));
                tokio::spawn(async move {
                    wait.cover(&barrier, ticket, || async move {
                        sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok(1)
                    })
                    .await
                })
            })
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
        release.send(true).unwrap();
        leader.await.unwrap().unwrap();
        for follower in followers {
            follower.await.unwrap().unwrap();
        }
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_wait_fails_what_it_covered_and_a_short_one_pauses_the_waits() {
        let barrier = Barrier::default();
        let wait = wait(1);
        let ticket = barrier.answered();
        let failed = wait
            .cover(&barrier, ticket, || async {
                Err(redis::RedisError::from(std::io::Error::from(
                    std::io::ErrorKind::ConnectionReset,
                )))
            })
            .await;
        assert!(failed.is_err());
        let ticket = barrier.answered();
        assert!(!wait.paused());
        wait.cover(&barrier, ticket, || async { Ok(0) })
            .await
            .unwrap();
        assert!(wait.paused(), "a short wait pauses the next ones");
    }

    #[tokio::test]
    async fn an_abandoned_wait_covers_nothing_and_the_next_writer_sends_one() {
        let barrier = Arc::new(Barrier::default());
        let wait = Arc::new(wait(1));
        let first = barrier.answered();
        let second = barrier.answered();
        // The first writer's wait never answers, and its caller gives up.
        let abandoned = {
            let (barrier, wait) = (Arc::clone(&barrier), Arc::clone(&wait));
            tokio::spawn(async move { wait.cover(&barrier, first, std::future::pending).await })
        };
        tokio::task::yield_now().await;
        let follower = {
            let (barrier, wait) = (Arc::clone(&barrier), Arc::clone(&wait));
            tokio::spawn(async move { wait.cover(&barrier, second, || async { Ok(1) }).await })
        };
        tokio::task::yield_now().await;
        assert!(!follower.is_finished(), "it waits for the wait in flight");
        abandoned.abort();
        // The other write is not failed for it: it sends its own.
        follower.await.unwrap().unwrap();
    }
}
