//! Session leases: what lets the node that serves a session's requests skip
//! the per-request read of the session.
//!
//! A node that loads a session for the actor it holds also takes the
//! session's lease, `<prefix>:{<session>}:lease`, when no other node has it:
//! the key holds the lease holder's id (one per store, so one per node
//! process) and expires after [`LEASE_TTL`]. Every script that changes or
//! ends a session checks the lease in the same atomic step: a writer that
//! is not the holder changes nothing, marks the lease as wanted (the id
//! with a trailing `!`, same TTL, so the holder can no longer renew it) and
//! gets the holder's id back. The writer then publishes
//! [`ControlMessage::Release`] and tries again until the holder has let the
//! lease go (deleted the key) or the key expired, for at most
//! [`WRITE_PATIENCE`].
//!
//! The holder trusts its copy of the session while the lease is held: from
//! a grant or a renewal until [`LEASE_TTL`] minus [`MARGIN`] after it sent
//! the command, by its own monotonic clock (the key expires that long after
//! Redis ran the command, which is later). It stops trusting at once when a
//! release is asked, when a renewal finds the lease gone or wanted, and
//! when any command of the node found the connection in trouble (lost,
//! timed out, a primary demoted or replaced): after a failover, the new
//! primary may not have the key. Leases in use are renewed together every
//! [`RENEW_EVERY`]; one not used since the last renewal is left to expire.
//!
//! So a client whose change was answered by one node never meets the old
//! state on the node that holds the lease: the change waited until that
//! node stopped trusting. A node that was asked to release does not take
//! the lease again for [`REST`], so the writer it let go ahead is not
//! overtaken by it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use mcp_cluster_store::{ControlMessage, NodeId, SessionId, StoreError};
use redis::{Script, Value};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::config::millis;
use crate::connection::Redis;
use crate::keys::Keys;
use crate::pubsub::PubSub;
use crate::reply;

/// How long a lease lasts after a grant or a renewal.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(3);
/// The holder stops trusting this long before its lease runs out in Redis
/// (clock rates differ a little; a renewal in flight is not counted on).
const MARGIN: Duration = Duration::from_millis(250);
/// How often leases in use are renewed.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// A node asked to release a lease does not take it again for this long.
const REST: Duration = Duration::from_secs(1);
/// How long a writer waits for another node's lease to go before it gives
/// up with an error: a lease that is wanted is no longer renewed, so it
/// expires within [`LEASE_TTL`] even when its holder died or never heard
/// the request.
pub(crate) const WRITE_PATIENCE: Duration = Duration::from_secs(4);
/// A writer that still finds the lease held asks again after this long
/// (pub/sub may lose a message).
const ASK_AGAIN: Duration = Duration::from_millis(200);
/// The longest pause between two tries of a write waiting for a lease.
const MAX_BACKOFF: Duration = Duration::from_millis(50);
/// Renewals in flight at once.
const RENEW_CONCURRENCY: usize = 64;

/// The Lua function every writing script starts with. `held_elsewhere(key,
/// me)`: false when no lease is held or `me` holds it; otherwise marks the
/// lease as wanted (keeping its TTL) and returns the holder.
pub(crate) const HELD_ELSEWHERE: &str = r"
local function held_elsewhere(key, me)
  local holder = redis.call('GET', key)
  if not holder or holder == me or holder == me .. '!' then
    return false
  end
  if string.sub(holder, -1) ~= '!' then
    local ttl = redis.call('PTTL', key)
    if ttl > 0 then
      redis.call('SET', key, holder .. '!', 'PX', ttl)
    end
    return holder
  end
  return string.sub(holder, 1, -2)
end
";

/// KEYS: lease. ARGV: holder, TTL ms. Renews a lease still held and not
/// wanted; 1 when renewed.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
",
    )
});

/// KEYS: lease. ARGV: holder. Deletes the lease if `holder` has it (wanted
/// or not).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or holder == ARGV[1] .. '!' then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// What this node knows of one session's lease.
#[derive(Debug, Clone, Copy)]
enum State {
    /// Held and trusted until `until`, unless the connection had trouble
    /// after `epoch`; `used` since the last renewal; `fresh`: granted since
    /// the last renewal round (spared by it even when not used yet).
    Held {
        until: Instant,
        epoch: u64,
        used: bool,
        fresh: bool,
    },
    /// Released on request: not taken again before `until`.
    Resting { until: Instant },
}

/// The leases of one store (one node process).
#[derive(Debug)]
pub(crate) struct Leases {
    /// The id the lease keys hold.
    holder: NodeId,
    redis: Redis,
    keys: Keys,
    /// Bounded by the sessions this node served in the last few seconds:
    /// unused leases are dropped at the next renewal, rests after [`REST`].
    states: Mutex<HashMap<SessionId, State>>,
}

/// A lease key's value: `<holder>` or, wanted, `<holder>!`.
pub(crate) fn value_holder(value: &str) -> Result<NodeId, StoreError> {
    value
        .strip_suffix('!')
        .unwrap_or(value)
        .parse()
        .map_err(|_| crate::error::corrupt(format_args!("malformed lease holder {value:?}")))
}

impl Leases {
    /// The leases of a new store; `start` runs their task.
    pub(crate) fn new(redis: Redis, keys: Keys) -> Self {
        Self {
            holder: NodeId::random(),
            redis,
            keys,
            states: Mutex::new(HashMap::new()),
        }
    }

    /// Starts the task that renews leases in use and lets go of those
    /// another node asks for. It ends with the last reference to `leases`.
    /// Must run inside a tokio runtime.
    pub(crate) fn start(leases: &Arc<Self>, pubsub: &PubSub) {
        let weak = Arc::downgrade(leases);
        let control = pubsub.control();
        tokio::spawn(run(weak, control));
    }

    /// The id lease keys hold for this node.
    pub(crate) fn holder(&self) -> &NodeId {
        &self.holder
    }

    fn states(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, State>> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this node holds `id`'s lease and may trust its copy now;
    /// counts as a use (the lease is renewed at the next round).
    pub(crate) fn trusted(&self, id: &SessionId) -> bool {
        let now = Instant::now();
        let epoch = self.redis.trouble();
        let mut states = self.states();
        match states.get_mut(id) {
            Some(State::Held {
                until,
                epoch: granted,
                used,
                ..
            }) if *until > now && *granted == epoch => {
                *used = true;
                true
            }
            _ => false,
        }
    }

    /// Whether a load should ask for the lease (not while resting).
    pub(crate) fn wanted(&self, id: &SessionId) -> bool {
        let now = Instant::now();
        !matches!(self.states().get(id), Some(State::Resting { until }) if *until > now)
    }

    /// Records a lease granted (or renewed) by a command sent at `sent`,
    /// when the connection had no trouble since `epoch`; a release asked
    /// meanwhile wins.
    pub(crate) fn granted(&self, id: &SessionId, sent: Instant, epoch: u64) {
        if epoch != self.redis.trouble() {
            return;
        }
        let until = sent + LEASE_TTL - MARGIN;
        let mut states = self.states();
        match states.get(id) {
            Some(State::Resting { until: rest }) if *rest > Instant::now() => {}
            _ => {
                states.insert(
                    id.clone(),
                    // Renewed only once a request used it.
                    State::Held {
                        until,
                        epoch,
                        used: false,
                        fresh: true,
                    },
                );
            }
        }
    }

    /// The epoch to pass to [`Self::granted`] for a command sent now.
    pub(crate) fn epoch(&self) -> u64 {
        self.redis.trouble()
    }

    /// Stops trusting `id` and rests (another node asked for the lease).
    fn rest(&self, id: &SessionId) {
        self.states().insert(
            id.clone(),
            State::Resting {
                until: Instant::now() + REST,
            },
        );
    }

    /// Deletes `id`'s lease key if this node still has it.
    pub(crate) async fn release_key(&self, id: &SessionId) {
        let released = self
            .redis
            .script(
                "lease_release",
                RELEASE.key(self.keys.lease(id)).arg(self.holder.as_str()),
            )
            .await;
        if let Err(err) = released {
            // The lease expires by itself within its TTL.
            tracing::debug!(session_id = %id, error = %err, "Lease release failed.");
        }
    }

    /// Forgets `id` (the session ended here).
    pub(crate) fn forget(&self, id: &SessionId) {
        self.states().remove(id);
    }

    /// One renewal round: drops expired states and unused leases, and
    /// renews the leases used since the last round.
    async fn renew(&self) {
        let now = Instant::now();
        let epoch = self.redis.trouble();
        let mut due = Vec::new();
        self.states().retain(|id, state| match state {
            State::Held {
                until,
                epoch: granted,
                used,
                fresh,
            } => {
                let live = *until > now && *granted == epoch;
                if live && *used {
                    *used = false;
                    *fresh = false;
                    due.push(id.clone());
                    true
                } else {
                    // A fresh grant gets one round to be used.
                    std::mem::replace(fresh, false) && live
                }
            }
            State::Resting { until } => *until > now,
        });
        if due.is_empty() {
            return;
        }
        let sent = Instant::now();
        let ttl = millis(LEASE_TTL);
        let renewals = futures_util::stream::iter(due)
            .map(|id| async move {
                let reply = self
                    .redis
                    .script(
                        "lease_renew",
                        RENEW
                            .key(self.keys.lease(&id))
                            .arg(self.holder.as_str())
                            .arg(ttl),
                    )
                    .await;
                (id, reply)
            })
            .buffer_unordered(RENEW_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        for (id, reply) in renewals {
            match reply.as_ref().map(reply::int) {
                Ok(Ok(1)) => self.extend(&id, sent, epoch),
                // Gone or wanted: no longer trusted.
                Ok(_) => self.forget(&id),
                // Trusted until it runs out (the trouble epoch moved on
                // anyway when the connection failed).
                Err(_) => {}
            }
        }
    }

    /// Moves a held lease's end after a renewal sent at `sent`.
    fn extend(&self, id: &SessionId, sent: Instant, epoch: u64) {
        if epoch != self.redis.trouble() {
            return;
        }
        if let Some(State::Held { until, .. }) = self.states().get_mut(id) {
            *until = sent + LEASE_TTL - MARGIN;
        }
    }

    /// Waits for `write` to run with no other node holding `id`'s lease:
    /// `write` returns `Ok(None)` when another node holds it (the script
    /// changed nothing), and this asks the holder to let it go, then tries
    /// again with a growing pause, for at most [`WRITE_PATIENCE`].
    ///
    /// # Errors
    /// `write`'s own; [`StoreError::Unavailable`] when the lease is still
    /// held after [`WRITE_PATIENCE`].
    pub(crate) async fn write<T, F, Fut>(
        &self,
        id: &SessionId,
        bus: &crate::bus::Publisher,
        mut write: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Written<T>, StoreError>>,
    {
        let started = Instant::now();
        let mut asked: Option<Instant> = None;
        let mut pause = Duration::from_millis(1);
        loop {
            let holder = match write().await? {
                Written::Done(value) => return Ok(value),
                Written::HeldBy(holder) => holder,
            };
            if asked.is_none_or(|at| at.elapsed() >= ASK_AGAIN) {
                asked = Some(Instant::now());
                let release = ControlMessage::Release {
                    session: id.clone(),
                    holder,
                    origin: self.holder.clone(),
                };
                // Lost or not, the lease expires within its TTL.
                if bus.publish(&release).await.is_err() {
                    mcp_cluster_telemetry::metrics::metrics()
                        .bus_dropped
                        .with_label_values(&["publish_failed"])
                        .inc();
                }
            }
            if started.elapsed() >= WRITE_PATIENCE {
                mcp_cluster_telemetry::metrics::metrics()
                    .redis_errors
                    .with_label_values(&["lease_wait", "timeout"])
                    .inc();
                return Err(StoreError::Unavailable(format!(
                    "session {id} is leased by another node that did not let it go within {WRITE_PATIENCE:?}"
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_BACKOFF);
        }
    }
}

/// What a writing script did.
pub(crate) enum Written<T> {
    /// It wrote (or found nothing to write); the value it returned.
    Done(T),
    /// Another node holds the lease: nothing changed.
    HeldBy(NodeId),
}

/// Decodes a writing script's reply: `{holder}` when another node holds
/// the lease, else the script's own reply.
pub(crate) fn written(value: Value) -> Result<Written<Value>, StoreError> {
    match value {
        Value::Array(mut items) if items.len() == 1 => {
            let holder = reply::text(items.remove(0))?;
            value_holder(&holder).map(Written::HeldBy)
        }
        other => Ok(Written::Done(other)),
    }
}

async fn run(weak: Weak<Leases>, mut control: tokio::sync::broadcast::Receiver<ControlMessage>) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let Some(leases) = weak.upgrade() else { return };
                leases.renew().await;
            }
            message = control.recv() => match message {
                Ok(ControlMessage::Release { session, holder, .. }) => {
                    let Some(leases) = weak.upgrade() else { return };
                    if holder == leases.holder {
                        // Trust ends now; the key goes in the background.
                        leases.rest(&session);
                        tokio::spawn(async move { leases.release_key(&session).await });
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    // Requests may be lost: trust nothing granted so far.
                    let Some(leases) = weak.upgrade() else { return };
                    leases.states().retain(|_, s| matches!(s, State::Resting { .. }));
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}
