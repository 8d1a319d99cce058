//! [`RedisBus`]: the control bus as one Redis pub/sub channel (`mcp:ctl`).
//!
//! Publishing is one `PUBLISH` of the JSON message, from a script, on the
//! command connection (`SPUBLISH` on a Redis Cluster: a sharded channel stays on the
//! shard of its slot instead of going to every member); receiving shares the node's one pub/sub connection
//! (`pubsub`). Off a Redis Cluster the same script logs the message (below):
//! one command per message. Delivery is Redis pub/sub's: every node connected at
//! that moment, nothing kept for a node that is away or reconnecting. So
//! each message (but a `kick` or a `release`, which must not arrive late,
//! and one longer than `LOG_ENTRY_MAX`) also goes, at the same time, into a
//! short log (`mcp:{ctl}:log`, a stream of the last `LOG_LEN` messages,
//! gone `LOG_TTL` after the last): a node whose pub/sub connection was down
//! replays from it what it missed (`pubsub`).
//!
//! A message for the other nodes only (one that does not concern its origin,
//! [`ControlMessage::concerns_origin`]) from a node alone in the cluster
//! (the only member of the node set, `mcp:{nodes}:all`) is neither logged
//! nor published: no one would hear it. The script that would announce it
//! reads `mcp:{nodes}:alone`, which names the set's only member, and the
//! set's size: that member's heartbeat sets the key once the set is whole
//! (`mcp:{nodes}:whole`: a Redis that lost its data lost the members too,
//! and each adds itself again at its next heartbeat), and the heartbeat
//! that adds a second member deletes it in the same script (see
//! `crate::nodes`); the size covers a node of an earlier version, whose
//! heartbeat does not. So the check is atomic with the set: a node joins
//! the set (its first heartbeat) before it serves, so a node that could
//! hold a copy of a session is a member before any announcement it must
//! hear. Off a Redis Cluster only (there the keys are in another slot).

use async_trait::async_trait;
use mcp_cluster_store::{ControlBus, ControlMessage, StoreError};
use tokio::sync::broadcast;

use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::Keys;
use crate::pubsub::PubSub;

/// Messages the control log keeps (`MAXLEN ~`).
pub(crate) const LOG_LEN: usize = 2048;
/// Longest message the control log keeps, in bytes (a client's answer can
/// be as long as a request body): the log holds at most about
/// `LOG_LEN * LOG_ENTRY_MAX` (32 MiB).
pub(crate) const LOG_ENTRY_MAX: usize = 16 * 1024;
/// The control log goes this long after its last message.
pub(crate) const LOG_TTL: std::time::Duration = std::time::Duration::from_secs(60);
/// The field of a log entry holding the message.
pub(crate) const LOG_FIELD: &str = "m";

/// `message` as JSON with a `nonce` field no other message has (a node
/// that predates it ignores it): two messages alike (a session changed
/// twice by one node) stay two for a node that replays the log and tells
/// what it received live from what it missed by their text.
fn with_nonce(message: &ControlMessage) -> Result<String, StoreError> {
    /// The message's fields and its nonce, written in one pass.
    #[derive(serde::Serialize)]
    struct WithNonce<'a> {
        #[serde(flatten)]
        message: &'a ControlMessage,
        nonce: String,
    }
    static PROCESS: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| mcp_cluster_store::StreamId::random().to_string());
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    serde_json::to_string(&WithNonce {
        message,
        nonce: format!("{}.{n}", &*PROCESS),
    })
    .map_err(corrupt)
}

/// Publishes control messages (the bus, and the stores that ask for a
/// session's lease).
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    redis: Redis,
    /// The control channel name.
    channel: String,
    /// The control log's key.
    log: String,
    /// The set of the cluster's nodes.
    nodes: String,
    /// Its only member, when it has one (`crate::nodes`).
    alone: String,
}

impl Publisher {
    pub(crate) fn new(redis: Redis, keys: &Keys) -> Self {
        Self {
            redis,
            channel: keys.ctl(),
            log: keys.ctl_log(),
            nodes: keys.nodes(),
            alone: keys.nodes_alone(),
        }
    }

    /// Publishes `message` to every node (this one included), and logs it
    /// (see the module doc). `Err` unless both were done: the caller
    /// publishes again (a node that heard the first copy hears a second,
    /// which every control message tolerates).
    pub(crate) async fn publish(&self, message: &ControlMessage) -> Result<(), StoreError> {
        let json = with_nonce(message)?;
        let log = loggable(message, &json);
        let published = if log && !self.redis.is_cluster() {
            // One Redis: the log and the channel in one script, one
            // command.
            let mut both = LOG_AND_PUBLISH.prepare_invoke();
            let announcement = self.announcement(message, json);
            both.key(&announcement.keys[..]).arg(&announcement.args[..]);
            match self.redis.script("bus_publish", &both).await {
                // For the other nodes, and there are none.
                Ok(redis::Value::Nil) => {
                    unsent(message.kind());
                    return Ok(());
                }
                reply => reply.map(drop),
            }
        } else {
            // On a Redis Cluster the log and the channel are in different
            // slots: two commands, both at once (a Redis that is away
            // costs one command timeout, not two). Which one Redis takes
            // first does not matter: a node replays only what it did not
            // receive live.
            let logged = async {
                if !log {
                    return Ok(());
                }
                let mut log = redis::pipe();
                log.cmd("XADD")
                    .arg(&self.log)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(LOG_LEN)
                    .arg("*")
                    .arg(LOG_FIELD)
                    .arg(&json)
                    .ignore()
                    .cmd("PEXPIRE")
                    .arg(&self.log)
                    .arg(crate::config::millis(LOG_TTL))
                    .ignore();
                self.redis.pipe("bus_log", &log).await.map(drop)
            };
            let mut publish = PUBLISH.prepare_invoke();
            publish
                .key(&self.channel)
                .arg(self.redis.publish_command())
                .arg(&json);
            let (logged, published) =
                tokio::join!(logged, self.redis.script("bus_publish", &publish));
            logged.and(published.map(drop))
        };
        // A failure is counted as a drop by whoever gives up on the
        // message (the runtime tries again while Redis is away).
        if published.is_ok() {
            counted(message.kind());
        }
        published
    }

    /// `message` ready to go out inside another writing script on this
    /// Redis (a session's save or deletion), logged and published as
    /// [`Self::publish`] would ([`ANNOUNCE`]): `None` on a Redis Cluster,
    /// where the log and the channel are in other slots than the session,
    /// and for a message [`Self::publish`] would not log.
    pub(crate) fn inline(
        &self,
        message: &ControlMessage,
    ) -> Result<Option<Announcement>, StoreError> {
        if self.redis.is_cluster() {
            return Ok(None);
        }
        let json = with_nonce(message)?;
        Ok(loggable(message, &json).then(|| self.announcement(message, json)))
    }

    /// `message` written as `json`, with what [`ANNOUNCE`] takes.
    fn announcement(&self, message: &ControlMessage, json: String) -> Announcement {
        // Only a message for the other nodes names its origin: one that
        // concerns its origin goes out even from a node alone.
        let origin = if message.concerns_origin() {
            String::new()
        } else {
            message.origin().as_str().to_owned()
        };
        Announcement {
            keys: [
                self.log.clone(),
                self.channel.clone(),
                self.nodes.clone(),
                self.alone.clone(),
            ],
            args: [
                LOG_LEN.to_string(),
                crate::config::millis(LOG_TTL).to_string(),
                LOG_FIELD.to_owned(),
                json,
                origin,
            ],
        }
    }
}

/// Whether the control log keeps `message` (written as `json`): not a
/// `kick` or a `release`, which must not arrive late, nor one longer than
/// [`LOG_ENTRY_MAX`].
fn loggable(message: &ControlMessage, json: &str) -> bool {
    let late_is_wrong = matches!(
        message,
        ControlMessage::Kick { .. } | ControlMessage::Release { .. }
    );
    !late_is_wrong && json.len() <= LOG_ENTRY_MAX
}

/// Counts a published message of `kind` (a script that carried an
/// [`Announcement`] counts it once it ran).
pub(crate) fn counted(kind: &str) {
    mcp_cluster_telemetry::metrics::metrics()
        .bus_published
        .with_label_values(&[kind])
        .inc();
}

/// Counts a message of `kind` for the other nodes that was not sent: this
/// node was alone in the cluster ([`ANNOUNCE`]).
pub(crate) fn unsent(kind: &str) {
    mcp_cluster_telemetry::metrics::metrics()
        .bus_unsent
        .with_label_values(&[kind])
        .inc();
}

/// A control message as it goes out inside a script, with what
/// [`ANNOUNCE`] takes ([`Publisher::inline`]).
#[derive(Debug)]
pub(crate) struct Announcement {
    /// The control log, the control channel, the node set, its only
    /// member.
    pub(crate) keys: [String; 4],
    /// The log's length, its TTL ms, the entry's field, the message (with
    /// its nonce), and for a message for the other nodes only its origin
    /// (else empty).
    pub(crate) args: [String; 5],
}

impl Announcement {
    /// Moves its keys to the end of `keys` and its arguments to the end of
    /// `args`, for a script that announces after its own keys and
    /// arguments.
    pub(crate) fn append_to(self, keys: &mut Vec<String>, args: &mut Vec<String>) {
        keys.extend(self.keys);
        args.extend(self.args);
    }
}

/// Lua: `announce(log, channel, nodes, alone, length, ttl, field, message,
/// origin)` logs a control message and publishes it, as
/// [`Publisher::publish`] does on one Redis, and is true; unless `origin`
/// (not empty) is what `alone` names (the only member of `nodes`, once the
/// set is whole: see `crate::nodes`) and `nodes` has one member, where it
/// does neither and is false. Its arguments are an [`Announcement`]'s keys,
/// then its arguments.
pub(crate) const ANNOUNCE: &str = r"
local function announce(log, channel, nodes, alone, length, ttl, field, message, origin)
  if origin ~= '' and redis.call('GET', alone) == origin
      and redis.call('SCARD', nodes) == 1 then
    return false
  end
  redis.call('XADD', log, 'MAXLEN', '~', length, '*', field, message)
  redis.call('PEXPIRE', log, ttl)
  redis.call('PUBLISH', channel, message)
  return true
end
";

/// KEYS: the control log, the control channel, the node set, its only
/// member. ARGV: the log's length, its TTL ms, the entry's field, the message, its
/// origin (or empty). Logs the message and publishes it (off a Redis
/// Cluster: all keys on one Redis); 1 when it did, nil when it was for the
/// other nodes and there are none.
///
/// Flagged, without `allow-oom`, like the log's own commands: a Redis out
/// of memory refuses it whole (publishing nothing, so the caller tries
/// again), and a replica refuses it as a writing script.
static LOG_AND_PUBLISH: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(&format!(
        "#!lua
{ANNOUNCE}
return announce(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
"
    ))
});

/// KEYS: the control channel. ARGV: the publish command (`PUBLISH`, or
/// `SPUBLISH` on a Redis Cluster), the message.
///
/// A script for one command: its shebang makes a replica refuse it. A
/// replica takes a bare `SPUBLISH` (a demoted primary a bare `PUBLISH`)
/// and answers as if it had delivered it, while during a failover it
/// reaches nobody; refused, the message is published again once the new
/// primary answers. `allow-oom`: the bus carries what requests wait for
/// (answers, cancellations), and a publish stores nothing.
static PUBLISH: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "#!lua flags=allow-oom
return redis.call(ARGV[1], KEYS[1], ARGV[2])
",
    )
});

/// The Redis [`ControlBus`].
#[derive(Debug)]
pub struct RedisBus {
    publisher: Publisher,
    /// Decoded messages come from here.
    pubsub: PubSub,
}

impl RedisBus {
    pub(crate) fn new(publisher: Publisher, pubsub: PubSub) -> Self {
        Self { publisher, pubsub }
    }
}

#[async_trait]
impl ControlBus for RedisBus {
    async fn publish(&self, message: &ControlMessage) -> Result<(), StoreError> {
        self.publisher.publish(message).await
    }

    fn subscribe(&self) -> broadcast::Receiver<ControlMessage> {
        self.pubsub.control()
    }
}

#[cfg(test)]
mod tests {
    use mcp_cluster_store::{NodeId, SessionId};

    use super::*;

    #[test]
    fn two_messages_alike_differ_on_the_wire_and_decode_the_same() {
        let message = ControlMessage::SessionChanged {
            session: SessionId::random(),
            origin: NodeId::random(),
        };
        let (a, b) = (with_nonce(&message).unwrap(), with_nonce(&message).unwrap());
        assert_ne!(a, b);
        for wire in [a, b] {
            let decoded: ControlMessage = serde_json::from_str(&wire).unwrap();
            assert_eq!(decoded, message);
            let fields: serde_json::Value = serde_json::from_str(&wire).unwrap();
            assert_eq!(fields["type"], "session_changed", "{wire}");
            assert!(fields["nonce"].is_string(), "{wire}");
        }
    }
}
