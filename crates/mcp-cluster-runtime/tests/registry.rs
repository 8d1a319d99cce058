//! The session registry and session actors, driven through the runtime's
//! handles: creation cap, idle expiry and passivation (paused time),
//! eviction and rehydration from the store, termination.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_protocol::jsonrpc::Body;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorObject, Message, Notification, Request, RequestId};
use mcp_cluster_runtime::{
    Answers, ExchangeReply, FollowItem, Inbound, McpService, RequestContext, Runtime,
    RuntimeConfig, RuntimeError, ServerEvent, SessionHandle, Submitted, Transport,
};
use mcp_cluster_store::Store;
use mcp_cluster_store::memory::Retention;
use serde_json::{Value, json};
use support::call;

#[derive(Debug)]
struct Echo;

#[async_trait]
impl McpService for Echo {
    fn server_info(&self) -> Implementation {
        Implementation {
            name: "echo".into(),
            version: "0".into(),
            title: None,
            ..Default::default()
        }
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        Ok(json!({"method": request.method, "version": ctx.protocol_version().as_str()}))
    }
}

/// As [`Echo`], with resources a client may subscribe to.
#[derive(Debug)]
struct Watched;

#[async_trait]
impl McpService for Watched {
    fn server_info(&self) -> Implementation {
        Echo.server_info()
    }

    fn capabilities(&self) -> ServerCapabilities {
        serde_json::from_value(json!({"resources": {"subscribe": true}})).unwrap()
    }

    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        Echo.handle(request, ctx).await
    }
}

/// A service whose requests never complete.
#[derive(Debug)]
struct Hang;

#[async_trait]
impl McpService for Hang {
    fn server_info(&self) -> Implementation {
        Implementation::default()
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, _: Request, _: RequestContext) -> Result<Value, ErrorObject> {
        std::future::pending().await
    }
}

fn runtime(config: RuntimeConfig) -> Runtime {
    Runtime::new(Arc::new(Echo), Store::memory(Retention::default()), config)
}

async fn initialized(runtime: &Runtime) -> SessionHandle {
    let session = runtime.create_session(None).await.unwrap();
    let params = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
    let r = call(runtime, &session, 0, "initialize", params).await;
    assert!(r.outcome.is_ok(), "{r:?}");
    session
        .notify(
            Notification {
                method: "notifications/initialized".into(),
                params: None,
                stateless: None,
            },
            None,
        )
        .unwrap();
    session
}

#[actix_rt::test]
async fn sessions_beyond_the_cap_are_refused() {
    let runtime = runtime(RuntimeConfig {
        max_sessions: 2,
        ..RuntimeConfig::default()
    });
    runtime.create_session(None).await.unwrap();
    runtime.create_session(None).await.unwrap();
    assert_eq!(
        runtime.create_session(None).await.unwrap_err(),
        RuntimeError::TooManySessions
    );
}

#[actix_rt::test]
async fn requests_before_initialize_are_refused_but_ping_is_answered() {
    let runtime = runtime(RuntimeConfig::default());
    let session = runtime.create_session(None).await.unwrap();
    let r = call(&runtime, &session, 1, "tools/list", json!({})).await;
    assert_eq!(
        r.outcome.unwrap_err().code,
        mcp_cluster_protocol::ErrorCode::INVALID_REQUEST
    );
    let r = call(&runtime, &session, 2, "ping", json!({})).await;
    assert_eq!(r.outcome.unwrap(), json!({}));
}

#[actix_rt::test]
async fn evicted_sessions_are_rehydrated_from_the_store_with_their_state() {
    let runtime = runtime(RuntimeConfig::default());
    let session = initialized(&runtime).await;
    let id = session.id().clone();
    // The initialized notification is handled before the eviction (same mailbox).
    assert!(runtime.evict(&id));
    tokio::time::timeout(Duration::from_secs(5), async {
        while session.is_alive() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    let again = runtime.session(&id).await.unwrap();
    assert!(again.is_alive());
    assert_eq!(again.protocol_version().unwrap().as_str(), "2025-06-18");
    let r = call(&runtime, &again, 3, "tools/list", json!({})).await;
    assert_eq!(r.outcome.unwrap()["version"], "2025-06-18");
}

#[actix_rt::test]
async fn idle_sessions_expire_and_then_are_not_found() {
    tokio::time::pause();
    let runtime = runtime(RuntimeConfig {
        session_idle_ttl_secs: 60,
        session_passivate_secs: 0,
        ..RuntimeConfig::default()
    });
    let session = initialized(&runtime).await;
    let id = session.id().clone();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(session.is_alive(), "not idle long enough");
    let r = call(&runtime, &session, 1, "tools/list", json!({})).await;
    assert!(r.outcome.is_ok());
    tokio::time::sleep(Duration::from_secs(61 + 15)).await;
    assert!(!session.is_alive(), "idle actor stopped");
    assert_eq!(
        runtime.session(&id).await.unwrap_err(),
        RuntimeError::SessionNotFound
    );
}

/// Waits (paused time) until `session`'s actor stopped, at most `secs`.
async fn stopped_within(session: &SessionHandle, secs: u64) {
    tokio::time::timeout(Duration::from_secs(secs), async {
        while session.is_alive() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the actor still runs after {secs} s"));
}

#[actix_rt::test]
async fn idle_sessions_passivate_and_their_next_request_finds_them_with_their_state() {
    tokio::time::pause();
    let runtime = runtime(RuntimeConfig {
        session_idle_ttl_secs: 60,
        session_passivate_secs: 10,
        ..RuntimeConfig::default()
    });
    let session = initialized(&runtime).await;
    let id = session.id().clone();
    let r = call(
        &runtime,
        &session,
        1,
        "logging/setLevel",
        json!({"level": "error"}),
    )
    .await;
    assert!(r.outcome.is_ok(), "{r:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        session.is_alive(),
        "passivated before it was idle long enough"
    );
    // Idle 10 s is seen at the next check (every 5 s), then the grace (1 s).
    stopped_within(&session, 12).await;
    assert_eq!(runtime.session_count(), 0, "out of the registry");
    let passivated_at = tokio::time::Instant::now();
    // Its next request starts an actor from the stored record, whose TTL
    // that activity renews: the session outlives the TTL counted from
    // before it passivated.
    let (again, started) = runtime.locate(&id).await.unwrap();
    assert!(started, "rehydrated, not found running");
    assert_eq!(again.protocol_version().unwrap().as_str(), "2025-06-18");
    let r = call(&runtime, &again, 2, "tools/list", json!({})).await;
    assert_eq!(r.outcome.unwrap()["version"], "2025-06-18");
    let stored = runtime.store().sessions.load(&id).await.unwrap().unwrap();
    assert!(stored.initialized);
    assert_eq!(stored.log_level.as_deref(), Some("error"));
    // 60 s after the last renewal before it passivated; passivated again
    // meanwhile, as a client finds it between requests.
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert!(passivated_at.elapsed() >= Duration::from_secs(50));
    assert!(!again.is_alive(), "passivated again");
    let (third, started) = runtime.locate(&id).await.unwrap();
    assert!(started);
    let r = call(&runtime, &third, 3, "tools/list", json!({})).await;
    assert!(r.outcome.is_ok(), "the renewed session lives: {r:?}");
}

#[actix_rt::test]
async fn a_body_that_found_the_session_before_it_passivated_is_served_by_a_new_actor() {
    tokio::time::pause();
    let runtime = runtime(RuntimeConfig {
        session_passivate_secs: 10,
        ..RuntimeConfig::default()
    });
    let session = initialized(&runtime).await;
    // Found, then kept waiting (its quota, say) while the session went
    // idle and stopped.
    stopped_within(&session, 20).await;
    let body = Body::Single(Message::Request(Request::new(
        RequestId::Number(7),
        "tools/list",
        json!({}),
    )));
    let submitted = runtime
        .submit(
            &session,
            body,
            Answers::Reply,
            &Inbound::new(Transport::Stdio),
        )
        .await
        .unwrap_or_else(|refusal| panic!("refused: {:?}", refusal.responses()));
    let Submitted::Reply { reply, .. } = submitted else {
        panic!("expected a reply");
    };
    let ExchangeReply::Json(mut answers) = reply.await.unwrap() else {
        panic!("expected JSON");
    };
    assert_eq!(
        answers.pop().unwrap().outcome.unwrap()["version"],
        "2025-06-18"
    );
    assert_eq!(runtime.session_count(), 1, "served by a new actor");
}

#[actix_rt::test]
async fn a_session_running_a_request_does_not_passivate() {
    tokio::time::pause();
    let runtime = Runtime::new(
        Arc::new(Hang),
        Store::memory(Retention::default()),
        RuntimeConfig {
            session_passivate_secs: 10,
            ..RuntimeConfig::default()
        },
    );
    let session = initialized(&runtime).await;
    let (exchange, _reply) = runtime.exchange(&session, vec![RequestId::Number(1)]);
    session
        .dispatch(
            Request::new(RequestId::Number(1), "tools/call", json!({})),
            exchange,
        )
        .unwrap();
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert!(session.is_alive(), "passivated with a request running");
    assert_eq!(runtime.session_count(), 1);
}

/// The next message `follow` yields, past at most two keep-alives.
async fn next_message(follow: &mut mcp_cluster_runtime::Follow) -> Value {
    for _ in 0..3 {
        match follow.next().await {
            Some(FollowItem::KeepAlive) => {}
            Some(FollowItem::Event(_, data)) => return serde_json::from_str(&data).unwrap(),
            other => panic!("the stream ended: {other:?}"),
        }
    }
    panic!("nothing written to the stream");
}

#[actix_rt::test]
async fn a_session_whose_client_only_listens_passivates_and_still_hears_the_server() {
    tokio::time::pause();
    let runtime = Runtime::new(
        Arc::new(Watched),
        Store::memory(Retention::default()),
        RuntimeConfig {
            session_idle_ttl_secs: 60,
            session_passivate_secs: 10,
            ..RuntimeConfig::default()
        },
    );
    let session = initialized(&runtime).await;
    let id = session.id().clone();
    let watched = "test://watched";
    let r = call(
        &runtime,
        &session,
        1,
        "resources/subscribe",
        json!({"uri": watched}),
    )
    .await;
    assert!(r.outcome.is_ok(), "{r:?}");
    let (_, mut follow) = runtime.follow_standalone(&session).await.unwrap();
    stopped_within(&session, 20).await;
    assert_eq!(
        runtime.session_count(),
        0,
        "passivated with its stream read"
    );

    // Twice the TTL since the last request: the node renewed the session
    // for its reader.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(
        runtime.store().sessions.load(&id).await.unwrap().is_some(),
        "a listened session expired"
    );

    // The server's events reach the stream as the actor would have written
    // them, without starting it: a list change, and an update of a resource
    // the session subscribed to, not of another.
    runtime.broadcast(ServerEvent::ToolsListChanged);
    let m = next_message(&mut follow).await;
    assert_eq!(m["method"], "notifications/tools/list_changed", "{m}");
    runtime.broadcast(ServerEvent::ResourceUpdated {
        uri: "test://other".into(),
    });
    runtime.broadcast(ServerEvent::ResourceUpdated {
        uri: watched.into(),
    });
    let m = next_message(&mut follow).await;
    assert_eq!(m["method"], "notifications/resources/updated", "{m}");
    assert_eq!(m["params"]["uri"], watched, "{m}");
    assert_eq!(runtime.session_count(), 0, "no actor started for them");

    // Once its reader is gone, nothing renews it: it expires a TTL later.
    drop(follow);
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert!(runtime.store().sessions.load(&id).await.unwrap().is_none());
}

#[actix_rt::test]
async fn without_passivation_a_listened_session_keeps_its_actor() {
    tokio::time::pause();
    let runtime = runtime(RuntimeConfig {
        session_idle_ttl_secs: 60,
        session_passivate_secs: 0,
        ..RuntimeConfig::default()
    });
    let session = initialized(&runtime).await;
    let (_, mut follow) = runtime.follow_standalone(&session).await.unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(session.is_alive(), "evicted while its client listens");
    runtime.broadcast(ServerEvent::ToolsListChanged);
    let m = next_message(&mut follow).await;
    assert_eq!(m["method"], "notifications/tools/list_changed", "{m}");
}

#[actix_rt::test]
async fn with_the_embedded_store_passivated_sessions_count_against_the_cap() {
    tokio::time::pause();
    let runtime = Runtime::new(
        Arc::new(Echo),
        Store::memory_holding(Retention::default(), 2),
        RuntimeConfig {
            max_sessions: 2,
            session_passivate_secs: 10,
            ..RuntimeConfig::default()
        },
    );
    let first = initialized(&runtime).await;
    let second = initialized(&runtime).await;
    stopped_within(&first, 20).await;
    stopped_within(&second, 20).await;
    assert_eq!(runtime.session_count(), 0);
    assert_eq!(
        runtime.create_session(None).await.unwrap_err(),
        RuntimeError::TooManySessions,
        "the store still holds both"
    );
    runtime.terminate(first.id()).await.unwrap();
    runtime.create_session(None).await.unwrap();
}

#[actix_rt::test]
async fn terminated_sessions_are_gone_and_their_streams_deleted() {
    let runtime = runtime(RuntimeConfig::default());
    let session = initialized(&runtime).await;
    let id = session.id().clone();
    let standalone = session.standalone_stream().clone();
    runtime.terminate(&id).await.unwrap();
    assert_eq!(
        runtime.session(&id).await.unwrap_err(),
        RuntimeError::SessionNotFound
    );
    assert_eq!(
        runtime.terminate(&id).await.unwrap_err(),
        RuntimeError::SessionNotFound
    );
    let err = runtime
        .store()
        .events
        .tail(&id, &standalone)
        .await
        .unwrap_err();
    assert_eq!(err, mcp_cluster_store::StoreError::StreamNotFound);
}

#[actix_rt::test]
async fn a_request_id_in_flight_cannot_be_reused() {
    let runtime = Runtime::new(
        Arc::new(Hang),
        Store::memory(Retention::default()),
        RuntimeConfig::default(),
    );
    let session = initialized(&runtime).await;
    let (first, first_reply) = runtime.exchange(&session, vec![RequestId::Number(7)]);
    session
        .dispatch(
            Request::new(RequestId::Number(7), "tools/call", json!({})),
            first,
        )
        .unwrap();
    let r = call(&runtime, &session, 7, "tools/call", json!({})).await;
    let err = r.outcome.unwrap_err();
    assert!(err.message.contains("already in flight"), "{err:?}");
    // Cancelling the first frees the id: its POST gets no response.
    let cancel = Notification::new("notifications/cancelled", json!({"requestId": 7}));
    session.notify(cancel, None).unwrap();
    assert!(matches!(first_reply.await.unwrap(), ExchangeReply::Empty));
}

#[actix_rt::test]
async fn requests_stopped_by_the_server_answer_with_an_error_not_silence() {
    let runtime = Runtime::new(
        Arc::new(Hang),
        Store::memory(Retention::default()),
        RuntimeConfig::default(),
    );
    let session = initialized(&runtime).await;
    let (exchange, reply) = runtime.exchange(&session, vec![RequestId::Number(1)]);
    session
        .dispatch(
            Request::new(RequestId::Number(1), "tools/call", json!({})),
            exchange,
        )
        .unwrap();
    // Let the request start before the node stops its requests.
    tokio::task::yield_now().await;
    runtime.stop_requests();
    let ExchangeReply::Json(mut responses) = reply.await.unwrap() else {
        panic!("expected a JSON answer")
    };
    let err = responses.pop().unwrap().outcome.unwrap_err();
    assert_eq!(err.code, mcp_cluster_protocol::ErrorCode::INTERNAL_ERROR);
    assert!(err.message.contains("shutting down"), "{err:?}");
}
