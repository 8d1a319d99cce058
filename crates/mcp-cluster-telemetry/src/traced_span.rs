//! A span of the node's own: its log span (the `tracing` span that log
//! lines carry the fields of) and, when traces are on, its OpenTelemetry
//! span, made with the SDK's tracer directly.
//!
//! The two live side by side rather than one derived from the other: a
//! `tracing` span that becomes an OpenTelemetry span on its close copies
//! every field into a builder, keeps it in the span's extensions and
//! builds the SDK span at the end: 1.72 µs a span against 0.55 µs for the
//! SDK span alone (`benches/request_span.rs`, 2026-12-06). Here the SDK
//! span is built once, its attributes set only when the sampler keeps it,
//! and it ends when the last clone of the [`TracedSpan`] (or of a
//! [`Context`] holding it) is dropped.
//!
//! Work runs "in" the span when its future is wrapped with
//! [`TracedSpan::instrument`] or while [`TracedSpan::enter`]'s guard
//! lives: the log span is entered and the span's context is the current
//! OpenTelemetry [`Context`] (what [`crate::current_traceparent`] reads, and
//! what log events become span events on).

use std::future::Future;

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanContext, Status, TraceContextExt as _};
use opentelemetry::{Context, ContextGuard, KeyValue};

/// A log span and, when traces are on and the span is made, its
/// OpenTelemetry span. Cheap to clone (two reference counts); the
/// OpenTelemetry span ends, and is exported, when the last clone is
/// dropped.
#[derive(Debug, Clone)]
pub struct TracedSpan {
    log: tracing::Span,
    /// A context holding the OpenTelemetry span; `None` when traces are
    /// off.
    otel: Option<Context>,
}

/// The guard of [`TracedSpan::enter`]: the log span is entered and the
/// span's context current until it is dropped. Not `Send`: never hold it
/// across an `.await` (use [`TracedSpan::instrument`]).
#[must_use = "the span is left when the guard is dropped"]
#[derive(Debug)]
pub struct EnteredSpan<'a> {
    _log: tracing::span::Entered<'a>,
    _otel: Option<ContextGuard>,
}

impl TracedSpan {
    /// A span that records nothing.
    pub fn none() -> Self {
        Self {
            log: tracing::Span::none(),
            otel: None,
        }
    }

    pub(crate) fn new(log: tracing::Span, otel: Option<Context>) -> Self {
        Self { log, otel }
    }

    /// The log span.
    pub fn log(&self) -> &tracing::Span {
        &self.log
    }

    /// The context holding the OpenTelemetry span, `None` when traces are
    /// off.
    pub fn context(&self) -> Option<&Context> {
        self.otel.as_ref()
    }

    /// Whether the OpenTelemetry span records (traces on, sampled).
    pub fn is_recording(&self) -> bool {
        self.otel
            .as_ref()
            .is_some_and(|cx| cx.span().is_recording())
    }

    /// Sets a text attribute on the OpenTelemetry span (nothing when it does
    /// not record).
    pub fn set_attribute(&self, key: &'static str, value: impl Into<String>) {
        if let Some(cx) = &self.otel {
            cx.span().set_attribute(KeyValue::new(key, value.into()));
        }
    }

    /// Sets attributes on the OpenTelemetry span (nothing when it does not
    /// record).
    pub(crate) fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if let Some(cx) = &self.otel {
            cx.span().set_attributes(attributes);
        }
    }

    pub(crate) fn set_status(&self, status: Status) {
        if let Some(cx) = &self.otel {
            cx.span().set_status(status);
        }
    }

    pub(crate) fn add_link(&self, link: SpanContext) {
        if let Some(cx) = &self.otel {
            cx.span().add_link(link, Vec::new());
        }
    }

    /// Enters the span on this thread until the guard is dropped.
    pub fn enter(&self) -> EnteredSpan<'_> {
        EnteredSpan {
            _log: self.log.enter(),
            _otel: self.otel.clone().map(Context::attach),
        }
    }

    /// Runs `f` in the span.
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _entered = self.enter();
        f()
    }

    /// `future`, run in the span on every poll. Boxed: every caller keeps
    /// the future as a boxed job, and the two shapes (with a context, and
    /// without when traces are off) are one type so.
    pub fn instrument<F>(
        self,
        future: F,
    ) -> std::pin::Pin<Box<dyn Future<Output = F::Output> + Send>>
    where
        F: Future + Send + 'static,
    {
        use tracing::Instrument as _;
        let future = future.instrument(self.log);
        match self.otel {
            Some(cx) => Box::pin(future.with_context(cx)),
            None => Box::pin(future),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context as TaskContext, Poll, Waker};

    use super::*;
    use crate::init::capture_spans;
    use crate::trace_context::{format_traceparent, remote_context};
    use crate::{ControlKind, RequestSpanAttrs, control_span, request_span};

    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// Polls `future` once; it must be ready.
    fn poll_once<T>(future: std::pin::Pin<Box<dyn Future<Output = T> + Send>>) -> T {
        let mut future = future;
        match future
            .as_mut()
            .poll(&mut TaskContext::from_waker(Waker::noop()))
        {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("the future is not ready"),
        }
    }

    #[test]
    fn an_instrumented_future_runs_in_the_span_and_the_span_ends_with_the_last_clone() {
        let attrs = RequestSpanAttrs {
            method: "tools/call",
            ..Default::default()
        };
        let mut inside = None;
        let mut kept = None;
        let spans = capture_spans(|| {
            let span = request_span(&attrs, remote_context(Some(CALLER), None));
            let held = span.clone();
            inside = poll_once(span.instrument(async {
                tracing::info!(tool = "echo", "Handled.");
                crate::current_traceparent()
            }));
            assert_eq!(crate::current_traceparent(), None, "left after the poll");
            kept = crate::traceparent_of(&held);
            // Not ended while a clone lives.
            assert!(held.is_recording());
        });
        let [span] = spans.as_slice() else {
            panic!("one span: {spans:?}")
        };
        let own = format_traceparent(&span.span_context);
        assert_eq!(inside.as_deref(), Some(own.as_str()));
        assert_eq!(kept.as_deref(), Some(own.as_str()));
        let [event] = span.events.events.as_slice() else {
            panic!("one event: {:?}", span.events)
        };
        assert_eq!(event.name, "Handled.");
        let attrs: Vec<(String, String)> = event
            .attributes
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        assert_eq!(
            attrs,
            [
                ("tool".to_owned(), "echo".to_owned()),
                ("level".to_owned(), "INFO".to_owned())
            ]
        );
    }

    #[test]
    fn a_request_made_while_a_control_span_is_entered_is_its_child() {
        let spans = capture_spans(|| {
            let control = control_span(ControlKind::Forward, "s-1", Some(CALLER));
            let _entered = control.enter();
            let attrs = RequestSpanAttrs {
                method: "tools/call",
                ..Default::default()
            };
            drop(request_span(&attrs, opentelemetry::Context::new()));
        });
        let [request, control] = spans.as_slice() else {
            panic!("two spans: {spans:?}")
        };
        assert_eq!(control.name, "process forward");
        assert_eq!(request.parent_span_id, control.span_context.span_id());
        assert_eq!(
            request.span_context.trace_id(),
            control.span_context.trace_id()
        );
    }

    #[test]
    fn with_traces_off_a_span_has_no_context_and_records_nothing() {
        // No tracer on this thread: what a node without an endpoint has.
        let attrs = RequestSpanAttrs {
            method: "tools/call",
            ..Default::default()
        };
        let span = request_span(&attrs, remote_context(Some(CALLER), None));
        assert!(span.context().is_none());
        assert!(!span.is_recording());
        assert_eq!(crate::traceparent_of(&span), None);
        let out = poll_once(span.instrument(async { crate::current_traceparent() }));
        assert_eq!(out, None);
    }
}
