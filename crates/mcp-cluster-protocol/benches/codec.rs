//! Decode and encode of the hot-path messages.

#![allow(clippy::unwrap_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_cluster_protocol::jsonrpc::decode_message;
use mcp_cluster_protocol::types::CallToolResult;
use mcp_cluster_protocol::{Message, RequestId, Response};

fn codec(c: &mut Criterion) {
    let call = br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"},"_meta":{"progressToken":7}}}"#;
    c.bench_function("decode tools/call", |b| {
        b.iter(|| decode_message(std::hint::black_box(call)))
    });
    let result = serde_json::to_value(CallToolResult::text("hello")).unwrap();
    c.bench_function("encode tools/call result", |b| {
        b.iter(|| {
            Message::Response(Response::result(RequestId::Number(42), result.clone())).to_json()
        })
    });
}

criterion_group!(benches, codec);
criterion_main!(benches);
