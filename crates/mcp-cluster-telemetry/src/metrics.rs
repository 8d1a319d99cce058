//! The node's Prometheus metrics, registered once in one registry.
//!
//! Names follow the OpenTelemetry MCP semantic conventions where they exist
//! (`mcp.server.operation.duration` → `mcp_server_operation_duration_seconds`,
//! attribute `mcp.method.name` → label `mcp_method_name`); the rest are
//! `mcp_*` metrics an operator sizes and alerts on. Every label takes values
//! from a bounded set: methods, tools and prompts the server does not know
//! are recorded as `_OTHER`, and no session id, request id or URI is ever a
//! label.
//!
//! The registry is process-wide ([`metrics`]): one node per process.
//! Gauges that mirror node state (sessions held, requests in flight, drain
//! phase…) are set when `/metrics` is scraped, by whoever serves it, through
//! [`NodeGauges`].

use std::sync::LazyLock;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Buckets of operation and HTTP durations, in seconds: from 100 µs (an
/// in-memory `tools/list`) to 10 min (the default request timeout).
pub const DURATION_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// Buckets of Redis command latency, in seconds: 50 µs to beyond the
/// command timeout (1 s by default).
pub const REDIS_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

/// Buckets of session durations, in seconds: 1 s to a day.
pub const SESSION_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
];

/// Every `reason` of `mcp_auth_failures_total` (mcp-cluster-auth's `AuthError`
/// labels; its tests check the two agree).
pub const AUTH_FAILURE_REASONS: &[&str] = &[
    "missing",
    "malformed_header",
    "malformed",
    "algorithm",
    "expired",
    "not_yet_valid",
    "issuer",
    "audience",
    "unknown_key",
    "signature",
    "claims",
    "inactive",
    "insufficient_scope",
    "unavailable",
    "throttled",
];

/// Every `type` of `mcp_bus_messages_published_total` and
/// `mcp_bus_messages_received_total` (mcp-cluster-store's `BusMessage::kind`).
pub const BUS_MESSAGE_TYPES: &[&str] = &[
    "deliver",
    "session_ended",
    "session_changed",
    "server_event",
    "release",
    "kick",
    "stream_failed",
    "forward",
];

/// Every `kind` of `mcp_sse_streams_open` and `mcp_sse_write_stalls_total`
/// (mcp-cluster-http's `StreamKind` labels; its tests check the two agree).
pub const SSE_STREAM_KINDS: &[&str] = &[
    "request",
    "standalone",
    "resumption",
    "legacy",
    "live",
    "listen",
];

/// The label value of a method, tool or prompt outside the known set.
pub const OTHER: &str = "_OTHER";

/// Every metric of the node.
#[derive(Debug)]
#[non_exhaustive]
pub struct Metrics {
    registry: Registry,
    /// `mcp_server_operation_duration_seconds`: from receipt of a request
    /// until its response is written (or it ends without one).
    pub operation_duration: HistogramVec,
    /// `mcp_server_session_duration_seconds`: sessions ended on this node.
    pub session_duration: HistogramVec,
    /// `mcp_sessions_created_total` by transport.
    pub sessions_created: IntCounterVec,
    /// `mcp_sessions_rejected_total` by reason.
    pub sessions_rejected: IntCounterVec,
    /// `mcp_sessions_rehydrated_total`: sessions loaded from the store onto
    /// this node (created elsewhere, or evicted here before).
    pub sessions_rehydrated: IntCounter,
    /// `mcp_sessions_passivated_total`: idle sessions whose actor stopped
    /// on this node, their records kept in the store.
    pub sessions_passivated: IntCounter,
    /// `mcp_sessions_adopted_total`: sessions whose own server this node
    /// took over from a host that was gone.
    pub sessions_adopted: IntCounter,
    /// `mcp_sessions_ended_total` by reason.
    pub sessions_ended: IntCounterVec,
    /// `mcp_sessions_held`: session actors on this node.
    pub sessions_held: IntGauge,
    /// `mcp_sessions_listened_passivated`: sessions without an actor here
    /// whose client reads their standalone stream on this node.
    pub sessions_listened_passivated: IntGauge,
    /// `mcp_node_max_sessions`: the most sessions this node holds.
    pub max_sessions: IntGauge,
    /// `mcp_requests_in_flight`: handlers running on this node.
    pub requests_in_flight: IntGauge,
    /// `mcp_exchanges_open`: POSTs whose answers are not all written.
    pub exchanges_open: IntGauge,
    /// `mcp_input_rounds_waiting`: 2026-07-28 calls kept running while
    /// their client answers their questions.
    pub input_rounds_waiting: IntGauge,
    /// `mcp_http_answers_total` by kind (`json`, `sse`, `accepted`).
    pub http_answers: IntCounterVec,
    /// `mcp_http_rejections_total` by reason.
    pub http_rejections: IntCounterVec,
    /// `http_server_request_duration_seconds` by method, route, status.
    pub http_duration: HistogramVec,
    /// `mcp_sse_streams_open` by kind.
    pub sse_streams_open: IntGaugeVec,
    /// `mcp_sse_resumptions_total` by outcome.
    pub sse_resumptions: IntCounterVec,
    /// `mcp_sse_takeovers_total`: readers of a stream told to let go (a
    /// client resumed it elsewhere).
    pub sse_takeovers: IntCounter,
    /// `mcp_sse_write_stalls_total` by kind: streams closed because their
    /// client took none of their bytes for the write-stall timeout.
    pub sse_write_stalls: IntCounterVec,
    /// `mcp_event_log_appends_total`.
    pub event_appends: IntCounter,
    /// `mcp_event_log_replayed_events_total`: events read back for a
    /// resumption or a tail.
    pub events_replayed: IntCounter,
    /// `mcp_event_log_trims_total`: appends that dropped old events.
    pub event_trims: IntCounter,
    /// `mcp_retained_bytes` by kind (`closed_streams`, `finished_tasks`,
    /// `in_flight`): bytes this node keeps (embedded) or wrote to Redis and
    /// answers for, and bytes its running work holds, against its byte
    /// budgets.
    pub retained_bytes: IntGaugeVec,
    /// `mcp_retention_evictions_total` by kind (`stream`, `task`): kept
    /// items dropped before their TTL to hold a byte budget.
    pub retention_evictions: IntCounterVec,
    /// `mcp_retention_refusals_total` by kind (`task_answer`,
    /// `task_result`, `node_budget`): data refused, or replaced by an
    /// error, for its size; requests refused because the node holds its
    /// byte budget for clients.
    pub retention_refusals: IntCounterVec,
    /// `mcp_redis_command_duration_seconds` by operation.
    pub redis_duration: HistogramVec,
    /// `mcp_redis_errors_total` by operation and kind.
    pub redis_errors: IntCounterVec,
    /// `mcp_redis_reconnects_total` by connection (`commands`, `pubsub`,
    /// `failover`, `layout`, `stuck`).
    pub redis_reconnects: IntCounterVec,
    /// `mcp_bus_messages_replayed_total`: control messages a node missed
    /// while its pub/sub connection was down, replayed from the control
    /// log.
    pub bus_replayed: IntCounter,
    /// `mcp_redis_replica_waits_total` by outcome (`replicated`, `short`,
    /// `unwaited`, `failed`).
    pub redis_replica_waits: IntCounterVec,
    /// `mcp_event_log_lost_total`: appends refused because the stream no
    /// longer held an event the store had acknowledged (a Redis failover
    /// that lost the primary's last writes).
    pub event_log_lost: IntCounter,
    /// `mcp_redis_primary_known`: 1 while the node knows a Redis primary to
    /// write to, 0 while the Sentinels name none it can reach.
    pub redis_primary_known: IntGauge,
    /// `mcp_bus_messages_published_total` by type.
    pub bus_published: IntCounterVec,
    /// `mcp_bus_messages_unsent_total` by type.
    pub bus_unsent: IntCounterVec,
    /// `mcp_bus_messages_received_total` by type.
    pub bus_received: IntCounterVec,
    /// `mcp_bus_messages_dropped_total` by reason.
    pub bus_dropped: IntCounterVec,
    /// `mcp_heartbeats_total` by outcome.
    pub heartbeats: IntCounterVec,
    /// `mcp_dead_nodes_claimed_total`.
    pub dead_nodes_claimed: IntCounter,
    /// `mcp_orphaned_requests_finalized_total`.
    pub orphans_finalized: IntCounter,
    /// `mcp_expired_sessions_swept_total`.
    pub sessions_swept: IntCounter,
    /// `mcp_server_to_client_requests_total` by method and outcome.
    pub client_requests: IntCounterVec,
    /// `mcp_tls_certificate_reloads_total` by outcome (`reloaded`,
    /// `rejected`): changed certificate files of the node's HTTPS listener.
    pub tls_reloads: IntCounterVec,
    /// `mcp_node_drain_phase`: 1 for the current phase, 0 for the others.
    pub drain_phase: IntGaugeVec,
    /// `mcp_connections_open`.
    pub connections_open: IntGauge,
    /// `mcp_connections_refused_total` by reason.
    pub connections_refused: IntCounterVec,
    /// `mcp_quota_rejections_total` by quota (one of [`QUOTAS`]).
    pub quota_rejections: IntCounterVec,
    /// `mcp_auth_failures_total` by reason: requests refused by
    /// authorization (401, 403, 503).
    pub auth_failures: IntCounterVec,
    /// `mcp_auth_jwks_fetches_total` by outcome.
    pub auth_jwks_fetches: IntCounterVec,
    /// `mcp_auth_introspections_total` by outcome.
    pub auth_introspections: IntCounterVec,
    /// `mcp_upstream_children_spawned_total` by upstream.
    pub upstream_spawned: IntCounterVec,
    /// `mcp_upstream_children_running` by upstream.
    pub upstream_running: IntGaugeVec,
    /// `mcp_upstream_children_ended_total` by upstream and cause.
    pub upstream_ended: IntCounterVec,
    /// `mcp_upstream_children_refused_total` by upstream and reason.
    pub upstream_refused: IntCounterVec,
    /// `mcp_upstream_requests_total` by upstream and method.
    pub upstream_requests: IntCounterVec,
    /// `mcp_upstream_request_duration_seconds` by upstream.
    pub upstream_duration: HistogramVec,
    /// `mcp_upstream_relay_errors_total` by upstream and kind.
    pub upstream_errors: IntCounterVec,
    /// `mcp_upstream_spawn_duration_seconds` by upstream: from start to
    /// the child's `initialize` answer.
    pub upstream_spawn_duration: HistogramVec,
    /// `mcp_upstream_replica_up` by upstream and replica: an HTTP
    /// upstream's replica answers (1), or failed to and is skipped by new
    /// sessions for a while (0).
    pub upstream_replica_up: IntGaugeVec,
    /// `mcp_upstream_replica_failures_total` by upstream and replica: an
    /// HTTP upstream's replica that could not be reached.
    pub upstream_replica_failures: IntCounterVec,
    /// `mcp_upstream_token_requests_total` by upstream, grant and outcome:
    /// the node's requests for a token of an HTTP upstream's.
    pub upstream_token_requests: IntCounterVec,
    /// `mcp_upstream_exchanged_tokens` by upstream: exchanged tokens the
    /// node keeps (one per principal and scopes).
    pub upstream_exchanged_tokens: IntGaugeVec,
    /// `mcp_audit_records_total` by outcome: audit records written.
    pub audit_records: IntCounterVec,
    /// `mcp_audit_records_dropped_total`: audit records dropped, the
    /// writer's queue full.
    pub audit_dropped: IntCounter,
}

/// Every `outcome` of an audit record (`mcp_audit_records_total`).
pub const AUDIT_OUTCOMES: &[&str] = &["ok", "tool_error", "error", "cancelled"];

/// Every `cause` of `mcp_upstream_children_ended_total`: the node ended the
/// child (its session ended), or it exited by itself (or broke a limit).
pub const UPSTREAM_END_CAUSES: &[&str] = &["ended", "exited"];

/// The quotas (label values of `mcp_quota_rejections_total`), as the
/// runtime names them.
pub const QUOTAS: &[&str] = &[
    "initialize_per_address",
    "requests_per_principal",
    "requests_per_address",
    "sessions_per_principal",
    "streams_per_principal",
    "streams_per_address",
    "listen_streams_per_address",
    "tasks_per_principal",
    "tasks_per_address",
    "in_flight_bytes_per_client",
];

/// The node's phases: the drain's, in order, then `starting` (waiting for
/// its store before serving).
pub const DRAIN_PHASES: &[&str] = &["serving", "draining", "closed", "left", "starting"];

/// The index of `starting` in [`DRAIN_PHASES`].
pub const STARTING: usize = 4;

/// State gauges read from the node when `/metrics` is scraped.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeGauges {
    /// Session actors on this node.
    pub sessions_held: usize,
    /// Sessions without an actor here whose client reads their stream here.
    pub sessions_listened_passivated: usize,
    /// Its limit (`max_sessions`).
    pub max_sessions: usize,
    /// Handlers running.
    pub requests_in_flight: usize,
    /// Exchanges not done.
    pub exchanges_open: usize,
    /// Index into [`DRAIN_PHASES`].
    pub drain_phase: usize,
}

fn histogram(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    // unwrap: the names, labels and buckets are constants checked by the
    // unit test below.
    #[allow(clippy::unwrap_used)]
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .unwrap()
}

#[allow(clippy::unwrap_used)]
fn counters(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).unwrap()
}

#[allow(clippy::unwrap_used)]
fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).unwrap()
}

#[allow(clippy::unwrap_used)]
fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).unwrap()
}

#[allow(clippy::unwrap_used)]
fn gauges(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).unwrap()
}

impl Metrics {
    fn new() -> Self {
        let m = Self {
            registry: Registry::new(),
            operation_duration: histogram(
                "mcp_server_operation_duration_seconds",
                "MCP request duration as observed on the server, from receipt until the response is written.",
                &[
                    "mcp_method_name",
                    "gen_ai_tool_name",
                    "gen_ai_prompt_name",
                    "error_type",
                    "mcp_protocol_version",
                    "network_transport",
                ],
                DURATION_BUCKETS,
            ),
            session_duration: histogram(
                "mcp_server_session_duration_seconds",
                "Duration of MCP sessions ended on this node (DELETE, or the legacy SSE or stdio connection ending).",
                &["mcp_protocol_version", "network_transport"],
                SESSION_BUCKETS,
            ),
            sessions_created: counters(
                "mcp_sessions_created_total",
                "Sessions created on this node.",
                &["transport"],
            ),
            sessions_rejected: counters(
                "mcp_sessions_rejected_total",
                "Sessions refused on this node, by reason.",
                &["reason"],
            ),
            sessions_rehydrated: counter(
                "mcp_sessions_rehydrated_total",
                "Sessions loaded from the store onto this node to serve a request.",
            ),
            sessions_passivated: counter(
                "mcp_sessions_passivated_total",
                "Idle sessions whose actor stopped on this node, their records kept in the store for their next request.",
            ),
            sessions_adopted: counter(
                "mcp_sessions_adopted_total",
                "Sessions whose own server (an HTTP upstream's session) this node took over from a node that was gone.",
            ),
            sessions_ended: counters(
                "mcp_sessions_ended_total",
                "Sessions ended by this node, by reason (deleted, disconnected, expired, upstream_exited, host_lost: the node running its own server was gone and the server could not be taken over).",
                &["reason"],
            ),
            sessions_held: gauge("mcp_sessions_held", "Sessions with an actor on this node."),
            sessions_listened_passivated: gauge(
                "mcp_sessions_listened_passivated",
                "Sessions without an actor on this node (passivated) whose client reads their standalone stream here: the node renews them and writes their server events.",
            ),
            input_rounds_waiting: gauge(
                "mcp_input_rounds_waiting",
                "2026-07-28 calls kept running on this node while their client answers their questions (a hosted server's child waiting).",
            ),
            max_sessions: gauge(
                "mcp_node_max_sessions",
                "The most sessions this node holds (max_sessions); beyond it new sessions get 503.",
            ),
            requests_in_flight: gauge(
                "mcp_requests_in_flight",
                "Client requests whose handler runs on this node.",
            ),
            exchanges_open: gauge(
                "mcp_exchanges_open",
                "Requests and batches received by this node whose answers are not all written.",
            ),
            http_answers: counters(
                "mcp_http_answers_total",
                "Answers to MCP POSTs by kind: json, sse, accepted (202).",
                &["kind"],
            ),
            http_rejections: counters(
                "mcp_http_rejections_total",
                "HTTP requests refused before reaching a session, by reason.",
                &["reason"],
            ),
            http_duration: histogram(
                "http_server_request_duration_seconds",
                "HTTP request duration until the response head is sent.",
                &[
                    "http_request_method",
                    "http_route",
                    "http_response_status_code",
                ],
                DURATION_BUCKETS,
            ),
            sse_streams_open: gauges(
                "mcp_sse_streams_open",
                "SSE streams this node is sending, by kind (request, standalone, resumption, legacy; 2026-07-28: live request streams, listen).",
                &["kind"],
            ),
            sse_resumptions: counters(
                "mcp_sse_resumptions_total",
                "Last-Event-ID resumptions by outcome: ok, other_node (this node started serving the session for it), gap (events no longer retained), unknown (no such event), failed (store error).",
                &["outcome"],
            ),
            sse_write_stalls: counters(
                "mcp_sse_write_stalls_total",
                "SSE streams this node closed because their client took none of their bytes for http.sse_write_stall_timeout_secs, by kind.",
                &["kind"],
            ),
            sse_takeovers: counter(
                "mcp_sse_takeovers_total",
                "Stream readers on this node told to let go because the client resumed the stream elsewhere.",
            ),
            event_appends: counter(
                "mcp_event_log_appends_total",
                "Events appended to the event log by this node.",
            ),
            events_replayed: counter(
                "mcp_event_log_replayed_events_total",
                "Events read from the event log for resumptions and tails.",
            ),
            event_trims: counter(
                "mcp_event_log_trims_total",
                "Appends by this node that dropped a stream's oldest events (retention).",
            ),
            retained_bytes: gauges(
                "mcp_retained_bytes",
                "Bytes kept for clients after they are done (closed_streams, finished_tasks), held by this node or written by it to Redis, and held by running work (in_flight), against the byte budgets.",
                &["kind"],
            ),
            retention_evictions: counters(
                "mcp_retention_evictions_total",
                "Kept items (stream, task) dropped before their TTL to hold a byte budget.",
                &["kind"],
            ),
            retention_refusals: counters(
                "mcp_retention_refusals_total",
                "Client data refused, or a task result replaced by an error, for its size (task_answer, task_result); requests refused because the node holds its byte budget (node_budget).",
                &["kind"],
            ),
            redis_duration: histogram(
                "mcp_redis_command_duration_seconds",
                "Successful Redis round trips by operation (failures are in mcp_redis_errors_total).",
                &["operation"],
                REDIS_BUCKETS,
            ),
            redis_errors: counters(
                "mcp_redis_errors_total",
                "Failed Redis round trips by operation and kind (timeout, connection, other).",
                &["operation", "kind"],
            ),
            redis_reconnects: counters(
                "mcp_redis_reconnects_total",
                "Redis connections restored after they were lost (commands, pubsub), failovers followed to a new primary (failover), Redis Cluster layout changes followed with new connections (layout), and Redis Cluster connections made again after answering nothing (stuck).",
                &["connection"],
            ),
            bus_replayed: counter(
                "mcp_bus_messages_replayed_total",
                "Control messages this node missed while its pub/sub connection was down, replayed from the control log once it was back.",
            ),
            redis_replica_waits: counters(
                "mcp_redis_replica_waits_total",
                "Writes a failover must not lose, by how their wait for replicas (WAIT) ended: replicated, short (fewer replicas in time: the write stands on the primary alone, and writes go unwaited for 5 s), unwaited (sent during such a pause), failed (the wait itself failed: the write is reported failed).",
                &["outcome"],
            ),
            event_log_lost: counter(
                "mcp_event_log_lost_total",
                "Appends refused because the stream no longer held an event the store had acknowledged (a Redis failover that lost the primary's last writes); the request then answers with an error.",
            ),
            redis_primary_known: gauge(
                "mcp_redis_primary_known",
                "1 while this node knows a Redis primary to write to; 0 while the Sentinels name none it can reach.",
            ),
            bus_published: counters(
                "mcp_bus_messages_published_total",
                "Control-bus messages published by this node, by type.",
                &["type"],
            ),
            bus_unsent: counters(
                "mcp_bus_messages_unsent_total",
                "Control-bus messages for the other nodes that this node did not send: it was alone in the cluster, by type.",
                &["type"],
            ),
            bus_received: counters(
                "mcp_bus_messages_received_total",
                "Control-bus messages received by this node, by type.",
                &["type"],
            ),
            bus_dropped: counters(
                "mcp_bus_messages_dropped_total",
                "Control-bus messages lost, by reason (publish_failed, malformed, lagged).",
                &["reason"],
            ),
            heartbeats: counters(
                "mcp_heartbeats_total",
                "Heartbeats of this node by outcome (ok, failed).",
                &["outcome"],
            ),
            dead_nodes_claimed: counter(
                "mcp_dead_nodes_claimed_total",
                "Dead nodes with open streams that this node claimed.",
            ),
            orphans_finalized: counter(
                "mcp_orphaned_requests_finalized_total",
                "Open streams of dead nodes this node finalized (their unanswered requests got -32603).",
            ),
            sessions_swept: counter(
                "mcp_expired_sessions_swept_total",
                "Expired sessions whose streams this node deleted.",
            ),
            client_requests: counters(
                "mcp_server_to_client_requests_total",
                "Requests this node sent to clients (sampling, roots, elicitation), by outcome.",
                &["method", "outcome"],
            ),
            tls_reloads: counters(
                "mcp_tls_certificate_reloads_total",
                "Changed certificate files of the HTTPS listener, by outcome: reloaded (served to new connections), rejected (the previous certificate stays).",
                &["outcome"],
            ),
            drain_phase: gauges(
                "mcp_node_drain_phase",
                "1 for the node's current phase (starting, serving, draining, closed, left), 0 for the others.",
                &["phase"],
            ),
            connections_open: gauge(
                "mcp_connections_open",
                "Connections the main listener holds.",
            ),
            connections_refused: counters(
                "mcp_connections_refused_total",
                "Connections closed at accept, and long-lived streams refused (503) near the connection limit, by reason (node_connection_limit, peer_connection_limit, stream_limit).",
                &["reason"],
            ),
            quota_rejections: counters(
                "mcp_quota_rejections_total",
                "Requests, sessions and streams refused by a quota (HTTP 429), by quota.",
                &["quota"],
            ),
            auth_failures: counters(
                "mcp_auth_failures_total",
                "Requests refused by authorization, by reason (missing, expired, audience, insufficient_scope, unavailable, ...).",
                &["reason"],
            ),
            auth_jwks_fetches: counters(
                "mcp_auth_jwks_fetches_total",
                "Fetches of an issuer's signing keys (metadata discovery included), by outcome: ok, failed.",
                &["outcome"],
            ),
            auth_introspections: counters(
                "mcp_auth_introspections_total",
                "RFC 7662 introspection calls, by outcome: ok, failed.",
                &["outcome"],
            ),
            upstream_spawned: counters(
                "mcp_upstream_children_spawned_total",
                "Child processes of hosted MCP servers started on this node, by upstream.",
                &["upstream"],
            ),
            upstream_running: gauges(
                "mcp_upstream_children_running",
                "Child processes of hosted MCP servers running on this node, by upstream.",
                &["upstream"],
            ),
            upstream_ended: counters(
                "mcp_upstream_children_ended_total",
                "Child processes of hosted MCP servers ended, by upstream and cause (ended: by the node, its session over; exited: by itself, or for breaking a limit).",
                &["upstream", "cause"],
            ),
            upstream_refused: counters(
                "mcp_upstream_children_refused_total",
                "Children not started, by upstream and reason (node_limit, principal_limit, spawn_rate, spawn_failed, initialize_failed).",
                &["upstream", "reason"],
            ),
            upstream_requests: counters(
                "mcp_upstream_requests_total",
                "Client requests relayed to hosted MCP servers, by upstream and method.",
                &["upstream", "mcp_method_name"],
            ),
            upstream_duration: histogram(
                "mcp_upstream_request_duration_seconds",
                "From relaying a client request to a hosted server to its answer, by upstream.",
                &["upstream"],
                DURATION_BUCKETS,
            ),
            upstream_errors: counters(
                "mcp_upstream_relay_errors_total",
                "What the relay could not carry, by upstream and kind (line_too_long, not_jsonrpc, ask_without_request, stderr_dropped, http_failed, http_status).",
                &["upstream", "kind"],
            ),
            upstream_replica_up: gauges(
                "mcp_upstream_replica_up",
                "An HTTP upstream's replica, by upstream and replica (its URL): 1 while it answers, 0 for a while after it could not be reached (new sessions go to the others).",
                &["upstream", "replica"],
            ),
            upstream_replica_failures: counters(
                "mcp_upstream_replica_failures_total",
                "Times an HTTP upstream's replica could not be reached, by upstream and replica (its URL).",
                &["upstream", "replica"],
            ),
            upstream_token_requests: counters(
                "mcp_upstream_token_requests_total",
                "The node's requests for a token of an HTTP upstream's, by upstream, grant (client_credentials, token_exchange) and outcome (ok, refused, unreachable).",
                &["upstream", "grant", "outcome"],
            ),
            upstream_exchanged_tokens: gauges(
                "mcp_upstream_exchanged_tokens",
                "Tokens exchanged for an HTTP upstream's that the node keeps, one per principal and scopes, by upstream (at most its token_exchange.max_principals).",
                &["upstream"],
            ),
            upstream_spawn_duration: histogram(
                "mcp_upstream_spawn_duration_seconds",
                "From starting a hosted server's child to its initialize answer, by upstream.",
                &["upstream"],
                DURATION_BUCKETS,
            ),
            audit_records: counters(
                "mcp_audit_records_total",
                "Audit records written ([audit]), by outcome (ok, tool_error, error, cancelled).",
                &["outcome"],
            ),
            audit_dropped: counter(
                "mcp_audit_records_dropped_total",
                "Audit records dropped because the audit writer's queue was full (the writer is slower than the calls).",
            ),
        };
        for outcome in AUDIT_OUTCOMES {
            m.audit_records.with_label_values(&[outcome]);
        }
        m.register_all();
        m
    }

    #[allow(clippy::unwrap_used)]
    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.operation_duration.clone()),
            Box::new(self.session_duration.clone()),
            Box::new(self.sessions_created.clone()),
            Box::new(self.sessions_rejected.clone()),
            Box::new(self.sessions_rehydrated.clone()),
            Box::new(self.sessions_passivated.clone()),
            Box::new(self.sessions_adopted.clone()),
            Box::new(self.sessions_ended.clone()),
            Box::new(self.sessions_held.clone()),
            Box::new(self.sessions_listened_passivated.clone()),
            Box::new(self.max_sessions.clone()),
            Box::new(self.requests_in_flight.clone()),
            Box::new(self.exchanges_open.clone()),
            Box::new(self.input_rounds_waiting.clone()),
            Box::new(self.http_answers.clone()),
            Box::new(self.http_rejections.clone()),
            Box::new(self.http_duration.clone()),
            Box::new(self.sse_streams_open.clone()),
            Box::new(self.sse_resumptions.clone()),
            Box::new(self.sse_takeovers.clone()),
            Box::new(self.sse_write_stalls.clone()),
            Box::new(self.event_appends.clone()),
            Box::new(self.events_replayed.clone()),
            Box::new(self.event_trims.clone()),
            Box::new(self.retained_bytes.clone()),
            Box::new(self.retention_evictions.clone()),
            Box::new(self.retention_refusals.clone()),
            Box::new(self.redis_duration.clone()),
            Box::new(self.redis_errors.clone()),
            Box::new(self.redis_reconnects.clone()),
            Box::new(self.redis_replica_waits.clone()),
            Box::new(self.bus_replayed.clone()),
            Box::new(self.redis_primary_known.clone()),
            Box::new(self.event_log_lost.clone()),
            Box::new(self.bus_published.clone()),
            Box::new(self.bus_unsent.clone()),
            Box::new(self.bus_received.clone()),
            Box::new(self.bus_dropped.clone()),
            Box::new(self.heartbeats.clone()),
            Box::new(self.dead_nodes_claimed.clone()),
            Box::new(self.orphans_finalized.clone()),
            Box::new(self.sessions_swept.clone()),
            Box::new(self.client_requests.clone()),
            Box::new(self.tls_reloads.clone()),
            Box::new(self.drain_phase.clone()),
            Box::new(self.connections_open.clone()),
            Box::new(self.connections_refused.clone()),
            Box::new(self.quota_rejections.clone()),
            Box::new(self.auth_failures.clone()),
            Box::new(self.auth_jwks_fetches.clone()),
            Box::new(self.auth_introspections.clone()),
            Box::new(self.upstream_spawned.clone()),
            Box::new(self.upstream_running.clone()),
            Box::new(self.upstream_ended.clone()),
            Box::new(self.upstream_refused.clone()),
            Box::new(self.upstream_requests.clone()),
            Box::new(self.upstream_duration.clone()),
            Box::new(self.upstream_errors.clone()),
            Box::new(self.upstream_spawn_duration.clone()),
            Box::new(self.upstream_replica_up.clone()),
            Box::new(self.upstream_replica_failures.clone()),
            Box::new(self.upstream_token_requests.clone()),
            Box::new(self.upstream_exchanged_tokens.clone()),
            Box::new(self.audit_records.clone()),
            Box::new(self.audit_dropped.clone()),
        ];
        for c in collectors {
            self.registry.register(c).unwrap();
        }
        let info = gauges(
            "mcp_build_info",
            "Always 1; the labels name the running build.",
            &["version"],
        );
        info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        self.registry.register(Box::new(info)).unwrap();
        #[cfg(target_os = "linux")]
        self.registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .unwrap();
        // Series that exist from the start, so that rates and alerts see a
        // zero rather than nothing.
        for phase in DRAIN_PHASES {
            self.drain_phase.with_label_values(&[phase]).set(0);
        }
        for kind in SSE_STREAM_KINDS {
            self.sse_streams_open.with_label_values(&[kind]).set(0);
        }
        // Every label value of counters known in advance, at zero: a series
        // that first appears at 1 shows no increase() for its first event.
        let zero = |vec: &IntCounterVec, values: &[&str]| {
            for value in values {
                vec.with_label_values(&[value]);
            }
        };
        for kind in ["closed_streams", "finished_tasks", "in_flight"] {
            self.retained_bytes.with_label_values(&[kind]).set(0);
        }
        zero(&self.retention_evictions, &["stream", "task"]);
        zero(&self.sse_write_stalls, SSE_STREAM_KINDS);
        zero(
            &self.retention_refusals,
            &["task_answer", "task_result", "node_budget"],
        );
        zero(
            &self.sse_resumptions,
            &["ok", "other_node", "gap", "unknown", "failed"],
        );
        zero(
            &self.sessions_rejected,
            &[
                "too_many_sessions",
                "shutting_down",
                "store_unavailable",
                "initialize_failed",
                "upstream_busy",
                "quota",
                "other",
            ],
        );
        zero(
            &self.sessions_ended,
            &[
                "deleted",
                "disconnected",
                "expired",
                "upstream_exited",
                "host_lost",
            ],
        );
        zero(
            &self.sessions_created,
            &["streamable_http", "legacy_sse", "stdio"],
        );
        zero(
            &self.redis_reconnects,
            &["commands", "pubsub", "failover", "layout", "stuck"],
        );
        zero(
            &self.redis_replica_waits,
            &["replicated", "short", "unwaited", "failed"],
        );
        zero(&self.quota_rejections, QUOTAS);
        zero(&self.bus_published, BUS_MESSAGE_TYPES);
        zero(&self.bus_unsent, BUS_MESSAGE_TYPES);
        zero(&self.bus_received, BUS_MESSAGE_TYPES);
        zero(
            &self.bus_dropped,
            &["publish_failed", "malformed", "lagged"],
        );
        zero(
            &self.connections_refused,
            &[
                "node_connection_limit",
                "peer_connection_limit",
                "stream_limit",
            ],
        );
        zero(
            &self.http_rejections,
            &[
                "forbidden_origin",
                "forbidden_host",
                "unsupported_media_type",
                "not_acceptable",
                "unsupported_version",
                "payload_too_large",
                "body_read",
                "body_timeout",
                "malformed_message",
                "missing_session",
                "malformed_session",
                "session_not_found",
                "invalid_request",
                "header_mismatch",
                "bad_last_event_id",
                "method_not_allowed",
                "unavailable",
                "unauthorized",
                "insufficient_scope",
                "auth_unavailable",
                "auth_throttled",
                "quota_exceeded",
                "upstream_busy",
                "method_not_found",
                "missing_capability",
            ],
        );
        zero(&self.auth_failures, AUTH_FAILURE_REASONS);
        zero(&self.auth_jwks_fetches, &["ok", "failed"]);
        zero(&self.auth_introspections, &["ok", "failed"]);
        for method in ["sampling/createMessage", "roots/list", "elicitation/create"] {
            for outcome in [
                "answered",
                "rejected",
                "timeout",
                "cancelled",
                "unavailable",
                "input_required",
            ] {
                self.client_requests.with_label_values(&[method, outcome]);
            }
        }
        for kind in ["json", "sse", "accepted"] {
            self.http_answers.with_label_values(&[kind]);
        }
        for outcome in ["ok", "failed"] {
            self.heartbeats.with_label_values(&[outcome]);
        }
        zero(&self.tls_reloads, &["reloaded", "rejected"]);
    }

    /// Sets the state gauges, then renders every metric in the Prometheus
    /// text exposition format (version 0.0.4).
    pub fn render(&self, gauges: NodeGauges) -> String {
        self.sessions_held.set(clamp(gauges.sessions_held));
        self.sessions_listened_passivated
            .set(clamp(gauges.sessions_listened_passivated));
        self.max_sessions.set(clamp(gauges.max_sessions));
        self.requests_in_flight
            .set(clamp(gauges.requests_in_flight));
        self.exchanges_open.set(clamp(gauges.exchanges_open));
        for (i, phase) in DRAIN_PHASES.iter().enumerate() {
            self.drain_phase
                .with_label_values(&[phase])
                .set(i64::from(i == gauges.drain_phase));
        }
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// The operation histogram for one set of labels.
    pub fn operation(&self, labels: &OperationLabels<'_>) -> Histogram {
        self.operation_duration.with_label_values(&[
            labels.method,
            labels.tool,
            labels.prompt,
            labels.error_type,
            labels.protocol_version,
            labels.transport,
        ])
    }
}

/// Labels of `mcp_server_operation_duration_seconds` (empty: not set).
#[derive(Debug, Clone, Copy, Default)]
pub struct OperationLabels<'a> {
    /// `mcp_method_name`: a known method or [`OTHER`].
    pub method: &'a str,
    /// `gen_ai_tool_name`: for `tools/call`, a tool the server has or [`OTHER`].
    pub tool: &'a str,
    /// `gen_ai_prompt_name`: for `prompts/get`, a prompt the server has or [`OTHER`].
    pub prompt: &'a str,
    /// `error_type`: the JSON-RPC error code, `tool_error`, `cancelled`, or empty.
    pub error_type: &'a str,
    /// `mcp_protocol_version`.
    pub protocol_version: &'a str,
    /// `network_transport`: `tcp` or `pipe`.
    pub transport: &'a str,
}

fn clamp(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The node's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_and_renders() {
        let m = metrics();
        m.operation(&OperationLabels {
            method: "tools/call",
            tool: "echo",
            transport: "tcp",
            protocol_version: "2025-11-25",
            ..OperationLabels::default()
        })
        .observe(0.0003);
        let text = m.render(NodeGauges {
            sessions_held: 3,
            sessions_listened_passivated: 2,
            drain_phase: 1,
            ..NodeGauges::default()
        });
        for name in [
            "mcp_server_operation_duration_seconds_bucket",
            "mcp_sessions_held 3",
            "mcp_sessions_listened_passivated 2",
            "mcp_node_drain_phase{phase=\"draining\"} 1",
            "mcp_node_drain_phase{phase=\"serving\"} 0",
            "mcp_build_info{version=",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(text.contains("le=\"0.00025\""), "sub-millisecond buckets");
    }

    #[test]
    fn the_operations_guide_describes_every_metric() {
        let guide = include_str!("../../../proto-docs/operations.md");
        // Every metric name this file registers: the first argument of
        // the constructors, a quoted `mcp_…` or `http_server_…` literal.
        let source = include_str!("metrics.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let names: Vec<&str> = source
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|lit| {
                (lit.starts_with("mcp_") || lit.starts_with("http_server_"))
                    && lit.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    && !lit.ends_with('_')
            })
            .filter(|lit| {
                !matches!(
                    *lit,
                    "mcp_method_name" | "mcp_protocol_version" | "mcp_access"
                )
            })
            .collect();
        assert!(names.len() > 30, "{names:?}");
        for name in names {
            assert!(
                guide.contains(&format!("`{name}`")),
                "proto-docs/operations.md does not describe {name}"
            );
        }
    }
}
