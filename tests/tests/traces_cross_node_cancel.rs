//! A call and its cancellation posted to another node form one trace: the
//! call's SERVER span is a child of the `traceparent` the test put in its
//! `params._meta`, the cancellation's SERVER span (on the other node) a
//! child of the `traceparent` header of its POST, and the node running the
//! call handles the routed cancellation in a CONSUMER span, child of the
//! cancellation's span.

mod cluster_support;

use std::time::Duration;

use cluster_support::*;
use mcp_cluster_testkit::{Cluster, OtlpReceiver, ReceivedSpan};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;

/// The client's trace, and its spans for the call and the cancellation.
const TRACE_ID: &str = "5b8efff798038103d269b633813fc60c";
const CALL_SPAN: &str = "eee19b7ec3c1b174";
const CANCEL_SPAN: &str = "eee19b7ec3c1b175";

/// Room for the batch processor's 5 s delay on a loaded machine; a hang
/// guard, not an assertion on time.
const ARRIVAL: Duration = Duration::from_secs(40);

fn find<'a>(spans: &'a [ReceivedSpan], name: &str) -> Option<&'a ReceivedSpan> {
    spans
        .iter()
        .find(|s| s.trace_id == TRACE_ID && s.name == name)
}

#[tokio::test]
async fn a_cancel_posted_to_another_node_stays_in_the_calls_trace() {
    let receiver = OtlpReceiver::start().unwrap();
    let endpoint = receiver.endpoint();
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start(2, &["--otlp-endpoint", &endpoint]).unwrap()
    })
    .await
    .unwrap();
    let a = session(&cluster.node_url(0), json!({})).await;
    let b = client(&cluster.node_url(1), a.session_id().unwrap());

    let mut call = long_running(11, 60_000, 600, "cancel-me");
    call["params"]["_meta"]["traceparent"] = json!(format!("00-{TRACE_ID}-{CALL_SPAN}-01"));
    let mut stream = post_sse(&a, &call).await;
    priming(&mut stream).await;
    next_event(&mut stream).await.expect("progress");

    let mut headers = HeaderMap::new();
    headers.insert(
        "traceparent",
        HeaderValue::from_str(&format!("00-{TRACE_ID}-{CANCEL_SPAN}-01")).unwrap(),
    );
    let cancel = notification(
        "notifications/cancelled",
        json!({"requestId": 11, "reason": "test"}),
    );
    let reply = b.post_with(&cancel, headers).await.unwrap();
    assert!(
        matches!(reply, mcp_cluster_client::Reply::Accepted),
        "{reply:?}"
    );
    while next_event(&mut stream).await.is_some() {}

    let spans = receiver
        .wait_until(
            |spans| {
                [
                    "tools/call long_running_operation",
                    "notifications/cancelled",
                    "process deliver",
                ]
                .iter()
                .all(|name| find(spans, name).is_some())
            },
            ARRIVAL,
        )
        .await
        .unwrap();
    let call = find(&spans, "tools/call long_running_operation").unwrap();
    let cancel = find(&spans, "notifications/cancelled").unwrap();
    let routed = find(&spans, "process deliver").unwrap();

    assert_eq!(call.kind, "server");
    assert_eq!(call.parent_span_id.as_deref(), Some(CALL_SPAN));
    assert_eq!(
        call.attr("gen_ai.tool.name"),
        Some("long_running_operation")
    );
    assert_eq!(call.attr("jsonrpc.request.id"), Some("11"));
    assert_eq!(call.attr("mcp.session.id"), a.session_id());

    assert_eq!(cancel.kind, "server");
    assert_eq!(cancel.parent_span_id.as_deref(), Some(CANCEL_SPAN));

    assert_eq!(routed.kind, "consumer");
    assert_eq!(
        routed.parent_span_id.as_deref(),
        Some(cancel.span_id.as_str())
    );
    assert_eq!(
        routed.attr("mcp.method.name"),
        Some("notifications/cancelled")
    );
    // The cancellation was received by one node and acted on by the other,
    // the one running the call.
    let node = |s: &ReceivedSpan| s.resource["service.instance.id"].clone();
    assert_ne!(node(cancel), node(routed));
    assert_eq!(node(call), node(routed));
}
