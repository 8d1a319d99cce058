//! One span per MCP request or notification a node receives, named and
//! attributed as the OpenTelemetry semantic conventions for MCP say
//! (`gen-ai/mcp.md`, server span): name `{mcp.method.name} {target}`, kind
//! SERVER, attributes `mcp.method.name`, `jsonrpc.request.id`,
//! `mcp.session.id`, `mcp.protocol.version`, `gen_ai.tool.name`,
//! `gen_ai.prompt.name`, `mcp.resource.uri`, `gen_ai.operation.name`,
//! `network.transport`, `network.protocol.name`/`.version`,
//! `client.address`/`.port`, and on failure `error.type`,
//! `rpc.response.status_code` and an ERROR status.
//!
//! The pipeline creates the span ([`request_span`]) and records the outcome
//! ([`record_error`]); this module knows no transport and no actor.
//!
//! The span is a [`TracedSpan`]: the `mcp_request` log span, with only the
//! method, request id and session id as fields (made only when the log
//! filter takes it), and, with traces on, the OpenTelemetry span, made with
//! the SDK's tracer. With traces off nothing else is formatted or
//! allocated; a span the sampler drops gets no attributes.

use std::fmt::{self, Write as _};
use std::net::SocketAddr;

use opentelemetry::trace::{Link, Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use tracing::field::Empty;

use crate::spans;
use crate::trace_context::RequestParent;
use crate::traced_span::TracedSpan;

/// What a request is about, beside its method.
///
/// Span names must keep a low cardinality: pass a tool or prompt name only
/// once the server knows it (an unknown name from a client would put any
/// string into span names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// `tools/call`: the tool's name (`gen_ai.tool.name`, in the span name).
    Tool(&'a str),
    /// `prompts/get`: the prompt's name (`gen_ai.prompt.name`, in the span
    /// name).
    Prompt(&'a str),
    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`: the
    /// URI (`mcp.resource.uri`; not in the span name, as the conventions
    /// advise, URIs being unbounded).
    Resource(&'a str),
}

/// Most characters of a string request id that a span or a log line
/// shows: an id is the client's text, up to the whole body (megabytes).
/// Real ids are numbers, counters or UUIDs, far shorter.
pub const MAX_SHOWN_ID_CHARS: usize = 128;

/// Most bytes of an error message a span records as its status
/// description (the message may quote what the client sent).
pub const MAX_SHOWN_DESCRIPTION_BYTES: usize = 512;

/// A JSON-RPC id, recorded as its text (`7`, `req-7`). A string id is
/// shown as the client sent it when it is at most [`MAX_SHOWN_ID_CHARS`]
/// visible ASCII characters (spaces allowed); otherwise its first
/// [`MAX_SHOWN_ID_CHARS`] characters, every one but visible ASCII escaped
/// (`\u{a}`), then `…`: a log line stays one line of bounded length
/// whatever the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonRpcId<'a> {
    /// A numeric id.
    Number(i64),
    /// A string id.
    Str(&'a str),
}

impl fmt::Display for JsonRpcId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Str(s)
                if s.len() <= MAX_SHOWN_ID_CHARS
                    && s.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) =>
            {
                f.write_str(s)
            }
            Self::Str(s) => {
                let mut chars = s.chars();
                for c in chars.by_ref().take(MAX_SHOWN_ID_CHARS) {
                    if c == ' ' || c.is_ascii_graphic() {
                        f.write_char(c)?;
                    } else {
                        write!(f, "{}", c.escape_unicode())?;
                    }
                }
                if chars.next().is_some() {
                    f.write_char('…')?;
                }
                Ok(())
            }
        }
    }
}

/// The transport a request came over ("Recording MCP transport" in the
/// conventions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport<'a> {
    /// Streamable HTTP or the legacy HTTP+SSE transport:
    /// `network.transport=tcp`, `network.protocol.name=http`.
    Http {
        /// `network.protocol.version`: `1.1`, `2`.
        version: Option<&'a str>,
    },
    /// stdio: `network.transport=pipe`.
    Stdio,
}

impl Default for Transport<'_> {
    fn default() -> Self {
        Self::Http { version: None }
    }
}

/// The attributes of one request's span. Build with
/// `RequestSpanAttrs { method, ..Default::default() }`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestSpanAttrs<'a> {
    /// `mcp.method.name`: `tools/call`, `notifications/cancelled`, ….
    pub method: &'a str,
    /// The tool, prompt or resource the request is about.
    pub target: Option<Target<'a>>,
    /// `mcp.session.id`, when the request belongs to a session.
    pub session_id: Option<&'a str>,
    /// `jsonrpc.request.id`; `None` for a notification (or a null id).
    pub request_id: Option<JsonRpcId<'a>>,
    /// `mcp.protocol.version`, once negotiated (or from the header).
    pub protocol_version: Option<&'a str>,
    /// The transport.
    pub transport: Transport<'a>,
    /// `client.address` and `client.port`: the peer of the connection.
    pub client: Option<SocketAddr>,
    /// Who the request acts for, when authorization is on.
    pub user: Option<User<'a>>,
}

/// The authenticated caller of a request: `user.id` (the token's
/// subject), `mcp.auth.issuer` and `mcp.auth.client_id`. Never a metric
/// label (unbounded); spans and access logs only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User<'a> {
    /// The token's issuer.
    pub issuer: &'a str,
    /// The token's subject.
    pub subject: &'a str,
    /// The OAuth client the token was issued to.
    pub client_id: Option<&'a str>,
}

/// Creates the SERVER span of one MCP request or notification, child of
/// `parent` (a [`RequestParent`], or a [`opentelemetry::Context`] from
/// [`crate::parent_from_headers`] / [`crate::parent_from_meta`]). With no
/// valid remote parent the span is a child of the current context's span,
/// if any (a control message's, say).
///
/// Run the request's work with [`TracedSpan::instrument`] (never an
/// entered guard across an `.await`); the OpenTelemetry span ends, and is
/// exported, when the last clone is dropped.
pub fn request_span(attrs: &RequestSpanAttrs<'_>, parent: impl Into<RequestParent>) -> TracedSpan {
    // The log span: three fields, nothing else formatted. Disabled (and
    // free) unless the log filter takes INFO lines of this crate.
    let log = tracing::info_span!(
        spans::MCP_REQUEST,
        "mcp.method.name" = attrs.method,
        "jsonrpc.request.id" = attrs.request_id.map(tracing::field::display),
        "mcp.session.id" = attrs.session_id,
        "error.type" = Empty,
        "rpc.response.status_code" = Empty,
    );
    if !crate::otel_enabled() {
        return TracedSpan::new(log, None);
    }
    let otel = crate::init::with_tracer(|tracer| {
        let parent = parent.into();
        let builder = tracer
            .span_builder(span_name(attrs))
            .with_kind(SpanKind::Server);
        let builder = match parent.link {
            Some(link) => builder.with_links(vec![Link::with_context(link)]),
            None => builder,
        };
        let mut span = if parent.parent.span().span_context().is_valid() {
            tracer.build_with_context(builder, &parent.parent)
        } else {
            tracer.build_with_context(builder, &Context::current())
        };
        // Attributes only for a span the sampler kept: one it drops costs
        // its name and identity, no more. (The samplers a node offers,
        // `OTEL_TRACES_SAMPLER`'s, decide on the trace id and the parent,
        // never on attributes.)
        if span.is_recording() {
            span.set_attributes(attributes(attrs));
        }
        Context::new().with_span(span)
    });
    TracedSpan::new(log, otel)
}

/// `{mcp.method.name} {target}`, the target only when it is a tool's or a
/// prompt's name.
fn span_name(attrs: &RequestSpanAttrs<'_>) -> String {
    match attrs.target {
        Some(Target::Tool(name) | Target::Prompt(name)) => format!("{} {name}", attrs.method),
        _ => attrs.method.to_owned(),
    }
}

/// The span's attributes, set once, as soon as it is made.
fn attributes(attrs: &RequestSpanAttrs<'_>) -> Vec<KeyValue> {
    let mut out = Vec::with_capacity(12);
    out.push(KeyValue::new("mcp.method.name", attrs.method.to_owned()));
    if let Some(id) = attrs.request_id {
        out.push(KeyValue::new("jsonrpc.request.id", id.to_string()));
    }
    if let Some(session) = attrs.session_id {
        out.push(KeyValue::new("mcp.session.id", session.to_owned()));
    }
    if let Some(version) = attrs.protocol_version {
        out.push(KeyValue::new("mcp.protocol.version", version.to_owned()));
    }
    match attrs.target {
        Some(Target::Tool(name)) => {
            out.push(KeyValue::new("gen_ai.tool.name", name.to_owned()));
            out.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        Some(Target::Prompt(name)) => {
            out.push(KeyValue::new("gen_ai.prompt.name", name.to_owned()));
        }
        Some(Target::Resource(uri)) => out.push(KeyValue::new("mcp.resource.uri", uri.to_owned())),
        None => {}
    }
    match attrs.transport {
        Transport::Http { version } => {
            out.push(KeyValue::new("network.transport", "tcp"));
            out.push(KeyValue::new("network.protocol.name", "http"));
            if let Some(version) = version {
                out.push(KeyValue::new(
                    "network.protocol.version",
                    version.to_owned(),
                ));
            }
        }
        Transport::Stdio => out.push(KeyValue::new("network.transport", "pipe")),
    }
    if let Some(client) = attrs.client {
        out.push(KeyValue::new("client.address", client.ip().to_string()));
        out.push(KeyValue::new("client.port", i64::from(client.port())));
    }
    if let Some(user) = attrs.user {
        out.push(KeyValue::new("user.id", user.subject.to_owned()));
        out.push(KeyValue::new("mcp.auth.issuer", user.issuer.to_owned()));
        if let Some(client_id) = user.client_id {
            out.push(KeyValue::new("mcp.auth.client_id", client_id.to_owned()));
        }
    }
    out
}

/// How a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFailure<'a> {
    /// Answered with a JSON-RPC error: `error.type` and
    /// `rpc.response.status_code` are the code, the status description its
    /// message.
    JsonRpc {
        /// The error code.
        code: i64,
        /// The error message.
        message: &'a str,
    },
    /// A `tools/call` result with `isError: true`: `error.type=tool_error`.
    ToolError,
    /// No JSON-RPC answer at all: a low-cardinality reason such as
    /// `cancelled` or `timeout`.
    Other(&'a str),
}

/// Records on `span` (from [`request_span`]) that its request failed; the
/// span's status becomes ERROR. Record nothing for a success.
pub fn record_error(span: &TracedSpan, failure: RequestFailure<'_>) {
    let log = span.log();
    let reason = match failure {
        RequestFailure::JsonRpc { code, message } => {
            log.record("error.type", code);
            log.record("rpc.response.status_code", code);
            if !span.is_recording() {
                return;
            }
            span.set_attributes([
                KeyValue::new("error.type", code.to_string()),
                KeyValue::new("rpc.response.status_code", code.to_string()),
            ]);
            // Bounded: a message may quote the client (`method not found:
            // <its method>`).
            let mut end = message.len().min(MAX_SHOWN_DESCRIPTION_BYTES);
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            span.set_status(Status::error(message[..end].to_owned()));
            return;
        }
        RequestFailure::ToolError => "tool_error",
        RequestFailure::Other(reason) => reason,
    };
    log.record("error.type", reason);
    if span.is_recording() {
        span.set_attributes([KeyValue::new("error.type", reason.to_owned())]);
        span.set_status(Status::error(""));
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanKind, Status};
    use opentelemetry::{Key, Value};
    use opentelemetry_sdk::trace::SpanData;

    use super::*;
    use crate::init::{capture_sampled_spans, capture_spans};
    use crate::trace_context::{format_traceparent, remote_context};

    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const HTTP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn attr(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key == Key::new(key.to_owned()))
            .map(|kv| match &kv.value {
                Value::String(s) => s.to_string(),
                other => format!("{other}"),
            })
    }

    #[test]
    fn a_tool_call_span_follows_the_mcp_conventions() {
        let spans = capture_spans(|| {
            let attrs = RequestSpanAttrs {
                method: "tools/call",
                target: Some(Target::Tool("get-weather")),
                session_id: Some("191c4850af6c49e08843a3f6c80e5046"),
                request_id: Some(JsonRpcId::Number(7)),
                protocol_version: Some("2025-11-25"),
                transport: Transport::Http {
                    version: Some("1.1"),
                },
                client: Some("127.0.0.1:50123".parse().unwrap()),
                user: Some(User {
                    issuer: "https://idp.example",
                    subject: "alice",
                    client_id: Some("inspector"),
                }),
            };
            let parent = RequestParent::new(
                remote_context(Some(HTTP), None),
                remote_context(Some(CALLER), None),
            );
            let span = request_span(&attrs, parent);
            span.in_scope(|| tracing::info!("Handled."));
        });
        let [span] = spans.as_slice() else {
            panic!("one span: {spans:?}")
        };
        assert_eq!(span.name, "tools/call get-weather");
        assert_eq!(span.span_kind, SpanKind::Server);
        assert_eq!(
            format!("{:032x}", span.span_context.trace_id()),
            "0af7651916cd43dd8448eb211c80319c",
            "the transport's context is the parent"
        );
        assert_eq!(format!("{:016x}", span.parent_span_id), "b7ad6b7169203331");
        assert!(span.parent_span_is_remote);
        let links: Vec<String> = span
            .links
            .iter()
            .map(|l| format_traceparent(&l.span_context))
            .collect();
        assert_eq!(links, [CALLER], "the _meta context is linked");
        for (key, value) in [
            ("mcp.method.name", "tools/call"),
            ("jsonrpc.request.id", "7"),
            ("mcp.session.id", "191c4850af6c49e08843a3f6c80e5046"),
            ("mcp.protocol.version", "2025-11-25"),
            ("gen_ai.tool.name", "get-weather"),
            ("gen_ai.operation.name", "execute_tool"),
            ("network.transport", "tcp"),
            ("network.protocol.name", "http"),
            ("network.protocol.version", "1.1"),
            ("client.address", "127.0.0.1"),
            ("client.port", "50123"),
            ("user.id", "alice"),
            ("mcp.auth.issuer", "https://idp.example"),
            ("mcp.auth.client_id", "inspector"),
        ] {
            assert_eq!(attr(span, key).as_deref(), Some(value), "{key}");
        }
        for absent in [
            "error.type",
            "otel.name",
            "otel.kind",
            "code.file.path",
            "thread.id",
        ] {
            assert_eq!(attr(span, absent), None, "{absent}");
        }
        assert_eq!(span.status, Status::Unset);
        assert_eq!(span.events.len(), 1, "log events become span events");
    }

    #[test]
    fn other_methods_name_their_target_or_not() {
        let spans = capture_spans(|| {
            let prompt = RequestSpanAttrs {
                method: "prompts/get",
                target: Some(Target::Prompt("review")),
                request_id: Some(JsonRpcId::Str("req-1")),
                transport: Transport::Stdio,
                ..Default::default()
            };
            drop(request_span(&prompt, remote_context(Some(HTTP), None)));
            let resource = RequestSpanAttrs {
                method: "resources/read",
                target: Some(Target::Resource("file:///a")),
                ..Default::default()
            };
            drop(request_span(&resource, opentelemetry::Context::new()));
            let notification = RequestSpanAttrs {
                method: "notifications/cancelled",
                ..Default::default()
            };
            drop(request_span(&notification, opentelemetry::Context::new()));
        });
        let names: Vec<&str> = spans.iter().map(|s| &*s.name).collect();
        assert_eq!(
            names,
            [
                "prompts/get review",
                "resources/read",
                "notifications/cancelled"
            ]
        );
        assert_eq!(
            attr(&spans[0], "gen_ai.prompt.name").as_deref(),
            Some("review")
        );
        assert_eq!(
            attr(&spans[0], "jsonrpc.request.id").as_deref(),
            Some("req-1")
        );
        assert_eq!(
            attr(&spans[0], "network.transport").as_deref(),
            Some("pipe")
        );
        assert_eq!(attr(&spans[0], "gen_ai.operation.name"), None);
        assert_eq!(
            format!("{:016x}", spans[0].parent_span_id),
            "b7ad6b7169203331",
            "the header's context is the parent without _meta"
        );
        assert!(spans[0].links.is_empty());
        assert_eq!(
            attr(&spans[1], "mcp.resource.uri").as_deref(),
            Some("file:///a")
        );
        // No remote parent, no current span: a new trace.
        assert_eq!(
            spans[1].parent_span_id,
            opentelemetry::trace::SpanId::INVALID
        );
        assert_eq!(
            attr(&spans[2], "jsonrpc.request.id"),
            None,
            "no id, no attribute"
        );
        assert_eq!(attr(&spans[2], "mcp.session.id"), None);
    }

    #[test]
    fn a_span_the_sampler_drops_is_not_exported_but_carries_the_trace_on() {
        use opentelemetry_sdk::trace::Sampler;
        let mut out = None;
        let spans = capture_sampled_spans(Sampler::TraceIdRatioBased(0.0), || {
            let attrs = RequestSpanAttrs {
                method: "tools/call",
                target: Some(Target::Tool("echo")),
                ..Default::default()
            };
            let span = request_span(&attrs, opentelemetry::Context::new());
            assert!(!span.is_recording());
            record_error(&span, RequestFailure::ToolError);
            out = crate::traceparent_of(&span);
        });
        assert!(spans.is_empty(), "{spans:?}");
        let out = out.expect("a dropped span still has an identity");
        assert!(out.starts_with("00-") && out.ends_with("-00"), "{out}");
    }

    #[test]
    fn failures_set_error_type_code_and_status() {
        let spans = capture_spans(|| {
            let attrs = RequestSpanAttrs {
                method: "tools/call",
                target: Some(Target::Tool("t")),
                ..Default::default()
            };
            let span = request_span(&attrs, opentelemetry::Context::new());
            record_error(
                &span,
                RequestFailure::JsonRpc {
                    code: -32602,
                    message: "unknown tool",
                },
            );
            drop(span);
            let span = request_span(&attrs, opentelemetry::Context::new());
            record_error(&span, RequestFailure::ToolError);
            drop(span);
            let span = request_span(&attrs, opentelemetry::Context::new());
            record_error(&span, RequestFailure::Other("cancelled"));
        });
        assert_eq!(attr(&spans[0], "error.type").as_deref(), Some("-32602"));
        assert_eq!(
            attr(&spans[0], "rpc.response.status_code").as_deref(),
            Some("-32602")
        );
        assert_eq!(spans[0].status, Status::error("unknown tool"));
        assert_eq!(attr(&spans[1], "error.type").as_deref(), Some("tool_error"));
        assert_eq!(attr(&spans[1], "rpc.response.status_code"), None);
        assert!(matches!(spans[1].status, Status::Error { .. }));
        assert_eq!(attr(&spans[2], "error.type").as_deref(), Some("cancelled"));
        assert!(matches!(spans[2].status, Status::Error { .. }));
        for span in &spans {
            assert_eq!(attr(span, "otel.status_code"), None);
            assert_eq!(attr(span, "otel.status_description"), None);
        }
    }

    #[test]
    fn client_ids_and_messages_are_shown_bounded_on_one_line() {
        assert_eq!(JsonRpcId::Number(-7).to_string(), "-7");
        assert_eq!(JsonRpcId::Str("req 7").to_string(), "req 7");
        let forged = "1\n2026-01-01T00:00:00Z  INFO forged";
        let shown = JsonRpcId::Str(forged).to_string();
        assert!(!shown.contains('\n'), "{shown}");
        assert!(shown.starts_with("1\\u{a}2026"), "{shown}");
        let huge = "x".repeat(4 << 20);
        let shown = JsonRpcId::Str(&huge).to_string();
        assert_eq!(shown, format!("{}…", "x".repeat(MAX_SHOWN_ID_CHARS)));

        let message = format!("method not found: {}", "é".repeat(4 << 20));
        let spans = capture_spans(|| {
            let attrs = RequestSpanAttrs {
                method: "_OTHER",
                ..Default::default()
            };
            let span = request_span(&attrs, opentelemetry::Context::new());
            record_error(
                &span,
                RequestFailure::JsonRpc {
                    code: -32601,
                    message: &message,
                },
            );
        });
        let Status::Error { description } = &spans[0].status else {
            panic!("{:?}", spans[0].status)
        };
        assert!(description.len() <= MAX_SHOWN_DESCRIPTION_BYTES);
        assert!(description.starts_with("method not found: é"));
    }

    #[test]
    fn the_current_span_goes_out_as_a_traceparent_and_links_come_in() {
        let mut out = None;
        let spans = capture_spans(|| {
            let attrs = RequestSpanAttrs {
                method: "notifications/cancelled",
                ..Default::default()
            };
            let span = request_span(&attrs, remote_context(Some(CALLER), None));
            out = span.in_scope(crate::current_traceparent);
            assert_eq!(crate::traceparent_of(&span), out);
            crate::link_from(&span, HTTP);
            crate::link_from(&span, "garbage");
        });
        let out = out.expect("a traceparent while in the span");
        let span = &spans[0];
        assert_eq!(out, format_traceparent(&span.span_context));
        assert!(out.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(out.ends_with("-01"));
        let links: Vec<String> = span
            .links
            .iter()
            .map(|l| format_traceparent(&l.span_context))
            .collect();
        assert_eq!(links, [HTTP]);
        assert_eq!(crate::current_traceparent(), None, "no span outside");
    }
}
