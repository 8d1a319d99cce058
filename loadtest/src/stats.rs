//! Shared counters and latency histograms, written by every virtual session
//! and read by the live progress line and the final report.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::scenario::OpKind;

/// Highest latency the histograms track exactly (longer ones saturate).
const MAX_TRACKED_LATENCY_US: u64 = 3_600_000_000;
/// Significant figures kept by the histograms.
const HISTOGRAM_SIGFIGS: u8 = 3;

/// Why an operation failed; the report counts each under [`ErrorKind::key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// An HTTP status other than the expected one.
    HttpStatus(u16),
    /// A JSON-RPC error response.
    JsonRpc(i64),
    /// The operation outlived its time bound.
    Timeout,
    /// Connecting, sending or reading failed.
    Transport,
    /// The tool answered with `isError: true`.
    ToolError,
    /// The server broke a protocol rule.
    Protocol(&'static str),
}

impl ErrorKind {
    /// The report key: `http_status:503`, `jsonrpc:-32600`, `timeout`, ...
    pub(crate) fn key(&self) -> String {
        match self {
            ErrorKind::HttpStatus(code) => format!("http_status:{code}"),
            ErrorKind::JsonRpc(code) => format!("jsonrpc:{code}"),
            ErrorKind::Timeout => "timeout".to_owned(),
            ErrorKind::Transport => "transport".to_owned(),
            ErrorKind::ToolError => "tool_error".to_owned(),
            ErrorKind::Protocol(name) => (*name).to_owned(),
        }
    }
}

/// Counters of one operation kind.
#[derive(Debug)]
struct OpStats {
    ok: AtomicU64,
    failed: AtomicU64,
    /// Latency of successful operations, microseconds. Locked only to
    /// record or read one value (never across `.await`).
    latency_us: Mutex<Histogram<u64>>,
}

/// Everything the run measures. Shared by reference (`Arc`) with every
/// session; dropped after the report is written.
#[derive(Debug)]
pub(crate) struct Stats {
    ops: Vec<OpStats>,
    /// Error counts by key; errors are rare, so one lock is enough.
    errors: Mutex<BTreeMap<String, u64>>,
    violations: AtomicU64,
    /// Sessions between their first initialize and their end.
    pub(crate) active_sessions: AtomicU64,
}

impl Stats {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let mut ops = Vec::with_capacity(OpKind::ALL.len());
        for _ in OpKind::ALL {
            ops.push(OpStats {
                ok: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                latency_us: Mutex::new(Histogram::new_with_bounds(
                    1,
                    MAX_TRACKED_LATENCY_US,
                    HISTOGRAM_SIGFIGS,
                )?),
            });
        }
        Ok(Self {
            ops,
            errors: Mutex::new(BTreeMap::new()),
            violations: AtomicU64::new(0),
            active_sessions: AtomicU64::new(0),
        })
    }

    /// A successful operation and its latency.
    pub(crate) fn ok(&self, kind: OpKind, latency: Duration) {
        let op = &self.ops[kind.index()];
        op.ok.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        if let Ok(mut hist) = op.latency_us.lock() {
            hist.saturating_record(us.max(1));
        }
    }

    /// A failed operation.
    pub(crate) fn failed(&self, kind: OpKind, error: &ErrorKind) {
        self.ops[kind.index()]
            .failed
            .fetch_add(1, Ordering::Relaxed);
        self.error(error);
    }

    /// An error outside any measured operation (the final DELETE).
    pub(crate) fn error(&self, error: &ErrorKind) {
        if matches!(error, ErrorKind::Protocol(_)) {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut errors) = self.errors.lock() {
            *errors.entry(error.key()).or_default() += 1;
        }
    }

    /// (operations done, operations failed, protocol violations) so far.
    pub(crate) fn totals(&self) -> (u64, u64, u64) {
        let ok = self.ops.iter().map(|o| o.ok.load(Ordering::Relaxed)).sum();
        let failed = self
            .ops
            .iter()
            .map(|o| o.failed.load(Ordering::Relaxed))
            .sum();
        (ok, failed, self.violations.load(Ordering::Relaxed))
    }

    /// Per-kind results, kinds that never ran left out.
    pub(crate) fn operations(&self, elapsed: Duration) -> BTreeMap<&'static str, OpReport> {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut out = BTreeMap::new();
        for kind in OpKind::ALL {
            let op = &self.ops[kind.index()];
            let ok = op.ok.load(Ordering::Relaxed);
            let failed = op.failed.load(Ordering::Relaxed);
            if ok + failed == 0 {
                continue;
            }
            let Ok(hist) = op.latency_us.lock() else {
                continue;
            };
            let ms = |us: u64| us as f64 / 1000.0;
            out.insert(
                kind.name(),
                OpReport {
                    ok,
                    failed,
                    per_sec: ok as f64 / secs,
                    p50_ms: ms(hist.value_at_quantile(0.50)),
                    p90_ms: ms(hist.value_at_quantile(0.90)),
                    p99_ms: ms(hist.value_at_quantile(0.99)),
                    max_ms: ms(hist.max()),
                    mean_ms: hist.mean() / 1000.0,
                },
            );
        }
        out
    }

    /// Error counts by key.
    pub(crate) fn errors(&self) -> BTreeMap<String, u64> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// One operation kind in the report.
#[derive(Debug, Serialize)]
pub(crate) struct OpReport {
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    /// Successful operations per second of the whole run.
    pub(crate) per_sec: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) mean_ms: f64,
}
