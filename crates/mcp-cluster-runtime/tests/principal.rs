//! Sessions bound to their principal: the runtime serves a session only to
//! the principal that created it (another, or none, meets it as unknown,
//! and it is neither rehydrated nor ended for them), and a handler learns
//! who its request acts for.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_protocol::jsonrpc::Body;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorObject, Message, Request, RequestId};
use mcp_cluster_runtime::{
    Answers, ExchangeReply, Inbound, McpService, RequestContext, Runtime, RuntimeConfig,
    RuntimeError, Submitted, Transport,
};
use mcp_cluster_store::memory::Retention;
use mcp_cluster_store::{Principal, Store};
use serde_json::{Value, json};

/// Answers every request with who it acts for.
#[derive(Debug)]
struct WhoAmI;

#[async_trait]
impl McpService for WhoAmI {
    fn server_info(&self) -> Implementation {
        Implementation::default()
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, _: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        Ok(match ctx.principal() {
            Some(p) => json!({"subject": p.subject, "scopes": p.scopes}),
            None => json!({"subject": null}),
        })
    }
}

fn principal(subject: &str) -> Arc<Principal> {
    Arc::new(Principal {
        issuer: "https://idp.example".into(),
        subject: subject.into(),
        client_id: Some("client".into()),
        scopes: vec!["mcp".into()],
    })
}

fn inbound(principal: Option<Arc<Principal>>) -> Inbound {
    Inbound {
        principal,
        ..Inbound::new(Transport::StreamableHttp)
    }
}

fn runtime() -> Runtime {
    Runtime::new(
        Arc::new(WhoAmI),
        Store::memory(Retention::default()),
        RuntimeConfig::default(),
    )
}

async fn ask(
    runtime: &Runtime,
    as_: &Inbound,
    session: &mcp_cluster_runtime::SessionHandle,
) -> Value {
    let request = Request::new(RequestId::Number(1), "tools/list", json!({}));
    let submitted = runtime
        .submit(
            session,
            Body::Single(Message::Request(request)),
            Answers::Reply,
            as_,
        )
        .await
        .unwrap();
    let Submitted::Reply { reply, .. } = submitted else {
        panic!("expected a reply")
    };
    match reply.await.unwrap() {
        ExchangeReply::Json(mut r) => r.pop().unwrap().outcome.unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

#[actix_rt::test]
async fn only_the_creating_principal_finds_its_session() {
    let runtime = runtime();
    let alice = principal("alice");
    let bob = principal("bob");
    let session = runtime
        .open_session(&inbound(Some(Arc::clone(&alice))))
        .await
        .unwrap();
    let id = session.id().clone();
    assert!(session.belongs_to(Some(&alice)));
    assert!(!session.belongs_to(Some(&bob)));
    assert!(!session.belongs_to(None));
    // An issuer whose name ends where a subject begins is not confused.
    let lookalike = Principal {
        issuer: "https://idp.example#al".into(),
        subject: "ice".into(),
        ..(*alice).clone()
    };
    assert!(!session.belongs_to(Some(&lookalike)));

    runtime.session_as(&id, Some(&alice)).await.unwrap();
    for other in [Some(&*bob), None, Some(&lookalike)] {
        assert_eq!(
            runtime.session_as(&id, other).await.unwrap_err(),
            RuntimeError::SessionNotFound
        );
        assert_eq!(
            runtime.terminate_as(&id, other).await.unwrap_err(),
            RuntimeError::SessionNotFound
        );
    }
    // Still there for its owner, after all those attempts.
    runtime.session_as(&id, Some(&alice)).await.unwrap();
    runtime.terminate_as(&id, Some(&alice)).await.unwrap();
    assert_eq!(
        runtime.session_as(&id, Some(&alice)).await.unwrap_err(),
        RuntimeError::SessionNotFound
    );
}

#[actix_rt::test]
async fn another_principal_does_not_rehydrate_an_evicted_session() {
    let runtime = runtime();
    let alice = principal("alice");
    let session = runtime
        .open_session(&inbound(Some(Arc::clone(&alice))))
        .await
        .unwrap();
    let id = session.id().clone();
    assert!(runtime.evict(&id));
    tokio::time::timeout(Duration::from_secs(5), async {
        while session.is_alive() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(runtime.session_count(), 0);
    assert_eq!(
        runtime
            .session_as(&id, Some(&principal("bob")))
            .await
            .unwrap_err(),
        RuntimeError::SessionNotFound
    );
    assert_eq!(runtime.session_count(), 0, "nothing started for bob");
    let again = runtime.session_as(&id, Some(&alice)).await.unwrap();
    assert!(again.is_alive());
    assert!(
        again.belongs_to(Some(&alice)),
        "the owner survives rehydration"
    );
}

#[actix_rt::test]
async fn handlers_see_the_principal_of_their_request() {
    let runtime = runtime();
    let alice = principal("alice");
    let as_alice = inbound(Some(Arc::clone(&alice)));
    let session = initialized(&runtime, &as_alice).await;
    assert!(session.belongs_to(Some(&alice)));
    let answer = ask(&runtime, &as_alice, &session).await;
    assert_eq!(answer, json!({"subject": "alice", "scopes": ["mcp"]}));

    let anonymous = inbound(None);
    let open = initialized(&runtime, &anonymous).await;
    assert_eq!(
        ask(&runtime, &anonymous, &open).await,
        json!({"subject": null})
    );
}

async fn initialized(runtime: &Runtime, as_: &Inbound) -> mcp_cluster_runtime::SessionHandle {
    let params = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
    let request = Request::new(RequestId::Number(0), "initialize", params);
    let (session, _, succeeded) = runtime.initialize(request, as_).await.unwrap();
    assert!(succeeded);
    session
        .notify(
            mcp_cluster_protocol::Notification::new("notifications/initialized", json!({})),
            None,
        )
        .unwrap();
    session
}
