//! [`SessionLink`]: what a service that runs one server per session (a
//! hosted MCP server's child) holds of that session, to reach its client
//! outside any request and to end it.

use actix::{Message as ActixMessage, WeakRecipient};
use mcp_cluster_protocol::Notification;
use mcp_cluster_store::SessionId;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::request::context::{AskError, AskOutcome};

/// Questions of a session's own server that belong to no request and wait
/// for the client's answer at once, per session ([`SessionLink::ask`]).
pub const MAX_SESSION_ASKS: usize = 16;

/// Bytes of such questions held for a client that has not opened its
/// standalone stream yet, per session.
pub(crate) const MAX_HELD_ASK_BYTES: usize = 1024 * 1024;

/// The session's own server ended ([`SessionLink::end`]): the session ends
/// everywhere once its in-flight requests have had their answers (the
/// server's failure already gave each its error), or after a grace period.
#[derive(ActixMessage, Debug)]
#[rtype(result = "()")]
pub(crate) struct EndHosted {
    /// The label of `mcp_sessions_ended_total`.
    pub(crate) reason: &'static str,
}

/// A notification of the session's own server that belongs to no request
/// ([`SessionLink::notify`]), for the session's standalone stream.
#[derive(ActixMessage, Debug)]
#[rtype(result = "()")]
pub(crate) struct HostedNotify(pub(crate) Notification);

/// A question of the session's own server that belongs to no request
/// ([`SessionLink::ask`]), for the session's standalone stream; the client's
/// answer completes the receiver, which is dropped unanswered after the
/// ask timeout.
#[derive(ActixMessage, Debug)]
#[rtype(result = "Result<oneshot::Receiver<AskOutcome>, AskError>")]
pub(crate) struct HostedAsk {
    pub(crate) method: String,
    pub(crate) params: Value,
}

/// A client started reading the session's standalone stream, on this node
/// or another: questions held until then can go out.
#[derive(ActixMessage, Debug)]
#[rtype(result = "()")]
pub(crate) struct ReaderAttached;

/// One session, as its own server holds it: notifications for the client
/// that belong to no request go to the session's standalone stream (the GET
/// stream), and the server's end ends the session.
///
/// Owner: the service's table of per-session servers, from
/// [`crate::McpService::open_session`] until
/// [`crate::McpService::close_session`]. It holds the session actor weakly:
/// once the actor is gone, every call is a no-op.
#[derive(Clone)]
pub struct SessionLink {
    id: SessionId,
    notify: WeakRecipient<HostedNotify>,
    ask: WeakRecipient<HostedAsk>,
    end: WeakRecipient<EndHosted>,
}

impl std::fmt::Debug for SessionLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLink")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Why a session's own server ended it: the label of
/// `mcp_sessions_ended_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostedEnd {
    /// The server's process exited or failed (`upstream_exited`).
    Exited,
}

impl HostedEnd {
    fn label(self) -> &'static str {
        match self {
            Self::Exited => "upstream_exited",
        }
    }
}

impl SessionLink {
    pub(crate) fn new(
        id: SessionId,
        notify: WeakRecipient<HostedNotify>,
        ask: WeakRecipient<HostedAsk>,
        end: WeakRecipient<EndHosted>,
    ) -> Self {
        Self {
            id,
            notify,
            ask,
            end,
        }
    }

    /// The session.
    pub fn session_id(&self) -> &SessionId {
        &self.id
    }

    /// Sends a notification that belongs to no request on the session's
    /// standalone stream, when a client listens to it on this node (as the
    /// runtime's own list and resource events): with no GET stream open,
    /// the client cannot be told, and a GET opened later starts at the
    /// stream's tail. A `notifications/message` goes only when its level
    /// passes the session's `logging/setLevel`. Callable from any thread.
    pub fn notify(&self, notification: Notification) {
        if let Some(session) = self.notify.upgrade() {
            session.do_send(HostedNotify(notification));
        }
    }

    /// Asks the client a question that belongs to no request (a server's
    /// `roots/list` after `notifications/initialized`, say), on the
    /// session's standalone stream (the GET stream), and waits for its
    /// answer, which may come through any node. Before the client first
    /// opens that stream the question is held for it. At most
    /// [`MAX_SESSION_ASKS`] wait at once per session, and never longer
    /// than the node's ask timeout.
    ///
    /// # Errors
    /// [`AskError::NotSupported`] when the client did not declare the
    /// capability the method needs, [`AskError::NotInitialized`] before
    /// `notifications/initialized`, [`AskError::Rejected`] for the client's
    /// error, [`AskError::Timeout`] when no answer came in time (or the
    /// session ended), [`AskError::Unavailable`] when the session already
    /// holds its most questions.
    pub async fn ask(&self, method: &str, params: Value) -> Result<Value, AskError> {
        let outcome = self.ask_session(method, params).await;
        crate::request::context::count_ask(method, &outcome);
        outcome
    }

    async fn ask_session(&self, method: &str, params: Value) -> Result<Value, AskError> {
        let session = self.ask.upgrade().ok_or(AskError::Unavailable)?;
        let answer = session
            .send(HostedAsk {
                method: method.to_owned(),
                params,
            })
            .await
            .map_err(|_| AskError::Unavailable)??;
        match answer.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(AskError::Rejected(error)),
            Err(_) => Err(AskError::Timeout),
        }
    }

    /// Ends the session everywhere, as a DELETE would: its server is gone,
    /// and a session must not outlive it. Its in-flight requests are
    /// stopped; the client's next request gets 404 and starts again.
    /// Callable from any thread.
    pub fn end(&self, why: HostedEnd) {
        if let Some(session) = self.end.upgrade() {
            session.do_send(EndHosted {
                reason: why.label(),
            });
        }
    }
}
