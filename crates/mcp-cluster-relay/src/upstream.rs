//! [`Upstream`]: the JSON-RPC conversation with one running child over its
//! stdin and stdout, and the tasks that carry it; or, for an HTTP server,
//! with one session of it (`crate::http` carries that conversation, the
//! rest is the same).
//!
//! Owner: the relay's table of sessions holds the [`Upstream`] of each
//! session from its `initialize` to its end. Three tasks per child run on
//! the relay's runtime: the writer (stdin, fed by a bounded channel), the
//! reader (stdout: answers to their requests, the child's own requests
//! and notifications to where they belong) and the supervisor (stderr into
//! the log, the process's end). Stop paths: [`Upstream::end`] closes stdin
//! and ends the process group; the child's own exit, or a line over the
//! limit, ends it too. Every request still waiting then gets -32603 naming
//! the upstream, and the session is told ([`SessionLink::end`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_cluster_protocol::{ErrorCode, ErrorObject, Message, Notification, RequestId, methods};
use mcp_cluster_runtime::{AskError, HostedEnd, ServerEvent, SessionLink};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{Notify, broadcast, mpsc, oneshot, watch};

use crate::child::{self, Line, Spawned};
use crate::config::UpstreamConfig;
use crate::metrics;
use crate::naming::Naming;

/// Lines waiting for the child's stdin. A child that stops reading holds
/// its senders up (each a request's handler, bounded by the request
/// timeout), never the node's memory.
const STDIN_QUEUE: usize = 64;

/// What the child sent for one request's handler, beyond the answer.
/// Bounded per request: a child that floods progress for a client that
/// does not read loses progress, never grows the node.
const EVENTS_PER_REQUEST: usize = 64;

/// How long the supervisor waits between two reports of dropped stderr
/// lines.
const STDERR_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// What the child sends that a request's handler relays to its client.
#[derive(Debug)]
pub(crate) enum Event {
    /// A request of the child's (sampling, elicitation, roots): asked of the
    /// client, answered back to the child under `id`.
    Ask {
        id: Value,
        method: String,
        params: Option<Map<String, Value>>,
    },
    /// Progress of the request, its token already the client's.
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// Any other notification the child sent while the request ran.
    Notify(Notification),
}

/// A request of ours the child has not answered yet.
#[derive(Debug)]
struct Pending {
    answer: oneshot::Sender<Result<Value, ErrorObject>>,
    /// Where its handler hears of the child's questions, progress and
    /// logs; `None` for `initialize`.
    events: Option<mpsc::Sender<Event>>,
}

#[derive(Debug, Default)]
struct State {
    /// By the id the child sees (ours, increasing).
    pending: BTreeMap<i64, Pending>,
    /// Why the child is gone, once it is: requests fail at once with it.
    gone: Option<String>,
}

/// One running child and the conversation with it.
#[derive(Debug)]
pub(crate) struct Upstream {
    name: Arc<str>,
    stdin: mpsc::Sender<String>,
    state: Mutex<State>,
    next_id: AtomicI64,
    /// Where notifications that belong to no request go; set once the
    /// session is open.
    link: Mutex<Option<SessionLink>>,
    /// Set for a session of a federation's member: its names as the
    /// client sees them, and its end ends only its part of the session.
    member: std::sync::OnceLock<Arc<Naming>>,
    /// For a pooled child (no session): where its list changes go
    /// ([`Self::announce_to`]).
    changes: Mutex<Option<broadcast::Sender<ServerEvent>>>,
    /// For a child watching resources for listen streams: where the URIs
    /// of its `notifications/resources/updated` go ([`Self::watch_to`]).
    updates: Mutex<Option<mpsc::Sender<String>>>,
    /// Wakes the supervisor to end the child.
    end: Notify,
    /// Set when the node ends the child itself (the session ended): its
    /// exit then ends nothing more.
    ended_by_us: std::sync::atomic::AtomicBool,
    /// Set when an HTTP session is let go for another node to take over:
    /// its conversation ends without a DELETE.
    released: std::sync::atomic::AtomicBool,
    /// Turns true once the child is gone.
    gone_tx: watch::Sender<bool>,
    /// An HTTP session's bearer token source.
    credential: std::sync::OnceLock<Arc<crate::http::Credential>>,
    /// An HTTP session's replica, `Mcp-Session-Id` and revision, once
    /// opened: what another node needs to take it over.
    attached: std::sync::OnceLock<crate::http::Attached>,
}

/// A request on its way to the child: its answer, the events for its
/// handler, and, when dropped before the answer, a cancellation for the
/// child (the client cancelled, or went away).
#[derive(Debug)]
pub(crate) struct Call {
    upstream: Arc<Upstream>,
    id: i64,
    pub(crate) answer: oneshot::Receiver<Result<Value, ErrorObject>>,
    pub(crate) events: mpsc::Receiver<Event>,
    answered: bool,
}

impl Call {
    /// The answer arrived: nothing to cancel any more.
    pub(crate) fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let waiting = self.upstream.forget(self.id);
        if !self.answered && waiting {
            let cancel = json!({
                "jsonrpc": "2.0",
                "method": methods::NOTIFICATION_CANCELLED,
                "params": { "requestId": self.id, "reason": "the client cancelled the request" },
            });
            // A full queue drops it: the child's answer is ignored anyway.
            let _ = self.upstream.stdin.try_send(cancel.to_string());
        }
    }
}

/// How a new upstream session is reached.
#[derive(Debug, Clone)]
pub(crate) enum Reach {
    /// A child of the program, with this whole environment.
    Spawn(BTreeMap<String, String>),
    /// A session of the HTTP server, at one of its replicas, with what it
    /// sends there as its bearer token.
    Http(
        Arc<crate::http::Replicas>,
        Option<Arc<crate::http::Credential>>,
    ),
}

impl Upstream {
    /// A conversation of upstream `name` written into `stdin`.
    fn new(name: &Arc<str>, stdin: mpsc::Sender<String>) -> Arc<Self> {
        Arc::new(Self {
            name: Arc::clone(name),
            stdin,
            state: Mutex::default(),
            next_id: AtomicI64::new(1),
            link: Mutex::new(None),
            member: std::sync::OnceLock::new(),
            changes: Mutex::new(None),
            updates: Mutex::new(None),
            end: Notify::new(),
            ended_by_us: std::sync::atomic::AtomicBool::new(false),
            released: std::sync::atomic::AtomicBool::new(false),
            gone_tx: watch::Sender::new(false),
            credential: std::sync::OnceLock::new(),
            attached: std::sync::OnceLock::new(),
        })
    }

    /// Starts a session of `config` as `reach` says, and its tasks on the
    /// current runtime (the relay's).
    pub(crate) fn start(config: &UpstreamConfig, reach: Reach) -> std::io::Result<Arc<Self>> {
        match reach {
            Reach::Spawn(env) => Self::spawn(config, &env),
            Reach::Http(replicas, credential) => Ok(Self::connect(config, replicas, credential)),
        }
    }

    /// A session of the HTTP server at one of `replicas`: opened by the
    /// first line (`initialize`), carried by `crate::http`.
    fn connect(
        config: &UpstreamConfig,
        replicas: Arc<crate::http::Replicas>,
        credential: Option<Arc<crate::http::Credential>>,
    ) -> Arc<Self> {
        metrics::spawned(&config.name);
        Self::converse(config, replicas, credential, None)
    }

    /// The session another node opened at one of `replicas` (`attached`),
    /// taken over without a new `initialize`: carried by `crate::http`
    /// from its next message on.
    ///
    /// # Errors
    /// `attached` names a replica the upstream no longer has.
    pub(crate) fn rejoin(
        config: &UpstreamConfig,
        replicas: Arc<crate::http::Replicas>,
        credential: Option<Arc<crate::http::Credential>>,
        attached: crate::http::Attached,
    ) -> Result<Arc<Self>, String> {
        let replica = replicas.index_of(&attached.url).ok_or_else(|| {
            format!(
                "no longer has the replica {} its session was opened at",
                attached.url
            )
        })?;
        metrics::rejoined(&config.name);
        Ok(Self::converse(
            config,
            replicas,
            credential,
            Some((replica, attached)),
        ))
    }

    /// The conversation with a session at one of `replicas`, carried by
    /// `crate::http` on a task of its own: a new one, or (`rejoined`) the
    /// one at that replica another node opened.
    fn converse(
        config: &UpstreamConfig,
        replicas: Arc<crate::http::Replicas>,
        credential: Option<Arc<crate::http::Credential>>,
        rejoined: Option<(usize, crate::http::Attached)>,
    ) -> Arc<Self> {
        let name: Arc<str> = Arc::from(config.name.as_str());
        let (stdin_tx, stdin_rx) = mpsc::channel(STDIN_QUEUE);
        let upstream = Self::new(&name, stdin_tx);
        if let Some(credential) = &credential {
            let _ = upstream.credential.set(Arc::clone(credential));
        }
        let replica = rejoined.map(|(replica, attached)| {
            let _ = upstream.attached.set(attached);
            replica
        });
        let max_message = config.max_line_bytes;
        let conversation = Arc::clone(&upstream);
        tokio::spawn(async move {
            let cause = crate::http::converse(
                Arc::clone(&conversation),
                replicas,
                credential,
                max_message,
                stdin_rx,
                replica,
            )
            .await;
            conversation.gone(&cause);
        });
        upstream
    }

    /// An HTTP session's replica, `Mcp-Session-Id` and revision, once
    /// opened.
    pub(crate) fn attached(&self) -> Option<&crate::http::Attached> {
        self.attached.get()
    }

    /// Records where the HTTP session opened (before its `initialize` is
    /// answered).
    pub(crate) fn set_attached(&self, attached: crate::http::Attached) {
        let _ = self.attached.set(attached);
    }

    /// Who a request of `ctx` acts for, with its token, for a session
    /// whose upstream gets the caller's token exchanged
    /// (`token_exchange`); nothing otherwise.
    pub(crate) fn offer_caller(&self, ctx: &mcp_cluster_runtime::RequestContext) {
        if let Some(credential) = self.credential.get()
            && credential.exchanges()
        {
            credential.offer(&crate::http::Who::of_request(ctx));
        }
    }

    /// As [`Self::offer_caller`], for `who`.
    pub(crate) fn offer(&self, who: &crate::http::Who) {
        if let Some(credential) = self.credential.get() {
            credential.offer(who);
        }
    }

    /// Resolves when the node ends the conversation ([`Self::end`]).
    pub(crate) async fn ended(&self) {
        self.end.notified().await;
    }

    /// Starts a child of `config` with the whole environment `env`.
    fn spawn(
        config: &UpstreamConfig,
        env: &BTreeMap<String, String>,
    ) -> std::io::Result<Arc<Self>> {
        let Spawned {
            mut child,
            group,
            stdin,
            stdout,
            stderr,
        } = child::spawn(config, env)?;
        let name: Arc<str> = Arc::from(config.name.as_str());
        let (stdin_tx, stdin_rx) = mpsc::channel(STDIN_QUEUE);
        let upstream = Self::new(&name, stdin_tx);
        metrics::spawned(&name);
        tokio::spawn(write_stdin(stdin, stdin_rx));
        let max_line = config.max_line_bytes;
        let reader = Arc::clone(&upstream);
        let stdout_done = tokio::spawn(async move { reader.read_stdout(stdout, max_line).await });
        let stderr_task = tokio::spawn(log_stderr(
            Arc::clone(&name),
            stderr,
            config.stderr_line_bytes,
            config.stderr_lines_per_sec,
        ));
        let grace = config.end_grace();
        let supervisor = Arc::clone(&upstream);
        tokio::spawn(async move {
            let cause = tokio::select! {
                status = child.wait() => {
                    child::signal_group(group, rustix::process::Signal::KILL);
                    match status {
                        Ok(status) => format!("exited ({status})"),
                        Err(err) => format!("could not be waited for ({err})"),
                    }
                }
                too_long = stdout_done => {
                    // stdout ended (the child closed it, or broke a limit):
                    // the conversation is over either way.
                    let why = too_long.ok().flatten();
                    let _ = child::end(&mut child, group, grace).await;
                    why.unwrap_or_else(|| "closed its stdout".to_owned())
                }
                () = supervisor.end.notified() => {
                    // Closing stdin first: the polite end a stdio server
                    // understands.
                    supervisor.close_stdin();
                    let status = child::end(&mut child, group, grace).await;
                    format!("was ended by the node ({})", status.map_or_else(|e| e.to_string(), |s| s.to_string()))
                }
            };
            stderr_task.abort();
            supervisor.gone(&cause);
        });
        Ok(upstream)
    }

    /// Whether the child is gone (exited, or ended).
    pub(crate) fn is_gone(&self) -> bool {
        lock(&self.state).gone.is_some()
    }

    /// The upstream's configured name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Where notifications that belong to no request go from now on.
    pub(crate) fn attach(&self, link: SessionLink) {
        *lock(&self.link) = Some(link);
    }

    /// This session belongs to a member of a federation named as `naming`
    /// says: what it sends the session carries the names the client sees,
    /// and its end leaves the session to the other members.
    pub(crate) fn federated(&self, naming: Arc<Naming>) {
        let _ = self.member.set(naming);
    }

    /// A pooled child (no session): the list changes it announces outside
    /// any request go to `changes`; its other notifications concern no
    /// one.
    pub(crate) fn announce_to(&self, changes: broadcast::Sender<ServerEvent>) {
        *lock(&self.changes) = Some(changes);
    }

    /// A child watching resources for listen streams: the URIs its
    /// `notifications/resources/updated` name go to `updates` (dropped
    /// when it is full: its reader fans them out at once).
    pub(crate) fn watch_to(&self, updates: mpsc::Sender<String>) {
        *lock(&self.updates) = Some(updates);
    }

    /// Sends a request to the child. `events`: whether the caller relays
    /// the child's questions, progress and logs (a client request does;
    /// `initialize` does not). `progress`: whether the child gets a
    /// progress token (the request's id) in place of the client's.
    /// `trace`: the W3C `traceparent` of the node's span for the request,
    /// given to the child as `_meta.traceparent` (in place of the
    /// client's, whose trace it continues), so that its spans join the
    /// trace.
    pub(crate) async fn call(
        self: &Arc<Self>,
        method: &str,
        params: Option<Map<String, Value>>,
        events: bool,
        progress: bool,
        trace: Option<String>,
    ) -> Result<Call, ErrorObject> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer_tx, answer) = oneshot::channel();
        let (events_tx, events_rx) = mpsc::channel(EVENTS_PER_REQUEST);
        {
            let mut state = lock(&self.state);
            if let Some(why) = &state.gone {
                return Err(self.error(why));
            }
            state.pending.insert(
                id,
                Pending {
                    answer: answer_tx,
                    events: events.then_some(events_tx),
                },
            );
        }
        let call = Call {
            upstream: Arc::clone(self),
            id,
            answer,
            events: events_rx,
            answered: false,
        };
        let mut params = params.unwrap_or_default();
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.remove("progressToken");
            if progress {
                meta.insert("progressToken".into(), json!(id));
            }
            if let Some(trace) = trace {
                meta.insert("traceparent".into(), Value::String(trace));
            }
            if meta.is_empty() {
                params.remove("_meta");
            }
        }
        let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send(line.to_string()).await?;
        metrics::request(&self.name, method);
        Ok(call)
    }

    /// Sends a notification to the child.
    pub(crate) async fn notify(&self, method: &str, params: Option<Map<String, Value>>) {
        let mut line = json!({ "jsonrpc": "2.0", "method": method });
        if let Some(params) = params {
            line["params"] = Value::Object(params);
        }
        let _ = self.send(line.to_string()).await;
    }

    /// Answers one of the child's own requests.
    pub(crate) async fn answer(&self, id: Value, outcome: Result<Value, ErrorObject>) {
        let line = match outcome {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
        };
        let _ = self.send(line.to_string()).await;
    }

    /// Ends the child (the session ended): stdin closed, then its group
    /// signalled after the grace period.
    pub(crate) fn end(&self) {
        self.ended_by_us.store(true, Ordering::Release);
        self.end.notify_one();
    }

    /// Ends an HTTP session's conversation here, leaving the upstream
    /// session to the node that takes it over (no DELETE).
    pub(crate) fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.end();
    }

    /// Whether [`Self::release`] ended the conversation.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Resolves once the child is gone (its process exited and was
    /// reaped).
    pub(crate) async fn gone_wait(&self) {
        let mut gone = self.gone_tx.subscribe();
        let _ = gone.wait_for(|gone| *gone).await;
    }

    async fn send(&self, line: String) -> Result<(), ErrorObject> {
        if let Some(why) = &lock(&self.state).gone {
            return Err(self.error(why));
        }
        self.stdin
            .send(line)
            .await
            .map_err(|_| self.error("closed its stdin"))
    }

    fn error(&self, why: &str) -> ErrorObject {
        ErrorObject::internal(format!("upstream {} {why}", self.name))
    }

    /// Takes the request out of the waiting table; whether it was there.
    fn forget(&self, id: i64) -> bool {
        lock(&self.state).pending.remove(&id).is_some()
    }

    fn close_stdin(&self) {
        // The writer ends once every sender is gone; the last one is ours,
        // but calls in flight hold none (they send through `self`). A
        // marker line tells the writer to stop at once instead.
        let _ = self.stdin.try_send(String::new());
    }

    /// The child is gone: every waiting request gets the error, new ones
    /// fail at once, and the session ends unless the node ended the child.
    fn gone(&self, cause: &str) {
        let pending = {
            let mut state = lock(&self.state);
            state.gone = Some(cause.to_owned());
            std::mem::take(&mut state.pending)
        };
        for (_, p) in pending {
            let _ = p.answer.send(Err(self.error(cause)));
        }
        self.gone_tx.send_replace(true);
        let ours = self.ended_by_us.load(Ordering::Acquire);
        metrics::ended(&self.name, if ours { "ended" } else { "exited" });
        if ours {
            tracing::debug!(upstream = %self.name, cause, "Hosted server ended.");
        } else if self.member.get().is_some() {
            // One member of a federation: its tools fail with this cause,
            // the others serve on.
            tracing::warn!(upstream = %self.name, cause, "Hosted server ended by itself; its part of the session fails from now on.");
        } else {
            tracing::warn!(upstream = %self.name, cause, "Hosted server ended by itself; its session ends.");
            if let Some(link) = lock(&self.link).take() {
                link.end(HostedEnd::Exited);
            }
        }
    }

    /// Reads the child's stdout until it ends; `Some(why)` when a line
    /// broke the limit (the child must then end).
    async fn read_stdout(
        self: Arc<Self>,
        stdout: tokio::process::ChildStdout,
        max_line: usize,
    ) -> Option<String> {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            match child::read_line(&mut reader, &mut buf, max_line).await {
                Ok(Line::Whole) => self.received(&buf).await,
                Ok(Line::TooLong) => {
                    metrics::relay_error(&self.name, "line_too_long");
                    return Some(format!(
                        "wrote a line over {max_line} bytes (max_line_bytes)"
                    ));
                }
                Ok(Line::End) => return None,
                Err(err) => return Some(format!("could not be read ({err})")),
            }
        }
    }

    /// One line from the child (one message of an HTTP upstream).
    pub(crate) async fn received(self: &Arc<Self>, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let message = match mcp_cluster_protocol::jsonrpc::decode_message(line) {
            Ok(message) => message,
            Err(err) => {
                // Servers that print to stdout are common; the line is not
                // the protocol's, and the conversation goes on.
                metrics::relay_error(&self.name, "not_jsonrpc");
                tracing::debug!(upstream = %self.name, error = %err, "A line of the hosted server's stdout is not JSON-RPC; ignored.");
                return;
            }
        };
        match message {
            Message::Response(response) => {
                let Some(RequestId::Number(id)) = response.id else {
                    return;
                };
                tracing::debug!(upstream = %self.name, id, "The hosted server answered.");
                let pending = lock(&self.state).pending.remove(&id);
                match pending {
                    Some(p) => {
                        let _ = p.answer.send(response.outcome);
                    }
                    None => {
                        tracing::debug!(upstream = %self.name, id, "Answer to a request no longer waiting; ignored.")
                    }
                }
            }
            Message::Request(request) => {
                let id = request.id.to_value();
                if request.method == methods::PING {
                    return self.answer(id, Ok(json!({}))).await;
                }
                let event = Event::Ask {
                    id: id.clone(),
                    method: request.method.clone(),
                    params: request.params,
                };
                let Err(Event::Ask { id, method, params }) = self.to_newest(event) else {
                    tracing::debug!(upstream = %self.name, %id, method = %request.method, "The hosted server asks, during a request.");
                    return;
                };
                tracing::debug!(upstream = %self.name, %id, %method, "The hosted server asks, outside any request.");
                // No request runs: the question goes on the session's GET
                // stream, answered in the background (the reader goes on).
                let link = lock(&self.link).clone();
                let Some(link) = link else {
                    metrics::relay_error(&self.name, "ask_without_request");
                    let err = ErrorObject::internal(format!(
                        "{method} cannot reach the client before its session is open"
                    ));
                    return self.answer(id, Err(err)).await;
                };
                let upstream = Arc::clone(self);
                tokio::spawn(async move {
                    let params = params.map_or_else(|| json!({}), Value::Object);
                    let answer = link.ask(&method, params).await.map_err(ask_error);
                    upstream.answer(id, answer).await;
                });
            }
            Message::Notification(n) => {
                tracing::trace!(upstream = %self.name, method = %n.method, "The hosted server notifies.");
                self.notification(n);
            }
        }
    }

    fn notification(&self, n: Notification) {
        match n.method.as_str() {
            methods::NOTIFICATION_PROGRESS => {
                let params = n.params.unwrap_or_default();
                let Some(token) = params.get("progressToken").and_then(Value::as_i64) else {
                    return;
                };
                let Some(progress) = params.get("progress").and_then(Value::as_f64) else {
                    return;
                };
                let event = Event::Progress {
                    progress,
                    total: params.get("total").and_then(Value::as_f64),
                    message: params
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                };
                let target = lock(&self.state)
                    .pending
                    .get(&token)
                    .and_then(|p| p.events.clone());
                if let Some(target) = target {
                    let _ = target.try_send(event);
                }
            }
            // The child gave up one of its own questions: the client's
            // answer will be ignored when it comes.
            methods::NOTIFICATION_CANCELLED => {}
            // A 2026-07-28 child took one of our `subscriptions/listen`
            // requests: its acknowledgement goes to that request (what
            // the stream then carries concerns every listener, below).
            methods::NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED => {
                let listen = n.params.as_ref().and_then(|p| {
                    p.get("_meta")?
                        .get(methods::meta::SUBSCRIPTION_ID)?
                        .as_i64()
                });
                let target = listen.and_then(|id| {
                    lock(&self.state)
                        .pending
                        .get(&id)
                        .and_then(|p| p.events.clone())
                });
                if let Some(target) = target {
                    let _ = target.try_send(Event::Notify(n));
                }
            }
            // A log line goes with the request running (stdio says nothing
            // of which one: the newest), or to the session.
            methods::NOTIFICATION_MESSAGE => {
                if let Err(Event::Notify(n)) = self.to_newest(Event::Notify(n)) {
                    self.to_session(n);
                }
            }
            // List changes, resource updates and the rest concern the
            // session.
            _ => self.to_session(n),
        }
    }

    fn to_session(&self, mut n: Notification) {
        if let Some(link) = lock(&self.link).as_ref() {
            if let Some(naming) = self.member.get() {
                naming.expose_notification(&n.method, n.params.as_mut());
            }
            return link.notify(n);
        }
        if n.method == methods::NOTIFICATION_RESOURCES_UPDATED {
            let uri = n.params.as_ref().and_then(|p| p.get("uri")?.as_str());
            if let (Some(uri), Some(updates)) = (uri, lock(&self.updates).as_ref()) {
                let _ = updates.try_send(uri.to_owned());
            }
            return;
        }
        let change = match n.method.as_str() {
            methods::NOTIFICATION_TOOLS_LIST_CHANGED => ServerEvent::ToolsListChanged,
            methods::NOTIFICATION_PROMPTS_LIST_CHANGED => ServerEvent::PromptsListChanged,
            methods::NOTIFICATION_RESOURCES_LIST_CHANGED => ServerEvent::ResourcesListChanged,
            _ => return,
        };
        if let Some(changes) = lock(&self.changes).as_ref() {
            // Nobody forwarding them (a service used without a node) is no
            // fault.
            let _ = changes.send(change);
        }
    }

    /// Hands an event to the handler of the newest request still waiting
    /// (over stdio, a child's question or log names no request: the newest
    /// is the one most likely to have caused it, and the only one when
    /// requests of a session run one at a time). The event back when no
    /// request waits, or its handler's queue is full.
    fn to_newest(&self, event: Event) -> Result<(), Event> {
        let target = lock(&self.state)
            .pending
            .values()
            .rev()
            .find_map(|p| p.events.clone());
        match target {
            Some(target) => target.try_send(event).map_err(|err| match err {
                mpsc::error::TrySendError::Full(e) | mpsc::error::TrySendError::Closed(e) => e,
            }),
            None => Err(event),
        }
    }
}

/// What the child hears when its question could not be answered.
pub(crate) fn ask_error(err: AskError) -> ErrorObject {
    match err {
        AskError::Rejected(err) => err,
        AskError::NotSupported(what) => ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("the client does not support {what}"),
        ),
        other => ErrorObject::internal(other.to_string()),
    }
}

/// Writes the queued lines to the child's stdin, each with its newline,
/// until the queue closes, an empty line asks it to stop, or the pipe
/// breaks. Dropping stdin closes it: the child reads the end of its input.
async fn write_stdin(mut stdin: tokio::process::ChildStdin, mut lines: mpsc::Receiver<String>) {
    while let Some(mut line) = lines.recv().await {
        if line.is_empty() {
            break;
        }
        line.push('\n');
        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
}

/// Logs the child's stderr, line by line, each cut at `max_line` bytes, at
/// most `per_sec` lines a second (the rest counted and reported). Always
/// reading: a child blocked on a full stderr pipe would hang its session.
async fn log_stderr(
    name: Arc<str>,
    stderr: tokio::process::ChildStderr,
    max_line: usize,
    per_sec: u32,
) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    let mut window = tokio::time::Instant::now();
    let mut logged = 0u32;
    let mut dropped = 0u64;
    let mut reported = tokio::time::Instant::now();
    loop {
        match child::read_line(&mut reader, &mut buf, max_line).await {
            Ok(Line::End) | Err(_) => break,
            Ok(_) => {}
        }
        let now = tokio::time::Instant::now();
        if now.duration_since(window) >= Duration::from_secs(1) {
            window = now;
            logged = 0;
        }
        if logged < per_sec {
            logged += 1;
            tracing::info!(upstream = %name, line = %String::from_utf8_lossy(&buf), "stderr");
        } else {
            dropped += 1;
            metrics::stderr_dropped(&name);
        }
        if dropped > 0 && now.duration_since(reported) >= STDERR_REPORT_INTERVAL {
            tracing::warn!(upstream = %name, dropped, "Hosted server's stderr lines dropped (stderr_lines_per_sec).");
            dropped = 0;
            reported = now;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind,
    // still consistent (every critical section is a single insert, remove
    // or take).
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
