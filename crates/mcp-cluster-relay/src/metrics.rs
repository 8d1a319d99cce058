//! The relay's side of the node's metrics (`mcp_upstream_*`, catalogued in
//! `mcp-cluster-telemetry`). Every `upstream` label is a configured name:
//! a bounded set.

use std::time::Duration;

use mcp_cluster_telemetry::metrics::{OTHER, metrics};

/// The methods a client sends that get a label of their own; the rest are
/// [`OTHER`] (a client chooses method names, and labels must stay few).
const METHODS: &[&str] = &[
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "initialize",
];

/// Every label value of `upstream`'s metrics, at 0 until counted.
pub(crate) fn register(upstream: &str) {
    let m = metrics();
    m.upstream_spawned.with_label_values(&[upstream]);
    m.upstream_running.with_label_values(&[upstream]).set(0);
    for cause in mcp_cluster_telemetry::metrics::UPSTREAM_END_CAUSES {
        m.upstream_ended.with_label_values(&[upstream, cause]);
    }
    for reason in REFUSALS {
        m.upstream_refused.with_label_values(&[upstream, reason]);
    }
    for kind in ERRORS {
        m.upstream_errors.with_label_values(&[upstream, kind]);
    }
}

/// Every `reason` of `mcp_upstream_children_refused_total`.
const REFUSALS: &[&str] = &[
    "node_limit",
    "principal_limit",
    "spawn_rate",
    "spawn_failed",
    "initialize_failed",
];

/// Every `kind` of `mcp_upstream_relay_errors_total`.
const ERRORS: &[&str] = &[
    "line_too_long",
    "not_jsonrpc",
    "ask_without_request",
    "stderr_dropped",
    "http_failed",
    "http_status",
];

/// A request of the node's for a token of `upstream`'s, by `grant`
/// (`client_credentials`, `token_exchange`): `ok`, `refused` or
/// `unreachable`.
pub(crate) fn token_request(upstream: &str, grant: &str, outcome: &str) {
    metrics()
        .upstream_token_requests
        .with_label_values(&[upstream, grant, outcome])
        .inc();
}

/// Principals whose exchanged token of `upstream`'s the node keeps.
pub(crate) fn exchanged_tokens(upstream: &str, held: usize) {
    metrics()
        .upstream_exchanged_tokens
        .with_label_values(&[upstream])
        .set(i64::try_from(held).unwrap_or(i64::MAX));
}

/// Every label value of `upstream`'s token metrics for `grant`, at 0.
pub(crate) fn register_grant(upstream: &str, grant: &str) {
    for outcome in ["ok", "refused", "unreachable"] {
        metrics()
            .upstream_token_requests
            .with_label_values(&[upstream, grant, outcome]);
    }
    if grant == "token_exchange" {
        exchanged_tokens(upstream, 0);
    }
}

/// An HTTP upstream's `replica`: up (answering) or not.
pub(crate) fn replica_up(upstream: &str, replica: &str, up: bool) {
    metrics()
        .upstream_replica_up
        .with_label_values(&[upstream, replica])
        .set(i64::from(up));
}

/// An HTTP upstream's `replica` could not be reached.
pub(crate) fn replica_failed(upstream: &str, replica: &str) {
    metrics()
        .upstream_replica_failures
        .with_label_values(&[upstream, replica])
        .inc();
    replica_up(upstream, replica, false);
}

pub(crate) fn spawned(upstream: &str) {
    let m = metrics();
    m.upstream_spawned.with_label_values(&[upstream]).inc();
    m.upstream_running.with_label_values(&[upstream]).inc();
}

/// A session of the upstream taken over from a gone node: running here
/// now, opened elsewhere.
pub(crate) fn rejoined(upstream: &str) {
    metrics()
        .upstream_running
        .with_label_values(&[upstream])
        .inc();
}

pub(crate) fn ended(upstream: &str, cause: &str) {
    let m = metrics();
    m.upstream_ended.with_label_values(&[upstream, cause]).inc();
    m.upstream_running.with_label_values(&[upstream]).dec();
}

pub(crate) fn refused(upstream: &str, reason: &str) {
    metrics()
        .upstream_refused
        .with_label_values(&[upstream, reason])
        .inc();
}

pub(crate) fn request(upstream: &str, method: &str) {
    let method = METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or(OTHER);
    metrics()
        .upstream_requests
        .with_label_values(&[upstream, method])
        .inc();
}

pub(crate) fn answered(upstream: &str, took: Duration) {
    metrics()
        .upstream_duration
        .with_label_values(&[upstream])
        .observe(took.as_secs_f64());
}

pub(crate) fn started(upstream: &str, took: Duration) {
    metrics()
        .upstream_spawn_duration
        .with_label_values(&[upstream])
        .observe(took.as_secs_f64());
}

pub(crate) fn relay_error(upstream: &str, kind: &str) {
    metrics()
        .upstream_errors
        .with_label_values(&[upstream, kind])
        .inc();
}

pub(crate) fn stderr_dropped(upstream: &str) {
    relay_error(upstream, "stderr_dropped");
}
