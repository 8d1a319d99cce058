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
    // The same call in each era, as the echo load sends it: a 2026-07-28
    // request carries its version, client and capabilities in `_meta`.
    let session = br#"{"jsonrpc":"2.0","id":12345,"method":"tools/call","params":{"name":"echo","arguments":{"message":"m12345"}}}"#;
    c.bench_function("decode tools/call, session era", |b| {
        b.iter(|| decode_message(std::hint::black_box(session)))
    });
    let stateless = br#"{"jsonrpc":"2.0","id":12345,"method":"tools/call","params":{"name":"echo","arguments":{"message":"m12345"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    c.bench_function("decode tools/call, 2026-07-28", |b| {
        b.iter(|| decode_message(std::hint::black_box(stateless)))
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
