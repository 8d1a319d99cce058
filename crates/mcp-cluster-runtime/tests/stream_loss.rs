//! A stream whose data is gone ends with a JSON-RPC error, never in
//! silence: one error per request it answers that got no response (on a
//! standalone stream, which may carry no response, an `error` log message). And a session's streams go when the
//! session expires: the node's sweep deletes them.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use mcp_cluster_protocol::jsonrpc::decode_message;
use mcp_cluster_protocol::{ErrorCode, Message, RequestId};
use mcp_cluster_runtime::{ExchangeReply, Follow, FollowEnd, FollowItem, RuntimeConfig};
use mcp_cluster_store::{Position, StoreError};
use support::*;

/// Reads the lost-stream error and the end that follows it; returns the
/// error's id.
async fn lost(follow: &mut Follow) -> Option<RequestId> {
    let Some(FollowItem::Notice(data)) = follow.next().await else {
        panic!("an error, not silence");
    };
    assert!(data.contains("stream lost"), "{data}");
    let Message::Response(r) = decode_message(data.as_bytes()).unwrap() else {
        panic!("not a response: {data}");
    };
    assert_eq!(r.outcome.unwrap_err().code, ErrorCode::INTERNAL_ERROR);
    assert_eq!(follow.next().await, Some(FollowItem::End(FollowEnd::Gone)));
    r.id
}

#[actix_rt::test]
async fn a_lost_request_stream_answers_its_request_with_an_error() {
    let runtime = runtime(RuntimeConfig::default());
    let session = initialized(&runtime).await;
    let (exchange, reply) = runtime.exchange(&session, vec![RequestId::Number(5)]);
    session.dispatch(tool_call(5), exchange).unwrap();
    let ExchangeReply::Stream(stream, requests) = reply.await.unwrap() else {
        panic!("the call logs: its answer is a stream");
    };
    assert_eq!(requests, vec![RequestId::Number(5)]);
    // Followed by a resumption, which finds the request ids in the store.
    let mut follow = runtime
        .follow(&session, &stream, Position::START)
        .await
        .unwrap();
    assert!(matches!(follow.next().await, Some(FollowItem::Event(..))));

    runtime
        .store()
        .events
        .delete_session(session.id())
        .await
        .unwrap();

    assert_eq!(lost(&mut follow).await, Some(RequestId::Number(5)));
    assert_eq!(follow.next().await, None);
}

#[actix_rt::test]
async fn a_lost_standalone_stream_ends_with_an_error_log_message_not_a_response() {
    let runtime = runtime(RuntimeConfig::default());
    let session = initialized(&runtime).await;
    let (_, mut follow) = runtime.follow_standalone(&session).await.unwrap();
    runtime
        .store()
        .events
        .delete_session(session.id())
        .await
        .unwrap();
    let Some(FollowItem::Notice(data)) = follow.next().await else {
        panic!("a notice, not silence");
    };
    let Message::Notification(n) = decode_message(data.as_bytes()).unwrap() else {
        panic!("a standalone stream carries no response: {data}");
    };
    assert_eq!(n.method, "notifications/message");
    let params = n.params.unwrap();
    assert_eq!(params["level"], "error", "{data}");
    assert!(
        params["data"].as_str().unwrap().contains("stream lost"),
        "{data}"
    );
    assert_eq!(follow.next().await, Some(FollowItem::End(FollowEnd::Gone)));
}

#[actix_rt::test]
async fn streams_of_a_session_the_client_deleted_end_quietly() {
    let runtime = runtime(RuntimeConfig::default());
    let session = initialized(&runtime).await;
    let (exchange, reply) = runtime.exchange(&session, vec![RequestId::Number(5)]);
    session.dispatch(tool_call(5), exchange).unwrap();
    let ExchangeReply::Stream(stream, requests) = reply.await.unwrap() else {
        panic!("the call logs: its answer is a stream");
    };
    let mut follow = runtime
        .follow_new(&session, &stream, requests)
        .await
        .unwrap();
    assert!(matches!(follow.next().await, Some(FollowItem::Event(..))));
    let (_, mut standalone) = runtime.follow_standalone(&session).await.unwrap();
    // DELETE cancels the session's requests: no response, no error.
    runtime.terminate(session.id()).await.unwrap();
    assert_eq!(follow.next().await, Some(FollowItem::End(FollowEnd::Gone)));
    assert_eq!(
        standalone.next().await,
        Some(FollowItem::End(FollowEnd::Gone))
    );
}

#[actix_rt::test]
async fn an_expired_sessions_streams_are_deleted_by_the_sweep() {
    tokio::time::pause();
    let runtime = runtime(RuntimeConfig {
        session_idle_ttl_secs: 60,
        ..RuntimeConfig::default()
    });
    let session = initialized(&runtime).await;
    let id = session.id().clone();
    let standalone = session.standalone_stream().clone();
    let events = &runtime.store().events;
    // Made by its first reader (a GET), not with the session.
    assert_eq!(
        events.tail(&id, &standalone).await.unwrap_err(),
        StoreError::StreamNotFound
    );
    runtime.open_standalone(&session).await.unwrap();
    assert!(events.tail(&id, &standalone).await.is_ok());
    // Idle past the TTL, one idle check and one sweep.
    tokio::time::sleep(Duration::from_secs(60 + 5 + 5 + 1)).await;
    assert!(!session.is_alive(), "the idle actor stopped");
    assert_eq!(
        events.tail(&id, &standalone).await.unwrap_err(),
        StoreError::StreamNotFound,
        "the standalone stream went with its session, long before its own idle TTL"
    );
}

#[actix_rt::test]
async fn abandoned_sessions_leave_no_stream_in_the_embedded_store() {
    use std::sync::Arc;

    use mcp_cluster_store::Store;
    use mcp_cluster_store::memory::{MemoryEventLog, MemorySessionStore, Retention};

    tokio::time::pause();
    let log = Arc::new(MemoryEventLog::new(Retention::default()));
    let mut store = Store::memory(Retention::default());
    store.events = Arc::clone(&log) as _;
    store.sessions = Arc::new(MemorySessionStore::new());
    let runtime = mcp_cluster_runtime::Runtime::new(
        Arc::new(Catalog),
        store,
        RuntimeConfig {
            session_idle_ttl_secs: 60,
            ..RuntimeConfig::default()
        },
    );
    for round in 0..3 {
        for _ in 0..500 {
            let session = initialized(&runtime).await;
            runtime.open_standalone(&session).await.unwrap();
        }
        assert!(
            log.stream_count() >= 500,
            "round {round}: {}",
            log.stream_count()
        );
        // Idle past the TTL, one idle check and one sweep.
        tokio::time::sleep(Duration::from_secs(60 + 5 + 5 + 1)).await;
        assert_eq!(log.stream_count(), 0, "round {round}: streams left behind");
        assert_eq!(
            runtime.session_count(),
            0,
            "round {round}: actors left behind"
        );
    }
}
