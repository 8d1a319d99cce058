//! Runtime settings.

use std::time::Duration;

use mcp_cluster_telemetry::Secret;
use serde::{Deserialize, Serialize};

use crate::node::quota::QuotaConfig;

/// How a POST carrying requests is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ResponseMode {
    /// JSON when the handler emits nothing before its result; SSE from its
    /// first notification or server request on.
    #[default]
    Auto,
    /// Always an SSE stream (every response is resumable).
    Sse,
}

/// Settings of the actor runtime. Every field has a safe default.
///
/// `Debug` prints every field but `quotas`, which a node fills from its own
/// `[quotas]` section and prints there: the node's effective-configuration
/// line shows each quota once, with the value applied.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Seconds a session may stay idle (no request, no open stream) before
    /// it expires. Default 1800: long enough for a human pause.
    pub session_idle_ttl_secs: u64,
    /// Seconds a session may go without a request or a notification of
    /// its client before its actor stops on this node (passivates): its
    /// record stays in the store, and its next request, on any node,
    /// starts it again from there. Only a session with nothing running and
    /// nothing held for its client passivates; one whose own server runs
    /// on this node (a hosted server's child) never does. A client reading
    /// its standalone stream meanwhile keeps the session (the node renews
    /// it) and hears the server's events (the node writes them). 0: never.
    /// Default 30.
    pub session_passivate_secs: u64,
    /// Most live sessions on this node; `initialize` beyond it gets HTTP 503.
    /// With the embedded store, passivated sessions count too (their
    /// records are kept on this node); with Redis, the sessions whose
    /// actors run here. Default 10,000.
    pub max_sessions: usize,
    /// Most in-flight requests per session; more get -32603 "too many
    /// in-flight requests". Default 64.
    pub max_in_flight_per_session: usize,
    /// Seconds a handler may run before it is stopped with -32603.
    /// Default 600.
    pub request_timeout_secs: u64,
    /// Seconds a handler waits for the client to answer a server request
    /// (sampling, roots, elicitation). Default 300: a human may be asked.
    pub ask_timeout_secs: u64,
    /// JSON or SSE answers.
    pub response_mode: ResponseMode,
    /// Milliseconds a client should wait before reconnecting (SSE `retry`).
    /// Default 1000.
    pub sse_retry_ms: u64,
    /// Seconds between SSE keep-alive comments. Default 15: below common
    /// proxy idle timeouts.
    pub sse_keep_alive_secs: u64,
    /// Mailbox size of each session actor; a full mailbox sheds load with
    /// HTTP 503. Default 256.
    pub session_mailbox: usize,
    /// Most messages in one JSON-RPC batch (2025-03-26 sessions). A longer
    /// batch is refused whole, before anything in it runs, with -32600
    /// (HTTP 400: not worth retrying as is). Default 64: as many requests
    /// as a session may run at once.
    pub max_batch_items: usize,
    /// Largest `clientInfo` an `initialize` may carry, in bytes of JSON;
    /// larger gets -32602 and no session. Default 8192: names, versions and
    /// a small icon fit; the session keeps it for its whole life.
    pub max_client_info_bytes: usize,
    /// Largest `capabilities` an `initialize` may carry, in bytes of JSON;
    /// larger gets -32602 and no session. Default 16384.
    pub max_client_capabilities_bytes: usize,
    /// Most resource subscriptions one session holds; beyond it
    /// `resources/subscribe` gets -32602. Default 64.
    pub max_subscriptions_per_session: usize,
    /// Longest resource URI `resources/subscribe` accepts, in bytes; longer
    /// gets -32602. Default 2048. With the defaults a session stores at
    /// most about 150 KiB of client-chosen data (info, capabilities,
    /// subscriptions).
    pub max_uri_bytes: usize,
    /// `ttlMs` on cacheable stateless results (`server/discover`, the
    /// lists, `resources/read`) when the handler sets none. Default 60,000:
    /// list changes also reach `subscriptions/listen` at once.
    pub cache_ttl_ms: u64,
    /// Seconds an input-required `requestState` stays valid. Default 600:
    /// a human may be asked.
    pub request_state_ttl_secs: u64,
    /// Keys that seal `requestState`, as `<id>:<base64 of 32 bytes>`, the
    /// first sealing and all opening (rotation: put the new key first, drop
    /// the old one after `request_state_ttl_secs`). Empty: the cluster
    /// shares a ring the store keeps and rotates
    /// (`request_state_rotate_secs`); a single node with the embedded store
    /// makes its own. Secrets: printed and serialized as `"<redacted>"`.
    pub request_state_keys: Vec<Secret>,
    /// Seconds between rotations of the store-kept key ring. Default 86,400.
    pub request_state_rotate_secs: u64,
    /// Most `subscriptions/listen` streams this node holds; more get
    /// HTTP 503. Default 10,000.
    pub max_listen_streams: usize,
    /// Milliseconds a task (tasks extension) is kept after its last change:
    /// its `ttlMs`. Default 3,600,000.
    pub task_ttl_ms: u64,
    /// `pollIntervalMs` suggested to clients polling a task. Default 500.
    pub task_poll_interval_ms: u64,
    /// Most tasks running on this node at once; more get HTTP 503.
    /// Default 1,000.
    pub max_running_tasks: usize,
    /// Most bytes of a task's result (its JSON); a larger result ends the
    /// task `failed` with an error saying so. Default 4 MiB.
    pub max_task_result_bytes: u64,
    /// Most bytes of one answer given by `tasks/update`; a larger one is
    /// refused (-32602). Default 256 KiB.
    pub max_task_answer_bytes: u64,
    /// Most bytes of all the answers one task holds; an update that would
    /// go beyond is refused whole (-32602). Default 1 MiB.
    pub max_task_answers_bytes: u64,
    /// Threads of the request executor, the runtime every handler runs on
    /// (both eras), apart from the HTTP workers so that no handler delays
    /// connections, streams or `initialize`. 0: one per CPU the process
    /// may use. Default 0.
    pub executor_threads: usize,
    /// Most threads of the executor's blocking pool, where tools declared
    /// blocking run (`ToolDef::blocking`); calls beyond wait for a thread.
    /// Default 64.
    pub blocking_threads: usize,
    /// Bytes all running work on this node may hold: the parameters of
    /// requests while their handlers run, the events of open answer
    /// streams and the questions on them (each client's share is
    /// `quotas.in_flight_bytes_per_client`). A request that would go past
    /// it gets HTTP 503 with `Retry-After` before it runs. Default
    /// 128 MiB: sixteen clients at their share, beside the 64 MiB budgets
    /// of closed streams and finished tasks.
    pub max_in_flight_bytes: u64,
    /// Quotas per client address and per principal. Not read from the
    /// runtime's section: a node sets it from its own `[quotas]` section.
    #[serde(skip)]
    pub quotas: QuotaConfig,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured without `..`: a new field does not compile until it
        // is printed here (or left out on purpose, as `quotas`).
        let Self {
            session_idle_ttl_secs,
            session_passivate_secs,
            max_sessions,
            max_in_flight_per_session,
            request_timeout_secs,
            ask_timeout_secs,
            response_mode,
            sse_retry_ms,
            sse_keep_alive_secs,
            session_mailbox,
            max_batch_items,
            max_client_info_bytes,
            max_client_capabilities_bytes,
            max_subscriptions_per_session,
            max_uri_bytes,
            cache_ttl_ms,
            request_state_ttl_secs,
            request_state_keys,
            request_state_rotate_secs,
            max_listen_streams,
            task_ttl_ms,
            task_poll_interval_ms,
            max_running_tasks,
            max_task_result_bytes,
            max_task_answer_bytes,
            max_task_answers_bytes,
            executor_threads,
            blocking_threads,
            max_in_flight_bytes,
            quotas: _,
        } = self;
        f.debug_struct("RuntimeConfig")
            .field("session_idle_ttl_secs", session_idle_ttl_secs)
            .field("session_passivate_secs", session_passivate_secs)
            .field("max_sessions", max_sessions)
            .field("max_in_flight_per_session", max_in_flight_per_session)
            .field("request_timeout_secs", request_timeout_secs)
            .field("ask_timeout_secs", ask_timeout_secs)
            .field("response_mode", response_mode)
            .field("sse_retry_ms", sse_retry_ms)
            .field("sse_keep_alive_secs", sse_keep_alive_secs)
            .field("session_mailbox", session_mailbox)
            .field("max_batch_items", max_batch_items)
            .field("max_client_info_bytes", max_client_info_bytes)
            .field(
                "max_client_capabilities_bytes",
                max_client_capabilities_bytes,
            )
            .field(
                "max_subscriptions_per_session",
                max_subscriptions_per_session,
            )
            .field("max_uri_bytes", max_uri_bytes)
            .field("cache_ttl_ms", cache_ttl_ms)
            .field("request_state_ttl_secs", request_state_ttl_secs)
            .field("request_state_keys", request_state_keys)
            .field("request_state_rotate_secs", request_state_rotate_secs)
            .field("max_listen_streams", max_listen_streams)
            .field("task_ttl_ms", task_ttl_ms)
            .field("task_poll_interval_ms", task_poll_interval_ms)
            .field("max_running_tasks", max_running_tasks)
            .field("max_task_result_bytes", max_task_result_bytes)
            .field("max_task_answer_bytes", max_task_answer_bytes)
            .field("max_task_answers_bytes", max_task_answers_bytes)
            .field("executor_threads", executor_threads)
            .field("blocking_threads", blocking_threads)
            .field("max_in_flight_bytes", max_in_flight_bytes)
            .finish()
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            session_idle_ttl_secs: 1800,
            session_passivate_secs: 30,
            max_sessions: 10_000,
            max_in_flight_per_session: 64,
            request_timeout_secs: 600,
            ask_timeout_secs: 300,
            response_mode: ResponseMode::Auto,
            sse_retry_ms: 1000,
            sse_keep_alive_secs: 15,
            session_mailbox: 256,
            max_batch_items: 64,
            max_client_info_bytes: 8 * 1024,
            max_client_capabilities_bytes: 16 * 1024,
            max_subscriptions_per_session: 64,
            max_uri_bytes: 2048,
            cache_ttl_ms: 60_000,
            request_state_ttl_secs: 600,
            request_state_keys: Vec::new(),
            request_state_rotate_secs: 86_400,
            max_listen_streams: 10_000,
            task_ttl_ms: 3_600_000,
            task_poll_interval_ms: 500,
            max_running_tasks: 1_000,
            max_task_result_bytes: 4 << 20,
            max_task_answer_bytes: 256 << 10,
            max_task_answers_bytes: 1 << 20,
            executor_threads: 0,
            blocking_threads: 64,
            max_in_flight_bytes: 128 << 20,
            quotas: QuotaConfig::default(),
        }
    }
}

impl RuntimeConfig {
    /// Session idle TTL.
    pub fn session_idle_ttl(&self) -> Duration {
        Duration::from_secs(self.session_idle_ttl_secs)
    }

    /// How long an idle session's actor runs before it passivates; `None`:
    /// never.
    pub fn session_passivate_after(&self) -> Option<Duration> {
        (self.session_passivate_secs > 0).then(|| Duration::from_secs(self.session_passivate_secs))
    }

    /// Handler timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    /// Client answer timeout.
    pub fn ask_timeout(&self) -> Duration {
        Duration::from_secs(self.ask_timeout_secs)
    }

    /// A resource URI a client subscribes to, within `max_uri_bytes`.
    ///
    /// # Errors
    /// -32602 saying how long it is and what is accepted.
    pub fn check_uri_len(&self, uri: &str) -> Result<(), mcp_cluster_protocol::ErrorObject> {
        if uri.len() > self.max_uri_bytes {
            return Err(mcp_cluster_protocol::ErrorObject::invalid_params(format!(
                "resource URI is {} bytes; this server accepts at most {}",
                uri.len(),
                self.max_uri_bytes
            )));
        }
        Ok(())
    }

    /// How long a `requestState` stays valid.
    pub fn request_state_ttl(&self) -> Duration {
        Duration::from_secs(self.request_state_ttl_secs.max(1))
    }

    /// Keep-alive interval.
    pub fn sse_keep_alive(&self) -> Duration {
        Duration::from_secs(self.sse_keep_alive_secs.max(1))
    }
}
