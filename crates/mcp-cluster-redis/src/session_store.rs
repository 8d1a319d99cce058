//! [`RedisSessionStore`]: one JSON string per session with a `PX` idle TTL
//! (Redis expires idle sessions itself), its subscriptions in a set beside
//! it with the same TTL, and an index of sessions by expiry so that what an
//! expired session leaves behind (its streams) can be deleted.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use mcp_cluster_store::{SessionId, SessionRecord, SessionStore, StoreError, Subscribed};
use redis::{Script, Value};

use crate::config::millis;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::Keys;
use crate::pubsub::PubSub;
use crate::reply;

/// KEYS: session, subs. ARGV: JSON, TTL ms. Replaces a live record and
/// renews both TTLs; 1 when written, 0 when the session is gone.
static SAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if not redis.call('SET', KEYS[1], ARGV[1], 'XX', 'PX', ARGV[2]) then
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
",
    )
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

/// KEYS: session, subs. ARGV: URI, max. Adds the URI unless the set holds
/// `max` already; the set expires with the session.
static SUBSCRIBE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
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

/// KEYS: session, subs. ARGV: URI. 1 when the session lives, 0 otherwise.
static UNSUBSCRIBE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
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
}

/// Milliseconds since the Unix epoch on this node's clock (expiry index
/// scores; skew between nodes only delays a sweep, it never deletes a live
/// session: the record's own TTL decides).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl RedisSessionStore {
    pub(crate) fn new(redis: Redis, keys: Keys, pubsub: PubSub) -> Self {
        Self {
            redis,
            keys,
            next_bucket: AtomicUsize::new(0),
            pubsub,
        }
    }
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    async fn create(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<(), StoreError> {
        let json = serde_json::to_string(record).map_err(corrupt)?;
        let ttl = millis(idle_ttl);
        let set = redis::cmd("SET")
            .arg(self.keys.session(&record.id))
            .arg(json)
            .arg("NX")
            .arg("PX")
            .arg(ttl)
            .clone();
        let index = redis::cmd("ZADD")
            .arg(self.keys.session_expiry(&record.id))
            .arg(now_ms().saturating_add(ttl))
            .arg(record.id.as_str())
            .clone();
        let replies = self.redis.each("session_create", &[set, index]).await?;
        match replies.first() {
            Some(Value::Nil) => Err(StoreError::Conflict),
            Some(_) => Ok(()),
            None => Err(corrupt("empty create reply")),
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
        let Some(json) = reply::opt_text(record)? else {
            return Ok(None);
        };
        let mut record: SessionRecord = serde_json::from_str(&json).map_err(corrupt)?;
        for uri in reply::array(subs)? {
            record.subscriptions.insert(reply::text(uri)?);
        }
        Ok(Some(record))
    }

    async fn save(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<bool, StoreError> {
        let json = serde_json::to_string(record).map_err(corrupt)?;
        let reply = self
            .redis
            .script(
                "session_save",
                SAVE.key(self.keys.session(&record.id))
                    .key(self.keys.subs(&record.id))
                    .arg(json)
                    .arg(millis(idle_ttl)),
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    async fn subscribe(
        &self,
        id: &SessionId,
        uri: &str,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        let reply = self
            .redis
            .script(
                "session_subscribe",
                SUBSCRIBE
                    .key(self.keys.session(id))
                    .key(self.keys.subs(id))
                    .arg(uri)
                    .arg(max),
            )
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
            .redis
            .script(
                "session_unsubscribe",
                UNSUBSCRIBE
                    .key(self.keys.session(id))
                    .key(self.keys.subs(id))
                    .arg(uri),
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

    async fn delete(&self, id: &SessionId) -> Result<bool, StoreError> {
        let cmds = [
            redis::cmd("DEL").arg(self.keys.session(id)).clone(),
            redis::cmd("DEL").arg(self.keys.subs(id)).clone(),
            redis::cmd("SET")
                .arg(self.keys.ended(id))
                .arg("1")
                .arg("PX")
                .arg(millis(mcp_cluster_store::ENDED_MEMORY))
                .clone(),
            redis::cmd("ZREM")
                .arg(self.keys.session_expiry(id))
                .arg(id.as_str())
                .clone(),
        ];
        let replies = self.redis.each("session_delete", &cmds).await?;
        let deleted = replies
            .first()
            .ok_or_else(|| corrupt("empty delete reply"))?;
        Ok(reply::int(deleted)? == 1)
    }
}

impl RedisSessionStore {
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
