//! The test OTLP receiver decodes OTLP/JSON as well as protobuf (which the
//! end-to-end trace tests send through a real exporter), keeps every field
//! the assertions read, and refuses what does not decode.

use std::time::Duration;

use mcp_cluster_testkit::{OtlpReceiver, ReceivedLink, raw_http};
use serde_json::json;

fn post(receiver: &OtlpReceiver, content_type: &str, body: &str) -> anyhow::Result<(u16, String)> {
    let addr = receiver.endpoint().trim_start_matches("http://").to_owned();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close",
        body.len()
    );
    raw_http(addr.parse()?, &head, body)
}

#[tokio::test]
async fn json_exports_are_decoded_into_spans() {
    let receiver = OtlpReceiver::start().unwrap();
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "svc"}}
        ]},
        "scopeSpans": [{"spans": [{
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": "eee19b7ec3c1b174",
            "parentSpanId": "eee19b7ec3c1b173",
            "name": "tools/call echo",
            "kind": 2,
            "startTimeUnixNano": "1544712660000000000",
            "endTimeUnixNano": "1544712661000000000",
            "attributes": [
                {"key": "mcp.method.name", "value": {"stringValue": "tools/call"}},
                {"key": "client.port", "value": {"intValue": "50123"}}
            ],
            "links": [{
                "traceId": "0af7651916cd43dd8448eb211c80319c",
                "spanId": "b7ad6b7169203331"
            }],
            "status": {"code": 2, "message": "boom"}
        }]}]
    }]})
    .to_string();
    // Blocking, which is fine: the receiver runs on its own thread.
    let (status, _) = post(&receiver, "application/json", &body).unwrap();
    assert_eq!(status, 200);

    let span = receiver
        .wait_for(|s| s.name == "tools/call echo", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(span.trace_id, "5b8efff798038103d269b633813fc60c");
    assert_eq!(span.span_id, "eee19b7ec3c1b174");
    assert_eq!(span.parent_span_id.as_deref(), Some("eee19b7ec3c1b173"));
    assert_eq!(span.kind, "server");
    assert_eq!(span.attr("mcp.method.name"), Some("tools/call"));
    assert_eq!(span.attr("client.port"), Some("50123"));
    assert_eq!(
        span.links,
        [ReceivedLink {
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: "b7ad6b7169203331".into(),
        }]
    );
    assert_eq!(
        (span.status, span.status_message.as_str()),
        ("error", "boom")
    );
    assert_eq!(span.resource["service.name"], "svc");
}

#[tokio::test]
async fn undecodable_exports_are_refused_and_nothing_is_kept() {
    let receiver = OtlpReceiver::start().unwrap();
    let (status, _) = post(&receiver, "application/x-protobuf", "\u{7f}not protobuf").unwrap();
    assert_eq!(status, 400);
    let (status, _) = post(&receiver, "application/json", "{").unwrap();
    assert_eq!(status, 400);
    assert!(receiver.spans().is_empty());
    let err = receiver
        .wait_until(|spans| !spans.is_empty(), Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("received 0 spans"), "{err}");
}
