//! One request as every era and transport sees it: the transport it came
//! on ([`Inbound`]), its span, and its measuring (`Call`, recorded in
//! `mcp_server_operation_duration_seconds` when its response is written).

use std::sync::Arc;

use mcp_cluster_protocol::{ProtocolVersion, Request, RequestId, Response, methods};
use mcp_cluster_store::{Hold, SessionId};
use mcp_cluster_telemetry::metrics::{self, OTHER, OperationLabels};
use tokio::time::Instant;

use crate::node::error::RuntimeError;
use crate::node::{NodeContext, Work};
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
    /// The access token that principal was read from, as the client sent
    /// it: for a hosted server whose authorization server exchanges it for
    /// one of the upstream's (RFC 8693). It stays on the node that received
    /// it: a request handed to another node goes without it.
    pub caller_token: Option<CallerToken>,
    /// Bytes of the body as received (its JSON): what its requests hold
    /// while they run, charged to their owner ([`Inbound::owner`]) in the
    /// node's in-flight bytes. 0 when unknown.
    pub body_bytes: usize,
    /// The body's bytes as counted while it was read ([`BodyBytes`]),
    /// handed to its requests by the pipeline; empty when the transport
    /// counted nothing (the pipeline then counts `body_bytes`).
    pub body_hold: BodyHold,
}

/// The bytes of a body being read, counted in the node's in-flight account
/// from its first byte (made by [`crate::Runtime::body_bytes`]): a client
/// whose running requests hold its share gets its refusal before its large
/// body is read, not after. Each transport adds what arrives
/// ([`Self::add`]), then hands the count to the body's [`Inbound`]
/// ([`Inbound::held_body`]).
#[derive(Debug)]
pub struct BodyBytes {
    hold: Hold,
    node: Arc<NodeContext>,
}

/// Bytes of a body counted without asking: a cancellation, an answer to
/// the server or a small request is always read, so that a client at its
/// share can still stop its work or answer what it was asked.
pub const SMALL_BODY_BYTES: usize = 16 * 1024;

impl BodyBytes {
    pub(crate) fn new(node: Arc<NodeContext>, owner: Option<&str>) -> Self {
        Self {
            hold: node.in_flight_bytes.empty_hold(owner),
            node,
        }
    }

    /// Counts `bytes` more of the body (its declared length up front, or
    /// each chunk as it arrives). Past [`SMALL_BODY_BYTES`], refused when
    /// the owner holds its share of in-flight bytes beside this body, or
    /// the node its budget.
    ///
    /// # Errors
    /// [`RuntimeError::QuotaExceeded`] (`in_flight_bytes_per_client`, 429)
    /// or [`RuntimeError::NodeBudget`] (503): stop reading.
    pub fn add(&mut self, bytes: usize) -> Result<(), RuntimeError> {
        let bytes = bytes as u64;
        if self.hold.bytes().saturating_add(bytes) <= SMALL_BODY_BYTES as u64 {
            self.hold.grow(bytes);
            return Ok(());
        }
        self.hold
            .try_grow(bytes)
            .map_err(|refused| self.node.refused(refused))
    }
}

/// A body's counted bytes, shared by the clones of its [`Inbound`] until
/// the pipeline hands them to the body's requests; what is left goes
/// when the last clone is dropped.
#[derive(Debug, Clone, Default)]
pub struct BodyHold(Arc<std::sync::Mutex<Option<Hold>>>);

impl BodyHold {
    /// Takes `bytes` of the body's count for one of its requests (`None`
    /// when the transport counted nothing).
    fn take(&self, bytes: usize) -> Option<Hold> {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_mut() {
            // The whole body (one request): no split.
            Some(hold) if hold.bytes() <= bytes as u64 => slot.take(),
            Some(hold) => Some(hold.split(bytes as u64)),
            None => None,
        }
    }
}

/// A client's access token as it sent it, kept only to be exchanged for
/// an upstream's (RFC 8693 token exchange) and never written anywhere: its
/// `Debug` shows nothing of it, and it is neither serialized nor sent to
/// another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerToken(Arc<mcp_cluster_telemetry::Secret>);

impl CallerToken {
    /// The token `token` (the credential of an `Authorization: Bearer`
    /// header).
    pub fn new(token: &str) -> Self {
        Self(Arc::new(token.into()))
    }

    /// The token itself, to send to an authorization server.
    pub fn secret(&self) -> &str {
        self.0.expose()
    }
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
            caller_token: None,
            body_bytes: 0,
            body_hold: BodyHold::default(),
        }
    }

    /// Hands the counted bytes of the body that came with this inbound to
    /// it (and sets `body_bytes`).
    pub fn held_body(&mut self, body: BodyBytes) {
        self.body_bytes = usize::try_from(body.hold.bytes()).unwrap_or(usize::MAX);
        self.body_hold = BodyHold(Arc::new(std::sync::Mutex::new(Some(body.hold))));
    }

    /// Admits one request of this body holding `bytes` of it, charged to
    /// the owner ([`NodeContext::admit_hold`] on the bytes counted while
    /// the body was read, else [`NodeContext::admit_bytes`]).
    ///
    /// # Errors
    /// As [`NodeContext::admit_bytes`].
    pub(crate) fn admit(
        &self,
        node: &NodeContext,
        bytes: usize,
        work: Work,
    ) -> Result<Hold, RuntimeError> {
        match self.body_hold.take(bytes) {
            Some(hold) => node.admit_hold(hold, work),
            None => node.admit_bytes(self.owner().as_deref(), bytes as u64, work),
        }
    }

    /// Who the body's requests are charged to, for what they hold and
    /// leave behind on the node: the principal's key, else the client's
    /// address subject (IPv6 per /64); `None` when neither is known
    /// (stdio, or a trusted proxy's own request), which counts against the
    /// node's budgets only.
    pub fn owner(&self) -> Option<Arc<str>> {
        match (&self.principal, self.client_ip) {
            (Some(principal), _) => Some(Arc::from(principal.key())),
            (None, Some(ip)) => Some(Arc::from(mcp_cluster_store::quota::address_subject(ip))),
            (None, None) => None,
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
    ) -> mcp_cluster_telemetry::TracedSpan {
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
    pub(crate) span: mcp_cluster_telemetry::TracedSpan,
    /// Who the request acts for (its handler's context tells).
    pub(crate) principal: Option<Arc<mcp_cluster_store::Principal>>,
    /// The access token it came with ([`Inbound::caller_token`]).
    pub(crate) caller_token: Option<CallerToken>,
    /// Who the request is charged to ([`Inbound::owner`]), as its `hold`
    /// names it; `None` until it holds bytes.
    pub(crate) owner: Option<Arc<str>>,
    /// The bytes of the request's parameters in the node's in-flight
    /// account: taken by its handler's job ([`Exchange::take_hold`]) and
    /// given back when the handler ends; otherwise when the call ends.
    ///
    /// [`Exchange::take_hold`]: crate::request::exchange::Exchange::take_hold
    pub(crate) hold: Option<mcp_cluster_store::Hold>,
    /// The client's running-task slot a 2025-11-25 session's
    /// task-augmented call was admitted with, taken by its task (which
    /// holds it while it runs).
    pub(crate) task_slot: Option<crate::node::quota::SlotLease>,
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
            caller_token: inbound.caller_token.clone(),
            owner: None,
            hold: None,
            task_slot: None,
        }
    }

    /// The call holding `hold` (its parameters' bytes) while it runs,
    /// charged to the hold's owner.
    #[must_use]
    pub(crate) fn holding(mut self, hold: mcp_cluster_store::Hold) -> Self {
        self.owner = hold.owner().cloned();
        self.hold = Some(hold);
        self
    }

    /// The call holding `slot`, its client's running-task slot.
    #[must_use]
    pub(crate) fn with_task_slot(mut self, slot: Option<crate::node::quota::SlotLease>) -> Self {
        self.task_slot = slot;
        self
    }

    /// Ends the call unmeasured here: another node runs the request and
    /// measures it (a hosted session's request, forwarded to its owner).
    pub(crate) fn handed_on(mut self) {
        self.recorded = true;
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
    fn a_caller_s_token_never_shows_in_debug_output() {
        let inbound = Inbound {
            caller_token: Some(CallerToken::new("eyJ.secret.sig")),
            ..Inbound::new(Transport::StreamableHttp)
        };
        let shown = format!("{inbound:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("CallerToken(\"<redacted>\")"), "{shown}");
        assert_eq!(
            inbound.caller_token.as_ref().map(CallerToken::secret),
            Some("eyJ.secret.sig")
        );
    }

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
