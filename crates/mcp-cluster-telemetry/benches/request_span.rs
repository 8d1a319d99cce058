//! What one request's tracing costs: extracting the caller's context from
//! headers and `_meta`, creating the `mcp_request` span with its attributes
//! and dropping it, with traces off (logs on, as a node runs by default;
//! and no subscriber at all) and on (the tracer, logs off, spans
//! queued to the batch processor).
//!
//! `cargo bench -p mcp-cluster-telemetry --bench request_span`

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_cluster_telemetry::{
    JsonRpcId, LogFormat, OtelConfig, RequestParent, RequestSpanAttrs, Target, Transport,
    parent_from_headers, parent_from_meta, request_span,
};
use serde_json::json;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn one_request(meta: &serde_json::Value) {
    let headers = [("traceparent", TRACEPARENT)];
    let transport =
        parent_from_headers(|name| headers.iter().find(|(k, _)| *k == name).map(|(_, v)| *v));
    let meta = parent_from_meta(meta.get("_meta"));
    let attrs = RequestSpanAttrs {
        method: "tools/call",
        target: Some(Target::Tool("echo")),
        session_id: Some("191c4850af6c49e08843a3f6c80e5046"),
        request_id: Some(JsonRpcId::Number(7)),
        protocol_version: Some("2025-11-25"),
        transport: Transport::Http {
            version: Some("1.1"),
        },
        client: Some("127.0.0.1:50123".parse().unwrap()),
        user: None,
    };
    let span = request_span(&attrs, RequestParent::new(transport, meta));
    drop(std::hint::black_box(span));
}

fn request_spans(c: &mut Criterion) {
    let params = json!({"name": "echo", "_meta": {"traceparent": TRACEPARENT}});
    let mut group = c.benchmark_group("request_span");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    group.bench_function("traces_off_no_subscriber", |b| {
        b.iter(|| one_request(&params));
    });
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        // As the node logs when stderr is not a terminal.
        .with_ansi(false)
        .with_env_filter("info")
        .finish();
    tracing::subscriber::with_default(logs, || {
        group.bench_function("traces_off_logs_on", |b| b.iter(|| one_request(&params)));
    });

    // Traces on, to a port nobody listens on: the cost measured is the
    // request's thread's (span built, ended, queued); exporting happens on
    // the batch processor's thread, and a full queue drops spans.
    let otel = OtelConfig::from_env(
        [(
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            "http://127.0.0.1:9".to_owned(),
        )],
        None,
    )
    .unwrap();
    let guard = mcp_cluster_telemetry::init(LogFormat::Text, "off", &otel).unwrap();
    group.bench_function("traces_on_logs_off", |b| b.iter(|| one_request(&params)));
    group.finish();
    drop(guard);
}

criterion_group!(benches, request_spans);
criterion_main!(benches);
