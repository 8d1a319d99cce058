//! The session registry: the node's sessions, found without a mailbox hop.
//!
//! Lookups go to a concurrent map (sharded, so they scale with worker
//! threads). A session takes itself out of the map when its actor stops
//! (`Session::stopped`), so a stopped session never counts against
//! `max_sessions`. `fan_out` hands server events to every session; the
//! `SessionRegistry` actor's sweep is only the backstop for a handle whose
//! actor went without running `stopped` (its arbiter died): the next
//! request rehydrates such a session from the store.
//!
//! Owner: the [`crate::runtime::Runtime`] starts the actor once and keeps its address.
//! Stop path: the actix system stops it at node shutdown.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use dashmap::DashMap;
use mcp_cluster_store::SessionId;

use crate::request::service::ServerEvent;
use crate::session::SessionHandle;

/// How often the map is swept for handles whose actor went without taking
/// itself out.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The node's live sessions.
pub(crate) type SessionMap = Arc<DashMap<SessionId, SessionHandle>>;

/// Supervises the session map.
#[derive(Debug)]
pub(crate) struct SessionRegistry {
    sessions: SessionMap,
}

impl SessionRegistry {
    pub(crate) fn new(sessions: SessionMap) -> Self {
        Self { sessions }
    }
}

impl Actor for SessionRegistry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(SWEEP_INTERVAL, |act, _| {
            let before = act.sessions.len();
            act.sessions.retain(|_, handle| handle.is_alive());
            let swept = before.saturating_sub(act.sessions.len());
            if swept > 0 {
                tracing::debug!(swept, "Stopped sessions removed from the registry.");
            }
        });
    }
}

/// Hands a server event to every session on this node; each decides
/// whether its client hears it (initialized, read, subscribed).
pub(crate) fn fan_out(sessions: &SessionMap, event: &ServerEvent) {
    for entry in sessions.iter() {
        entry.value().broadcast(event.clone());
    }
}
