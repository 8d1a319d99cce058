//! Telemetry of an MCP node: logging and trace setup, the names of spans,
//! and the spans of MCP requests with W3C trace context in and out.
//!
//! Only the node (through `mcp-cluster`) installs a subscriber; libraries emit
//! `tracing` events with the span names defined here.
//!
//! # Layout
//! - [`spans`]: span names.
//! - [`metrics`]: the Prometheus metrics, registered once.
//! - [`audit`]: the audit trail, one JSON line per request handled;
//!   [`rfc3339`], a time as its records and tasks write it.
//! - [`events`]: notable happenings, each logged and counted by one
//!   `emit()`.
//! - [`init`] (`init`): the `tracing` subscriber (text or JSON, env filter)
//!   plus, when configured, the tracer and the layer turning log events
//!   into span events; [`TelemetryGuard`].
//! - [`TracedSpan`] (`traced_span`): a log span and its OpenTelemetry span,
//!   made side by side; what the request and control spans are.
//! - [`OtelConfig`] (`otel`): OTLP export from the standard `OTEL_*`
//!   variables.
//! - `trace_context`: `traceparent` from HTTP headers and `params._meta`,
//!   and out to the control bus ([`parent_from_headers`],
//!   [`parent_from_meta`], [`current_traceparent`], [`link_from`]).
//! - [`request_span()`] (`request_span`): one SERVER span per MCP request,
//!   per the OpenTelemetry MCP conventions; [`record_error`].
//! - [`control_span()`] (`control_span`): handling a control-bus message
//!   in the publisher's trace.
//! - [`Secret`] (`secret`): a setting that prints and serializes as
//!   `"<redacted>"`; [`redacted_url`] and [`url_scheme_and_host`]: a URL
//!   setting as logs and errors show it, without the secrets it may hold.

pub mod audit;
pub mod events;
pub mod metrics;

pub mod spans {
    //! Log span names, written once. (The control bus's spans are
    //! OpenTelemetry spans only: [`crate::control_span()`].)

    /// One JSON-RPC request or notification received. Fields are named as
    /// the OpenTelemetry MCP conventions name the attributes, so that logs
    /// and traces agree: `mcp.method.name`, `jsonrpc.request.id`,
    /// `mcp.session.id` (see [`crate::request_span()`]).
    pub const MCP_REQUEST: &str = "mcp_request";
}

mod control_span;
mod init;
mod otel;
mod request_span;
mod secret;
mod trace_context;
mod traced_span;

pub use audit::rfc3339;
pub use control_span::{ControlKind, control_span};
pub use init::{InitError, LogFormat, TelemetryGuard, init, init_logging, otel_enabled};
/// A trace context (the caller's, from [`parent_from_headers`]).
pub use opentelemetry::Context as TraceContext;
pub use otel::{DEFAULT_SERVICE_NAME, OtelConfig, OtelConfigError, SamplerConfig};
pub use request_span::{
    JsonRpcId, MAX_SHOWN_DESCRIPTION_BYTES, MAX_SHOWN_ID_CHARS, RequestFailure, RequestSpanAttrs,
    Target, Transport, User, record_error, request_span,
};
pub use secret::{REDACTED, Secret, UNPARSABLE_URL, redacted_url, url_scheme_and_host};
pub use trace_context::{
    RequestParent, TRACEPARENT, TRACESTATE, current_traceparent, link_from, parent_from_headers,
    parent_from_meta, traceparent_of, traceparent_of_context,
};
pub use traced_span::{EnteredSpan, TracedSpan};
