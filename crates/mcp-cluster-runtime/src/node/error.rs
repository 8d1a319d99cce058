//! Errors the runtime reports to transports.

use std::time::Duration;

use mcp_cluster_store::StoreError;

use crate::node::quota::Quota;

/// Why the runtime could not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The session never existed, ended or expired (HTTP 404).
    #[error("session not found")]
    SessionNotFound,
    /// The node holds its maximum of sessions (HTTP 503).
    #[error("too many sessions")]
    TooManySessions,
    /// A session's mailbox is full (HTTP 503).
    #[error("session overloaded")]
    Overloaded,
    /// The node holds its most of something clients open without a session
    /// (2026-07-28: listen streams, running tasks): HTTP 503.
    #[error("node holds its most {0}")]
    NodeFull(NodeFull),
    /// The node is draining and takes no new sessions (HTTP 503).
    #[error("node is shutting down")]
    ShuttingDown,
    /// The `Last-Event-ID` names no stream or event of this session (HTTP 400).
    #[error("unknown Last-Event-ID")]
    UnknownEvent,
    /// The events after the `Last-Event-ID` are no longer retained (HTTP 400).
    #[error("events after Last-Event-ID are no longer retained")]
    EventsExpired,
    /// The store failed (HTTP 503).
    #[error("store unavailable")]
    Store(#[source] StoreError),
    /// The node holds its byte budget for clients (in-flight bytes, or
    /// kept streams or tasks that nothing can be dropped from): new work
    /// waits (HTTP 503 with `Retry-After`).
    #[error("node holds its byte budget")]
    NodeBudget,
    /// The session's own server (a hosted upstream) was not started: the
    /// node starts no more now (HTTP 503), or the client holds its most
    /// (`client`: HTTP 429); either with `Retry-After`.
    #[error("{message}")]
    HostedLimit {
        /// The client's limit, not the node's.
        client: bool,
        /// Which limit, for the client.
        message: String,
        /// When trying again may succeed at the soonest.
        retry_after: Duration,
    },
    /// A quota refused (HTTP 429 with `Retry-After`).
    #[error("quota {} exceeded", .quota.name())]
    QuotaExceeded {
        /// Which.
        quota: Quota,
        /// When trying again may succeed at the soonest.
        retry_after: Duration,
    },
}

/// What a node holds its most of ([`RuntimeError::NodeFull`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFull {
    /// `runtime.max_listen_streams`.
    ListenStreams,
    /// `runtime.max_running_tasks`.
    Tasks,
}

impl std::fmt::Display for NodeFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ListenStreams => "listen streams",
            Self::Tasks => "running tasks",
        })
    }
}

impl RuntimeError {
    /// What a client is told, on every transport.
    pub fn client_message(&self) -> &'static str {
        match self {
            Self::SessionNotFound => "session not found",
            Self::TooManySessions => "too many sessions",
            Self::Overloaded => "session overloaded, retry later",
            Self::NodeFull(NodeFull::ListenStreams) => {
                "this node holds its most listen streams, retry later"
            }
            Self::NodeFull(NodeFull::Tasks) => "this node runs its most tasks, retry later",
            Self::ShuttingDown => "node is shutting down",
            Self::UnknownEvent => "unknown Last-Event-ID",
            Self::EventsExpired => "events after Last-Event-ID are no longer retained",
            Self::Store(_) => "session store unavailable",
            Self::NodeBudget => "the server holds all the bytes it keeps for clients, retry later",
            Self::HostedLimit { client: true, .. } => {
                "you hold the most sessions of this server one client may on this node: end one first"
            }
            Self::HostedLimit { client: false, .. } => {
                "this node starts no more sessions of its hosted server now, retry later"
            }
            Self::QuotaExceeded { quota, .. } => quota.client_message(),
        }
    }

    /// Whole seconds a refused client should wait (`Retry-After`), at least
    /// 1; `None` when waiting is not the remedy.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::QuotaExceeded { retry_after, .. } | Self::HostedLimit { retry_after, .. } => {
                let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                Some(secs.max(1))
            }
            _ => None,
        }
    }

    /// The JSON-RPC error a client gets, on every transport.
    pub fn to_error_object(&self) -> mcp_cluster_protocol::ErrorObject {
        use mcp_cluster_protocol::{ErrorCode, ErrorObject};
        match self {
            Self::QuotaExceeded { quota, .. } => {
                let mut data =
                    mcp_cluster_protocol::retry_after_data(self.retry_after_secs().unwrap_or(1));
                data["quota"] = quota.name().into();
                ErrorObject::new(ErrorCode::QUOTA_EXCEEDED, quota.client_message()).with_data(data)
            }
            Self::HostedLimit {
                client, message, ..
            } => {
                let code = if *client {
                    ErrorCode::QUOTA_EXCEEDED
                } else {
                    ErrorCode::INTERNAL_ERROR
                };
                ErrorObject::new(code, message.clone()).with_data(
                    mcp_cluster_protocol::retry_after_data(self.retry_after_secs().unwrap_or(1)),
                )
            }
            other => ErrorObject::internal(other.client_message()),
        }
    }
}

impl From<StoreError> for RuntimeError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::StreamNotFound | StoreError::EventNotFound => Self::UnknownEvent,
            StoreError::Trimmed => Self::EventsExpired,
            StoreError::Full => Self::TooManySessions,
            other => Self::Store(other),
        }
    }
}
