//! The control bus port: cluster-wide messages between nodes.
//!
//! Routing by broadcast: what must reach the node running a request
//! (`notifications/cancelled`, the client's answer to a server request) or
//! every node (DELETE, a session's state change, server events, a stream's
//! new reader) is published once and every node acts on what concerns its
//! local actors. These messages are rare next to requests, so the hot path
//! writes no directory entry; proto-docs/cluster.md explains the choice.

use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::{NodeId, Principal, SessionId, StoreError, StreamId};

/// One cluster-wide message. `origin` is the publishing node, so a node can
/// skip what it already did locally.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMessage {
    /// A client message for a session's actors: a notification
    /// (`notifications/cancelled`) or a response to a server request,
    /// JSON-encoded. The node whose actor knows the request acts on it.
    Deliver {
        /// The session.
        session: SessionId,
        /// The encoded JSON-RPC message.
        message: String,
        /// The publishing node.
        origin: NodeId,
        /// The W3C `traceparent` of the span in which the publishing node
        /// received the client message, so that the node acting on it
        /// continues the caller's trace. Absent when traces are off; a
        /// node that predates the field ignores it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
    /// The session ended (DELETE): every node stops its actor.
    SessionEnded {
        /// The session.
        session: SessionId,
        /// The publishing node.
        origin: NodeId,
    },
    /// The session's stored state changed (initialized, log level,
    /// subscriptions): nodes holding an actor reload it.
    SessionChanged {
        /// The session.
        session: SessionId,
        /// The publishing node.
        origin: NodeId,
    },
    /// A server event (`tools_list_changed`, `prompts_list_changed`,
    /// `resources_list_changed`, `resource_updated` with `uri`).
    ServerEvent {
        /// The event name.
        name: String,
        /// The resource URI, for `resource_updated`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
        /// The publishing node.
        origin: NodeId,
    },
    /// `origin` wants to change a session whose lease `holder` has (see
    /// `SessionStore::leased`): the holder stops trusting its copy of the
    /// session and lets the lease go. Sent and acted on by the stores.
    Release {
        /// The session.
        session: SessionId,
        /// The store instance that holds the lease.
        holder: NodeId,
        /// The store instance that asks.
        origin: NodeId,
    },
    /// A reader attached to `stream` on `origin`: readers of it elsewhere
    /// end (one reader per stream, cluster-wide).
    Kick {
        /// The session.
        session: SessionId,
        /// The stream.
        stream: StreamId,
        /// The publishing node.
        origin: NodeId,
        /// The W3C `traceparent` of the span that attached the new reader
        /// (a GET, a resumption), as for [`ControlMessage::Deliver`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
    /// The node writing `stream` could not write its response or close it
    /// (its data was lost, or the store refused): a reader of it on another
    /// node answers the stream's requests with an error and ends, instead
    /// of waiting for a response that will never come.
    StreamFailed {
        /// The session.
        session: SessionId,
        /// The stream.
        stream: StreamId,
        /// The publishing node.
        origin: NodeId,
    },
    /// Requests of a session whose own server runs on `host` (a hosted MCP
    /// server's child), received by `origin`: `host` runs them and writes
    /// their answers into `stream`, which `origin` created, registered
    /// under `host` and follows for the client. Every other node ignores
    /// it.
    Forward {
        /// The session.
        session: SessionId,
        /// The stream that carries their answers.
        stream: StreamId,
        /// `stream` is the session's own stream (legacy HTTP+SSE), which
        /// the answers go into and nobody closes; else a stream of their
        /// own, closed after the last.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        attached: bool,
        /// The node that runs the session's server.
        host: NodeId,
        /// The JSON-RPC requests, each encoded.
        requests: Vec<String>,
        /// Who they act for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<Principal>,
        /// The publishing node.
        origin: NodeId,
        /// As for [`ControlMessage::Deliver`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
}

impl ControlMessage {
    /// The W3C `traceparent` the message carries, if any.
    pub fn trace(&self) -> Option<&str> {
        match self {
            Self::Deliver { trace, .. }
            | Self::Kick { trace, .. }
            | Self::Forward { trace, .. } => trace.as_deref(),
            Self::SessionEnded { .. }
            | Self::SessionChanged { .. }
            | Self::ServerEvent { .. }
            | Self::Release { .. }
            | Self::StreamFailed { .. } => None,
        }
    }

    /// The message type, as on the wire (`deliver`, `kick`…); each is in
    /// `mcp_cluster_telemetry::metrics::BUS_MESSAGE_TYPES`, the label values that
    /// exist at 0 from the start.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Deliver { .. } => "deliver",
            Self::SessionEnded { .. } => "session_ended",
            Self::SessionChanged { .. } => "session_changed",
            Self::ServerEvent { .. } => "server_event",
            Self::Release { .. } => "release",
            Self::Kick { .. } => "kick",
            Self::StreamFailed { .. } => "stream_failed",
            Self::Forward { .. } => "forward",
        }
    }

    /// Whether the publishing node must hear this message itself.
    ///
    /// `false` for what the origin already did for its own sessions before
    /// publishing, and which only the other nodes act on: a client message
    /// it delivered to its own actors, a session it ended or changed, a
    /// stream it failed, a reader it attached. A bus may leave these out of
    /// the origin's own subscription ([`ControlBus::subscribe_as`]), and a
    /// node ignores them when it hears them. `true` for a server event (the
    /// origin's sessions hear it only through the bus), a lease release
    /// (the stores act on it) and a forward (its `host` runs it, whoever
    /// sent it).
    pub fn concerns_origin(&self) -> bool {
        match self {
            Self::Deliver { .. }
            | Self::SessionEnded { .. }
            | Self::SessionChanged { .. }
            | Self::Kick { .. }
            | Self::StreamFailed { .. } => false,
            Self::ServerEvent { .. } | Self::Release { .. } | Self::Forward { .. } => true,
        }
    }

    /// Whether `node` must hear this message: always, unless `node` is its
    /// origin and the message does not concern its origin
    /// ([`ControlMessage::concerns_origin`]).
    pub fn concerns(&self, node: &NodeId) -> bool {
        self.concerns_origin() || self.origin() != node
    }

    /// The publishing node.
    pub fn origin(&self) -> &NodeId {
        match self {
            Self::Deliver { origin, .. }
            | Self::SessionEnded { origin, .. }
            | Self::SessionChanged { origin, .. }
            | Self::ServerEvent { origin, .. }
            | Self::Release { origin, .. }
            | Self::Kick { origin, .. }
            | Self::StreamFailed { origin, .. }
            | Self::Forward { origin, .. } => origin,
        }
    }
}

/// Cluster-wide publish/subscribe.
#[async_trait]
pub trait ControlBus: Send + Sync + Debug + 'static {
    /// Publishes to every node (this one included).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the backend cannot be reached.
    async fn publish(&self, message: &ControlMessage) -> Result<(), StoreError>;

    /// Receives every message published from now on. A receiver that lags
    /// loses the oldest messages (and is told so by the channel).
    fn subscribe(&self) -> broadcast::Receiver<ControlMessage>;

    /// Receives what `node` must hear of the messages published from now
    /// on: every one, except that a bus may leave out `node`'s own messages
    /// that do not concern their origin
    /// ([`ControlMessage::concerns_origin`]), so that the node is not woken
    /// for what it already did. The in-memory bus leaves them out; by
    /// default this is [`ControlBus::subscribe`].
    fn subscribe_as(&self, node: &NodeId) -> broadcast::Receiver<ControlMessage> {
        let _ = node;
        self.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_origin_did_not_do_itself_concerns_it() {
        let (session, stream, origin) = (SessionId::random(), StreamId::random(), NodeId::random());
        let cases = [
            (
                ControlMessage::Deliver {
                    session: session.clone(),
                    message: "{}".into(),
                    origin: origin.clone(),
                    trace: None,
                },
                false,
            ),
            (
                ControlMessage::SessionEnded {
                    session: session.clone(),
                    origin: origin.clone(),
                },
                false,
            ),
            (
                ControlMessage::SessionChanged {
                    session: session.clone(),
                    origin: origin.clone(),
                },
                false,
            ),
            (
                ControlMessage::Kick {
                    session: session.clone(),
                    stream: stream.clone(),
                    origin: origin.clone(),
                    trace: None,
                },
                false,
            ),
            (
                ControlMessage::StreamFailed {
                    session: session.clone(),
                    stream: stream.clone(),
                    origin: origin.clone(),
                },
                false,
            ),
            (
                ControlMessage::ServerEvent {
                    name: "tools_list_changed".into(),
                    uri: None,
                    origin: origin.clone(),
                },
                true,
            ),
            (
                ControlMessage::Release {
                    session: session.clone(),
                    holder: NodeId::random(),
                    origin: origin.clone(),
                },
                true,
            ),
            (
                ControlMessage::Forward {
                    session,
                    stream,
                    attached: false,
                    host: origin.clone(),
                    requests: Vec::new(),
                    principal: None,
                    origin: origin.clone(),
                    trace: None,
                },
                true,
            ),
        ];
        let other = NodeId::random();
        for (message, concerns) in cases {
            assert_eq!(message.concerns_origin(), concerns, "{}", message.kind());
            assert_eq!(message.concerns(&origin), concerns, "{}", message.kind());
            assert!(message.concerns(&other), "{}", message.kind());
        }
    }

    #[test]
    fn trace_is_optional_on_the_wire_both_ways() {
        let session = SessionId::random();
        let origin = NodeId::random();
        // From a node that predates `trace`.
        let old = format!(
            r#"{{"type":"deliver","session":"{session}","message":"{{}}","origin":"{origin}"}}"#
        );
        let message: ControlMessage = serde_json::from_str(&old).unwrap();
        assert_eq!(message.trace(), None);
        // Without a trace, the JSON is what older nodes sent.
        assert_eq!(serde_json::to_string(&message).unwrap(), old);

        let traced = ControlMessage::Kick {
            session,
            stream: StreamId::random(),
            origin,
            trace: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        };
        let json = serde_json::to_string(&traced).unwrap();
        assert!(json.contains(r#""trace":"00-4bf9"#), "{json}");
        let back: ControlMessage = serde_json::from_str(&json).unwrap();
        assert_eq!(back, traced);
        assert_eq!(back.trace(), traced.trace());
    }
}
