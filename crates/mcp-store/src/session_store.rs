//! The session store port: what any node needs to serve a session.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{NodeId, SessionId, StoreError, StreamId};

/// Serializes an id newtype as its string form and validates on the way in.
macro_rules! serde_plain_id {
    ($ty:ty) => {
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_plain_id!(SessionId);
serde_plain_id!(StreamId);
serde_plain_id!(NodeId);

/// The durable state of one MCP session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session.
    pub id: SessionId,
    /// The negotiated protocol revision, as sent on the wire; `None` until
    /// `initialize` (legacy HTTP+SSE and stdio sessions exist before it).
    pub protocol_version: Option<String>,
    /// Client capabilities from `initialize`.
    pub client_capabilities: Value,
    /// Client implementation info from `initialize`.
    pub client_info: Value,
    /// `notifications/initialized` has arrived.
    pub initialized: bool,
    /// The minimum level of `notifications/message` (`logging/setLevel`);
    /// `None` until the client sets one.
    pub log_level: Option<String>,
    /// Resource URIs the client subscribed to.
    pub subscriptions: BTreeSet<String>,
    /// The stream that carries messages unrelated to a request (the GET
    /// stream, or the legacy SSE connection).
    pub standalone_stream: StreamId,
    /// The authenticated principal that created the session, if any.
    pub principal: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// Durable session state with an idle TTL.
#[async_trait]
pub trait SessionStore: Send + Sync + Debug + 'static {
    /// Stores a new session.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the id exists; [`StoreError::Unavailable`].
    async fn create(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<(), StoreError>;

    /// Loads a live session; `None` when it never existed, ended or expired.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError>;

    /// Replaces a live session's state and renews its TTL; `false` when the
    /// session is gone (it is not recreated).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn save(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<bool, StoreError>;

    /// Renews the idle TTL; `false` when the session is gone.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn touch(&self, id: &SessionId, idle_ttl: Duration) -> Result<bool, StoreError>;

    /// Checks that the backend answers (readiness).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn ping(&self) -> Result<(), StoreError>;

    /// Ends a session; `false` when it was already gone.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn delete(&self, id: &SessionId) -> Result<bool, StoreError>;
}
