//! What a provider implements: the MCP server logic behind the runtime.

use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorObject, Notification, Request, methods};
use serde_json::{Map, Value};

use crate::node::error::RuntimeError;
use crate::request::context::RequestContext;
use crate::request::link::SessionLink;
use mcp_cluster_protocol::types::LoggingLevel;
use mcp_cluster_store::SessionId;

/// A tool argument mirrored into an `Mcp-Param-<header>` HTTP header
/// (`x-mcp-header` in the tool's input schema).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirroredParam {
    /// The header name part, e.g. `Region` for `Mcp-Param-Region`.
    pub header: String,
    /// The argument (property) name.
    pub argument: String,
}

impl MirroredParam {
    /// The arguments a tool's input schema mirrors into headers
    /// (`x-mcp-header` on its properties), checked against the transport's
    /// rules: an HTTP field-name token, unique ignoring case, on string,
    /// integer and boolean properties only.
    ///
    /// # Errors
    /// The first annotation that breaks a rule, said for the tool's author.
    pub fn from_input_schema(schema: &Value) -> Result<Vec<Self>, String> {
        let mut out: Vec<Self> = Vec::new();
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return Ok(out);
        };
        for (argument, prop) in props {
            let Some(header) = prop.get("x-mcp-header") else {
                continue;
            };
            let header = header
                .as_str()
                .ok_or_else(|| format!("{argument}: must be a string"))?;
            // An HTTP field-name token (RFC 9110 `1*tchar`).
            let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if header.is_empty() || !header.bytes().all(tchar) {
                return Err(format!(
                    "{argument}: {header:?} must be an HTTP field-name token"
                ));
            }
            // 2026-07-28: integers, strings and booleans; a `number` has no
            // one text form to compare.
            let primitive = matches!(
                prop.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean")
            );
            if !primitive {
                return Err(format!(
                    "{argument}: only string, integer and boolean parameters can be mirrored"
                ));
            }
            if out.iter().any(|m| m.header.eq_ignore_ascii_case(header)) {
                return Err(format!("{header:?} is used twice"));
            }
            out.push(Self {
                header: header.to_owned(),
                argument: argument.clone(),
            });
        }
        Ok(out)
    }
}

/// Whether a tool runs as a task, in either era (the protocol crate's
/// type, named here where services use it).
pub use mcp_cluster_protocol::types::TaskSupport;

/// A server-side happening that clients may need to hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// The tool list changed.
    ToolsListChanged,
    /// The prompt list changed.
    PromptsListChanged,
    /// The resource list changed.
    ResourcesListChanged,
    /// A resource changed; sent to sessions subscribed to it.
    ResourceUpdated {
        /// The resource URI.
        uri: String,
    },
}

impl ServerEvent {
    /// The notification that tells a client of the event, in either era:
    /// `meta` is its `_meta` (a listen stream's subscription id; none for
    /// a session).
    pub(crate) fn notification(&self, meta: Option<Value>) -> Notification {
        let method = match self {
            Self::ToolsListChanged => methods::NOTIFICATION_TOOLS_LIST_CHANGED,
            Self::PromptsListChanged => methods::NOTIFICATION_PROMPTS_LIST_CHANGED,
            Self::ResourcesListChanged => methods::NOTIFICATION_RESOURCES_LIST_CHANGED,
            Self::ResourceUpdated { .. } => methods::NOTIFICATION_RESOURCES_UPDATED,
        };
        let mut params = Map::new();
        if let Some(meta) = meta {
            params.insert("_meta".into(), meta);
        }
        if let Self::ResourceUpdated { uri } = self {
            params.insert("uri".into(), Value::String(uri.clone()));
        }
        Notification::new(method, Value::Object(params))
    }

    /// The event as the control bus carries it: a name and, for resource
    /// updates, the URI.
    pub fn wire(&self) -> (&'static str, Option<String>) {
        match self {
            Self::ToolsListChanged => ("tools_list_changed", None),
            Self::PromptsListChanged => ("prompts_list_changed", None),
            Self::ResourcesListChanged => ("resources_list_changed", None),
            Self::ResourceUpdated { uri } => ("resource_updated", Some(uri.clone())),
        }
    }

    /// The event from its bus form; `None` for a name this node does not
    /// know (a newer node in a rolling deploy).
    pub fn from_wire(name: &str, uri: Option<String>) -> Option<Self> {
        match (name, uri) {
            ("tools_list_changed", _) => Some(Self::ToolsListChanged),
            ("prompts_list_changed", _) => Some(Self::PromptsListChanged),
            ("resources_list_changed", _) => Some(Self::ResourcesListChanged),
            ("resource_updated", Some(uri)) => Some(Self::ResourceUpdated { uri }),
            _ => None,
        }
    }
}

/// The MCP server logic: everything but lifecycle, ping, logging level and
/// subscriptions, which the session handles itself.
#[async_trait]
pub trait McpService: Send + Sync + std::fmt::Debug + 'static {
    /// `serverInfo` for `initialize`.
    fn server_info(&self) -> Implementation;

    /// Capabilities for `initialize`.
    fn capabilities(&self) -> ServerCapabilities;

    /// `instructions` for `initialize`.
    fn instructions(&self) -> Option<String> {
        None
    }

    /// The protocol revisions the service can serve, when it cannot serve
    /// every one the node speaks (a hosted server of 2026-07-28 that names
    /// fewer in its own `server/discover`): `server/discover` then answers
    /// those of the node's that are among them. Default `None`: all.
    fn supported_versions(&self) -> Option<Vec<String>> {
        None
    }

    /// Handles one request. The future runs in an in-flight request actor:
    /// it is dropped on cancellation and bounded by the request timeout.
    ///
    /// # Errors
    /// A JSON-RPC error for the client.
    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject>;

    /// Handles a client notification the session does not consume
    /// (e.g. `notifications/roots/list_changed`).
    async fn notification(&self, _notification: Notification) {}

    /// The hosted server `request` goes to, which its audit record names
    /// (a federation's member, by the name or URI it names). Default: none,
    /// the service answers it itself.
    fn upstream_of(&self, _request: &Request) -> Option<String> {
        None
    }

    /// Whether `uri` names a resource this server can read (a listed
    /// resource or one matching a template): `resources/subscribe` refuses
    /// others with -32002, so a client cannot make a session hold
    /// subscriptions to nothing. The default accepts every URI.
    fn has_resource(&self, _uri: &str) -> bool {
        true
    }

    /// Whether the server has a tool named `name` (metrics name only the
    /// tools it has: a client cannot add label values). Default: none.
    fn has_tool(&self, _name: &str) -> bool {
        false
    }

    /// OAuth scopes a caller needs to call tool `name` (when authorization
    /// is on). Default: none.
    fn tool_scopes(&self, _name: &str) -> Vec<String> {
        Vec::new()
    }

    /// Whether the server has a prompt named `name` (as [`Self::has_tool`]).
    fn has_prompt(&self, _name: &str) -> bool {
        false
    }

    /// Whether tool `name` runs as a task: for 2026-07-28 clients of the
    /// tasks extension, and for task-augmented calls in 2025-11-25
    /// sessions. Default: never.
    fn task_support(&self, _name: &str) -> TaskSupport {
        TaskSupport::Forbidden
    }

    /// Whether any tool may run as a task: a 2025-11-25 session's
    /// `initialize` then declares `capabilities.tasks`. Default: no.
    fn runs_tasks(&self) -> bool {
        false
    }

    /// Whether tool `name` becomes a task only when its handler calls
    /// [`RequestContext::become_task`] (after asking what it needs first,
    /// as input-required rounds), rather than from its start. Default: no.
    fn task_starts_in_handler(&self, _name: &str) -> bool {
        false
    }

    /// Tool arguments mirrored into `Mcp-Param-*` headers, for header
    /// validation at the transport.
    fn mirrored_params(&self, _tool: &str) -> Vec<MirroredParam> {
        Vec::new()
    }

    /// Called before the node serves a 2026-07-28 request (before the
    /// transport checks its headers against [`Self::mirrored_params`]),
    /// with what it answers from the service itself (`server/discover`'s
    /// capabilities and instructions, the `serverInfo` every result
    /// carries, the mirrored arguments): a service that
    /// learns those at run time (a hosted server, from its first child)
    /// learns them here. Called by the transport for every such request:
    /// make it cheap once learnt. `caller`: who the request acts for (a
    /// hosted server reached with the caller's exchanged token needs it to
    /// learn anything).
    /// Default: nothing to learn.
    ///
    /// # Errors
    /// They cannot be learnt now: the request is answered with the error.
    async fn prepare_stateless(
        &self,
        caller: &crate::request::context::Caller,
    ) -> Result<(), ErrorObject> {
        let _ = caller;
        Ok(())
    }

    /// 2026-07-28: whether a handler that asks the client something it has
    /// not answered yet keeps running while the client answers, rather than
    /// being run again on the retry. Yes for a service whose handler cannot
    /// be run twice (a hosted server's child, waiting for its question's
    /// answer): the question goes out in the request's `input_required`
    /// result, and the retry, on any node, brings the answers to the
    /// waiting run and its outcome back. Default: no (a handler runs again
    /// with the answers, which suits handlers written for this era).
    fn keeps_running_on_input(&self) -> bool {
        false
    }

    /// 2026-07-28: whether the service runs input rounds itself (a hosted
    /// server that speaks this revision): a request's `inputResponses` and
    /// `requestState` reach it untouched, and its `input_required` results
    /// go back as they are. Default: no (the runtime runs them).
    fn answers_input_rounds(&self) -> bool {
        false
    }

    /// The node is stopping, its drain over: end whatever the service
    /// started (a hosted server's children). The node waits for it.
    async fn shutdown(&self) {}

    /// Whether the service runs a server per session
    /// ([`Self::open_session`]). Default: no, and `open_session` is never
    /// called.
    fn runs_server_per_session(&self) -> bool {
        false
    }

    /// Opens the server of one session, for a service that runs one per
    /// session (a hosted MCP server's child process): called with the
    /// client's `initialize` before it is answered. `Ok(Some(result))`:
    /// the session is this server's, answered with `result` (its
    /// `initialize` result, whose `protocolVersion` the session takes), and
    /// it lives as long as the server: it ends when the server ends
    /// ([`SessionLink::end`]) and the server ends when the session does
    /// ([`Self::close_session`]). `Ok(None)`, the default: the service
    /// serves every session alike.
    ///
    /// # Errors
    /// The server could not be started ([`OpenError::Failed`]: the client's
    /// `initialize` gets the error), or may not be now ([`OpenError::Busy`],
    /// [`OpenError::ClientLimit`]: the HTTP request is refused with 503 or
    /// 429 and `Retry-After`). Either way no session is kept.
    async fn open_session(&self, _open: SessionOpen) -> Result<Option<Value>, OpenError> {
        Ok(None)
    }

    /// What another node needs to take the server of `session` (opened by
    /// [`Self::open_session`] here) over when this node is gone, without
    /// a new `initialize`: an HTTP server's session, say, which lives on
    /// at its replica (its address and `Mcp-Session-Id`). Asked once, when
    /// the session is stored; kept in the session's record, with the
    /// server's capabilities in at most [`MAX_HANDOVER_BYTES`] of JSON.
    /// `None`, the default: the server
    /// dies with this node (a child process), and so does the session.
    fn session_handover(&self, _session: &SessionId) -> Option<Value> {
        None
    }

    /// Takes over the server of a session whose host is gone, from what
    /// [`Self::session_handover`] gave on that host: this node runs it from
    /// now on ([`Self::hosts_session`]), as if it had opened it. Called
    /// before the session handles anything here.
    ///
    /// # Errors
    /// The server cannot be taken over ([`OpenError::Failed`]); the
    /// session is then ended. The default: always.
    async fn adopt_session(&self, adopt: SessionAdopt) -> Result<(), OpenError> {
        Err(OpenError::Failed(ErrorObject::internal(format!(
            "session {} cannot be taken over by this service",
            adopt.session
        ))))
    }

    /// Lets the server of `session` go without ending it: another node
    /// takes it over ([`Self::adopt_session`]), because this node is
    /// stopping or because another node already did while this one was
    /// away. Called only for a session [`Self::session_handover`] gave
    /// something for. Default: [`Self::close_session`].
    async fn release_session(&self, session: &SessionId) {
        self.close_session(session).await;
    }

    /// Whether this node runs the server of `session` (opened by
    /// [`Self::open_session`] and not closed since). A session whose server
    /// runs nowhere is over: the runtime ends it rather than serve it
    /// without its server.
    fn hosts_session(&self, _session: &SessionId) -> bool {
        false
    }

    /// Ends the server of `session` (opened by [`Self::open_session`]): the
    /// session ended (DELETE, idle expiry, eviction, the node's shutdown).
    async fn close_session(&self, _session: &SessionId) {}

    /// A client notification of a session the session does not consume
    /// (`notifications/roots/list_changed`, say). Default:
    /// [`Self::notification`].
    async fn session_notification(&self, _session: &SessionId, notification: Notification) {
        self.notification(notification).await;
    }

    /// The client set the session's log level (`logging/setLevel`); the
    /// session filters what it sends by it already. For a server opened by
    /// [`Self::open_session`], which hears of it too.
    async fn session_log_level(&self, _session: &SessionId, _level: LoggingLevel) {}

    /// The client subscribes to `uri` (`subscribe`) or unsubscribes, in a
    /// session whose server [`Self::open_session`] opened: asked before
    /// the session records the change, which it does only if this accepts.
    ///
    /// # Errors
    /// The server refused; the client gets the error.
    async fn session_subscription(
        &self,
        _session: &SessionId,
        _uri: &str,
        _subscribe: bool,
    ) -> Result<(), ErrorObject> {
        Ok(())
    }

    /// 2026-07-28: a `subscriptions/listen` stream on this node names
    /// resources (`watch.uris`), or wants list changes (`watch.lists`).
    /// A service whose resources are its principals' own (a hosted
    /// server, whose children run per principal) watches them itself, on
    /// this node: it sends each URI of
    /// `watch.uris` that changes to `watch.updates` while the returned
    /// [`Watching`] lives, and drops `watch.updates` once it can watch no
    /// more (the stream then ends; its client listens again).
    /// `Ok(None)`, the default: the service raises
    /// [`ServerEvent::ResourceUpdated`], which reaches the listen streams
    /// of every node.
    ///
    /// # Errors
    /// It cannot watch now ([`OpenError::Busy`], [`OpenError::ClientLimit`]:
    /// the listen request is refused with 503 or 429 and `Retry-After`), or
    /// failed ([`OpenError::Failed`]: the listen request gets the error).
    async fn watch_resources(&self, _watch: ResourceWatch) -> Result<Option<Watching>, OpenError> {
        Ok(None)
    }
}

/// A listen stream's resources, for [`McpService::watch_resources`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ResourceWatch {
    /// Whose stream it is ([`mcp_cluster_store::Principal::key`]); `None`
    /// without authorization.
    pub principal: Option<String>,
    /// The URIs the stream names.
    pub uris: std::collections::BTreeSet<String>,
    /// Where each URI that changes goes.
    pub updates: tokio::sync::mpsc::Sender<String>,
    /// The stream also wants list changes (`toolsListChanged` and the
    /// like, as the server declared them). They reach it as the node's
    /// events ([`ServerEvent`]); a service that hears of them only while
    /// it listens (a hosted server of 2026-07-28) listens for as long as
    /// the watch lives.
    pub lists: bool,
    /// Who the stream's request acts for, with its token (see
    /// [`crate::RequestContext::caller_token`]).
    pub caller: crate::request::context::Caller,
}

/// What [`McpService::watch_resources`] watches, for as long as it lives.
#[non_exhaustive]
pub struct Watching {
    /// The URIs watched: the stream's acknowledgement lists these only.
    pub uris: std::collections::BTreeSet<String>,
    /// Dropped when the stream ends: the service stops watching for it.
    pub guard: Box<dyn std::any::Any + Send + Sync>,
}

impl Watching {
    /// Watches `uris` until `guard` is dropped.
    pub fn new(
        uris: std::collections::BTreeSet<String>,
        guard: Box<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        Self { uris, guard }
    }
}

impl std::fmt::Debug for Watching {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watching")
            .field("uris", &self.uris)
            .finish_non_exhaustive()
    }
}

impl ResourceWatch {
    /// A watch of `uris` for `principal`'s stream, sending to `updates`.
    pub fn new(
        principal: Option<String>,
        uris: std::collections::BTreeSet<String>,
        updates: tokio::sync::mpsc::Sender<String>,
    ) -> Self {
        Self {
            principal,
            uris,
            updates,
            lists: false,
            caller: crate::request::context::Caller::default(),
        }
    }

    /// The stream's request acts for `caller` ([`Self::caller`]).
    #[must_use]
    pub fn with_caller(mut self, caller: crate::request::context::Caller) -> Self {
        self.caller = caller;
        self
    }

    /// The stream also wants list changes ([`Self::lists`]).
    #[must_use]
    pub fn with_lists(mut self, lists: bool) -> Self {
        self.lists = lists;
        self
    }
}

/// Why [`McpService::open_session`] opened no server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OpenError {
    /// This node starts no more servers now (its most running, or its most
    /// starts a second): the client is refused with 503 and `Retry-After`,
    /// and may try again (on any node).
    Busy {
        /// What the client is told: which limit.
        message: String,
        /// When trying again may succeed.
        retry_after: Duration,
    },
    /// The client holds its most servers on this node: refused with 429
    /// and `Retry-After`.
    ClientLimit {
        /// What the client is told: which limit.
        message: String,
        /// When trying again may succeed.
        retry_after: Duration,
    },
    /// The server could not start (its program failed, it did not answer
    /// `initialize`): the client's `initialize` is answered with this
    /// error.
    Failed(ErrorObject),
}

impl OpenError {
    /// The refusal as the runtime reports it ([`RuntimeError::HostedLimit`]:
    /// 503 or 429 with `Retry-After` over HTTP), or the start's own error
    /// for the client's `initialize` ([`Self::Failed`]).
    ///
    /// # Errors
    /// [`Self::Failed`]'s error.
    pub fn into_refusal(self) -> Result<RuntimeError, ErrorObject> {
        match self {
            Self::Failed(err) => Err(err),
            Self::Busy {
                message,
                retry_after,
            } => Ok(RuntimeError::HostedLimit {
                client: false,
                message,
                retry_after,
            }),
            Self::ClientLimit {
                message,
                retry_after,
            } => Ok(RuntimeError::HostedLimit {
                client: true,
                message,
                retry_after,
            }),
        }
    }
}

impl From<ErrorObject> for OpenError {
    fn from(err: ErrorObject) -> Self {
        Self::Failed(err)
    }
}

/// What [`McpService::open_session`] gets: the session and its client's
/// `initialize`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionOpen {
    /// The session.
    pub session: SessionId,
    /// The key of the principal that created it
    /// ([`mcp_cluster_store::Principal::key`]); `None` without
    /// authorization.
    pub principal: Option<String>,
    /// Who the `initialize` acts for, with its token (see
    /// [`crate::RequestContext::caller_token`]); empty without
    /// authorization.
    pub caller: crate::request::context::Caller,
    /// The `initialize` params as the client sent them (every field, known
    /// to this runtime or not).
    pub params: Value,
    /// The session's way to its client outside any request.
    pub link: SessionLink,
}

/// What [`McpService::adopt_session`] gets: a session whose host is gone,
/// and what its server's service said to take it over.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionAdopt {
    /// The session.
    pub session: SessionId,
    /// The key of the principal that created it; `None` without
    /// authorization.
    pub principal: Option<String>,
    /// The revision the session negotiated.
    pub protocol_version: String,
    /// What [`McpService::session_handover`] answered on the old host.
    pub handover: Value,
    /// The session's way to its client outside any request.
    pub link: SessionLink,
}

/// Longest handover a session's record keeps, in bytes of JSON: what
/// [`McpService::session_handover`] said with the server's capabilities. A
/// longer one is not kept, and the session ends with its host.
pub const MAX_HANDOVER_BYTES: usize = 16 * 1024;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_event_is_one_notification_in_both_eras() {
        let updated = ServerEvent::ResourceUpdated {
            uri: "file:///a".into(),
        };
        let session = updated.notification(None);
        assert_eq!(session.method, methods::NOTIFICATION_RESOURCES_UPDATED);
        assert_eq!(
            Value::Object(session.params.unwrap()),
            json!({ "uri": "file:///a" })
        );
        let listen = updated.notification(Some(json!({ "subscriptionId": 7 })));
        assert_eq!(
            Value::Object(listen.params.unwrap()),
            json!({ "_meta": { "subscriptionId": 7 }, "uri": "file:///a" })
        );
        let tools = ServerEvent::ToolsListChanged.notification(None);
        assert_eq!(tools.method, methods::NOTIFICATION_TOOLS_LIST_CHANGED);
        assert_eq!(tools.params, Some(Map::new()));
    }
}
