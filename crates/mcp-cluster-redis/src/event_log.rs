//! [`RedisEventLog`]: the SSE event log on Redis Streams.
//!
//! One Redis Stream per SSE stream, its entry ids minted by `XADD *`, so
//! positions are unique and increasing within the stream whichever node
//! appends. A meta hash beside it holds what a Redis Stream cannot say by
//! itself: whether the stream is closed, its newest entry, and the newest
//! entry dropped by retention. Each operation is one Lua script (one round
//! trip, atomic), so a read sees the entries and the meta of one instant.
//!
//! Retention, as in the in-memory log: at most `max_events_per_stream`
//! events (exact trimming, recording the newest dropped id), an open stream
//! expires `idle_stream_ttl_ms` after its last append or touch, a closed one
//! `closed_stream_ttl_ms` after its close; Redis expires the keys itself.
//!
//! Bytes, as in the in-memory log: the meta hash counts the bytes of the
//! events a stream holds (`bytes`); past `max_stream_bytes` the oldest are
//! dropped (the newest is always kept). A stream closed by this node
//! counts against this node's closed-stream budget (a [`Ledger`], per node
//! and per owner, the client that made the stream); past it the oldest
//! closed streams are deleted (`UNLINK`) before their TTL, as the ledger
//! picks them. Each node answers for the streams it closed, so Redis holds
//! at most the nodes' budgets together, with no shared counter on the
//! request path.
//!
//! Reads follow the in-memory rules: `after` below the trimmed boundary is
//! `Trimmed`; `after` equal to `0-0`, the boundary or an entry id is
//! accepted; anything else is `EventNotFound`; `closed` is set only when the
//! batch reaches the end of a closed stream.

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use mcp_cluster_store::{
    EventId, EventLog, Ledger, Position, ReadBatch, RequestId, SessionId, StoreError, StoredEvent,
    StreamId, Wakeup,
};
use redis::{Script, Value};

use crate::config::RedisRetention;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::{
    ENTRY_DATA, Keys, META_BYTES, META_CLOSED, META_LAST, META_REQUESTS, META_TRIMMED,
};
use crate::pubsub::PubSub;
use crate::reply;

/// Most events one read returns, whatever `max` asks: bounds one reply.
/// A capped batch is simply not the end of the stream (`closed` is false).
pub const MAX_READ_BATCH: usize = 10_000;

/// Lua shared by every script: field names (from [`crate::keys`]) and a
/// helper that lengthens a key's TTL but never shortens it.
fn prelude() -> String {
    format!(
        "local CLOSED, LAST, TRIMMED, DATA, REQUESTS, BYTES = '{META_CLOSED}', '{META_LAST}', '{META_TRIMMED}', '{ENTRY_DATA}', '{META_REQUESTS}', '{META_BYTES}'\n{}",
        r"
local function extend(key, ttl)
  if redis.call('PTTL', key) < tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
end
"
    )
}

fn script(body: &str) -> Script {
    Script::new(&format!("{}{body}", prelude()))
}

/// KEYS: meta, session's stream set. ARGV: stream id, idle TTL ms, meta key
/// prefix of the session, the JSON array of the stream's request ids (empty
/// for none). Also drops up to two set members whose stream expired, so the
/// set tracks the live streams within a constant factor.
static CREATE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
redis.call('HSET', KEYS[1], CLOSED, '0')
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], REQUESTS, ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
for _, old in ipairs(redis.call('SRANDMEMBER', KEYS[2], 2)) do
  if redis.call('EXISTS', ARGV[3] .. old) == 0 then
    redis.call('SREM', KEYS[2], old)
  end
end
extend(KEYS[2], ARGV[2])
return 1
",
    )
});

/// KEYS: the session's record, the stream's meta, the session's stream
/// set. ARGV: stream id, idle TTL ms. Creates a session's standalone
/// stream, open and empty, unless it exists (open or closed), as `CREATE`
/// does but only while the session's record exists. Returns the stream's
/// last position (`0-0` for none yet), or 0 when the session is gone
/// (nothing is created). Run by the session store, at the stream's first
/// use.
pub(crate) static OPEN_STANDALONE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HSETNX', KEYS[2], CLOSED, '0') == 1 then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  redis.call('SADD', KEYS[3], ARGV[1])
  extend(KEYS[3], ARGV[2])
end
return redis.call('HGET', KEYS[2], LAST) or '0-0'
",
    )
});

/// KEYS: stream, meta, set. ARGV: data, max events, idle TTL ms, wake
/// channel, max bytes, the position (`<ms>-<seq>`, `0-0` for none yet)
/// that must be the stream's last or `''`, and the publish command
/// (`PUBLISH`, or `SPUBLISH` on a Redis Cluster). Returns `{entry id, 1 if older
/// events were dropped else 0}`, nil for a missing or closed stream,
/// `{'lost'}` when the stream's last event is older than that position (the
/// store lost it), `{'ahead'}` when it is newer (an append not seen
/// acknowledged went in).
static APPEND: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if redis.call('HGET', KEYS[2], CLOSED) ~= '0' then
  return false
end
if ARGV[6] ~= '' then
  local last = redis.call('HGET', KEYS[2], LAST) or '0-0'
  local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
  local fms, fseq = string.match(ARGV[6], '^(%d+)-(%d+)$')
  lms, lseq, fms, fseq = tonumber(lms), tonumber(lseq), tonumber(fms), tonumber(fseq)
  if lms < fms or (lms == fms and lseq < fseq) then
    return {'lost'}
  end
  if lms > fms or lseq > fseq then
    return {'ahead'}
  end
end
local id = redis.call('XADD', KEYS[1], '*', DATA, ARGV[1])
local bytes = redis.call('HINCRBY', KEYS[2], BYTES, #ARGV[1])
local len = redis.call('XLEN', KEYS[1])
local excess = 0
while len > 1 and (len > tonumber(ARGV[2]) or bytes > tonumber(ARGV[5])) do
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  local fields = oldest[2]
  for i = 1, #fields - 1, 2 do
    if fields[i] == DATA then
      bytes = bytes - #fields[i + 1]
    end
  end
  redis.call('XDEL', KEYS[1], oldest[1])
  redis.call('HSET', KEYS[2], TRIMMED, oldest[1])
  len = len - 1
  excess = excess + 1
end
if excess > 0 then
  redis.call('HSET', KEYS[2], BYTES, bytes)
end
redis.call('HSET', KEYS[2], LAST, id)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
extend(KEYS[3], ARGV[3])
redis.call(ARGV[7], ARGV[4], id)
if excess > 0 then
  return {id, 1}
end
return {id, 0}
",
    )
});

/// KEYS: stream, meta, set. ARGV: closed TTL ms, wake channel, publish
/// command. Returns 0 for
/// a missing stream, 1 for a closed one (closing twice changes nothing), 2
/// + the bytes of its events when this call closed it.
static CLOSE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local closed = redis.call('HGET', KEYS[2], CLOSED)
if not closed then
  return 0
end
if closed == '0' then
  redis.call('HSET', KEYS[2], CLOSED, '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
  extend(KEYS[3], ARGV[1])
  redis.call(ARGV[3], ARGV[2], 'closed')
  return 2 + tonumber(redis.call('HGET', KEYS[2], BYTES) or '0')
end
return 1
",
    )
});

/// Read status: the stream does not exist.
const READ_NOT_FOUND: i64 = 0;
/// Read status: `after` is below the trimmed boundary.
const READ_TRIMMED: i64 = 1;
/// Read status: `after` names no event.
const READ_UNKNOWN_POSITION: i64 = 2;
/// Read status: success, followed by `closed` (0/1) and the entries.
const READ_OK: i64 = 3;
/// Read status: the stored boundary does not parse.
const READ_CORRUPT: i64 = 4;

/// KEYS: stream, meta. ARGV: after (`<ms>-<seq>`, no leading zeros), max
/// events. Returns `{status}` or `{READ_OK, closed, entries}`. Entry ids
/// are compared as decimal strings: by length, then bytewise, for each part.
static READ: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local function num_less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local meta = redis.call('HMGET', KEYS[2], CLOSED, TRIMMED)
if not meta[1] then
  return {0}
end
local after = ARGV[1]
local trimmed = meta[2] or '0-0'
local am, as = string.match(after, '^(%d+)-(%d+)$')
local tm, ts = string.match(trimmed, '^(%d+)-(%d+)$')
if not tm then
  return {4}
end
if (am ~= tm and num_less(am, tm)) or (am == tm and num_less(as, ts)) then
  return {1}
end
if after ~= '0-0' and after ~= trimmed and #redis.call('XRANGE', KEYS[1], after, after) == 0 then
  return {2}
end
local max = tonumber(ARGV[2])
local entries = redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', max + 1)
local at_end = #entries <= max
if not at_end then
  entries[#entries] = nil
end
local closed = 0
if meta[1] ~= '0' and at_end then
  closed = 1
end
return {3, closed, entries}
",
    )
});

/// KEYS: stream, meta, set. ARGV: idle TTL ms, closed TTL ms. Renews the
/// TTL that applies (idle while open, closed once closed). Returns 0 for a
/// missing stream.
static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local closed = redis.call('HGET', KEYS[2], CLOSED)
if not closed then
  return 0
end
local ttl = ARGV[1]
if closed ~= '0' then
  ttl = ARGV[2]
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
extend(KEYS[3], ttl)
return 1
",
    )
});

/// Lua: `delete_streams(set, stream_prefix, meta_prefix, wake_prefix,
/// publish)` deletes every stream of a session (its stream set, then the
/// stream key prefix, meta key prefix, wake channel prefix of the session
/// and the publish command) and wakes its readers (who re-read and find it
/// gone); the number of streams. The session's own scripts run it too: its
/// keys are all in the session's slot.
pub(crate) const DELETE_STREAMS: &str = r"
local function delete_streams(set, stream_prefix, meta_prefix, wake_prefix, publish)
  local ids = redis.call('SMEMBERS', set)
  for _, id in ipairs(ids) do
    redis.call('DEL', stream_prefix .. id, meta_prefix .. id)
    redis.call(publish, wake_prefix .. id, 'deleted')
  end
  redis.call('DEL', set)
  return #ids
end
";

/// KEYS: the session's stream set. ARGV: stream key prefix, meta key
/// prefix, wake channel prefix, publish command. [`DELETE_STREAMS`].
static DELETE_SESSION: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        "{DELETE_STREAMS}
return delete_streams(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
"
    ))
});

/// The streams a node closed, their bytes, their owners, grouped by
/// session: shared by the event log, which admits them, and the session
/// store, which forgets a session's when it deletes them with the session.
pub(crate) type ClosedStreams = Ledger<(SessionId, StreamId)>;

/// The ledger of a node's closed streams, within `retention`'s budget.
pub(crate) fn closed_streams(retention: &RedisRetention) -> Arc<ClosedStreams> {
    Arc::new(Ledger::new(retention.closed_streams).reporting("closed_streams", "stream"))
}

/// The Redis [`EventLog`]. Holds no per-stream state: any node reads and
/// writes any stream.
#[derive(Debug)]
pub struct RedisEventLog {
    redis: Redis,
    keys: Keys,
    /// Max events as sent to Redis (clamped to what it parses).
    max_events: u64,
    idle_ttl_ms: u64,
    closed_ttl_ms: u64,
    /// Bytes of events kept per stream.
    max_stream_bytes: u64,
    /// The streams this node closed, their bytes, their owners, grouped by
    /// session.
    closed: Arc<ClosedStreams>,
    /// Hands out wake-ups from the node's one pub/sub connection.
    pubsub: PubSub,
}

impl RedisEventLog {
    /// One field of the stream's meta hash (`Nil` when unset); the
    /// stream is missing when its `closed` field is.
    async fn meta_field(
        &self,
        session: &SessionId,
        stream: &StreamId,
        field: &str,
    ) -> Result<Value, StoreError> {
        let command = redis::cmd("HMGET")
            .arg(self.keys.meta(session, stream))
            .arg(META_CLOSED)
            .arg(field)
            .clone();
        let reply = self.redis.cmd("stream_meta", &command).await?;
        let mut fields = reply::array(reply)?.into_iter();
        let (Some(closed), Some(value)) = (fields.next(), fields.next()) else {
            return Err(corrupt("short HMGET reply"));
        };
        if closed == Value::Nil {
            return Err(StoreError::StreamNotFound);
        }
        Ok(value)
    }

    /// A position kept in the stream's meta hash (`last`, `trimmed`);
    /// [`Position::START`] when unset.
    async fn meta_position(
        &self,
        session: &SessionId,
        stream: &StreamId,
        field: &str,
    ) -> Result<Position, StoreError> {
        match self.meta_field(session, stream, field).await? {
            Value::Nil => Ok(Position::START),
            position => reply::position(position),
        }
    }

    pub(crate) fn new(
        redis: Redis,
        keys: Keys,
        retention: RedisRetention,
        closed: Arc<ClosedStreams>,
        pubsub: PubSub,
    ) -> Self {
        Self {
            redis,
            keys,
            max_events: u64::try_from(retention.max_events_per_stream)
                .unwrap_or(u64::MAX)
                .min(i64::MAX.unsigned_abs()),
            idle_ttl_ms: retention.idle_stream_ttl_ms.max(1),
            closed_ttl_ms: retention.closed_stream_ttl_ms.max(1),
            // Lua numbers are doubles: beyond 2^53 the bound is "none".
            max_stream_bytes: retention.max_stream_bytes.min(1 << 53),
            closed,
            pubsub,
        }
    }
}

impl RedisEventLog {
    /// One append; with `follows`, only when that is the stream's last
    /// position (see [`EventLog::append_following`]).
    async fn append_after(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
        follows: Option<Position>,
    ) -> Result<EventId, StoreError> {
        let reply = self
            .redis
            .script_kept(
                "stream_append",
                APPEND
                    .key(self.keys.stream(session, stream))
                    .key(self.keys.meta(session, stream))
                    .key(self.keys.streams(session))
                    .arg(&*data)
                    .arg(self.max_events)
                    .arg(self.idle_ttl_ms)
                    .arg(self.keys.wake(session, stream))
                    .arg(self.max_stream_bytes)
                    .arg(follows.map(|p| p.to_string()).unwrap_or_default())
                    .arg(self.redis.publish_command()),
            )
            .await?;
        if reply == Value::Nil {
            return Err(StoreError::StreamNotFound);
        }
        let parts = reply::array(reply)?;
        if let [refused] = parts.as_slice() {
            return match reply::text(refused.clone())?.as_str() {
                "lost" => {
                    mcp_cluster_telemetry::metrics::metrics()
                        .event_log_lost
                        .inc();
                    Err(StoreError::EventsLost)
                }
                "ahead" => Err(StoreError::Conflict),
                other => Err(corrupt(format!("append refused as {other:?}"))),
            };
        }
        let mut parts = parts.into_iter();
        let (Some(id), Some(trimmed)) = (parts.next(), parts.next()) else {
            return Err(corrupt("short append reply"));
        };
        if reply::int(&trimmed)? == 1 {
            mcp_cluster_telemetry::metrics::metrics().event_trims.inc();
        }
        Ok(EventId {
            stream: stream.clone(),
            position: reply::position(id)?,
        })
    }

    /// Accounts for a stream this node closed, and deletes the oldest
    /// closed streams beyond the budget.
    async fn closed_now(&self, session: &SessionId, stream: &StreamId, owner: &str, bytes: u64) {
        let ttl = std::time::Duration::from_millis(self.closed_ttl_ms);
        let dropped = self.closed.admit(
            (session.clone(), stream.clone()),
            owner,
            Some(session.as_str()),
            bytes,
            ttl,
        );
        if dropped.is_empty() {
            return;
        }
        // Keys of different sessions sit in different slots of a Redis
        // Cluster: one UNLINK per stream.
        for (session, stream) in dropped {
            let unlink = redis::cmd("UNLINK")
                .arg(self.keys.stream(&session, &stream))
                .arg(self.keys.meta(&session, &stream))
                .clone();
            if let Err(err) = self.redis.cmd("stream_evict", &unlink).await {
                // Their TTL deletes them anyway.
                tracing::warn!(error = %err, "Closed streams over the byte budget not deleted.");
                return;
            }
        }
    }
}

#[async_trait]
impl EventLog for RedisEventLog {
    async fn create_stream_as(
        &self,
        session: &SessionId,
        stream: &StreamId,
        requests: &[RequestId],
    ) -> Result<(), StoreError> {
        let requests = if requests.is_empty() {
            String::new()
        } else {
            serde_json::to_string(requests).map_err(corrupt)?
        };
        self.redis
            .script_kept(
                "stream_create",
                CREATE
                    .key(self.keys.meta(session, stream))
                    .key(self.keys.streams(session))
                    .arg(stream.as_str())
                    .arg(self.idle_ttl_ms)
                    .arg(self.keys.meta_prefix(session))
                    .arg(requests),
            )
            .await?;
        Ok(())
    }

    async fn stream_requests(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Vec<RequestId>, StoreError> {
        let requests = self.meta_field(session, stream, META_REQUESTS).await?;
        match reply::opt_text(requests)? {
            Some(json) => serde_json::from_str(&json).map_err(corrupt),
            None => Ok(Vec::new()),
        }
    }

    async fn append(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
    ) -> Result<EventId, StoreError> {
        self.append_after(session, stream, data, None).await
    }

    async fn append_following(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
        follows: Position,
    ) -> Result<EventId, StoreError> {
        self.append_after(session, stream, data, Some(follows))
            .await
    }

    async fn close_stream(
        &self,
        session: &SessionId,
        stream: &StreamId,
        owner: &str,
    ) -> Result<(), StoreError> {
        let reply = self
            .redis
            .script_kept(
                "stream_close",
                CLOSE
                    .key(self.keys.stream(session, stream))
                    .key(self.keys.meta(session, stream))
                    .key(self.keys.streams(session))
                    .arg(self.closed_ttl_ms)
                    .arg(self.keys.wake(session, stream))
                    .arg(self.redis.publish_command()),
            )
            .await?;
        let n = reply::int(&reply)?;
        if n == 0 {
            return Err(StoreError::StreamNotFound);
        }
        if n >= 2 {
            let bytes = u64::try_from(n - 2).unwrap_or(0);
            self.closed_now(session, stream, owner, bytes).await;
        }
        Ok(())
    }

    async fn read(
        &self,
        session: &SessionId,
        stream: &StreamId,
        after: Position,
        max: usize,
    ) -> Result<ReadBatch, StoreError> {
        let max = max.min(MAX_READ_BATCH);
        let reply = self
            .redis
            .script(
                "stream_read",
                READ.key(self.keys.stream(session, stream))
                    .key(self.keys.meta(session, stream))
                    .arg(after.to_string())
                    .arg(max),
            )
            .await?;
        let mut parts = reply::array(reply)?.into_iter();
        let status = parts.next().ok_or_else(|| corrupt("empty read reply"))?;
        match reply::int(&status)? {
            READ_OK => {}
            READ_NOT_FOUND => return Err(StoreError::StreamNotFound),
            READ_TRIMMED => return Err(StoreError::Trimmed),
            READ_UNKNOWN_POSITION => return Err(StoreError::EventNotFound),
            READ_CORRUPT => return Err(corrupt("malformed trimmed position")),
            other => return Err(corrupt(format_args!("unknown read status {other}"))),
        }
        let (Some(closed), Some(entries)) = (parts.next(), parts.next()) else {
            return Err(corrupt("short read reply"));
        };
        let events = reply::array(entries)?
            .into_iter()
            .map(entry)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ReadBatch {
            events,
            closed: reply::int(&closed)? == 1,
        })
    }

    async fn tail(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError> {
        self.meta_position(session, stream, META_LAST).await
    }

    async fn oldest(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError> {
        self.meta_position(session, stream, META_TRIMMED).await
    }

    async fn subscribe(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Wakeup, StoreError> {
        let exists = self
            .redis
            .cmd(
                "stream_exists",
                redis::cmd("EXISTS").arg(self.keys.meta(session, stream)),
            )
            .await?;
        if reply::int(&exists)? == 0 {
            return Err(StoreError::StreamNotFound);
        }
        self.pubsub.wake(self.keys.wake(session, stream)).await
    }

    async fn touch(&self, session: &SessionId, stream: &StreamId) -> Result<(), StoreError> {
        let reply = self
            .redis
            .script(
                "stream_touch",
                TOUCH
                    .key(self.keys.stream(session, stream))
                    .key(self.keys.meta(session, stream))
                    .key(self.keys.streams(session))
                    .arg(self.idle_ttl_ms)
                    .arg(self.closed_ttl_ms),
            )
            .await?;
        found(&reply)
    }

    async fn delete_session(&self, session: &SessionId) -> Result<(), StoreError> {
        let (set, args) = streams_of(&self.keys, &self.redis, session);
        self.redis
            .script("streams_delete", DELETE_SESSION.key(set).arg(&args[..]))
            .await?;
        self.closed.forget_group(session.as_str());
        Ok(())
    }

    fn over_budget(&self) -> bool {
        self.closed.over_budget()
    }
}

/// What [`DELETE_STREAMS`] takes for `session`: its key (the stream set)
/// and its four arguments.
pub(crate) fn streams_of(keys: &Keys, redis: &Redis, session: &SessionId) -> (String, [String; 4]) {
    (
        keys.streams(session),
        [
            keys.stream_prefix(session),
            keys.meta_prefix(session),
            keys.wake_prefix(session),
            redis.publish_command().to_owned(),
        ],
    )
}

/// A script's 0 (missing stream) / 1 (done) reply.
fn found(reply: &Value) -> Result<(), StoreError> {
    if reply::int(reply)? == 0 {
        Err(StoreError::StreamNotFound)
    } else {
        Ok(())
    }
}

/// One `XRANGE` entry: `[id, [field, value, ...]]`.
fn entry(value: Value) -> Result<StoredEvent, StoreError> {
    let mut parts = reply::array(value)?.into_iter();
    let (Some(id), Some(fields)) = (parts.next(), parts.next()) else {
        return Err(corrupt("short stream entry"));
    };
    let position = reply::position(id)?;
    let mut fields = reply::array(fields)?.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if reply::text(name)? == ENTRY_DATA {
            return Ok(StoredEvent {
                position,
                data: Arc::from(reply::text(value)?),
            });
        }
    }
    Err(corrupt(format_args!("stream entry {position} has no data")))
}
