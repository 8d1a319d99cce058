//! The process's `tracing` subscriber: log lines on stderr (text or JSON,
//! `EnvFilter` syntax), and, when [`OtelConfig`] enables traces, the tracer
//! that [`crate::request_span()`] and [`crate::control_span()`] make their
//! OpenTelemetry spans with, plus a layer turning log events into events of
//! the current OpenTelemetry span.
//!
//! Owner: the binary's `main` calls [`init`] once and keeps the
//! [`TelemetryGuard`]. Stop path: [`TelemetryGuard::shutdown`] (or its drop)
//! flushes the spans still buffered and stops the exporter's thread.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber, span};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt as _, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::otel::{self, OtelConfig};

/// Longest wait at exit for buffered spans to reach the collector.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The instrumentation scope of every span this workspace emits.
const TRACER_NAME: &str = "mcp-cluster-telemetry";

/// Set once [`init`] made the tracer, cleared at shutdown; read (relaxed,
/// one load) by every tracing helper to skip all work when traces are off.
static OTEL_ON: AtomicBool = AtomicBool::new(false);

/// The tracer of every span this workspace makes, set by [`init`] (once
/// per process).
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

#[cfg(test)]
thread_local! {
    /// A test's tracer ([`capture_spans`]), on its thread only.
    static TEST_TRACER: std::cell::RefCell<Option<SdkTracer>> = const { std::cell::RefCell::new(None) };
}

/// Whether spans are exported (the tracer is made). Lets callers skip
/// gathering span attributes when traces are off.
pub fn otel_enabled() -> bool {
    OTEL_ON.load(Ordering::Relaxed)
}

/// `f` of the tracer, `None` when traces are off.
pub(crate) fn with_tracer<R>(f: impl FnOnce(&SdkTracer) -> R) -> Option<R> {
    #[cfg(test)]
    {
        TEST_TRACER.with_borrow(|t| t.as_ref().map(f))
    }
    #[cfg(not(test))]
    {
        if otel_enabled() {
            TRACER.get().map(f)
        } else {
            None
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Why the subscriber could not be installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// The log filter does not parse.
    #[error("invalid --log filter: {0}")]
    Filter(#[from] tracing_subscriber::filter::ParseError),
    /// A global subscriber is already installed.
    #[error("a tracing subscriber is already installed")]
    AlreadyInstalled(#[source] tracing_subscriber::util::TryInitError),
    /// The OTLP exporter could not be built.
    #[error("OTLP trace exporter: {0}")]
    Exporter(String),
}

/// Keeps the trace exporter running; the binary holds it until exit.
#[derive(Debug)]
#[must_use = "dropping the guard stops the trace exporter"]
pub struct TelemetryGuard {
    /// The tracer provider, `None` when traces are off. Its batch span
    /// processor owns a thread and a buffer of spans; shutting it down
    /// exports the buffer.
    provider: Option<SdkTracerProvider>,
    /// The logger provider of the audit trail's OTLP log records, `None`
    /// when they are off; shut down (its buffer exported) with the rest.
    logs: Option<opentelemetry_sdk::logs::SdkLoggerProvider>,
}

impl TelemetryGuard {
    /// Exports the spans still buffered (waiting up to 5 s for the
    /// collector) and stops the exporter. Spans ended after this are lost.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(logs) = self.logs.take()
            && let Err(err) = logs.shutdown_with_timeout(SHUTDOWN_TIMEOUT)
        {
            tracing::warn!(error = %err, "Log record exporter did not shut down cleanly; audit records may be lost.");
        }
        if let Some(provider) = self.provider.take() {
            OTEL_ON.store(false, Ordering::Relaxed);
            if let Err(err) = provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
                tracing::warn!(error = %err, "Trace exporter did not shut down cleanly; spans may be lost.");
            }
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Installs the global `tracing` subscriber: log lines to stderr (stdout
/// may carry the protocol, as in stdio mode) filtered by `filter`
/// (`EnvFilter` syntax, e.g. `info,mcp_cluster_runtime=debug`), and, when `otel`
/// enables traces, the tracer of the node's spans and a layer that adds
/// log events to the current span. That layer has its own filter: events
/// of this workspace's crates (`mcp_*`) at INFO and above, whatever the log
/// filter says, and nothing from libraries (the exporter's own HTTP client
/// included).
///
/// # Errors
/// The filter does not parse, a subscriber is already installed, or the
/// exporter cannot be built.
pub fn init(
    format: LogFormat,
    filter: &str,
    otel: &OtelConfig,
) -> Result<TelemetryGuard, InitError> {
    let filter = tracing_subscriber::EnvFilter::try_new(quiet_client_errors(filter))?;
    // Colours only for a terminal, never into log files or collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let logs = match format {
        LogFormat::Text => logs.with_filter(AskedPerCall(filter)).boxed(),
        LogFormat::Json => logs.json().with_filter(AskedPerCall(filter)).boxed(),
    };
    let provider = otel::provider(otel).map_err(InitError::Exporter)?;
    let events = provider.as_ref().map(|_| span_events());
    tracing_subscriber::registry()
        .with(logs)
        .with(events)
        .try_init()
        .map_err(InitError::AlreadyInstalled)?;
    if let Some(provider) = &provider
        && TRACER.set(provider.tracer(TRACER_NAME)).is_ok()
        && let Some(endpoint) = &otel.traces_endpoint
    {
        OTEL_ON.store(true, Ordering::Relaxed);
        let endpoint = crate::secret::redacted_url(endpoint);
        tracing::info!(
            %endpoint,
            service.name = %otel.service_name,
            service.instance.id = %otel.service_instance_id,
            sampler = ?otel.sampler,
            "Exporting traces over OTLP/HTTP."
        );
    }
    let logs = otel::logger_provider(otel).map_err(InitError::Exporter)?;
    if let Some(logs) = &logs {
        use opentelemetry::logs::LoggerProvider as _;
        crate::audit::export_to(logs.logger("mcp-audit"));
    }
    Ok(TelemetryGuard { provider, logs })
}

/// The layer that adds log events to the current OpenTelemetry span, with
/// its own filter: this workspace's events (`mcp_*` targets) at INFO and
/// above, not the access log's (its lines belong to no request).
fn span_events<S>() -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    // Events only: a span this layer took would be made (and entered on
    // every poll) for it alone when the log filter leaves it out.
    let events = tracing_subscriber::filter::filter_fn(|meta| meta.is_event());
    SpanEvents.with_filter(AskedPerCall(
        Targets::new()
            .with_target("mcp", LevelFilter::INFO)
            .with_target("mcp_access", LevelFilter::OFF)
            .and(events),
    ))
}

/// Adds each event to the current OpenTelemetry span, when it records: the
/// event's message is the span event's name, its other fields (as text)
/// and `level` its attributes.
#[derive(Debug)]
struct SpanEvents;

impl<S: Subscriber> tracing_subscriber::Layer<S> for SpanEvents {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let cx = opentelemetry::Context::current();
        let span = cx.span();
        if !span.is_recording() {
            return;
        }
        let mut fields = EventFields::default();
        event.record(&mut fields);
        fields
            .attributes
            .push(KeyValue::new("level", event.metadata().level().as_str()));
        span.add_event(fields.message, fields.attributes);
    }
}

/// An event's fields as a span event takes them.
#[derive(Debug, Default)]
struct EventFields {
    message: String,
    attributes: Vec<KeyValue>,
}

impl EventFields {
    fn take(&mut self, field: &tracing::field::Field, value: String) {
        if field.name() == "message" {
            self.message = value;
        } else {
            self.attributes.push(KeyValue::new(field.name(), value));
        }
    }
}

impl tracing::field::Visit for EventFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.take(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.take(field, format!("{value:?}"));
    }
}

/// A per-layer filter that decides on every span and event, never once
/// for all at a callsite.
///
/// tracing-subscriber hands a per-layer filter's decision from `enabled` to
/// the span or event that follows through a thread-local. A callsite whose
/// interest is `always` skips `enabled`, and its span then takes whatever
/// the thread's last `enabled` call left there. After a
/// `tracing::enabled!` check of a target that one layer filters out (the
/// access log's, which traces leave out), that layer's bit stays cleared,
/// and the next span created on that thread is not that layer's: every
/// HTTP request span was made right after the access log's check, so none
/// was ever exported (tokio-rs/tracing#2519). With the interest capped at
/// `sometimes`, every span and event asks every layer's filter first, which
/// writes every bit afresh. The cost is one filter lookup per span and
/// event.
#[derive(Debug)]
struct AskedPerCall<F>(F);

impl<S: Subscriber, F: Filter<S>> Filter<S> for AskedPerCall<F> {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        self.0.enabled(meta, cx)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        let interest = self.0.callsite_enabled(meta);
        if interest.is_always() {
            Interest::sometimes()
        } else {
            interest
        }
    }

    fn event_enabled(&self, event: &Event<'_>, cx: &Context<'_, S>) -> bool {
        self.0.event_enabled(event, cx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, cx: Context<'_, S>) {
        self.0.on_new_span(attrs, id, cx);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, cx: Context<'_, S>) {
        self.0.on_record(id, values, cx);
    }

    fn on_enter(&self, id: &span::Id, cx: Context<'_, S>) {
        self.0.on_enter(id, cx);
    }

    fn on_exit(&self, id: &span::Id, cx: Context<'_, S>) {
        self.0.on_exit(id, cx);
    }

    fn on_close(&self, id: span::Id, cx: Context<'_, S>) {
        self.0.on_close(id, cx);
    }
}

/// Installs the global `tracing` subscriber without traces: [`init`] with
/// traces off.
///
/// # Errors
/// A subscriber is already installed, or the filter does not parse.
pub fn init_logging(
    format: LogFormat,
    filter: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Nothing to flush without traces: the guard holds no exporter.
    drop(init(format, filter, &OtelConfig::default())?);
    Ok(())
}

/// actix-http logs every malformed request it cannot parse at ERROR
/// ("stream error: request parse error"): a client can flood the log, and
/// an operator has nothing to act on. Those lines are off unless the filter
/// names `actix_http` itself.
fn quiet_client_errors(filter: &str) -> String {
    if filter.contains("actix_http") {
        filter.to_owned()
    } else if filter.trim().is_empty() {
        "actix_http::h1::dispatcher=off".to_owned()
    } else {
        format!("{filter},actix_http::h1::dispatcher=off")
    }
}

/// Turns the tracing helpers on for a test, as [`init`] does when it
/// installs the layer (the flag is process-wide; no test needs it off).
#[cfg(test)]
pub(crate) fn otel_on_for_tests() {
    OTEL_ON.store(true, Ordering::Relaxed);
}

/// Runs `f` with a tracer and the span events layer as [`init`] makes them
/// (this thread only), and returns the spans it ended.
#[cfg(test)]
pub(crate) fn capture_spans(f: impl FnOnce()) -> Vec<opentelemetry_sdk::trace::SpanData> {
    capture_sampled_spans(opentelemetry_sdk::trace::Sampler::AlwaysOn, f)
}

/// [`capture_spans`] with `sampler` deciding.
#[cfg(test)]
pub(crate) fn capture_sampled_spans(
    sampler: opentelemetry_sdk::trace::Sampler,
    f: impl FnOnce(),
) -> Vec<opentelemetry_sdk::trace::SpanData> {
    use std::sync::{Arc, Mutex};

    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SpanData, SpanExporter};

    #[derive(Debug, Clone, Default)]
    struct Memory(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Memory {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    otel_on_for_tests();
    let memory = Memory::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(memory.clone())
        .with_sampler(sampler)
        .build();
    TEST_TRACER.set(Some(provider.tracer(TRACER_NAME)));
    let subscriber = tracing_subscriber::registry().with(span_events());
    tracing::subscriber::with_default(subscriber, f);
    TEST_TRACER.set(None);
    provider.force_flush().unwrap();
    memory.0.lock().unwrap().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_parse_errors_are_off_unless_asked_for() {
        assert_eq!(
            quiet_client_errors("info"),
            "info,actix_http::h1::dispatcher=off"
        );
        assert_eq!(quiet_client_errors(""), "actix_http::h1::dispatcher=off");
        assert_eq!(
            quiet_client_errors("info,actix_http=debug"),
            "info,actix_http=debug"
        );
        for filter in ["info", "", "warn,mcp_cluster_runtime=debug"] {
            tracing_subscriber::EnvFilter::try_new(quiet_client_errors(filter)).unwrap();
        }
    }
}
