//! [`RedisNodes`]: heartbeats (`mcp:node:<node>:alive` with `PX`), the set
//! of known nodes (`mcp:nodes`) and each node's open streams
//! (`mcp:node:<node>:streams`, stream id → JSON [`OpenStream`]).
//!
//! A claim is one Lua script, so of several survivors exactly one takes a
//! dead node's streams: the first to run finds the node in `mcp:nodes` and
//! removes it with its streams; the others find nothing.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_store::{NodeId, NodeRegistry, OpenStream, StoreError, StreamId};
use redis::Script;
use tracing::warn;

use crate::config::millis;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::Keys;
use crate::reply;

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

/// KEYS: heartbeat, open streams hash, nodes set. ARGV: node id. Returns
/// the hash as `[field, value, ...]`, removing it and the node, if the node
/// is known and its heartbeat expired; else nothing.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {}
end
if redis.call('SREM', KEYS[3], ARGV[1]) == 0 then
  return {}
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
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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

    async fn heartbeat(&self, node: &NodeId, ttl: Duration) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(self.keys.node_alive(node))
            .arg("1")
            .arg("PX")
            .arg(millis(ttl))
            .ignore()
            .cmd("SADD")
            .arg(self.keys.nodes())
            .arg(node.as_str())
            .ignore();
        self.redis.pipe("node_heartbeat", &pipe).await.map(drop)
    }

    async fn leave(&self, node: &NodeId) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("DEL")
            .arg(self.keys.node_alive(node))
            .arg(self.keys.node_streams(node))
            .ignore()
            .cmd("SREM")
            .arg(self.keys.nodes())
            .arg(node.as_str())
            .ignore();
        self.redis.pipe("node_leave", &pipe).await.map(drop)
    }

    async fn open_stream(&self, node: &NodeId, stream: &OpenStream) -> Result<(), StoreError> {
        let json = serde_json::to_string(stream).map_err(corrupt)?;
        self.redis
            .cmd(
                "node_stream_open",
                redis::cmd("HSET")
                    .arg(self.keys.node_streams(node))
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
                    .arg(self.keys.node_streams(node))
                    .arg(stream.as_str()),
            )
            .await
            .map(drop)
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
                    .key(self.keys.node_streams(dead))
                    .key(self.keys.nodes())
                    .arg(dead.as_str()),
            )
            .await?;
        let mut fields = reply::array(reply)?.into_iter();
        let mut open = Vec::new();
        while let (Some(_stream), Some(json)) = (fields.next(), fields.next()) {
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
        Ok(open)
    }
}
