//! One request as every era and transport sees it: the transport it came
//! on ([`Inbound`]), its span, and its measuring (`Call`, recorded in
//! `mcp_server_operation_duration_seconds` when its response is written).

use std::sync::Arc;

use mcp_cluster_protocol::{ProtocolVersion, Request, RequestId, Response, methods};
use mcp_cluster_store::SessionId;
use mcp_cluster_telemetry::metrics::{self, OTHER, OperationLabels};
use tokio::time::Instant;

use crate::request::method_table;
use crate::request::service::McpService;

/// The session a message belongs to, as spans name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLabel<'a> {
    pub(crate) id: &'a SessionId,
    /// Its negotiated version (`None` before `initialize`).
    pub(crate) version: Option<ProtocolVersion>,
}

/// The transport a message arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP (`/mcp`).
    StreamableHttp,
    /// The 2024-11-05 HTTP+SSE transport (`/sse`, `/messages`).
    LegacySse,
    /// Newline-delimited JSON-RPC on stdin/stdout.
    Stdio,
}

impl Transport {
    /// Label of `mcp_sessions_created_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::StreamableHttp => "streamable_http",
            Self::LegacySse => "legacy_sse",
            Self::Stdio => "stdio",
        }
    }

    /// OpenTelemetry `network.transport`.
    pub fn network(self) -> &'static str {
        match self {
            Self::StreamableHttp | Self::LegacySse => "tcp",
            Self::Stdio => "pipe",
        }
    }
}

/// What the transport knows of a body beside its messages.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// The transport it arrived on.
    pub transport: Transport,
    /// The caller's trace context from the transport (W3C `traceparent`
    /// HTTP headers; empty when traces are off or none was sent).
    pub trace: mcp_cluster_telemetry::TraceContext,
    /// The peer of the connection.
    pub client: Option<std::net::SocketAddr>,
    /// The client's address as quotas count it: the peer, or behind
    /// trusted proxies the address they forwarded for (`mcp-cluster-http`
    /// decides); `None` on stdio, and when the client cannot be told from
    /// a proxy that carries many clients.
    pub client_ip: Option<std::net::IpAddr>,
    /// Who the body acts for: the principal of its validated access token
    /// (`None` when authorization is off, and on stdio).
    pub principal: Option<Arc<mcp_cluster_store::Principal>>,
}

impl Inbound {
    /// A body with no trace context and no peer (stdio).
    pub fn new(transport: Transport) -> Self {
        Self {
            transport,
            trace: mcp_cluster_telemetry::TraceContext::new(),
            client: None,
            client_ip: None,
            principal: None,
        }
    }

    pub(crate) fn span_transport(&self) -> mcp_cluster_telemetry::Transport<'static> {
        match self.transport {
            Transport::Stdio => mcp_cluster_telemetry::Transport::Stdio,
            Transport::StreamableHttp | Transport::LegacySse => {
                mcp_cluster_telemetry::Transport::Http { version: None }
            }
        }
    }

    /// The span of one message received: child of its `_meta` trace
    /// context when it has one, else of the transport's.
    pub(crate) fn span(
        &self,
        method: &str,
        target: Option<mcp_cluster_telemetry::Target<'_>>,
        session: Option<SessionLabel<'_>>,
        id: Option<&RequestId>,
        params: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> tracing::Span {
        let request_id = id.map(log_id);
        let meta = params.and_then(|p| p.get("_meta"));
        let version = match session {
            Some(session) => session.version.map(ProtocolVersion::as_str),
            None => Some(ProtocolVersion::STATELESS.as_str()),
        };
        mcp_cluster_telemetry::request_span(
            &mcp_cluster_telemetry::RequestSpanAttrs {
                method,
                target,
                session_id: session.map(|s| s.id.as_str()),
                request_id,
                protocol_version: version,
                transport: self.span_transport(),
                client: self.client,
                user: self
                    .principal
                    .as_deref()
                    .map(|p| mcp_cluster_telemetry::User {
                        issuer: &p.issuer,
                        subject: &p.subject,
                        client_id: p.client_id.as_deref(),
                    }),
            },
            mcp_cluster_telemetry::RequestParent::new(
                self.trace.clone(),
                mcp_cluster_telemetry::parent_from_meta(meta),
            ),
        )
    }
}

/// A request being measured: recorded in
/// `mcp_server_operation_duration_seconds` when its response is written
/// ([`Call::complete`]) or, without one (cancelled, or its session
/// stopped), when its exchange lets it go.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) id: RequestId,
    method: &'static str,
    tool: Option<String>,
    prompt: Option<String>,
    version: &'static str,
    transport: Transport,
    started: Instant,
    recorded: bool,
    /// The request's span: the handler runs in it.
    pub(crate) span: tracing::Span,
    /// Who the request acts for (its handler's context tells).
    pub(crate) principal: Option<Arc<mcp_cluster_store::Principal>>,
}

impl Call {
    pub(crate) fn new(
        service: &Arc<dyn McpService>,
        request: &Request,
        session: Option<SessionLabel<'_>>,
        version: &'static str,
        inbound: &Inbound,
    ) -> Self {
        let method = method_label(&request.method);
        let name = || {
            request
                .params
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(serde_json::Value::as_str)
        };
        let tool = (method == methods::TOOLS_CALL).then(|| {
            name()
                .filter(|n| service.has_tool(n))
                .unwrap_or(OTHER)
                .to_owned()
        });
        let prompt = (method == methods::PROMPTS_GET).then(|| {
            name()
                .filter(|n| service.has_prompt(n))
                .unwrap_or(OTHER)
                .to_owned()
        });
        let target = match (&tool, &prompt) {
            (Some(tool), _) if tool != OTHER => Some(mcp_cluster_telemetry::Target::Tool(tool)),
            (_, Some(prompt)) if prompt != OTHER => {
                Some(mcp_cluster_telemetry::Target::Prompt(prompt))
            }
            _ if method == methods::RESOURCES_READ
                || method == methods::RESOURCES_SUBSCRIBE
                || method == methods::RESOURCES_UNSUBSCRIBE =>
            {
                request
                    .params
                    .as_ref()
                    .and_then(|p| p.get("uri"))
                    .and_then(serde_json::Value::as_str)
                    .map(mcp_cluster_telemetry::Target::Resource)
            }
            _ => None,
        };
        let span = inbound.span(
            method,
            target,
            session,
            Some(&request.id),
            request.params.as_ref(),
        );
        Self {
            id: request.id.clone(),
            method,
            tool,
            prompt,
            version,
            transport: inbound.transport,
            started: Instant::now(),
            recorded: false,
            span,
            principal: inbound.principal.clone(),
        }
    }

    /// Records the call with the outcome of `response`.
    pub(crate) fn complete(mut self, response: &Response) {
        if self.method == methods::INITIALIZE
            && let Ok(result) = &response.outcome
        {
            // The version the session now speaks.
            self.version = result
                .get("protocolVersion")
                .and_then(serde_json::Value::as_str)
                .and_then(|v| v.parse::<ProtocolVersion>().ok())
                .map_or("", ProtocolVersion::as_str);
        }
        let error_type = match &response.outcome {
            Err(err) => {
                mcp_cluster_telemetry::record_error(
                    &self.span,
                    mcp_cluster_telemetry::RequestFailure::JsonRpc {
                        code: i64::from(err.code.0),
                        message: &err.message,
                    },
                );
                err.code.0.to_string()
            }
            Ok(value)
                if self.method == methods::TOOLS_CALL
                    && value.get("isError").and_then(serde_json::Value::as_bool) == Some(true) =>
            {
                mcp_cluster_telemetry::record_error(
                    &self.span,
                    mcp_cluster_telemetry::RequestFailure::ToolError,
                );
                "tool_error".to_owned()
            }
            Ok(_) => String::new(),
        };
        self.record(&error_type);
    }

    fn record(&mut self, error_type: &str) {
        self.recorded = true;
        metrics::metrics()
            .operation(&OperationLabels {
                method: self.method,
                tool: self.tool.as_deref().unwrap_or(""),
                prompt: self.prompt.as_deref().unwrap_or(""),
                error_type,
                protocol_version: self.version,
                transport: self.transport.network(),
            })
            .observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !self.recorded {
            mcp_cluster_telemetry::record_error(
                &self.span,
                mcp_cluster_telemetry::RequestFailure::Other("cancelled"),
            );
            self.record("cancelled");
        }
    }
}

/// Client notifications this server knows (others are named [`OTHER`] in
/// spans: a span name must not take any value a client sends).
const KNOWN_NOTIFICATIONS: &[&str] = &[
    methods::NOTIFICATION_INITIALIZED,
    methods::NOTIFICATION_CANCELLED,
    methods::CANCEL_REQUEST_ALIAS,
    methods::NOTIFICATION_PROGRESS,
    methods::NOTIFICATION_ROOTS_LIST_CHANGED,
];

pub(crate) fn notification_label(method: &str) -> &'static str {
    known(KNOWN_NOTIFICATIONS, method)
}

/// A client-to-server method as this server names it: the request or
/// notification method when the server knows it, `None` for any other
/// text (which never reaches a log line or a label as the client sent it:
/// a method name may be megabytes).
pub fn known_client_method(method: &str) -> Option<&'static str> {
    method_table::find(method).map(|m| m.name).or_else(|| {
        KNOWN_NOTIFICATIONS
            .iter()
            .find(|known| **known == method)
            .copied()
    })
}

/// A request id as logs show it: bounded and escaped
/// ([`mcp_cluster_telemetry::JsonRpcId`]), whatever the client sent.
pub(crate) fn log_id(id: &RequestId) -> mcp_cluster_telemetry::JsonRpcId<'_> {
    match id {
        RequestId::Number(n) => mcp_cluster_telemetry::JsonRpcId::Number(*n),
        RequestId::String(s) => mcp_cluster_telemetry::JsonRpcId::Str(s),
    }
}

/// The label of a method: itself when known, else [`OTHER`].
fn method_label(method: &str) -> &'static str {
    method_table::find(method).map_or(OTHER, |m| m.name)
}

/// `name` as the entry of `list` it equals, else [`OTHER`].
fn known(list: &[&'static str], name: &str) -> &'static str {
    list.iter().find(|m| **m == name).copied().unwrap_or(OTHER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_methods_are_one_label() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("tools/call2"), OTHER);
        assert_eq!(method_label(""), OTHER);
        assert_eq!(
            notification_label("notifications/cancelled"),
            "notifications/cancelled"
        );
        assert_eq!(notification_label("notifications/anything"), OTHER);
    }

    #[test]
    fn only_known_client_methods_are_named() {
        assert_eq!(known_client_method("tools/call"), Some("tools/call"));
        assert_eq!(
            known_client_method("notifications/cancelled"),
            Some("notifications/cancelled")
        );
        assert_eq!(
            known_client_method("server/discover"),
            Some("server/discover")
        );
        assert_eq!(known_client_method(&"x".repeat(1 << 20)), None);
        assert_eq!(known_client_method("sampling/createMessage"), None);
    }
}
