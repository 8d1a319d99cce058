//! The node's cluster duties: acting on control-bus messages, heartbeating,
//! and finalizing the requests of dead nodes.
//!
//! Owner: [`Runtime::new`] starts both tasks on the actix system arbiter.
//! Stop path: they end with the actix system (the bus task also when the
//! bus closes).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mcp_protocol::jsonrpc::decode_message;
use mcp_protocol::{ErrorObject, Message, Response};
use mcp_store::{ControlMessage, OpenStream, Position, Store, StoreError};
use tokio::sync::broadcast::error::RecvError;

use crate::registry::FanOut;
use crate::{Runtime, ServerEvent};

/// How often a node renews its liveness.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// How long a heartbeat lasts: three missed beats and the node is dead.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(6);
/// How often a node looks for dead nodes to finalize. A dead node's
/// requests are answered within `HEARTBEAT_TTL + REAP_INTERVAL` (9 s) plus
/// the time to write the errors.
pub const REAP_INTERVAL: Duration = Duration::from_secs(3);

/// Events read per round trip while finalizing a stream.
const FINALIZE_BATCH: usize = 256;

pub(crate) fn start(runtime: &Runtime) {
    let mut messages = runtime.store().bus.subscribe();
    let rt = runtime.clone();
    actix::spawn(async move {
        loop {
            match messages.recv().await {
                Ok(message) => on_control(&rt, message),
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "Control messages dropped: this node fell behind.");
                }
                Err(RecvError::Closed) => break,
            }
        }
    });
    let rt = runtime.clone();
    actix::spawn(async move {
        let mut beat = tokio::time::interval(HEARTBEAT_INTERVAL);
        let mut since_reap = Duration::ZERO;
        loop {
            beat.tick().await;
            let store = rt.store();
            if let Err(err) = store.nodes.heartbeat(rt.node_id(), HEARTBEAT_TTL).await {
                tracing::warn!(error = %err, "Heartbeat failed.");
                continue;
            }
            since_reap += HEARTBEAT_INTERVAL;
            if since_reap >= REAP_INTERVAL {
                since_reap = Duration::ZERO;
                reap(store).await;
            }
        }
    });
}

fn on_control(rt: &Runtime, message: ControlMessage) {
    let own = message.origin() == rt.node_id();
    match message {
        ControlMessage::Deliver {
            session, message, ..
        } if !own => {
            let Some(handle) = rt.sessions().get(&session).map(|h| h.clone()) else {
                return;
            };
            match decode_message(message.as_bytes()) {
                Ok(m) => handle.deliver_remote(m),
                Err(err) => tracing::warn!(error = %err, "Undecodable message on the control bus."),
            }
        }
        ControlMessage::SessionEnded { session, .. } if !own => {
            if let Some((_, handle)) = rt.sessions().remove(&session) {
                handle.terminate();
            }
        }
        ControlMessage::SessionChanged { session, .. } if !own => {
            if let Some(handle) = rt.sessions().get(&session) {
                handle.reload();
            }
        }
        // Published by `Runtime::broadcast` only through the bus, so the
        // origin's own sessions hear it here too.
        ControlMessage::ServerEvent { name, uri, .. } => match ServerEvent::from_wire(&name, uri) {
            Some(event) => rt.registry().do_send(FanOut(event)),
            None => tracing::debug!(%name, "Unknown server event ignored."),
        },
        ControlMessage::Kick { stream, .. } if !own => rt.node().attachments.kick_reader(&stream),
        _ => {}
    }
}

/// Finalizes the open streams of every dead node this node manages to claim.
async fn reap(store: &Store) {
    let dead = match store.nodes.dead_nodes().await {
        Ok(dead) => dead,
        Err(err) => {
            tracing::warn!(error = %err, "Dead-node scan failed.");
            return;
        }
    };
    for node in dead {
        let orphans = match store.nodes.claim_orphans(&node).await {
            Ok(orphans) => orphans,
            Err(err) => {
                tracing::warn!(%node, error = %err, "Orphan claim failed.");
                continue;
            }
        };
        let count = orphans.len();
        for open in orphans {
            if let Err(err) = finalize(store, &open).await {
                tracing::warn!(stream = %open.stream, error = %err, "Orphaned stream could not be finalized.");
            }
        }
        if count > 0 {
            tracing::info!(%node, streams = count, "Finalized the requests of a dead node.");
        }
    }
}

/// Answers every request of `open` that has no response in its stream with
/// -32603, then closes the stream: a client resuming it gets an answer.
pub(crate) async fn finalize(store: &Store, open: &OpenStream) -> Result<(), StoreError> {
    let mut answered = HashSet::new();
    let mut after = Position::START;
    loop {
        let batch = match store
            .events
            .read(&open.session, &open.stream, after, FINALIZE_BATCH)
            .await
        {
            Ok(batch) => batch,
            // The session ended meanwhile: nobody to answer.
            Err(StoreError::StreamNotFound) => return Ok(()),
            Err(err) => return Err(err),
        };
        for event in &batch.events {
            after = event.position;
            if let Ok(Message::Response(Response { id: Some(id), .. })) =
                decode_message(event.data.as_bytes())
            {
                answered.insert(id);
            }
        }
        if batch.closed {
            return Ok(());
        }
        if batch.events.is_empty() {
            break;
        }
    }
    let error =
        ErrorObject::internal("the node handling this request stopped; send the request again");
    for id in open.requests.iter().filter(|id| !answered.contains(*id)) {
        let response = Message::Response(Response::error(Some(id.clone()), error.clone()));
        store
            .events
            .append(&open.session, &open.stream, Arc::from(response.to_json()))
            .await?;
    }
    store.events.close_stream(&open.session, &open.stream).await
}
