//! [`RedisBus`]: the control bus as one Redis pub/sub channel (`mcp:ctl`).
//!
//! Publishing is one `PUBLISH` of the JSON message on the command
//! connection (`SPUBLISH` on a Redis Cluster: a sharded channel stays on the
//! shard of its slot instead of going to every member); receiving shares the node's one pub/sub connection
//! (`pubsub`). Delivery is Redis pub/sub's: every node connected at
//! that moment, nothing kept for a node that is away or reconnecting.

use async_trait::async_trait;
use mcp_cluster_store::{ControlBus, ControlMessage, StoreError};
use tokio::sync::broadcast;

use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::Keys;
use crate::pubsub::PubSub;

/// Publishes control messages (the bus, and the stores that ask for a
/// session's lease).
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    redis: Redis,
    /// The control channel name.
    channel: String,
}

impl Publisher {
    pub(crate) fn new(redis: Redis, keys: &Keys) -> Self {
        Self {
            redis,
            channel: keys.ctl(),
        }
    }

    /// Publishes `message` to every node (this one included).
    pub(crate) async fn publish(&self, message: &ControlMessage) -> Result<(), StoreError> {
        let json = serde_json::to_string(message).map_err(corrupt)?;
        let published = self
            .redis
            .cmd(
                "bus_publish",
                redis::cmd(self.redis.publish_command())
                    .arg(&self.channel)
                    .arg(json),
            )
            .await
            .map(drop);
        let m = mcp_cluster_telemetry::metrics::metrics();
        match &published {
            Ok(()) => m.bus_published.with_label_values(&[message.kind()]).inc(),
            Err(_) => m.bus_dropped.with_label_values(&["publish_failed"]).inc(),
        }
        published
    }
}

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
