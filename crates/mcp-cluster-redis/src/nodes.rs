//! [`RedisNodes`]: heartbeats (`mcp:{nodes}:alive:<node>` with `PX`), the
//! set of known nodes (`mcp:{nodes}:all`) and each node's open streams
//! (`mcp:{nodes:<node>:<b>}:streams`, stream id → JSON [`OpenStream`], in
//! [`crate::keys::BUCKETS`] buckets by stream).
//!
//! A claim takes a dead node's streams in steps, each atomic on one slot:
//! a script checks that the node is known and its heartbeat expired (and
//! takes the streams versions before the buckets kept in the `{nodes}`
//! slot); then each bucket is read and deleted in one transaction; last the
//! node leaves the set. A stream is handed out once however many survivors
//! claim at the same time, since each bucket goes whole to whoever took it
//! first; a claimer that dies half way leaves the node in the set, and the
//! next claim takes the buckets left.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_store::{NodeId, NodeRegistry, OpenStream, StoreError, StreamId};
use redis::{Script, Value};
use tracing::warn;

use crate::clock::with_now_ms;
use crate::config::millis;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::Keys;
use crate::reply;

/// KEYS: the node's heartbeat, the nodes set, the set's `whole` mark, the
/// `alone` key. ARGV: heartbeat TTL ms, node id. Marks the node alive and a
/// member; 1 when that added it to the set. On a Redis without the mark
/// (new, or one that lost its data, and with it members that will add
/// themselves again at their next heartbeat) sets it to now plus the TTL:
/// from then on the set holds every live node. Once it is past, a node that
/// finds itself the set's only member names itself in `alone` (for the TTL,
/// renewed by each of its heartbeats, and gone with its heartbeat); a
/// heartbeat that finds more than one member deletes it, in the same script
/// as the `SADD` that made them more. The scripts that announce read it
/// (see `crate::bus`).
static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| {
    with_now_ms(
        r"
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
local added = redis.call('SADD', KEYS[2], ARGV[2])
local since = tonumber(redis.call('GET', KEYS[3]))
if not since then
  redis.call('SET', KEYS[3], now_ms() + tonumber(ARGV[1]))
elseif redis.call('SCARD', KEYS[2]) == 1 and now_ms() >= since then
  redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[1])
  return added
end
redis.call('DEL', KEYS[4])
return added
",
    )
});

/// KEYS: the nodes set. ARGV: heartbeat key prefix, heartbeat key suffix.
/// Returns the members whose heartbeat expired.
static DEAD_NODES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local dead = {}
for _, node in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. node .. ARGV[2]) == 0 then
    dead[#dead + 1] = node
  end
end
return dead
",
    )
});

/// KEYS: heartbeat, unbucketed open streams hash, nodes set. ARGV: node
/// id. If the node is known and its heartbeat expired, returns the
/// unbucketed hash as `[field, value, ...]` (deleting it): the claim goes
/// on. Else nil: nothing to claim.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 0 then
  return false
end
local open = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2])
return open
",
    )
});

/// KEYS: the key ring hash. ARGV: fresh key id, fresh `<id>:<secret>`,
/// rotate ms, keep ms. Values are `<made ms>:<id>:<secret>`. Adds the fresh
/// key when the newest is `rotate` old (or none), drops those older than
/// `rotate + keep` but the newest; returns the values, newest first.
static STATE_KEYS: LazyLock<Script> = LazyLock::new(|| {
    with_now_ms(
        r"
local now = now_ms()
local ring = {}
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
  local made = tonumber(string.match(v, '^(%d+):'))
  if made then ring[#ring + 1] = {made, v} end
end
table.sort(ring, function(a, b) return a[1] > b[1] end)
if #ring == 0 or now - ring[1][1] >= tonumber(ARGV[3]) then
  local v = now .. ':' .. ARGV[2]
  redis.call('HSET', KEYS[1], ARGV[1], v)
  table.insert(ring, 1, {now, v})
end
local out = {}
for i, e in ipairs(ring) do
  if i == 1 or now - e[1] < tonumber(ARGV[3]) + tonumber(ARGV[4]) then
    out[#out + 1] = e[2]
  else
    redis.call('HDEL', KEYS[1], string.match(e[2], '^%d+:([^:]+):'))
  end
end
return out
",
    )
});

/// The Redis [`NodeRegistry`].
#[derive(Debug)]
pub struct RedisNodes {
    redis: Redis,
    keys: Keys,
}

impl RedisNodes {
    pub(crate) fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys }
    }
}

#[async_trait]
impl NodeRegistry for RedisNodes {
    async fn state_keys(
        &self,
        fresh: &str,
        rotate: Duration,
        keep: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let id = fresh.split(':').next().unwrap_or_default();
        let reply = self
            .redis
            .script(
                "state_keys",
                STATE_KEYS
                    .key(self.keys.state_keys())
                    .arg(id)
                    .arg(fresh)
                    .arg(millis(rotate).max(1))
                    .arg(millis(keep)),
            )
            .await?;
        reply::array(reply)?
            .into_iter()
            .map(|v| {
                let text = reply::text(v)?;
                // `<made>:<id>:<secret>` → `<id>:<secret>`.
                text.split_once(':')
                    .map(|(_, key)| key.to_owned())
                    .ok_or_else(|| corrupt(format!("state key {text:?}")))
            })
            .collect()
    }

    async fn heartbeat(&self, node: &NodeId, ttl: Duration) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .script(
                "node_heartbeat",
                HEARTBEAT
                    .key(self.keys.node_alive(node))
                    .key(self.keys.nodes())
                    .key(self.keys.nodes_whole())
                    .key(self.keys.nodes_alone())
                    .arg(millis(ttl))
                    .arg(node.as_str()),
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    async fn leave(&self, node: &NodeId) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        // `alone` goes too: whoever it names, the next heartbeat of a node
        // alone sets it again.
        pipe.atomic()
            .cmd("DEL")
            .arg(self.keys.node_alive(node))
            .arg(self.keys.node_streams_unbucketed(node))
            .arg(self.keys.nodes_alone())
            .ignore()
            .cmd("SREM")
            .arg(self.keys.nodes())
            .arg(node.as_str())
            .ignore();
        self.redis.pipe("node_leave", &pipe).await?;
        let buckets: Vec<redis::Cmd> = self
            .keys
            .node_streams_all(node)
            .into_iter()
            .map(|bucket| redis::cmd("DEL").arg(bucket).clone())
            .collect();
        self.redis.each("node_leave", &buckets).await.map(drop)
    }

    async fn open_stream(&self, node: &NodeId, stream: &OpenStream) -> Result<(), StoreError> {
        let json = serde_json::to_string(stream).map_err(corrupt)?;
        self.redis
            .cmd(
                "node_stream_open",
                redis::cmd("HSET")
                    .arg(self.keys.node_streams(node, &stream.stream))
                    .arg(stream.stream.as_str())
                    .arg(json),
            )
            .await
            .map(drop)
    }

    async fn close_stream(&self, node: &NodeId, stream: &StreamId) -> Result<(), StoreError> {
        self.redis
            .cmd(
                "node_stream_close",
                redis::cmd("HDEL")
                    .arg(self.keys.node_streams(node, stream))
                    .arg(stream.as_str()),
            )
            .await
            .map(drop)
    }

    async fn alive(&self, node: &NodeId) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .cmd(
                "node_alive",
                redis::cmd("EXISTS").arg(self.keys.node_alive(node)),
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    async fn dead_nodes(&self) -> Result<Vec<NodeId>, StoreError> {
        let reply = self
            .redis
            .script(
                "nodes_dead",
                DEAD_NODES
                    .key(self.keys.nodes())
                    .arg(self.keys.node_prefix())
                    .arg(self.keys.node_alive_suffix()),
            )
            .await?;
        let mut dead = Vec::new();
        for member in reply::array(reply)? {
            let text = reply::text(member)?;
            match text.parse() {
                Ok(node) => dead.push(node),
                // Not ours to judge or remove; one bad member must not stop
                // orphan finalization for the others.
                Err(_) => warn!(member = %text, "Malformed node id in the node set skipped."),
            }
        }
        Ok(dead)
    }

    async fn claim_orphans(&self, dead: &NodeId) -> Result<Vec<OpenStream>, StoreError> {
        let reply = self
            .redis
            .script(
                "node_claim",
                CLAIM
                    .key(self.keys.node_alive(dead))
                    .key(self.keys.node_streams_unbucketed(dead))
                    .key(self.keys.nodes())
                    .arg(dead.as_str()),
            )
            .await?;
        if matches!(reply, Value::Nil) {
            return Ok(Vec::new());
        }
        let mut open = Vec::new();
        decode_open(dead, reply, &mut open)?;
        for bucket in self.keys.node_streams_all(dead) {
            let mut take = redis::pipe();
            take.atomic()
                .cmd("HGETALL")
                .arg(&bucket)
                .cmd("DEL")
                .arg(&bucket)
                .ignore();
            let taken = reply::array(self.redis.pipe("node_claim", &take).await?)?;
            if let Some(fields) = taken.into_iter().next() {
                decode_open(dead, fields, &mut open)?;
            }
        }
        self.redis
            .cmd(
                "node_claim",
                redis::cmd("SREM").arg(self.keys.nodes()).arg(dead.as_str()),
            )
            .await?;
        Ok(open)
    }
}

/// Adds the streams of a hash read as `[field, value, ...]` (or a map) to
/// `open`.
fn decode_open(dead: &NodeId, fields: Value, open: &mut Vec<OpenStream>) -> Result<(), StoreError> {
    let pairs = match fields {
        Value::Map(pairs) => pairs,
        fields => {
            let mut flat = reply::array(fields)?.into_iter();
            let mut pairs = Vec::new();
            while let (Some(field), Some(value)) = (flat.next(), flat.next()) {
                pairs.push((field, value));
            }
            pairs
        }
    };
    for (_stream, json) in pairs {
        let json = reply::text(json)?;
        // The claim is made: an entry that does not decode is reported
        // and skipped rather than losing the others with an error.
        match serde_json::from_str(&json) {
            Ok(stream) => open.push(stream),
            Err(err) => {
                warn!(node = %dead, %err, "Undecodable open stream of a dead node skipped.")
            }
        }
    }
    Ok(())
}
