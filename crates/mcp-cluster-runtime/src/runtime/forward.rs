//! Requests of a hosted session that reach a node other than the one
//! running its server (a hosted MCP server's child, which lives in one
//! process): that node, the *host*, runs them; the node that received them
//! follows their answers in the event log, as it would follow any stream.
//!
//! The receiving node (`session::forward::hand_on`) creates the requests' stream, registers
//! it as open under the host (so that should the host die, the survivor
//! that claims its streams answers them with -32603), checks the host is
//! still alive after that registration (so that claim cannot have happened
//! before it), writes what it already answered, and publishes
//! [`mcp_cluster_store::ControlMessage::Forward`]. The host ([`Runtime::run_forwarded`]) hands
//! the requests to the session's actor with an exchange writing into that
//! stream, which it closes after the last answer. Everything else of the
//! session (notifications, the client's answers, the GET stream,
//! `Last-Event-ID`, DELETE) is served by any node as for any session.

use std::sync::Arc;

use mcp_cluster_protocol::jsonrpc::decode_message;
use mcp_cluster_protocol::{ErrorObject, Message, Request, RequestId, Response};
use mcp_cluster_store::{OpenStream, Principal, SessionId, StreamId};

use crate::node::Work;
use crate::request::call::{Call, Inbound, Transport};
use crate::request::exchange::Exchange;
use crate::runtime::Runtime;
use crate::session::forward::answer_unrun;

impl Runtime {
    /// Runs requests another node received for a session whose server runs
    /// here ([`mcp_cluster_store::ControlMessage::Forward`]), writing their answers into
    /// `stream`.
    pub(crate) fn run_forwarded(
        &self,
        session: SessionId,
        stream: StreamId,
        attached: bool,
        requests: &[String],
        principal: Option<Principal>,
        trace: Option<&str>,
    ) {
        let mut decoded = Vec::with_capacity(requests.len());
        let mut bytes = Vec::with_capacity(requests.len());
        for text in requests {
            match decode_message(text.as_bytes()) {
                Ok(Message::Request(request)) => {
                    bytes.push(text.len());
                    decoded.push(request);
                }
                _ => {
                    tracing::warn!(session_id = %session, "Undecodable forwarded request ignored.")
                }
            }
        }
        let ids: Vec<RequestId> = decoded.iter().map(|r| r.id.clone()).collect();
        let node = Arc::clone(self.node());
        let handle = self
            .sessions()
            .get(&session)
            .filter(crate::session::SessionHandle::is_alive);
        let Some(handle) = handle.filter(|_| !decoded.is_empty()) else {
            // Ended here meanwhile: nobody runs them (a session's own
            // stream ends with the session).
            if attached {
                return;
            }
            let open = OpenStream {
                session,
                stream,
                requests: ids,
            };
            actix::spawn(async move {
                let host = node.id.clone();
                if let Err(err) = answer_unrun(&node, &host, &open).await {
                    tracing::warn!(stream = %open.stream, error = %err, "Forwarded requests could not be answered.");
                }
            });
            return;
        };
        let exchange = if attached {
            Exchange::attached(session, Arc::clone(&node), stream)
        } else {
            Exchange::streaming_into(session, Arc::clone(&node), stream, ids.clone())
        };
        let mut inbound = Inbound::new(Transport::StreamableHttp);
        inbound.principal = principal.map(Arc::new);
        inbound.trace = mcp_cluster_telemetry::parent_from_headers(|name| {
            (name == mcp_cluster_telemetry::TRACEPARENT)
                .then_some(trace)
                .flatten()
        });
        let version = handle
            .protocol_version()
            .map_or("", mcp_cluster_protocol::ProtocolVersion::as_str);
        // Admitted here as a request received here is: its parameters'
        // bytes are held while it runs, or it is refused with the reason.
        let mut holds = Vec::with_capacity(decoded.len());
        for len in &bytes {
            match inbound.admit(&node, *len, Work::Stream) {
                Ok(hold) => holds.push(hold),
                Err(err) => return refuse(exchange, ids, err.to_error_object()),
            }
        }
        for (request, hold) in decoded.iter().zip(holds) {
            exchange.track(
                Call::new(
                    self.service(),
                    request,
                    Some(handle.label()),
                    version,
                    &inbound,
                )
                .holding(hold),
            );
        }
        let dispatched = match <[Request; 1]>::try_from(decoded) {
            Ok([request]) => handle.dispatch(request, Arc::clone(&exchange)),
            Err(batch) => {
                let messages = batch.into_iter().map(Message::Request).collect();
                // Requests only: nothing to wait for before they are placed.
                handle
                    .dispatch_batch(messages, Arc::clone(&exchange))
                    .map(drop)
            }
        };
        if let Err(err) = dispatched {
            refuse(exchange, ids, err.to_error_object());
        }
    }
}

/// Answers each of `ids` with `error` (none of them ran).
fn refuse(exchange: Arc<Exchange>, ids: Vec<RequestId>, error: ErrorObject) {
    actix::spawn(async move {
        for id in ids {
            let _ = exchange
                .finish(Some(Response::error(Some(id), error.clone())))
                .await;
        }
    });
}
