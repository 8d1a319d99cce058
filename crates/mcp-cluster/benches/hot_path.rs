//! The node's hot path without sockets: decode a `tools/call` body, dispatch
//! it through the session actor and an in-flight request actor, encode the
//! response. Compare with `codec` (mcp-cluster-protocol) for the decode/encode share.

#![allow(clippy::unwrap_used, clippy::disallowed_types)]

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_cluster::{ServerBuilder, ToolDef};
use mcp_cluster_protocol::jsonrpc::{Body, decode_body};
use mcp_cluster_protocol::types::CallToolResult;
use mcp_cluster_protocol::{Message, Request};
use mcp_cluster_runtime::{ExchangeReply, Runtime, RuntimeConfig};
use mcp_cluster_store::Store;
use mcp_cluster_store::memory::Retention;
use serde_json::{Value, json};

fn request(body: &[u8]) -> Request {
    match decode_body(body).unwrap() {
        Body::Single(Message::Request(r)) => r,
        _ => unreachable!("fixture is a request"),
    }
}

fn hot_path(c: &mut Criterion) {
    let system = actix_rt::System::new();
    let (runtime, session) = system.block_on(async {
        let echo = ToolDef::new(
            "echo",
            "Echoes.",
            json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
            |args, _| async move { Ok(CallToolResult::text(args["message"].as_str().unwrap_or_default())) },
        )
        .unwrap();
        let server = ServerBuilder::new("bench", "0").tool(echo).build();
        let runtime = Runtime::new(std::sync::Arc::new(server), Store::memory(Retention::default()), RuntimeConfig::default());
        let session = runtime.create_session(None).await.unwrap();
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"0"}}}"#;
        let (exchange, reply) = runtime.exchange(&session, vec![mcp_cluster_protocol::RequestId::Number(0)]);
        session.dispatch(request(init), exchange).unwrap();
        reply.await.unwrap();
        session.notify(mcp_cluster_protocol::Notification { method: "notifications/initialized".into(), params: None, stateless: None }, None).unwrap();
        (runtime, session)
    });
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}"#;
    c.bench_function("tools/call decode-dispatch-encode", |b| {
        b.iter_custom(|iters| {
            system.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let (exchange, reply) = runtime
                        .exchange(&session, vec![mcp_cluster_protocol::RequestId::Number(1)]);
                    session
                        .dispatch(request(std::hint::black_box(body)), exchange)
                        .unwrap();
                    let ExchangeReply::Json(mut responses) = reply.await.unwrap() else {
                        unreachable!("echo answers as JSON")
                    };
                    let out = Message::Response(responses.pop().unwrap()).to_json();
                    std::hint::black_box::<Value>(Value::String(out));
                }
                start.elapsed()
            })
        });
    });
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
