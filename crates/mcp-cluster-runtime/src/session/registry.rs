//! The session era's side of the node registry (`node/registry.rs`):
//! the node's live sessions, found without a mailbox hop.
//!
//! A session takes itself out when its actor stops (`Session::stopped`),
//! so a stopped session never counts against `max_sessions`. A server
//! event reaches every session, and each decides whether its client hears
//! it (initialized, read, subscribed). The sweep only backs up a handle
//! whose actor went without running `stopped` (its arbiter died): the next
//! request rehydrates such a session from the store.
//!
//! Owner: the [`crate::runtime::Runtime`]. Stop path: dropped with it.

use std::sync::Arc;

use mcp_cluster_store::SessionId;

use crate::node::registry::{Member, Registry};
use crate::request::service::ServerEvent;
use crate::session::SessionHandle;

/// The node's live sessions.
pub(crate) type Sessions = Arc<Registry<SessionId, SessionHandle>>;

impl Member for SessionHandle {
    type Event = ServerEvent;

    fn hear(&self, event: &ServerEvent) -> bool {
        // The mailbox takes it (`do_send`): a session never falls behind.
        self.broadcast(event.clone());
        true
    }

    fn is_alive(&self) -> bool {
        SessionHandle::is_alive(self)
    }
}
