//! [`RedisSessionStore`]: one JSON string per session with a `PX` idle TTL
//! (Redis expires idle sessions itself), its subscriptions in a set beside
//! it with the same TTL, and an index of sessions by expiry so that what an
//! expired session leaves behind (its streams) can be deleted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use mcp_cluster_store::{
    ControlMessage, Ended, EventLog, Position, Saved, SessionId, SessionRecord, SessionStore,
    StoreError, StreamId, Subscribed,
};
use redis::{Cmd, Script, Value};
use tokio::time::Instant;

use crate::bus::{ANNOUNCE, Announcement, Publisher, counted, unsent};
use crate::config::millis;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::event_log::{ClosedStreams, DELETE_STREAMS, OPEN_STANDALONE, streams_of};
use crate::keys::Keys;
use crate::lease::{HELD_ELSEWHERE, LEASE_TTL, Leases, written};
use crate::pubsub::PubSub;
use crate::reply;

/// A writing script: `body`, run unless another node holds the session's
/// lease (its last key; this node's holder id is its last argument), when
/// it returns `{holder}` instead (see [`HELD_ELSEWHERE`]).
fn writing(body: &str) -> Script {
    Script::new(&format!(
        "{HELD_ELSEWHERE}
local other = held_elsewhere(KEYS[#KEYS], ARGV[#ARGV])
if other then
  return {{other}}
end
{body}"
    ))
}

/// KEYS: session, subs, then (when an announcement goes with it) the
/// control log, channel, node set and its only member, then the lease. ARGV: JSON, TTL ms,
/// then (with the announcement) the five arguments of an [`Announcement`],
/// then holder. Replaces a live record, renews both TTLs and, on one Redis,
/// announces the change ([`ANNOUNCE`]); 1 when written, plus 2 when the
/// announcement was left out (no other node), 0 when the session is gone
/// (nothing announced), `{holder}` when another node holds the lease.
static SAVE: LazyLock<Script> = LazyLock::new(|| {
    writing(&format!(
        r"{ANNOUNCE}
if not redis.call('SET', KEYS[1], ARGV[1], 'XX', 'PX', ARGV[2]) then
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if #KEYS == 7
    and not announce(KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) then
  return 1 + 2
end
return 1
"
    ))
});

/// KEYS: session, subs, lease. ARGV: JSON, TTL ms, the host it replaces,
/// holder. Replaces a live record whose `host` is still the one named and
/// renews both TTLs; 1 when written, 0 when the session is gone or its
/// host is another, `{holder}` when another node holds the lease.
static REHOST: LazyLock<Script> = LazyLock::new(|| {
    writing(
        r"
local record = redis.call('GET', KEYS[1])
if not record then
  return 0
end
local ok, stored = pcall(cjson.decode, record)
if not ok or type(stored) ~= 'table' or stored['host'] ~= ARGV[3] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'XX', 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
",
    )
});

/// KEYS: session, subs, lease. ARGV: holder, lease TTL ms, `1` to take the
/// lease. The record and subscriptions of a live session, and whether this
/// node holds the lease (taken when free and asked for, renewed when held):
/// `{record, {uri...}, 0|1}`; 0 when the session is gone.
static LOAD_HELD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local record = redis.call('GET', KEYS[1])
if not record then
  return 0
end
local leased = 0
if ARGV[3] == '1' then
  local holder = redis.call('GET', KEYS[3])
  if not holder then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
    leased = 1
  elseif holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
    leased = 1
  end
end
return {record, redis.call('SMEMBERS', KEYS[2]), leased}
",
    )
});

/// KEYS: session, subs, ended, the stream set, then (off a Redis Cluster)
/// the expiry index and (when the announcement goes with it) the control
/// log, channel, node set and its only member, then the lease. ARGV: ended marker TTL ms,
/// the four arguments of [`DELETE_STREAMS`], then (with the index) the
/// session id, then (with the announcement) the five arguments of an
/// [`Announcement`], then holder. Ends a session with its streams (in its
/// slot) and its announcement, remembering that it was ended: 1 when the
/// session was live, 0 when already gone, plus 2 when the announcement was
/// left out (no other node); `{holder}` when another node holds the lease
/// (nothing changed).
static END: LazyLock<Script> = LazyLock::new(|| {
    writing(&format!(
        r"{DELETE_STREAMS}{ANNOUNCE}
local live = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2], KEYS[#KEYS])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[1])
delete_streams(KEYS[4], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
if #KEYS >= 6 then
  redis.call('ZREM', KEYS[5], ARGV[6])
end
if #KEYS == 10
    and not announce(KEYS[6], KEYS[7], KEYS[8], KEYS[9], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]) then
  return live + 2
end
return live
"
    ))
});

/// KEYS: session, subs. ARGV: TTL ms. Renews both TTLs; 1 when the session
/// lives, 0 when it is gone.
static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
",
    )
});

/// `SUBSCRIBE` replies.
const SUB_GONE: i64 = 0;
const SUB_ADDED: i64 = 1;
const SUB_PRESENT: i64 = 2;
const SUB_FULL: i64 = 3;

/// KEYS: session, subs, lease. ARGV: URI, max, holder. Adds the URI unless
/// the set holds `max` already; the set expires with the session.
/// `{holder}` when another node holds the lease.
static SUBSCRIBE: LazyLock<Script> = LazyLock::new(|| {
    writing(
        r"
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return 0
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 2
end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[2]) then
  return 3
end
redis.call('SADD', KEYS[2], ARGV[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
",
    )
});

/// KEYS: session, subs, lease. ARGV: URI, holder. 1 when the session
/// lives, 0 otherwise, `{holder}` when another node holds the lease.
static UNSUBSCRIBE: LazyLock<Script> = LazyLock::new(|| {
    writing(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('SREM', KEYS[2], ARGV[1])
return 1
",
    )
});

/// The Redis [`SessionStore`].
#[derive(Debug)]
pub struct RedisSessionStore {
    redis: Redis,
    keys: Keys,
    /// The bucket of the expiry index the next sweep starts with.
    next_bucket: AtomicUsize,
    /// Checked by `ping`: the node is ready only with both connections up.
    pubsub: PubSub,
    /// The leases this node holds.
    leases: Arc<Leases>,
    /// Asks a lease's holder to let it go; announces a session's change
    /// and end with the scripts that make them.
    publisher: Publisher,
    /// The event log's idle TTL of a stream (a standalone stream created
    /// with its session).
    stream_idle_ttl_ms: u64,
    /// The event log's ledger of the streams this node closed: a session
    /// ended with its streams is forgotten there.
    closed: Arc<ClosedStreams>,
}

/// Milliseconds since the Unix epoch on this node's clock: expiry index
/// scores (skew between nodes only delays a sweep, it never deletes a live
/// session: the record's own TTL decides), and where a control log replay
/// starts (`pubsub`).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A session record from the replies to `GET` of the record and
/// `SMEMBERS` of its subscriptions.
fn record_of(json: Value, subs: Value) -> Result<SessionRecord, StoreError> {
    let mut record: SessionRecord = serde_json::from_str(&reply::text(json)?).map_err(corrupt)?;
    for uri in reply::array(subs)? {
        record.subscriptions.insert(reply::text(uri)?);
    }
    Ok(record)
}

impl RedisSessionStore {
    pub(crate) fn new(
        redis: Redis,
        keys: Keys,
        pubsub: PubSub,
        leases: Arc<Leases>,
        publisher: Publisher,
        stream_idle_ttl_ms: u64,
        closed: Arc<ClosedStreams>,
    ) -> Self {
        Self {
            redis,
            keys,
            next_bucket: AtomicUsize::new(0),
            pubsub,
            leases,
            publisher,
            stream_idle_ttl_ms,
            closed,
        }
    }

    /// Runs a writing script on `id` until no other node holds its lease
    /// (see [`Leases::write`]); the script's own reply. Its keys: the
    /// session, its subscriptions, `more`, then the lease; its arguments:
    /// `args`, then this node's holder id.
    async fn write(
        &self,
        op: &'static str,
        script: &'static Script,
        id: &SessionId,
        more: &[String],
        args: &[String],
    ) -> Result<Value, StoreError> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.keys.session(id))
            .key(self.keys.subs(id))
            .key(more)
            .key(self.keys.lease(id))
            .arg(args)
            .arg(self.leases.holder().as_str());
        self.leases
            .write(id, &self.publisher, || async {
                written(self.redis.script_kept(op, &invocation).await?)
            })
            .await
    }

    /// What every creation of a session sends: the record (`SET NX` with
    /// the idle TTL), this node's lease on it (`SET NX`: the creating node
    /// serves the session's next requests, most likely), and its entry in
    /// the expiry index (another slot).
    fn creation(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<[Cmd; 3], StoreError> {
        let json = serde_json::to_string(record).map_err(corrupt)?;
        let ttl = millis(idle_ttl);
        let id = &record.id;
        let mut set = redis::cmd("SET");
        set.arg(self.keys.session(id))
            .arg(json)
            .arg("NX")
            .arg("PX")
            .arg(ttl);
        let mut lease = redis::cmd("SET");
        lease
            .arg(self.keys.lease(id))
            .arg(self.leases.holder().as_str())
            .arg("NX")
            .arg("PX")
            .arg(millis(LEASE_TTL));
        let mut index = redis::cmd("ZADD");
        index
            .arg(self.keys.session_expiry(id))
            .arg("NX")
            .arg(now_ms().saturating_add(ttl))
            .arg(id.as_str());
        Ok([set, lease, index])
    }
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    /// One round trip on one Redis (on a Redis Cluster, two requests at
    /// once): the record, this node's lease on it and its expiry index
    /// entry, each of which only creates (`SET … NX`, `ZADD NX`). The
    /// three need no transaction: each carries its own expiry. A lease or
    /// index entry without its record harms no one; a record left without
    /// them by a failed call was answered with no session id, and expires.
    async fn create(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<(), StoreError> {
        let id = &record.id;
        let sent = Instant::now();
        let epoch = self.leases.epoch();
        let replies = self
            .redis
            .each_kept("session_create", &self.creation(record, idle_ttl)?)
            .await?;
        let (Some(record_set), Some(lease_set)) = (replies.first(), replies.get(1)) else {
            return Err(corrupt("short create reply"));
        };
        let leased = !matches!(lease_set, Value::Nil);
        if !matches!(record_set, Value::Nil) {
            // A lease key left under a new id (never by chance) is not
            // this node's to trust.
            if leased {
                self.leases.granted(id, sent, epoch);
            }
            return Ok(());
        }
        // The id was taken (never by chance: ids are random): a lease this
        // call took on that session is given back.
        if leased {
            self.leases.release_key(id).await;
        }
        Err(StoreError::Conflict)
    }

    /// Writes the record alone, as [`Self::create`] does: the standalone
    /// stream's keys are written by [`Self::open_standalone`] when a client
    /// first opens the stream, which most sessions never do. That keeps a
    /// new session at three commands, and its keys at three.
    async fn create_with_stream(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        _events: &dyn EventLog,
    ) -> Result<(), StoreError> {
        self.create(record, idle_ttl).await
    }

    /// One script on the session's slot (`OPEN_STANDALONE`), which also
    /// answers the tail: refuses a session whose record is gone, so no
    /// stream outlives its session (a session deleted at the same moment,
    /// by another node, may leave one, which expires after the stream idle
    /// TTL). `events` is this store's own.
    async fn open_standalone(
        &self,
        id: &SessionId,
        stream: &StreamId,
        _events: &dyn EventLog,
    ) -> Result<Position, StoreError> {
        let reply = self
            .redis
            .script_kept(
                "stream_open",
                OPEN_STANDALONE
                    .key(self.keys.session(id))
                    .key(self.keys.meta(id, stream))
                    .key(self.keys.streams(id))
                    .arg(stream.as_str())
                    .arg(self.stream_idle_ttl_ms),
            )
            .await?;
        match reply {
            Value::Int(0) => Err(StoreError::StreamNotFound),
            tail => reply::position(tail),
        }
    }

    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(self.keys.session(id))
            .cmd("SMEMBERS")
            .arg(self.keys.subs(id));
        let mut replies = reply::array(self.redis.pipe("session_load", &pipe).await?)?.into_iter();
        let (Some(record), Some(subs)) = (replies.next(), replies.next()) else {
            return Err(corrupt("short load reply"));
        };
        if let Value::Nil = record {
            return Ok(None);
        }
        record_of(record, subs).map(Some)
    }

    async fn load_held(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let take = self.leases.wanted(id);
        let sent = Instant::now();
        let epoch = self.leases.epoch();
        let reply = self
            .redis
            .script(
                "session_load",
                LOAD_HELD
                    .key(self.keys.session(id))
                    .key(self.keys.subs(id))
                    .key(self.keys.lease(id))
                    .arg(self.leases.holder().as_str())
                    .arg(millis(LEASE_TTL))
                    .arg(u8::from(take)),
            )
            .await?;
        if let Value::Int(0) = reply {
            self.leases.forget(id);
            return Ok(None);
        }
        let mut parts = reply::array(reply)?.into_iter();
        let (Some(json), Some(subs), Some(leased)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(corrupt("short load reply"));
        };
        let record = record_of(json, subs)?;
        if reply::int(&leased)? == 1 {
            self.leases.granted(id, sent, epoch);
        }
        Ok(Some(record))
    }

    fn leased(&self, id: &SessionId) -> bool {
        self.leases.trusted(id)
    }

    async fn save(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<bool, StoreError> {
        Ok(self.save_with(record, idle_ttl, None).await?.done)
    }

    /// On one Redis, one script (`SAVE`): the announcement costs no
    /// round trip of its own. On a Redis Cluster the control log and
    /// channel are in other slots: the record alone, as [`Self::save`].
    async fn save_announcing(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        changed: &ControlMessage,
    ) -> Result<Saved, StoreError> {
        let announcement = self.publisher.inline(changed)?;
        let carried = announcement.is_some();
        let wrote = self.save_with(record, idle_ttl, announcement).await?;
        let announced = wrote.done && carried;
        if announced {
            wrote.count(changed);
        }
        Ok(Saved {
            written: wrote.done,
            announced,
        })
    }

    async fn rehost(
        &self,
        record: &SessionRecord,
        from: &str,
        idle_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let json = serde_json::to_string(record).map_err(corrupt)?;
        let args = [json, millis(idle_ttl).to_string(), from.to_owned()];
        let reply = self
            .write("session_rehost", &REHOST, &record.id, &[], &args)
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    async fn subscribe(
        &self,
        id: &SessionId,
        uri: &str,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        let args = [uri.to_owned(), max.to_string()];
        let reply = self
            .write("session_subscribe", &SUBSCRIBE, id, &[], &args)
            .await?;
        match reply::int(&reply)? {
            SUB_GONE => Ok(Subscribed::SessionGone),
            SUB_ADDED => Ok(Subscribed::Added),
            SUB_PRESENT => Ok(Subscribed::AlreadySubscribed),
            SUB_FULL => Ok(Subscribed::Full),
            other => Err(corrupt(format_args!("unknown subscribe reply {other}"))),
        }
    }

    async fn unsubscribe(&self, id: &SessionId, uri: &str) -> Result<bool, StoreError> {
        let reply = self
            .write(
                "session_unsubscribe",
                &UNSUBSCRIBE,
                id,
                &[],
                &[uri.to_owned()],
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    async fn touch(&self, id: &SessionId, idle_ttl: Duration) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .script(
                "session_touch",
                TOUCH
                    .key(self.keys.session(id))
                    .key(self.keys.subs(id))
                    .arg(millis(idle_ttl)),
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    /// Each bucket of the index in turn (starting one further at each
    /// call, so none waits behind another), until `max` are taken.
    async fn take_expired(&self, max: usize) -> Result<Vec<SessionId>, StoreError> {
        let indexes = self.keys.session_expiry_all();
        let start = self.next_bucket.fetch_add(1, Ordering::Relaxed) % indexes.len();
        let mut taken = Vec::new();
        for index in indexes.iter().cycle().skip(start).take(indexes.len()) {
            if taken.len() >= max {
                break;
            }
            taken.extend(self.take_expired_in(index, max - taken.len()).await?);
        }
        Ok(taken)
    }
    async fn ping(&self) -> Result<(), StoreError> {
        if !self.pubsub.is_connected() {
            return Err(StoreError::Unavailable(
                "redis pub/sub connection is down".into(),
            ));
        }
        if !self.redis.primary_known() {
            return Err(StoreError::Unavailable(
                "no redis primary: waiting for the sentinels to name one".into(),
            ));
        }
        self.redis.cmd("ping", &redis::cmd("PING")).await.map(drop)
    }

    async fn ended(&self, id: &SessionId) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .cmd(
                "session_ended",
                redis::cmd("EXISTS").arg(self.keys.ended(id)),
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    /// One round trip on one Redis: the session's keys, its streams (all in
    /// its slot) and its entry in the expiry index, in one script (`END`,
    /// after any other node let its lease go). On a Redis Cluster the index
    /// is in another slot: its entry goes in a second round trip, after the
    /// keys.
    async fn delete(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(self.end_here(id, None).await?.done)
    }

    /// One script on the session's slot: the record, its streams (all in
    /// that slot), and on one Redis its expiry index entry and the
    /// announcement (`END`); on a Redis Cluster the index entry follows
    /// in a second round trip and the caller publishes.
    async fn end(
        &self,
        id: &SessionId,
        _events: &dyn EventLog,
        ended: &ControlMessage,
    ) -> Result<Ended, StoreError> {
        let announcement = self.publisher.inline(ended)?;
        let announced = announcement.is_some();
        let wrote = self.end_here(id, announcement).await?;
        if announced {
            wrote.count(ended);
        }
        Ok(Ended {
            existed: wrote.done,
            streams_deleted: true,
            announced,
        })
    }
}

/// What [`SAVE`] or [`END`] did, from its reply: 1 when it wrote (or the
/// session was live), plus 2 when the announcement it carried was left out.
#[derive(Debug, Clone, Copy)]
struct Wrote {
    /// The record was written, or (an end) the session was live.
    done: bool,
    /// The announcement it carried was for the other nodes, and there were
    /// none ([`crate::bus::ANNOUNCE`]).
    left_out: bool,
}

impl Wrote {
    fn of(reply: &Value) -> Result<Self, StoreError> {
        let bits = reply::int(reply)?;
        Ok(Self {
            done: bits & 1 == 1,
            left_out: bits & 2 == 2,
        })
    }

    /// Counts the carried `message` as published, or as not sent.
    fn count(self, message: &ControlMessage) {
        if self.left_out {
            unsent(message.kind());
        } else {
            counted(message.kind());
        }
    }
}

impl RedisSessionStore {
    /// Replaces a live record ([`SAVE`]), with `announcement` in the same
    /// script.
    async fn save_with(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        announcement: Option<Announcement>,
    ) -> Result<Wrote, StoreError> {
        let json = serde_json::to_string(record).map_err(corrupt)?;
        let mut args = vec![json, millis(idle_ttl).to_string()];
        let mut more = Vec::new();
        if let Some(announcement) = announcement {
            announcement.append_to(&mut more, &mut args);
        }
        let reply = self
            .write("session_save", &SAVE, &record.id, &more, &args)
            .await?;
        Wrote::of(&reply)
    }

    /// [`SessionStore::end`] on one Redis, or on a Redis Cluster with the
    /// announcement left to the caller: one script ([`END`]) on the
    /// session's slot, then on a Redis Cluster the expiry index's entry (in
    /// another slot) in a second round trip.
    async fn end_here(
        &self,
        id: &SessionId,
        announcement: Option<Announcement>,
    ) -> Result<Wrote, StoreError> {
        let index = self.keys.session_expiry(id);
        let one_slot = !self.redis.is_cluster();
        let (streams, streams_args) = streams_of(&self.keys, &self.redis, id);
        let mut more = vec![self.keys.ended(id), streams];
        let mut args = vec![millis(mcp_cluster_store::ENDED_MEMORY).to_string()];
        args.extend(streams_args);
        if one_slot {
            more.push(index.clone());
            args.push(id.as_str().to_owned());
            if let Some(announcement) = announcement {
                announcement.append_to(&mut more, &mut args);
            }
        }
        let reply = self.write("session_delete", &END, id, &more, &args).await?;
        self.leases.forget(id);
        self.closed.forget_group(id.as_str());
        if !one_slot {
            self.redis
                .cmd(
                    "session_unindex",
                    redis::cmd("ZREM").arg(index).arg(id.as_str()),
                )
                .await?;
        }
        Wrote::of(&reply)
    }

    /// Three round trips: the ids due in one bucket of the index; their
    /// records' remaining TTLs (on a Redis Cluster, each on its own shard);
    /// then `ZREM` for the expired ones (the caller whose `ZREM` removed an
    /// id owns it, so each is returned once cluster-wide) and a new score
    /// for the live ones.
    async fn take_expired_in(&self, index: &str, max: usize) -> Result<Vec<SessionId>, StoreError> {
        let now = now_ms();

        let due = self
            .redis
            .cmd(
                "expiry_due",
                redis::cmd("ZRANGEBYSCORE")
                    .arg(index)
                    .arg("-inf")
                    .arg(now)
                    .arg("LIMIT")
                    .arg(0)
                    .arg(max),
            )
            .await?;
        let mut ids = Vec::new();
        for member in reply::array(due)? {
            let text = reply::text(member)?;
            match text.parse::<SessionId>() {
                Ok(id) => ids.push(id),
                Err(_) => {
                    // Not ours to keep: drop the malformed member.
                    self.redis
                        .cmd("expiry_drop", redis::cmd("ZREM").arg(index).arg(&text))
                        .await?;
                }
            }
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ttls: Vec<redis::Cmd> = ids
            .iter()
            .map(|id| redis::cmd("PTTL").arg(self.keys.session(id)).clone())
            .collect();
        let ttls = self.redis.each("expiry_ttls", &ttls).await?;
        let mut settle = redis::pipe();
        let mut expired = Vec::new();
        for (id, ttl) in ids.into_iter().zip(ttls) {
            let ttl = reply::int(&ttl)?;
            // `PTTL` answers 0 for a key with less than a millisecond
            // left: still alive, and due again at once.
            if ttl >= 0 {
                // Still alive: due again when its TTL can have run out.
                settle
                    .cmd("ZADD")
                    .arg(index)
                    .arg("XX")
                    .arg(now.saturating_add(ttl.unsigned_abs().max(1)))
                    .arg(id.as_str())
                    .ignore();
            } else {
                // -2: gone; -1: no TTL (not a record this store wrote).
                // Counting 0 as gone would drop a session from the index
                // without handing it to anyone: its streams would stay.
                settle.cmd("ZREM").arg(index).arg(id.as_str());
                if ttl == -2 {
                    expired.push(Some(id));
                } else {
                    expired.push(None);
                }
            }
        }
        let removed = reply::array(self.redis.pipe("expiry_settle", &settle).await?)?;
        Ok(expired
            .into_iter()
            .zip(removed)
            .filter_map(|(id, removed)| id.filter(|_| matches!(reply::int(&removed), Ok(1))))
            .collect())
    }
}
