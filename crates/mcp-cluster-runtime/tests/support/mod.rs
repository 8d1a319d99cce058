//! A service and helpers shared by the runtime's integration tests.

#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

use std::sync::Arc;

use async_trait::async_trait;
use mcp_cluster_protocol::types::{
    Implementation, ListChanged, LoggingLevel, ResourcesCapability, ServerCapabilities,
};
use mcp_cluster_protocol::{ErrorObject, Notification, Request, RequestId, Response};
use mcp_cluster_runtime::{
    ExchangeReply, McpService, RequestContext, Runtime, RuntimeConfig, SessionHandle,
};
use mcp_cluster_store::Store;
use mcp_cluster_store::memory::Retention;
use serde_json::{Value, json};

/// Resources `test://<anything>` that can be subscribed to; `tools/call`
/// logs one message (the answer turns into a stream) and never completes;
/// every other method answers at once.
#[derive(Debug)]
pub struct Catalog;

#[async_trait]
impl McpService for Catalog {
    fn server_info(&self) -> Implementation {
        Implementation {
            name: "catalog".into(),
            version: "0".into(),
            title: None,
            ..Default::default()
        }
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities {
            resources: Some(ResourcesCapability {
                subscribe: Some(true),
                list_changed: Some(true),
            }),
            tools: Some(ListChanged {
                list_changed: Some(false),
            }),
            ..ServerCapabilities::default()
        }
    }

    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        if request.method == "tools/call" {
            ctx.log(LoggingLevel::Info, None, json!("started"))
                .await
                .ok();
            std::future::pending::<()>().await;
        }
        Ok(json!({"method": request.method}))
    }

    fn has_resource(&self, uri: &str) -> bool {
        uri.starts_with("test://")
    }
}

/// A runtime over [`Catalog`] on the embedded store.
pub fn runtime(config: RuntimeConfig) -> Runtime {
    Runtime::new(
        Arc::new(Catalog),
        Store::memory(Retention::default()),
        config,
    )
}

/// Sends one request and returns its JSON answer.
pub async fn call(
    runtime: &Runtime,
    session: &SessionHandle,
    id: i64,
    method: &str,
    params: Value,
) -> Response {
    let (exchange, reply) = runtime.exchange(session, vec![RequestId::Number(id)]);
    session
        .dispatch(
            Request::new(RequestId::Number(id), method, params),
            exchange,
        )
        .unwrap();
    match reply.await.unwrap() {
        ExchangeReply::Json(mut r) => r.pop().unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

/// `initialize` with these capabilities and client info.
pub fn initialize_params(capabilities: Value, client_info: Value) -> Value {
    json!({"protocolVersion": "2025-03-26", "capabilities": capabilities, "clientInfo": client_info})
}

/// A new session, initialized (2025-03-26: batches allowed).
pub async fn initialized(runtime: &Runtime) -> SessionHandle {
    let session = runtime.create_session(None).await.unwrap();
    let params = initialize_params(json!({}), json!({"name": "t", "version": "0"}));
    let r = call(runtime, &session, 0, "initialize", params).await;
    assert!(r.outcome.is_ok(), "{r:?}");
    session
        .notify(
            Notification::new("notifications/initialized", json!({})),
            None,
        )
        .unwrap();
    session
}

/// The session's record as the store holds it now.
pub async fn record(
    runtime: &Runtime,
    session: &SessionHandle,
) -> mcp_cluster_store::SessionRecord {
    runtime
        .store()
        .sessions
        .load(session.id())
        .await
        .unwrap()
        .unwrap()
}

/// A `tools/call` request (never completes with [`Catalog`]).
pub fn tool_call(id: i64) -> Request {
    Request::new(RequestId::Number(id), "tools/call", json!({"name": "t"}))
}

/// The error code of an answer.
pub fn code(response: &Response) -> i64 {
    response.outcome.as_ref().unwrap_err().code.0.into()
}
