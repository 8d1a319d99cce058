//! Quotas in the pipeline: new sessions, requests and open streams per
//! client address (without a principal), requests, open sessions and open
//! streams per principal.
//! Each refusal is `QuotaExceeded` with a time to wait, before anything of
//! the refused body runs; other addresses and principals are unaffected.
//! (Cluster-wide counting and node death: `tests/tests/quotas_*.rs`.)

#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_protocol::jsonrpc::Body;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorCode, ErrorObject, Message, Request, RequestId};
use mcp_cluster_runtime::{
    Answers, ExchangeReply, Inbound, McpService, Quota, QuotaConfig, Refusal, RequestContext,
    Runtime, RuntimeConfig, RuntimeError, SessionHandle, Submitted, Transport,
};
use mcp_cluster_store::memory::Retention;
use mcp_cluster_store::{Principal, Store};
use serde_json::{Value, json};

/// Counts the requests its handlers ran.
#[derive(Debug, Default)]
struct Counting {
    handled: AtomicUsize,
}

#[async_trait]
impl McpService for Counting {
    fn server_info(&self) -> Implementation {
        Implementation::default()
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, _: Request, _: RequestContext) -> Result<Value, ErrorObject> {
        self.handled.fetch_add(1, Ordering::SeqCst);
        Ok(json!({}))
    }
}

fn runtime(quotas: QuotaConfig) -> (Runtime, Arc<Counting>) {
    let service = Arc::new(Counting::default());
    let config = RuntimeConfig {
        quotas,
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(
        Arc::clone(&service) as Arc<dyn McpService>,
        Store::memory(Retention::default()),
        config,
    );
    (runtime, service)
}

fn principal(subject: &str) -> Arc<Principal> {
    Arc::new(Principal {
        issuer: "https://idp.example".into(),
        subject: subject.into(),
        client_id: None,
        scopes: vec![],
    })
}

fn from(address: &str, principal: Option<Arc<Principal>>) -> Inbound {
    Inbound {
        client_ip: Some(address.parse::<IpAddr>().unwrap()),
        principal,
        ..Inbound::new(Transport::StreamableHttp)
    }
}

fn quota_of(err: &RuntimeError) -> (Quota, Duration) {
    match err {
        RuntimeError::QuotaExceeded { quota, retry_after } => (*quota, *retry_after),
        other => panic!("expected a quota refusal, got {other:?}"),
    }
}

fn initialize_request(id: i64, version: &str) -> Request {
    Request::new(
        RequestId::Number(id),
        "initialize",
        json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    )
}

async fn initialized(runtime: &Runtime, inbound: &Inbound, version: &str) -> SessionHandle {
    let (session, _, succeeded) = runtime
        .initialize(initialize_request(0, version), inbound)
        .await
        .unwrap();
    assert!(succeeded);
    session
        .notify(
            mcp_cluster_protocol::Notification::new("notifications/initialized", json!({})),
            None,
        )
        .unwrap();
    session
}

fn list(id: i64) -> Message {
    Message::Request(Request::new(RequestId::Number(id), "tools/list", json!({})))
}

async fn answered(submitted: Submitted) -> usize {
    let Submitted::Reply { reply, .. } = submitted else {
        panic!("expected a reply")
    };
    match reply.await.unwrap() {
        ExchangeReply::Json(responses) => responses.len(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

#[actix_rt::test]
async fn new_sessions_are_limited_per_client_address_without_a_principal() {
    let (runtime, _) = runtime(QuotaConfig {
        initialize_per_address: 3,
        initialize_window_secs: 60,
        ..QuotaConfig::default()
    });
    let flooder = from("192.0.2.1", None);
    for _ in 0..3 {
        runtime.open_session(&flooder).await.unwrap();
    }
    let err = runtime.open_session(&flooder).await.unwrap_err();
    let (quota, wait) = quota_of(&err);
    assert_eq!(quota, Quota::InitializePerAddress);
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(20),
        "{wait:?}"
    );
    assert_eq!(err.retry_after_secs(), Some(wait.as_secs() + 1));
    // Through `initialize`: refused before anything ran, naming the request.
    let refusal = runtime
        .initialize(initialize_request(7, "2025-11-25"), &flooder)
        .await
        .unwrap_err();
    assert_eq!(refusal.id(), Some(&RequestId::Number(7)));
    let error = refusal.to_error_object();
    assert_eq!(error.code, ErrorCode::QUOTA_EXCEEDED);
    assert_eq!(
        error.data.unwrap()["quota"],
        json!("initialize_per_address")
    );
    assert_eq!(runtime.session_count(), 3);

    // Other addresses, a principal from the same address (counted as a
    // principal instead), and requests without an address are not limited.
    runtime
        .open_session(&from("192.0.2.2", None))
        .await
        .unwrap();
    runtime
        .open_session(&from("192.0.2.1", Some(principal("alice"))))
        .await
        .unwrap();
    for _ in 0..5 {
        runtime
            .open_session(&Inbound::new(Transport::Stdio))
            .await
            .unwrap();
    }
    // IPv6 addresses count per /64.
    for i in 0..3 {
        runtime
            .open_session(&from(&format!("2001:db8:0:1::{i}"), None))
            .await
            .unwrap();
    }
    let err = runtime
        .open_session(&from("2001:db8:0:1:ffff::9", None))
        .await
        .unwrap_err();
    assert_eq!(quota_of(&err).0, Quota::InitializePerAddress);
}

#[actix_rt::test]
async fn requests_are_limited_per_principal_and_a_batch_is_refused_whole() {
    let (runtime, service) = runtime(QuotaConfig {
        requests_per_principal: 6,
        requests_window_secs: 600,
        ..QuotaConfig::default()
    });
    let alice = from("192.0.2.1", Some(principal("alice")));
    // initialize and notifications/initialized count: 1 each (the latter
    // is sent to the session directly here, so only initialize counts).
    let session = initialized(&runtime, &alice, "2025-03-26").await;
    for id in 1..=3 {
        let body = Body::Single(list(id));
        let submitted = runtime
            .submit(&session, body, Answers::Reply, &alice)
            .await
            .unwrap();
        assert_eq!(answered(submitted).await, 1);
    }
    // Two units left: a batch of three is refused whole, nothing runs.
    let handled = service.handled.load(Ordering::SeqCst);
    let batch = Body::Batch(vec![Ok(list(10)), Ok(list(11)), Ok(list(12))]);
    let refusal = runtime
        .submit(&session, batch, Answers::Reply, &alice)
        .await
        .unwrap_err();
    let Refusal::Runtime { error, batch, .. } = &refusal else {
        panic!("expected a runtime refusal, got {refusal:?}")
    };
    assert_eq!(quota_of(error).0, Quota::RequestsPerPrincipal);
    assert_eq!(batch.len(), 3, "every request of the batch is answered");
    assert_eq!(refusal.responses().len(), 3);
    assert!(
        refusal
            .to_error_object()
            .message
            .ends_with("nothing in the batch was run")
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(service.handled.load(Ordering::SeqCst), handled);
    // The two units left still fit.
    let batch = Body::Batch(vec![Ok(list(20)), Ok(list(21))]);
    let submitted = runtime
        .submit(&session, batch, Answers::Reply, &alice)
        .await
        .unwrap();
    assert_eq!(answered(submitted).await, 2);
    let refusal = runtime
        .submit(&session, Body::Single(list(30)), Answers::Reply, &alice)
        .await
        .unwrap_err();
    assert_eq!(refusal.id(), Some(&RequestId::Number(30)));
    // Over the quota, a cancellation still passes: it frees, it does not
    // take.
    let cancel = mcp_cluster_protocol::Notification::new(
        "notifications/cancelled",
        json!({"requestId": 30, "reason": "over quota"}),
    );
    let submitted = runtime
        .submit(
            &session,
            Body::Single(Message::Notification(cancel)),
            Answers::Reply,
            &alice,
        )
        .await
        .unwrap();
    assert!(matches!(submitted, Submitted::Accepted));

    // Another principal, and the same session without one, are not
    // counted against alice.
    let bob = from("192.0.2.1", Some(principal("bob")));
    let theirs = initialized(&runtime, &bob, "2025-03-26").await;
    runtime
        .submit(&theirs, Body::Single(list(1)), Answers::Reply, &bob)
        .await
        .unwrap();
    let anonymous = from("192.0.2.1", None);
    let open = initialized(&runtime, &anonymous, "2025-03-26").await;
    for id in 0..10 {
        runtime
            .submit(&open, Body::Single(list(id)), Answers::Reply, &anonymous)
            .await
            .unwrap();
    }
}

#[actix_rt::test]
async fn requests_without_a_principal_are_limited_per_address_and_a_batch_is_refused_whole() {
    let (runtime, service) = runtime(QuotaConfig {
        requests_per_address: 6,
        requests_window_secs: 600,
        ..QuotaConfig::default()
    });
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    let anonymous = from("192.0.2.1", None);
    // initialize: 1; a GET or a refused request, counted by the transport: 1.
    let session = initialized(&runtime, &anonymous, "2025-03-26").await;
    runtime.admit_request_from(ip).await.unwrap();
    for id in 1..=2 {
        let submitted = runtime
            .submit(&session, Body::Single(list(id)), Answers::Reply, &anonymous)
            .await
            .unwrap();
        assert_eq!(answered(submitted).await, 1);
    }
    // Two units left: a batch of three is refused whole, nothing runs, and
    // the address is not taken to be over its rate for single requests.
    let handled = service.handled.load(Ordering::SeqCst);
    let batch = Body::Batch(vec![Ok(list(10)), Ok(list(11)), Ok(list(12))]);
    let refusal = runtime
        .submit(&session, batch, Answers::Reply, &anonymous)
        .await
        .unwrap_err();
    let Refusal::Runtime { error, batch, .. } = &refusal else {
        panic!("expected a runtime refusal, got {refusal:?}")
    };
    assert_eq!(quota_of(error).0, Quota::RequestsPerAddress);
    assert_eq!(batch.len(), 3);
    assert!(!runtime.is_over_request_rate(ip));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(service.handled.load(Ordering::SeqCst), handled);
    for id in 20..22 {
        runtime
            .submit(&session, Body::Single(list(id)), Answers::Reply, &anonymous)
            .await
            .unwrap();
    }
    // Spent: refused by the store once, then known here until one more
    // request fits (a tenth of the window).
    let refusal = runtime
        .submit(&session, Body::Single(list(30)), Answers::Reply, &anonymous)
        .await
        .unwrap_err();
    assert_eq!(refusal.id(), Some(&RequestId::Number(30)));
    assert!(runtime.is_over_request_rate(ip));
    let known = runtime.over_request_rate(ip).expect("known to be over");
    let (quota, wait) = quota_of(&known);
    assert_eq!(quota, Quota::RequestsPerAddress);
    assert!(wait <= Duration::from_secs(100), "{wait:?}");
    assert_eq!(
        quota_of(&runtime.admit_request_from(ip).await.unwrap_err()).0,
        Quota::RequestsPerAddress
    );
    // A cancellation still passes.
    let cancel = mcp_cluster_protocol::Notification::new(
        "notifications/cancelled",
        json!({"requestId": 30, "reason": "over quota"}),
    );
    let submitted = runtime
        .submit(
            &session,
            Body::Single(Message::Notification(cancel)),
            Answers::Reply,
            &anonymous,
        )
        .await
        .unwrap();
    assert!(matches!(submitted, Submitted::Accepted));

    // Another address, a principal on the same address (counted as a
    // principal) and a request without an address are not limited.
    let other = from("192.0.2.2", None);
    let theirs = initialized(&runtime, &other, "2025-03-26").await;
    runtime
        .submit(&theirs, Body::Single(list(1)), Answers::Reply, &other)
        .await
        .unwrap();
    let alice = from("192.0.2.1", Some(principal("alice")));
    let hers = initialized(&runtime, &alice, "2025-03-26").await;
    runtime
        .submit(&hers, Body::Single(list(1)), Answers::Reply, &alice)
        .await
        .unwrap();
    let stdio = Inbound::new(Transport::Stdio);
    for id in 0..10 {
        runtime
            .submit(&session, Body::Single(list(id)), Answers::Reply, &stdio)
            .await
            .unwrap();
    }
    // IPv6 addresses count per /64.
    let six = from("2001:db8:0:1::1", None);
    let sixth = initialized(&runtime, &six, "2025-03-26").await;
    for id in 0..5 {
        runtime
            .submit(&sixth, Body::Single(list(id)), Answers::Reply, &six)
            .await
            .unwrap();
    }
    let neighbour = from("2001:db8:0:1:ffff::9", None);
    let refusal = runtime
        .submit(&sixth, Body::Single(list(9)), Answers::Reply, &neighbour)
        .await
        .unwrap_err();
    let Refusal::Runtime { error, .. } = &refusal else {
        panic!("expected a runtime refusal, got {refusal:?}")
    };
    assert_eq!(quota_of(error).0, Quota::RequestsPerAddress);
}

#[actix_rt::test]
async fn open_sessions_are_limited_per_principal_until_one_ends() {
    let (runtime, _) = runtime(QuotaConfig {
        sessions_per_principal: 2,
        ..QuotaConfig::default()
    });
    let alice = from("192.0.2.1", Some(principal("alice")));
    let first = runtime.open_session(&alice).await.unwrap();
    runtime.open_session(&alice).await.unwrap();
    let err = runtime.open_session(&alice).await.unwrap_err();
    let (quota, wait) = quota_of(&err);
    assert_eq!(quota, Quota::SessionsPerPrincipal);
    assert!(
        wait <= RuntimeConfig::default().session_idle_ttl(),
        "a slot frees when a session expires at the latest: {wait:?}"
    );
    // Refused as a principal, whatever the address.
    let elsewhere = from("198.51.100.1", Some(principal("alice")));
    assert!(runtime.open_session(&elsewhere).await.is_err());
    runtime
        .open_session(&from("192.0.2.1", Some(principal("bob"))))
        .await
        .unwrap();
    runtime
        .terminate_as(first.id(), Some(&principal("alice")))
        .await
        .unwrap();
    runtime.open_session(&alice).await.unwrap();
    assert!(runtime.open_session(&alice).await.is_err());
}

#[actix_rt::test]
async fn open_streams_are_limited_per_principal_and_come_back_when_they_close() {
    let (runtime, _) = runtime(QuotaConfig {
        streams_per_principal: 2,
        ..QuotaConfig::default()
    });
    let alice = from("192.0.2.1", Some(principal("alice")));
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(runtime.open_session(&alice).await.unwrap());
    }
    let (_, first) = runtime.follow_standalone(&sessions[0]).await.unwrap();
    let (_, second) = runtime.follow_standalone(&sessions[1]).await.unwrap();
    let err = runtime.follow_standalone(&sessions[2]).await.unwrap_err();
    assert_eq!(quota_of(&err).0, Quota::StreamsPerPrincipal);
    // Reconnecting to a stream alice already reads takes its slot over.
    let (_, again) = runtime.follow_standalone(&sessions[0]).await.unwrap();
    drop(first);
    assert!(
        runtime.follow_standalone(&sessions[2]).await.is_err(),
        "the taken-over reader's end leaves the slot to the new one"
    );
    // A closed stream gives its slot back (released in the background).
    drop(second);
    let third = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match runtime.follow_standalone(&sessions[2]).await {
                Ok(follow) => break follow,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .expect("the closed stream's slot comes back");
    drop((again, third));
    // Sessions without a principal are not counted.
    let anonymous = from("192.0.2.1", None);
    let mut open = Vec::new();
    for _ in 0..4 {
        let session = runtime.open_session(&anonymous).await.unwrap();
        open.push(runtime.follow_standalone(&session).await.unwrap());
    }
}

#[actix_rt::test]
async fn open_streams_without_a_principal_are_limited_per_reader_address() {
    let (runtime, _) = runtime(QuotaConfig {
        streams_per_address: 2,
        ..QuotaConfig::default()
    });
    let reader = from("192.0.2.1", None);
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(runtime.open_session(&reader).await.unwrap());
    }
    let (_, first) = runtime
        .follow_standalone_as(&sessions[0], &reader)
        .await
        .unwrap();
    let (_, second) = runtime
        .follow_standalone_as(&sessions[1], &reader)
        .await
        .unwrap();
    let err = runtime
        .follow_standalone_as(&sessions[2], &reader)
        .await
        .unwrap_err();
    let (quota, wait) = quota_of(&err);
    assert_eq!(quota, Quota::StreamsPerAddress);
    assert!(wait <= QuotaConfig::default().stream_lease(), "{wait:?}");
    // Reconnecting to a stream the address already reads takes its slot
    // over.
    let (_, again) = runtime
        .follow_standalone_as(&sessions[0], &reader)
        .await
        .unwrap();
    drop(first);
    // Another address, and a reader without one, are not counted.
    let elsewhere = from("192.0.2.2", None);
    let (_, theirs) = runtime
        .follow_standalone_as(&sessions[2], &elsewhere)
        .await
        .unwrap();
    drop(theirs);
    let (_, local) = runtime.follow_standalone(&sessions[2]).await.unwrap();
    drop(local);
    // A closed stream gives its slot back (released in the background).
    drop(second);
    let third = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match runtime.follow_standalone_as(&sessions[2], &reader).await {
                Ok(follow) => break follow,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .expect("the closed stream's slot comes back");
    drop((again, third));
    // A principal's sessions count as the principal's, whatever the
    // reader's address.
    let alice = from("192.0.2.1", Some(principal("alice")));
    let mut held = Vec::new();
    for _ in 0..4 {
        let session = runtime.open_session(&alice).await.unwrap();
        held.push(
            runtime
                .follow_standalone_as(&session, &alice)
                .await
                .unwrap(),
        );
    }
}
