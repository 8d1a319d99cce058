//! The span of a control-bus message a node acts on for another node: a
//! client message (`notifications/cancelled`, an answer to a server
//! request) routed to the node running the request, or a stream takeover
//! (`kick`) after a resumption elsewhere. The message carries the W3C
//! `traceparent` of the span that published it; this span is that span's
//! child, so the work stays in the caller's trace across nodes.
//!
//! Named as the messaging conventions name a "process" span: kind CONSUMER,
//! `process <message type>`, `messaging.operation.type=process`.

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt as _;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::spans;
use crate::trace_context::parse_traceparent;

/// `messaging.system` of the control bus (not one of the conventions'
/// well-known systems: it runs over Redis pub/sub or in memory).
const MESSAGING_SYSTEM: &str = "mcp_control_bus";

/// The control-bus messages that continue a caller's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlKind {
    /// `deliver`: a client message for the node running a request.
    Deliver,
    /// `kick`: a reader attached to a stream elsewhere; this node's ends.
    Kick,
    /// `forward`: requests of a session whose server runs on this node,
    /// received by another.
    Forward,
}

impl ControlKind {
    /// The message's `type` on the bus.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deliver => "deliver",
            Self::Kick => "kick",
            Self::Forward => "forward",
        }
    }

    fn span_name(self) -> &'static str {
        match self {
            Self::Deliver => "process deliver",
            Self::Kick => "process kick",
            Self::Forward => "process forward",
        }
    }
}

/// The span of handling one control message of session `session_id` that
/// carries `trace` (its publisher's `traceparent`), a child of that
/// context. A disabled span (nothing recorded, nothing allocated) when
/// traces are off or the message carries no valid context: a control
/// message outside any trace is not worth a trace of its own.
///
/// The handler may record `mcp.method.name` (the routed message's method)
/// and `jsonrpc.request.id` on it.
pub fn control_span(kind: ControlKind, session_id: &str, trace: Option<&str>) -> Span {
    if !crate::otel_enabled() {
        return Span::none();
    }
    let Some(parent) = trace.and_then(|tp| parse_traceparent(tp, None)) else {
        return Span::none();
    };
    let span = tracing::info_span!(
        spans::MCP_CONTROL,
        "otel.name" = kind.span_name(),
        "otel.kind" = "consumer",
        "messaging.system" = MESSAGING_SYSTEM,
        "messaging.operation.type" = "process",
        "messaging.operation.name" = "process",
        "mcp.session.id" = session_id,
        "mcp.method.name" = Empty,
        "jsonrpc.request.id" = Empty,
    );
    let parent = Context::new().with_remote_span_context(parent);
    // Only fails without the layer or once started: neither here.
    let _ = span.set_parent(parent);
    span
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::SpanKind;

    use super::*;
    use crate::init::capture_spans;

    const PUBLISHER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_handled_message_continues_the_publishers_trace() {
        let spans = capture_spans(|| {
            let span = control_span(ControlKind::Deliver, "s-1", Some(PUBLISHER));
            span.record("mcp.method.name", "notifications/cancelled");
            drop(span);
            // No context carried, or an invalid one: no span at all.
            assert!(control_span(ControlKind::Kick, "s-1", None).is_none());
            assert!(control_span(ControlKind::Kick, "s-1", Some("00-zz")).is_none());
        });
        let [span] = spans.as_slice() else {
            panic!("one span: {spans:?}")
        };
        assert_eq!(span.name, "process deliver");
        assert_eq!(span.span_kind, SpanKind::Consumer);
        assert_eq!(
            format!("{:032x}", span.span_context.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(format!("{:016x}", span.parent_span_id), "00f067aa0ba902b7");
        let has = |k: &str, v: &str| {
            span.attributes
                .iter()
                .any(|kv| kv.key.as_str() == k && kv.value.as_str() == v)
        };
        assert!(has("mcp.session.id", "s-1"));
        assert!(has("mcp.method.name", "notifications/cancelled"));
        assert!(has("messaging.operation.type", "process"));
    }
}
