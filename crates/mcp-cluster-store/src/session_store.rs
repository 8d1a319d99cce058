//! The session store port: what any node needs to serve a session.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::{ControlMessage, EventLog, NodeId, Position, SessionId, StoreError, StreamId};

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
    pub client_capabilities: RawJson,
    /// Client implementation info from `initialize`.
    pub client_info: RawJson,
    /// `notifications/initialized` has arrived.
    pub initialized: bool,
    /// The minimum level of `notifications/message` (`logging/setLevel`);
    /// `None` until the client sets one.
    pub log_level: Option<String>,
    /// Resource URIs the client subscribed to. Changed only through
    /// [`SessionStore::subscribe`] and [`SessionStore::unsubscribe`], and
    /// never part of the record's JSON: a store keeps them apart, so a
    /// change does not rewrite the record (at most
    /// `max_subscriptions_per_session` of them, each a bounded URI).
    #[serde(default, skip_serializing)]
    pub subscriptions: BTreeSet<String>,
    /// The stream that carries messages unrelated to a request (the GET
    /// stream, or the legacy SSE connection).
    pub standalone_stream: StreamId,
    /// The authenticated principal that created the session, if any.
    pub principal: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The node that runs this session's own server (a hosted MCP server's
    /// child process), when it has one: the session lives exactly as long
    /// as that server, and only that node can serve it. `None` for a
    /// session served by handlers every node has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// What another node needs to take the session's own server over when
    /// its host is gone (an HTTP server's session: its replica and
    /// `Mcp-Session-Id`), as the runtime wrote it; `None` when only the
    /// host can serve it (a child process dies with its node). Bounded by
    /// the runtime (a few kilobytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<RawJson>,
}

/// A JSON value kept as its text: what the session only stores and passes
/// on (client info and capabilities). A parsed `serde_json::Value` object
/// costs a tree of allocations (most of a kilobyte for a two-field object)
/// in every copy of every idle session; the text costs its length.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// `null`.
    pub fn null() -> Self {
        Self::of(&()).unwrap_or_else(|_| unreachable!("() serializes"))
    }

    /// The JSON text of `value`.
    ///
    /// # Errors
    /// `value` does not serialize (a map with non-string keys, say).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// Parses the text as a `T`.
    ///
    /// # Errors
    /// The text is not a `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Debug for RawJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

/// How long a store remembers that a session was ended by DELETE: longer
/// than any reader takes to notice that its stream is gone (at once on a
/// wake-up, at the latest at its next keep-alive).
pub const ENDED_MEMORY: Duration = Duration::from_secs(60);

/// What [`SessionStore::subscribe`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscribed {
    /// The URI was added.
    Added,
    /// The session was already subscribed to it.
    AlreadySubscribed,
    /// The session holds the maximum of subscriptions; nothing changed.
    Full,
    /// The session is gone.
    SessionGone,
}

/// What [`SessionStore::save_announcing`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    /// The record was written (`false`: the session is gone).
    pub written: bool,
    /// The announcement went out with it; when not, the caller publishes
    /// it (if the record was written).
    pub announced: bool,
}

/// What [`SessionStore::end`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The session was live (`false`: it was already gone).
    pub existed: bool,
    /// Its streams went with it; when not, the caller deletes them
    /// ([`EventLog::delete_session`]).
    pub streams_deleted: bool,
    /// The announcement went out with it; when not, the caller publishes
    /// it.
    pub announced: bool,
}

/// Durable session state with an idle TTL.
#[async_trait]
pub trait SessionStore: Send + Sync + Debug + 'static {
    /// Stores a new session.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the id exists; [`StoreError::Unavailable`].
    async fn create(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<(), StoreError>;

    /// Stores a new session as [`Self::create`] does, with its standalone
    /// stream (`record.standalone_stream`) in `events`. This default writes
    /// the record, then the stream. A store whose event log lives in the
    /// same backend may write only the record and leave the stream to
    /// [`Self::open_standalone`], which every first use of the stream calls
    /// (`events` is then that store's own event log): most sessions never
    /// open a standalone stream. On a conflict, nothing of the existing
    /// session is touched; a call that fails answers no session id, and
    /// whatever it wrote expires with its TTL.
    ///
    /// # Errors
    /// As [`Self::create`] and [`EventLog::create_stream_as`].
    async fn create_with_stream(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        events: &dyn EventLog,
    ) -> Result<(), StoreError> {
        self.create(record, idle_ttl).await?;
        let stream = events
            .create_stream_as(&record.id, &record.standalone_stream, &[])
            .await;
        if stream.is_err() {
            // Best effort: unanswered, the session expires unused.
            let _ = self.delete(&record.id).await;
        }
        stream
    }

    /// Makes sure the standalone stream `stream` of the live session `id`
    /// exists in `events`, before it is first followed: creates it open and
    /// empty if it is missing, leaves it as it is (open or closed, with its
    /// events) if not. Returns its tail, as [`EventLog::tail`]. This
    /// default, for stores whose [`Self::create_with_stream`] wrote the
    /// stream already, reads that tail.
    ///
    /// # Errors
    /// [`StoreError::StreamNotFound`] when the session is gone (no stream
    /// is made for it), or the stream is and this store does not make it
    /// again; [`StoreError::Unavailable`].
    async fn open_standalone(
        &self,
        id: &SessionId,
        stream: &StreamId,
        events: &dyn EventLog,
    ) -> Result<Position, StoreError> {
        events.tail(id, stream).await
    }

    /// Loads a live session; `None` when it never existed, ended or expired.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError>;

    /// As [`Self::load`], for a node that holds (or is about to hold) an
    /// actor for the session and serves its requests: where the store
    /// shares sessions between nodes, it also takes the session's lease
    /// when no other node holds it (see [`Self::leased`]).
    ///
    /// # Errors
    /// As [`Self::load`].
    async fn load_held(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        self.load(id).await
    }

    /// Whether this node holds the session's lease now. While it does, no
    /// other node changes or ends the session without first asking this
    /// node to let the lease go (and waiting until it has, or until the
    /// lease ran out): the copy this node's actor keeps is then current
    /// without a read. `false` for a store no other node shares (no one
    /// else writes there), and whenever in doubt.
    fn leased(&self, id: &SessionId) -> bool {
        let _ = id;
        false
    }

    /// Replaces a live session's state and renews its TTL; `false` when the
    /// session is gone (it is not recreated).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn save(&self, record: &SessionRecord, idle_ttl: Duration) -> Result<bool, StoreError>;

    /// Saves the record as [`Self::save`] does and, when it was written,
    /// publishes `changed` (the session's change, for the other nodes) in
    /// the same step where the store's control bus shares its backend (on
    /// one Redis: one script, one round trip). This default saves and
    /// publishes nothing: the caller publishes.
    ///
    /// # Errors
    /// As [`Self::save`]; then nothing was published.
    async fn save_announcing(
        &self,
        record: &SessionRecord,
        idle_ttl: Duration,
        changed: &ControlMessage,
    ) -> Result<Saved, StoreError> {
        let _ = changed;
        let written = self.save(record, idle_ttl).await?;
        Ok(Saved {
            written,
            announced: false,
        })
    }

    /// Replaces a live session's state with `record`, whose `host` is the
    /// node taking the session's own server over, and renews its TTL, only
    /// if the stored session's host is still `from` (a node found gone):
    /// atomically, so of nodes that find the same host gone at once
    /// exactly one takes the session over. `false` when the host is no
    /// longer `from` (another node was first) or the session is gone.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn rehost(
        &self,
        record: &SessionRecord,
        from: &str,
        idle_ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Adds `uri` to a live session's subscriptions unless it holds `max`
    /// already, atomically (two nodes adding at once never exceed `max`).
    /// The subscriptions live and expire with the session.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn subscribe(
        &self,
        id: &SessionId,
        uri: &str,
        max: usize,
    ) -> Result<Subscribed, StoreError>;

    /// Removes `uri` from a live session's subscriptions (removing one it
    /// does not hold changes nothing); `false` when the session is gone.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn unsubscribe(&self, id: &SessionId, uri: &str) -> Result<bool, StoreError>;

    /// Renews the idle TTL; `false` when the session is gone.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn touch(&self, id: &SessionId, idle_ttl: Duration) -> Result<bool, StoreError>;

    /// Sessions whose idle TTL ran out, at most `max` per call, so that the
    /// caller deletes what they left behind (their event-log streams). Each
    /// expired session is returned once, to one caller in the whole
    /// cluster; one returned to a caller that then fails is not returned
    /// again (its streams expire with their own retention).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn take_expired(&self, max: usize) -> Result<Vec<SessionId>, StoreError>;

    /// Checks that the backend answers (readiness).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn ping(&self) -> Result<(), StoreError>;

    /// Whether the session was ended by [`Self::delete`] (the client's
    /// DELETE) within the last [`ENDED_MEMORY`]: a reader that finds its
    /// stream gone then ends quietly, as the client asked, instead of
    /// reporting lost data.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn ended(&self, id: &SessionId) -> Result<bool, StoreError>;

    /// Ends a session, remembering for [`ENDED_MEMORY`] that it was ended
    /// (see [`Self::ended`]); `false` when it was already gone.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn delete(&self, id: &SessionId) -> Result<bool, StoreError>;

    /// Ends a session as [`Self::delete`] does and, in the same step where
    /// the backend allows it, deletes its streams from `events` (this
    /// store's own event log) and publishes `ended` on the control bus: a
    /// store whose streams live beside the record (Redis: in the session's
    /// slot) deletes them in the same script, and on one Redis the
    /// announcement goes in it too. What was not done, the caller does
    /// (the session is gone either way: the record's deletion is the
    /// commit). This default deletes the record alone.
    ///
    /// # Errors
    /// As [`Self::delete`]; then nothing was done.
    async fn end(
        &self,
        id: &SessionId,
        events: &dyn EventLog,
        ended: &ControlMessage,
    ) -> Result<Ended, StoreError> {
        let _ = (events, ended);
        let existed = self.delete(id).await?;
        Ok(Ended {
            existed,
            streams_deleted: false,
            announced: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_json_is_embedded_json_not_a_string() {
        let info = RawJson::of(&serde_json::json!({"name": "c", "version": "1"})).unwrap();
        let record = SessionRecord {
            id: SessionId::random(),
            protocol_version: Some("2025-11-25".into()),
            client_capabilities: RawJson::null(),
            client_info: info.clone(),
            initialized: true,
            log_level: None,
            subscriptions: BTreeSet::new(),
            standalone_stream: StreamId::random(),
            principal: None,
            created_at_ms: 1,
            host: None,
            handover: None,
        };
        let text = serde_json::to_string(&record).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["clientInfo"]["name"], "c");
        assert!(value["clientCapabilities"].is_null());
        let back: SessionRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
        let parsed: serde_json::Value = back.client_info.parse().unwrap();
        assert_eq!(parsed["version"], "1");
        assert_ne!(info, RawJson::null());
        assert!(RawJson::null().parse::<u32>().is_err());
    }
}
