//! The node's cluster duties: acting on control-bus messages, heartbeating,
//! finalizing the requests of dead nodes, and renewing the quota slots of
//! the streams this node serves.
//!
//! Owner: [`Runtime::new`] starts the three tasks on the actix system
//! arbiter. Stop path: they end with the actix system (the bus task also
//! when the bus closes).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_protocol::jsonrpc::decode_message;
use mcp_cluster_protocol::{ErrorObject, Message, RequestId, Response};
use mcp_cluster_store::{ControlMessage, OpenStream, Store, StoreError};
use mcp_cluster_telemetry::{ControlKind, control_span};
use tokio::sync::broadcast::error::RecvError;

use crate::request::service::ServerEvent;
use crate::runtime::Runtime;

/// How often a node renews its liveness.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// How long a heartbeat lasts: three missed beats and the node is dead.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(6);
/// How often a node looks for dead nodes to finalize. A dead node's
/// requests are answered within `HEARTBEAT_TTL + REAP_INTERVAL` (9 s) plus
/// the time to write the errors.
pub const REAP_INTERVAL: Duration = Duration::from_secs(3);

/// How often a node re-reads the cluster's request-state key ring.
pub const KEY_RING_REFRESH: Duration = Duration::from_secs(60);

/// Events read per round trip while finalizing a stream.
const FINALIZE_BATCH: usize = 256;

/// How often a node deletes what expired sessions left behind (their
/// streams): a session's streams go at most this long after the session.
pub const EXPIRY_SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Expired sessions taken from the store per round trip of a sweep.
const EXPIRED_BATCH: usize = 512;

pub(crate) fn start(runtime: &Runtime) {
    // Not woken for this node's own announcements (on the embedded bus;
    // through Redis they come back and are skipped below).
    let mut messages = runtime.store().bus.subscribe_as(runtime.node_id());
    let rt = runtime.clone();
    actix::spawn(async move {
        loop {
            match messages.recv().await {
                Ok(message) => on_control(&rt, message),
                Err(RecvError::Lagged(missed)) => {
                    mcp_cluster_telemetry::metrics::metrics()
                        .bus_dropped
                        .with_label_values(&["lagged"])
                        .inc_by(missed);
                    tracing::warn!(missed, "Control messages dropped: this node fell behind.");
                }
                Err(RecvError::Closed) => break,
            }
        }
    });
    // The request-state key ring the cluster shares (unless configured):
    // fetched now, then often enough to pick up a rotation well before
    // anyone needs it (a state sealed with a key this node lacks makes it
    // fetch at once, too).
    if runtime.config().request_state_keys.is_empty() {
        let rt = runtime.clone();
        actix::spawn(async move {
            let mut refresh = tokio::time::interval(KEY_RING_REFRESH);
            loop {
                refresh.tick().await;
                rt.refresh_key_ring().await;
            }
        });
    }
    // Apart from the heartbeat: renewing many principals' slots must never
    // delay it.
    let rt = runtime.clone();
    actix::spawn(async move {
        let quotas = std::sync::Arc::clone(&rt.node().quotas);
        let mut renew = tokio::time::interval(quotas.renew_interval());
        loop {
            renew.tick().await;
            quotas.renew_streams().await;
        }
    });
    let rt = runtime.clone();
    actix::spawn(async move {
        let mut beat = tokio::time::interval(HEARTBEAT_INTERVAL);
        let mut scan = tokio::time::interval(REAP_INTERVAL);
        let mut sweep = tokio::time::interval(EXPIRY_SWEEP_INTERVAL);
        loop {
            tokio::select! {
                _ = beat.tick() => {
                    rt.heartbeat().await;
                }
                _ = scan.tick() => reap(rt.store()).await,
                _ = sweep.tick() => sweep_expired(rt.store()).await,
            }
        }
    });
}

fn on_control(rt: &Runtime, message: ControlMessage) {
    // What this node published for its own sessions, it already did.
    if !message.concerns(rt.node_id()) {
        return;
    }
    match message {
        ControlMessage::Deliver {
            session,
            message,
            trace,
            ..
        } => {
            let Some(handle) = rt.sessions().get(&session) else {
                return;
            };
            // In the trace of the node that received the client message
            // (a disabled span when traces are off or none was carried).
            let span = control_span(ControlKind::Deliver, session.as_str(), trace.as_deref());
            let _entered = span.enter();
            match decode_message(message.as_bytes()) {
                Ok(m) => {
                    record_routed(&span, &m);
                    handle.deliver_remote(m);
                }
                Err(err) => tracing::warn!(error = %err, "Undecodable message on the control bus."),
            }
        }
        ControlMessage::Forward {
            session,
            stream,
            attached,
            host,
            requests,
            principal,
            trace,
            ..
        } if host == *rt.node_id() => {
            let span = control_span(ControlKind::Forward, session.as_str(), trace.as_deref());
            let _entered = span.enter();
            rt.run_forwarded(
                session,
                stream,
                attached,
                &requests,
                principal,
                trace.as_deref(),
            );
        }
        ControlMessage::SessionEnded { session, .. } => {
            if let Some(handle) = rt.sessions().remove(&session) {
                handle.terminate();
            }
        }
        ControlMessage::SessionChanged { session, .. } => {
            if let Some(handle) = rt.sessions().get(&session) {
                handle.reload();
            }
        }
        // Published by `Runtime::broadcast` only through the bus, so the
        // origin's own sessions hear it here too.
        ControlMessage::ServerEvent { name, uri, .. } => match ServerEvent::from_wire(&name, uri) {
            Some(event) => rt.fan_out(&event),
            None => tracing::debug!(%name, "Unknown server event ignored."),
        },
        ControlMessage::StreamFailed { stream, .. } => {
            rt.node().attachments.fail_reader(&stream);
        }
        ControlMessage::Kick {
            session,
            stream,
            trace,
            ..
        } => {
            let attachments = &rt.node().attachments;
            // A span only where a reader ends: every node hears every kick.
            let span = if trace.is_some() && attachments.is_attached(&stream) {
                control_span(ControlKind::Kick, session.as_str(), trace.as_deref())
            } else {
                mcp_cluster_telemetry::TracedSpan::none()
            };
            let _entered = span.enter();
            attachments.kick_reader(&stream);
            // A reader of a standalone stream attached elsewhere: the
            // session's questions held for one can go out.
            if let Some(handle) = rt.sessions().get(&session)
                && handle.standalone_stream() == &stream
            {
                handle.reader_attached();
            }
        }
        _ => {}
    }
}

/// Names on `span` the client message a `deliver` routes.
fn record_routed(span: &mcp_cluster_telemetry::TracedSpan, message: &Message) {
    if !span.is_recording() {
        return;
    }
    match message {
        Message::Notification(n) => {
            span.set_attribute("mcp.method.name", n.method.as_str());
        }
        // The client's answer to a server request: the id of that request,
        // as text (a string id without its JSON quotes).
        Message::Response(Response { id: Some(id), .. }) => match id {
            RequestId::Number(n) => {
                span.set_attribute("jsonrpc.request.id", n.to_string());
            }
            RequestId::String(s) => {
                span.set_attribute("jsonrpc.request.id", s.as_str());
            }
        },
        _ => {}
    }
}

/// Deletes the streams of sessions that expired (idle past their TTL,
/// never DELETEd): a session's streams live no longer than the session.
/// Each expired session is handed to one node of the cluster.
async fn sweep_expired(store: &Store) {
    loop {
        let expired = match store.sessions.take_expired(EXPIRED_BATCH).await {
            Ok(expired) => expired,
            Err(err) => {
                tracing::warn!(error = %err, "Expired-session sweep failed.");
                return;
            }
        };
        for session in &expired {
            if let Err(err) = store.events.delete_session(session).await {
                tracing::warn!(session_id = %session, error = %err, "Streams of an expired session not deleted; their retention ends them.");
            }
        }
        if !expired.is_empty() {
            let m = mcp_cluster_telemetry::metrics::metrics();
            m.sessions_swept.inc_by(expired.len() as u64);
            m.sessions_ended
                .with_label_values(&["expired"])
                .inc_by(expired.len() as u64);
            tracing::debug!(
                sessions = expired.len(),
                "Streams of expired sessions deleted."
            );
        }
        if expired.len() < EXPIRED_BATCH {
            return;
        }
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
        if count > 0 {
            // Claimed by this node (a node claimed elsewhere yields none).
            let m = mcp_cluster_telemetry::metrics::metrics();
            m.dead_nodes_claimed.inc();
            m.orphans_finalized.inc_by(count as u64);
        }
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
    // From the oldest retained event: what retention dropped cannot be
    // checked (a response trimmed away is rare: it needs as many events
    // after it as the stream keeps).
    let mut after = match store.events.oldest(&open.session, &open.stream).await {
        Ok(position) => position,
        Err(StoreError::StreamNotFound) => return Ok(()),
        Err(err) => return Err(err),
    };
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
    store
        .events
        .close_stream(
            &open.session,
            &open.stream,
            crate::request::exchange::NO_OWNER,
        )
        .await
}

#[cfg(test)]
mod tests {
    use mcp_cluster_protocol::{Notification, RequestId};
    use mcp_cluster_store::SessionId;
    use mcp_cluster_store::memory::Retention;

    use super::*;

    async fn events(store: &Store, open: &OpenStream) -> Vec<Message> {
        let after = store
            .events
            .oldest(&open.session, &open.stream)
            .await
            .unwrap();
        let batch = store
            .events
            .read(&open.session, &open.stream, after, 100)
            .await
            .unwrap();
        assert!(batch.closed, "finalized streams are closed");
        batch
            .events
            .iter()
            .map(|e| decode_message(e.data.as_bytes()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn orphans_get_an_error_for_each_unanswered_request_even_when_trimmed() {
        let store = Store::memory(Retention {
            max_events_per_stream: 3,
            ..Retention::default()
        });
        let session = SessionId::random();
        let stream = store.events.create_stream(&session, &[]).await.unwrap();
        for i in 0..5 {
            let progress =
                Notification::new("notifications/progress", serde_json::json!({"progress": i}));
            let data = Arc::from(Message::Notification(progress).to_json());
            store.events.append(&session, &stream, data).await.unwrap();
        }
        let answered = Message::Response(Response::result(
            RequestId::Number(1),
            serde_json::json!({}),
        ));
        store
            .events
            .append(&session, &stream, Arc::from(answered.to_json()))
            .await
            .unwrap();
        let open = OpenStream {
            session,
            stream,
            requests: vec![RequestId::Number(1), RequestId::Number(2)],
        };
        finalize(&store, &open).await.unwrap();
        let messages = events(&store, &open).await;
        let Some(Message::Response(last)) = messages.last() else {
            panic!("ends with a response")
        };
        assert_eq!(
            last.id,
            Some(RequestId::Number(2)),
            "only the unanswered request gets an error"
        );
        assert_eq!(
            last.outcome.as_ref().unwrap_err().code,
            mcp_cluster_protocol::ErrorCode::INTERNAL_ERROR
        );
        let errors = messages
            .iter()
            .filter(|m| matches!(m, Message::Response(r) if r.outcome.is_err()))
            .count();
        assert_eq!(errors, 1);
        // Finalizing again (a second survivor) adds nothing.
        finalize(&store, &open).await.unwrap();
        assert_eq!(events(&store, &open).await.len(), messages.len());
    }
}
