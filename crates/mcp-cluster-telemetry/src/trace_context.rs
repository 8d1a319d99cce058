//! W3C Trace Context in and out of a node: the caller's context from HTTP
//! headers or from `params._meta` (2026-07-28, SEP-414: `traceparent`,
//! `tracestate` in `_meta`, unprefixed), and the current span's context as
//! a `traceparent` value for the control bus, so that work continued on
//! another node stays in the caller's trace.
//!
//! Transports and the pipeline call these; they know no HTTP framework:
//! headers come through a getter. With traces off (no tracer made by
//! [`crate::init`]) every function here returns at once,
//! without parsing or allocating.
//!
//! Baggage is not propagated.

use std::fmt::Write as _;
use std::str::FromStr;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};

use crate::traced_span::TracedSpan;

/// The W3C `traceparent` header name (lowercase; HTTP header lookups are
/// case-insensitive), also the `params._meta` key.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C `tracestate` header name, also the `params._meta` key.
pub const TRACESTATE: &str = "tracestate";

/// The caller's trace context from HTTP headers: `get` returns a header's
/// value by (lowercase) name, [`TRACEPARENT`] or [`TRACESTATE`] (static: a
/// caller can make a header name of it without allocating). An empty
/// [`Context`] when traces are off or `traceparent` is missing or invalid.
pub fn parent_from_headers<'a>(get: impl Fn(&'static str) -> Option<&'a str>) -> Context {
    if !crate::otel_enabled() {
        return Context::new();
    }
    remote_context(get(TRACEPARENT), get(TRACESTATE))
}

/// The caller's trace context from a request's `params._meta` object (MCP
/// 2026-07-28 SEP-414, the OpenTelemetry MCP conventions): string members
/// `traceparent` and `tracestate`. An empty [`Context`] when traces are off,
/// `meta` is not an object, or `traceparent` is missing or invalid.
pub fn parent_from_meta(meta: Option<&serde_json::Value>) -> Context {
    if !crate::otel_enabled() {
        return Context::new();
    }
    let member = |key| {
        meta.and_then(|m| m.get(key))
            .and_then(serde_json::Value::as_str)
    };
    remote_context(member(TRACEPARENT), member(TRACESTATE))
}

/// The parent of one request's span, and the context it links to.
///
/// The transport's context (the HTTP `traceparent` header) first, as every
/// draft of the next revision has it: a gateway or load balancer that
/// traces sees the request in its own trace. `params._meta`'s (SEP-414) is
/// the parent when the transport has none, or when the transport's is not
/// sampled and `_meta`'s, of another trace, is. The context not taken, when
/// valid and another span, is linked (one HTTP request may carry several
/// MCP messages, one MCP request may take several HTTP requests).
#[derive(Debug, Clone, Default)]
pub struct RequestParent {
    /// Becomes the span's parent when it holds a valid remote span.
    pub(crate) parent: Context,
    /// Linked from the span.
    pub(crate) link: Option<SpanContext>,
}

impl RequestParent {
    /// `transport` (from [`parent_from_headers`]) takes precedence over
    /// `meta` (from [`parent_from_meta`]), which is then linked; see the
    /// type for when `meta` is the parent.
    pub fn new(transport: Context, meta: Context) -> Self {
        let transport_span = transport.span().span_context().clone();
        let meta_span = meta.span().span_context().clone();
        let meta_first = meta_span.is_valid()
            && (!transport_span.is_valid()
                || (!transport_span.is_sampled()
                    && meta_span.is_sampled()
                    && meta_span.trace_id() != transport_span.trace_id()));
        let (parent, parent_span, other) = if meta_first {
            (meta, meta_span, transport_span)
        } else {
            (transport, transport_span, meta_span)
        };
        let link =
            (other.is_valid() && parent_span.is_valid() && other != parent_span).then_some(other);
        Self { parent, link }
    }
}

impl From<Context> for RequestParent {
    fn from(parent: Context) -> Self {
        Self { parent, link: None }
    }
}

/// The W3C `traceparent` of the current span (the one whose work is
/// running: [`TracedSpan::instrument`], [`TracedSpan::enter`]), to carry
/// the trace to another node or process. `None` when traces are off or no
/// span is current.
pub fn current_traceparent() -> Option<String> {
    if !crate::otel_enabled() {
        return None;
    }
    traceparent_of_context(&Context::current())
}

/// The W3C `traceparent` of `span` (e.g. a request's span kept by an actor
/// that publishes on its behalf). `None` when traces are off or the span
/// has no OpenTelemetry span.
pub fn traceparent_of(span: &TracedSpan) -> Option<String> {
    span.context().and_then(traceparent_of_context)
}

/// The W3C `traceparent` of a context's span (the caller's, from
/// [`parent_from_headers`]), to carry it to another node. `None` when it
/// holds no valid span.
pub fn traceparent_of_context(context: &Context) -> Option<String> {
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| format_traceparent(&span_context))
}

/// Links `span` to the span `traceparent` names (another node's, carried
/// over the control bus). Nothing happens when traces are off or
/// `traceparent` is invalid.
pub fn link_from(span: &TracedSpan, traceparent: &str) {
    if !span.is_recording() {
        return;
    }
    if let Some(context) = parse_traceparent(traceparent, None) {
        span.add_link(context);
    }
}

/// `context` with `traceparent` as its remote parent, if valid.
pub(crate) fn remote_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Context {
    match traceparent.and_then(|tp| parse_traceparent(tp, tracestate)) {
        Some(span_context) => Context::new().with_remote_span_context(span_context),
        None => Context::new(),
    }
}

/// Parses a W3C `traceparent` value (Trace Context level 1, section 3.2):
/// `version-traceid-parentid-flags`, lowercase hex, exact lengths, version
/// `ff` and all-zero ids invalid; a later version may append `-…` fields.
/// An invalid `tracestate` is dropped, the parent kept.
pub(crate) fn parse_traceparent(value: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let value = value.trim();
    let bytes = value.as_bytes();
    // 2 + 1 + 32 + 1 + 16 + 1 + 2
    const LEN: usize = 55;
    if bytes.len() < LEN || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let (version, trace_id, span_id, flags) =
        (&value[..2], &value[3..35], &value[36..52], &value[53..55]);
    if ![version, trace_id, span_id, flags]
        .iter()
        .all(|s| lower_hex(s))
    {
        return None;
    }
    match version {
        "ff" => return None,
        "00" if bytes.len() != LEN => return None,
        // A future version: more fields may follow, after a dash.
        _ if bytes.len() > LEN && bytes[LEN] != b'-' => return None,
        _ => {}
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    // Only the sampled bit is defined; others are not passed on.
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?) & TraceFlags::SAMPLED;
    let state = tracestate
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    let context = SpanContext::new(trace_id, span_id, flags, true, state);
    context.is_valid().then_some(context)
}

/// `00-<trace id>-<span id>-<flags>`.
pub(crate) fn format_traceparent(context: &SpanContext) -> String {
    let mut out = String::with_capacity(55);
    // Writing into a String cannot fail.
    let _ = write!(
        out,
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    );
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

    fn ids(context: &Context) -> (String, String) {
        let span = context.span();
        let sc = span.span_context();
        (
            format!("{:032x}", sc.trace_id()),
            format!("{:016x}", sc.span_id()),
        )
    }

    #[test]
    fn a_valid_traceparent_parses_and_formats_back() {
        let sc = parse_traceparent(TP, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")).unwrap();
        assert!(sc.is_remote());
        assert!(sc.is_sampled());
        assert_eq!(sc.trace_state().get("congo"), Some("t61rcWkgMzE"));
        assert_eq!(format_traceparent(&sc), TP);
        let unsampled = parse_traceparent(OTHER, None).unwrap();
        assert!(!unsampled.is_sampled());
        assert_eq!(format_traceparent(&unsampled), OTHER);
        // A bad tracestate is dropped, the parent kept.
        let sc = parse_traceparent(TP, Some("not a tracestate")).unwrap();
        assert_eq!(sc.trace_state().header(), "");
    }

    #[test]
    fn invalid_traceparents_are_ignored() {
        for bad in [
            "",
            "00",
            // Uppercase hex.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            // All-zero ids.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Version ff, and extra fields on version 00.
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            // Short ids (a lenient hex parser would take them).
            "00-abc-def-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad, None).is_none(), "{bad:?}");
        }
        // A later version may carry more fields.
        let future = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever";
        assert!(parse_traceparent(future, None).is_some());
        assert!(
            parse_traceparent(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
                None
            )
            .is_none()
        );
    }

    #[test]
    fn the_header_takes_precedence_over_meta_and_links_it() {
        // OTHER, sampled.
        let sampled = format!("{}-01", &OTHER[..OTHER.len() - 3]);
        let header = remote_context(Some(&sampled), None);
        let meta = remote_context(Some(TP), None);
        let chosen = RequestParent::new(header.clone(), meta.clone());
        assert_eq!(ids(&chosen.parent).0, "0af7651916cd43dd8448eb211c80319c");
        let link = chosen.link.unwrap();
        assert_eq!(format_traceparent(&link), TP);

        // No valid _meta context: the header's is the parent, nothing linked.
        let chosen = RequestParent::new(header, remote_context(Some("00-bad"), None));
        assert_eq!(ids(&chosen.parent).0, "0af7651916cd43dd8448eb211c80319c");
        assert!(chosen.link.is_none());

        // No header: _meta's is the parent.
        let chosen = RequestParent::new(Context::new(), meta.clone());
        assert_eq!(ids(&chosen.parent).0, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(chosen.link.is_none());

        // A header not sampled, _meta sampled in another trace: _meta's,
        // the header's linked.
        let chosen = RequestParent::new(remote_context(Some(OTHER), None), meta);
        assert_eq!(ids(&chosen.parent).0, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(format_traceparent(&chosen.link.unwrap()), OTHER);

        // The same context on both: one parent, no link to itself.
        let same = RequestParent::new(
            remote_context(Some(TP), None),
            remote_context(Some(TP), None),
        );
        assert!(same.link.is_none());

        // Neither: no parent.
        let none = RequestParent::new(Context::new(), Context::new());
        assert!(!none.parent.span().span_context().is_valid());
    }

    #[test]
    fn meta_and_header_getters_read_their_carriers() {
        crate::init::otel_on_for_tests();
        let meta = json!({"traceparent": TP, "tracestate": "k=v", "other": 1});
        let cx = parent_from_meta(Some(&meta));
        assert_eq!(ids(&cx).1, "00f067aa0ba902b7");
        assert_eq!(cx.span().span_context().trace_state().get("k"), Some("v"));
        for not_there in [json!({}), json!({"traceparent": 7}), json!("x")] {
            let cx = parent_from_meta(Some(&not_there));
            assert!(!cx.span().span_context().is_valid(), "{not_there}");
        }
        assert!(!parent_from_meta(None).span().span_context().is_valid());

        let headers = [("traceparent", OTHER)];
        let cx =
            parent_from_headers(|name| headers.iter().find(|(k, _)| *k == name).map(|(_, v)| *v));
        assert_eq!(ids(&cx).1, "b7ad6b7169203331");
        assert!(
            !parent_from_headers(|_| None)
                .span()
                .span_context()
                .is_valid()
        );
    }
}
