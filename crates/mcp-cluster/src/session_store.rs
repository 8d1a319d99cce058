//! [`RedisSessionStore`]: one JSON string per session with a `PX` idle TTL;
//! Redis expires idle sessions itself.

use std::time::Duration;

use async_trait::async_trait;
use mcp_store::{SessionId, SessionRecord, SessionStore, StoreError};
use redis::Value;

use crate::config::millis;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::Keys;
use crate::pubsub::PubSub;
use crate::reply;

/// The Redis [`SessionStore`].
#[derive(Debug)]
pub struct RedisSessionStore {
    redis: Redis,
    keys: Keys,
    /// Checked by `ping`: the node is ready only with both connections up.
    pubsub: PubSub,
}

impl RedisSessionStore {
    pub(crate) fn new(redis: Redis, keys: Keys, pubsub: PubSub) -> Self {
        Self {
            redis,
            keys,
            pubsub,
        }
    }

    /// `SET key json <condition> PX ttl`: `true` when Redis wrote it.
    async fn set(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        condition: &str,
    ) -> Result<bool, StoreError> {
        let json = serde_json::to_string(record).map_err(corrupt)?;
        let reply = self
            .redis
            .cmd(
                redis::cmd("SET")
                    .arg(self.keys.session(&record.id))
                    .arg(json)
                    .arg(condition)
                    .arg("PX")
                    .arg(millis(idle_ttl)),
            )
            .await?;
        Ok(reply != Value::Nil)
    }
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    async fn create(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<(), StoreError> {
        if self.set(record, idle_ttl, "NX").await? {
            Ok(())
        } else {
            Err(StoreError::Conflict)
        }
    }

    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let reply = self
            .redis
            .cmd(redis::cmd("GET").arg(self.keys.session(id)))
            .await?;
        reply::opt_text(reply)?
            .map(|json| serde_json::from_str(&json).map_err(corrupt))
            .transpose()
    }

    async fn save(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<bool, StoreError> {
        self.set(record, idle_ttl, "XX").await
    }

    async fn touch(&self, id: &SessionId, idle_ttl: Duration) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .cmd(
                redis::cmd("PEXPIRE")
                    .arg(self.keys.session(id))
                    .arg(millis(idle_ttl)),
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if !self.pubsub.is_connected() {
            return Err(StoreError::Unavailable(
                "redis pub/sub connection is down".into(),
            ));
        }
        self.redis.cmd(&redis::cmd("PING")).await.map(drop)
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .cmd(redis::cmd("DEL").arg(self.keys.session(id)))
            .await?;
        Ok(reply::int(&reply)? == 1)
    }
}
