//! The node's byte budgets in the pipeline: the bytes running requests
//! hold, per owner (429, quota `in_flight_bytes_per_client`) and per node
//! (503); and a kept budget that only owners at their floor fill refuses
//! new work instead of dropping what they keep. Each refusal comes before
//! anything of the refused body runs. (Real processes and floods:
//! `tests/tests/hostile_retained_owners.rs`.)

#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use mcp_cluster_protocol::jsonrpc::Body;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorObject, Message, Notification, Request, RequestId};
use mcp_cluster_runtime::{
    Answers, ExchangeReply, FollowItem, Inbound, McpService, Quota, QuotaConfig, Refusal,
    RequestContext, ResponseMode, Runtime, RuntimeConfig, RuntimeError, SessionHandle, Submitted,
    Transport,
};
use mcp_cluster_store::memory::Retention;
use mcp_cluster_store::{ByteBudget, Store};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Runs calls of the tool `wait` until a permit is given, answers the rest
/// at once.
#[derive(Debug)]
struct Gated {
    open: Semaphore,
}

#[async_trait]
impl McpService for Gated {
    fn server_info(&self) -> Implementation {
        Implementation::default()
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, request: Request, _: RequestContext) -> Result<Value, ErrorObject> {
        let name = request.params.as_ref().and_then(|p| p.get("name"));
        if name.and_then(Value::as_str) == Some("wait") {
            self.open.acquire().await.unwrap().forget();
        }
        Ok(json!({}))
    }
}

fn runtime(config: RuntimeConfig, retention: Retention) -> (Runtime, Arc<Gated>) {
    let service = Arc::new(Gated {
        open: Semaphore::new(0),
    });
    let runtime = Runtime::new(
        Arc::clone(&service) as Arc<dyn McpService>,
        Store::memory(retention),
        config,
    );
    (runtime, service)
}

/// A body of `bytes` from `address`, as a transport hands it over.
fn from(address: &str, bytes: usize) -> Inbound {
    Inbound {
        client_ip: Some(address.parse::<IpAddr>().unwrap()),
        body_bytes: bytes,
        ..Inbound::new(Transport::StreamableHttp)
    }
}

async fn session(runtime: &Runtime, inbound: &Inbound) -> SessionHandle {
    let initialize = Request::new(
        RequestId::Number(0),
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    let small = Inbound {
        body_bytes: 100,
        ..inbound.clone()
    };
    let (session, _, succeeded) = runtime.initialize(initialize, &small).await.unwrap();
    assert!(succeeded);
    session
        .notify(
            Notification::new("notifications/initialized", json!({})),
            None,
        )
        .unwrap();
    session
}

/// A call of the tool `name` (`wait` or `now`).
fn request(id: i64, name: &str) -> Message {
    Message::Request(Request::new(
        RequestId::Number(id),
        "tools/call",
        json!({"name": name, "arguments": {}}),
    ))
}

fn refusal_of(submitted: Result<Submitted, Refusal>) -> RuntimeError {
    match submitted {
        Err(Refusal::Runtime { error, .. }) => error,
        Err(other) => panic!("expected a runtime refusal, got {other:?}"),
        Ok(other) => panic!("expected a refusal, got {other:?}"),
    }
}

async fn reply(submitted: Submitted) -> ExchangeReply {
    let Submitted::Reply { reply, .. } = submitted else {
        panic!("expected a reply")
    };
    reply.await.unwrap()
}

#[actix_rt::test]
async fn running_requests_hold_their_owners_share_and_the_nodes_budget() {
    let config = RuntimeConfig {
        max_in_flight_bytes: 2_000,
        quotas: QuotaConfig {
            in_flight_bytes_per_client: 1_000,
            ..QuotaConfig::off()
        },
        ..RuntimeConfig::default()
    };
    let (runtime, service) = runtime(config, Retention::default());
    let a = from("192.0.2.1", 600);
    let session_a = session(&runtime, &a).await;

    // The first waits: its 600 bytes are held while its handler runs.
    let waiting = runtime
        .submit(
            &session_a,
            Body::Single(request(1, "wait")),
            Answers::Reply,
            &a,
        )
        .await
        .unwrap();
    let err = refusal_of(
        runtime
            .submit(
                &session_a,
                Body::Single(request(2, "wait")),
                Answers::Reply,
                &a,
            )
            .await,
    );
    assert!(
        matches!(
            err,
            RuntimeError::QuotaExceeded {
                quota: Quota::InFlightBytesPerClient,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.retry_after_secs(), Some(1));
    // A batch whose requests together go past the share runs none.
    let batch = Body::Batch(vec![Ok(request(3, "now")), Ok(request(4, "now"))]);
    let batch_a = from("192.0.2.1", 1_000);
    let err = refusal_of(
        runtime
            .submit(&session_a, batch, Answers::Reply, &batch_a)
            .await,
    );
    assert!(matches!(err, RuntimeError::QuotaExceeded { .. }), "{err:?}");

    // Other owners take the node's budget, up to it.
    let b = from("192.0.2.2", 1_000);
    let session_b = session(&runtime, &b).await;
    let c = from("192.0.2.3", 1_000);
    let session_c = session(&runtime, &c).await;
    let held_b = runtime
        .submit(
            &session_b,
            Body::Single(request(5, "wait")),
            Answers::Reply,
            &b,
        )
        .await
        .unwrap();
    let err = refusal_of(
        runtime
            .submit(
                &session_c,
                Body::Single(request(6, "wait")),
                Answers::Reply,
                &c,
            )
            .await,
    );
    assert_eq!(err, RuntimeError::NodeBudget);

    // The handlers end: their bytes come back.
    service.open.add_permits(2);
    reply(waiting).await;
    reply(held_b).await;
    let done = runtime
        .submit(
            &session_c,
            Body::Single(request(7, "now")),
            Answers::Reply,
            &c,
        )
        .await
        .unwrap();
    assert!(matches!(reply(done).await, ExchangeReply::Json(_)));
    let done = runtime
        .submit(
            &session_a,
            Body::Single(request(8, "now")),
            Answers::Reply,
            &a,
        )
        .await
        .unwrap();
    assert!(matches!(reply(done).await, ExchangeReply::Json(_)));
}

#[actix_rt::test]
async fn a_kept_budget_full_of_floors_refuses_new_work_instead_of_dropping() {
    // Every answer is a stream, kept once closed; a floor as large as the
    // share protects everything an owner keeps.
    let config = RuntimeConfig {
        response_mode: ResponseMode::Sse,
        ..RuntimeConfig::default()
    };
    let budget = ByteBudget {
        per_node: 100,
        per_client: 1_000,
        floor: 1_000,
    };
    let retention = Retention {
        closed_streams: budget,
        ..Retention::default()
    };
    let (runtime, _) = runtime(config, retention);
    let a = from("192.0.2.1", 50);
    let session_a = session(&runtime, &a).await;
    let b = from("192.0.2.2", 50);
    let session_b = session(&runtime, &b).await;
    // Closed streams of a few dozen bytes each, until the node holds more
    // than its 100 and nothing may go.
    let mut refused = None;
    for id in 1..10 {
        match runtime
            .submit(
                &session_a,
                Body::Single(request(id, "now")),
                Answers::Reply,
                &a,
            )
            .await
        {
            Ok(submitted) => {
                let ExchangeReply::Stream(stream, requests) = reply(submitted).await else {
                    panic!("expected a stream");
                };
                // Read to its end: the stream is closed, kept.
                let mut follow = runtime
                    .follow_new(&session_a, &stream, requests)
                    .await
                    .unwrap();
                while let Some(item) = follow.next().await {
                    if let FollowItem::End(_) = item {
                        break;
                    }
                }
            }
            Err(refusal) => {
                refused = Some(refusal);
                break;
            }
        }
    }
    let refusal = refused.expect("the full budget refused a request");
    let Refusal::Runtime { error, .. } = &refusal else {
        panic!("{refusal:?}")
    };
    assert_eq!(*error, RuntimeError::NodeBudget);
    // Another owner too: what a keeps within its floor is not dropped.
    assert_eq!(
        refusal_of(
            runtime
                .submit(
                    &session_b,
                    Body::Single(request(1, "now")),
                    Answers::Reply,
                    &b
                )
                .await
        ),
        RuntimeError::NodeBudget
    );
    // a's session ends, its streams with it: there is room again.
    runtime.terminate(session_a.id()).await.unwrap();
    let done = runtime
        .submit(
            &session_b,
            Body::Single(request(2, "now")),
            Answers::Reply,
            &b,
        )
        .await
        .unwrap();
    assert!(matches!(reply(done).await, ExchangeReply::Stream(..)));
}
