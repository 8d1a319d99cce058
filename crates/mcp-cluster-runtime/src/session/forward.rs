//! The receiving side of a hosted session's requests (see
//! `runtime::forward` for the whole path): a node that does not run the
//! session's own server hands them to the node that does, and follows
//! their answers in the event log.

use std::sync::Arc;

use mcp_cluster_protocol::{ErrorObject, Message, Request, Response};
use mcp_cluster_store::{
    ControlMessage, NodeId, OpenStream, Principal, SessionId, StoreError, StreamId,
};

use crate::node::NodeContext;
use crate::request::exchange::{Exchange, ExchangeReply, HandedOn};

/// Hands `requests` of `session`, received here, to `host`, which runs the
/// session's server; the transport's reply (taken from `exchange`) follows
/// their stream. `principal` and `trace`: who they act for and the span
/// that received them.
pub(crate) async fn hand_on(
    node: Arc<NodeContext>,
    session: SessionId,
    host: NodeId,
    requests: Vec<Request>,
    exchange: Arc<Exchange>,
    principal: Option<Principal>,
    trace: Option<String>,
) {
    let encoded = requests
        .iter()
        .map(|r| Message::Request(r.clone()).to_json())
        .collect();
    let ids = requests.into_iter().map(|r| r.id).collect();
    let forward = |stream, attached| ControlMessage::Forward {
        session: session.clone(),
        stream,
        attached,
        host: host.clone(),
        requests: encoded,
        principal,
        origin: node.id.clone(),
        trace,
    };
    let (answered, reply) = match exchange.hand_on().await {
        Some(HandedOn::Reply(answered, reply)) => (answered, reply),
        // The session's own stream (legacy HTTP+SSE): the host writes
        // into it as this node would.
        Some(HandedOn::Attached(stream)) => {
            node.publish(forward(stream, true)).await;
            return;
        }
        None => return,
    };
    let open = OpenStream {
        session: session.clone(),
        stream: StreamId::random(),
        requests: ids,
    };
    let alive = match open_for(&node, &host, &open, answered).await {
        Ok(alive) => alive,
        Err(err) => {
            let _ = reply.send(ExchangeReply::Failed(err));
            return;
        }
    };
    let _ = reply.send(ExchangeReply::Stream(
        open.stream.clone(),
        open.requests.clone(),
    ));
    let sent = alive && node.publish(forward(open.stream.clone(), false)).await;
    if !sent {
        // The host is gone (or unreachable): its answer will not come.
        tracing::debug!(%host, stream = %open.stream, alive, "Forwarded requests answered here: their host is gone or unreachable.");
        if let Err(err) = answer_unrun(&node, &host, &open).await {
            tracing::warn!(stream = %open.stream, error = %err, "Forwarded requests could not be answered.");
        }
    }
}

/// Creates `open`'s stream with `answered` in it, registered under `host`;
/// whether `host` was alive once it was registered.
async fn open_for(
    node: &NodeContext,
    host: &NodeId,
    open: &OpenStream,
    answered: Vec<Response>,
) -> Result<bool, StoreError> {
    let events = &node.store.events;
    events
        .create_stream_as(&open.session, &open.stream, &open.requests)
        .await?;
    node.store.nodes.open_stream(host, open).await?;
    for response in answered {
        let data = Arc::from(Message::Response(response).to_json());
        events.append(&open.session, &open.stream, data).await?;
    }
    node.store.nodes.alive(host).await
}

/// Answers every request of `open` with -32603 (none ran) and closes its
/// stream, registered under `host`.
pub(crate) async fn answer_unrun(
    node: &NodeContext,
    host: &NodeId,
    open: &OpenStream,
) -> Result<(), StoreError> {
    let error = ErrorObject::internal(
        "the node running this session's server stopped; send the request again",
    );
    let events = &node.store.events;
    for id in &open.requests {
        let response = Message::Response(Response::error(Some(id.clone()), error.clone()));
        let data = Arc::from(response.to_json());
        events.append(&open.session, &open.stream, data).await?;
    }
    events
        .close_stream(
            &open.session,
            &open.stream,
            crate::request::exchange::NO_OWNER,
        )
        .await?;
    node.store.nodes.close_stream(host, &open.stream).await
}
