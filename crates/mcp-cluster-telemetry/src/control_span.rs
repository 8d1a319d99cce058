//! The span of a control-bus message a node acts on for another node: a
//! client message (`notifications/cancelled`, an answer to a server
//! request) routed to the node running the request, or a stream takeover
//! (`kick`) after a resumption elsewhere. The message carries the W3C
//! `traceparent` of the span that published it; this span is that span's
//! child, so the work stays in the caller's trace across nodes.
//!
//! Named as the messaging conventions name a "process" span: kind CONSUMER,
//! `process <message type>`, `messaging.operation.type=process`.

use opentelemetry::trace::{SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::trace_context::parse_traceparent;
use crate::traced_span::TracedSpan;

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
/// context. A span that records nothing (nothing allocated) when traces
/// are off or the message carries no valid context: a control message
/// outside any trace is not worth a trace of its own. It has no log span:
/// the handlers' log lines name the session themselves.
///
/// The handler may set `mcp.method.name` (the routed message's method)
/// and `jsonrpc.request.id` on it ([`TracedSpan::set_attribute`]).
pub fn control_span(kind: ControlKind, session_id: &str, trace: Option<&str>) -> TracedSpan {
    if !crate::otel_enabled() {
        return TracedSpan::none();
    }
    let Some(parent) = trace.and_then(|tp| parse_traceparent(tp, None)) else {
        return TracedSpan::none();
    };
    let parent = Context::new().with_remote_span_context(parent);
    let otel = crate::init::with_tracer(|tracer| {
        let builder = tracer
            .span_builder(kind.span_name())
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("messaging.system", MESSAGING_SYSTEM),
                KeyValue::new("messaging.operation.type", "process"),
                KeyValue::new("messaging.operation.name", "process"),
                KeyValue::new("mcp.session.id", session_id.to_owned()),
            ]);
        Context::new().with_span(tracer.build_with_context(builder, &parent))
    });
    TracedSpan::new(tracing::Span::none(), otel)
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
            span.set_attribute("mcp.method.name", "notifications/cancelled");
            drop(span);
            // No context carried, or an invalid one: no span at all.
            assert!(
                control_span(ControlKind::Kick, "s-1", None)
                    .context()
                    .is_none()
            );
            assert!(
                control_span(ControlKind::Kick, "s-1", Some("00-zz"))
                    .context()
                    .is_none()
            );
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
