//! Shared counters and latency histograms, written by every virtual session
//! and read by the live progress line and the final report.
//!
//! Besides the whole-run figures, every counter also feeds a current interval
//! that the sampler (`series.rs`) swaps out each tick with
//! [`Stats::take_interval`]; turning an interval into a point of the time
//! series is the sampler's job.

use std::collections::BTreeMap;
use std::mem;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::failures::{ErrorWindow, Retry, now_unix_ms};
use crate::scenario::OpId;

/// Highest latency the histograms track exactly (longer ones saturate).
const MAX_TRACKED_LATENCY_US: u64 = 3_600_000_000;
/// Significant figures kept by the histograms.
const HISTOGRAM_SIGFIGS: u8 = 3;

/// Why an operation failed; the report counts each under [`ErrorKind::key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// An HTTP status other than the expected one, and not a [`Refusal`].
    HttpStatus(u16),
    /// The server refused the request for who sent it or how often.
    Refused(Refusal),
    /// A 429 or 503 answer that said when to retry (`Retry-After`):
    /// counted under the same key as the status without it
    /// ([`ErrorKind::status`]), and as `said` in the report's `retry`.
    RetryAfter(u16),
    /// A JSON-RPC error response.
    JsonRpc(i64),
    /// The operation outlived its time bound.
    Timeout,
    /// Connecting, sending or reading failed: what failed, with its causes
    /// (the first one of a run is kept as the `transport` sample).
    Transport(String),
    /// The tool answered with `isError: true`.
    ToolError,
    /// The server broke a protocol rule.
    Protocol(&'static str),
    /// The answer failed one of the scenario's checks (`check:equals`,
    /// `check:latency`, ...).
    Check(&'static str),
    /// Every answer was well-formed, but the operation did not get what it
    /// was for: a task that ended `failed` or `cancelled` (`task:failed`,
    /// `task:cancelled`),
    /// no resource update after subscribing (`subscribe:no_update`), a
    /// standalone stream that ended and could not be resumed
    /// (`subscribe:stream_ended`).
    NotDone(&'static str),
    /// The `--server-pid` process could no longer be read (it exited); counted
    /// once, after which the run goes on without RSS samples.
    ServerRssLost,
}

impl ErrorKind {
    /// The failure an HTTP status other than the expected one stands for:
    /// 401, 403 and 429 are [`Refusal`]s, counted apart; others are
    /// [`ErrorKind::HttpStatus`].
    pub(crate) fn status(code: u16) -> Self {
        match Refusal::ALL.into_iter().find(|r| r.status() == code) {
            Some(refusal) => ErrorKind::Refused(refusal),
            None => ErrorKind::HttpStatus(code),
        }
    }

    /// The failure an HTTP answer of status `code` with `headers` stands
    /// for: as [`ErrorKind::status`], but a 429 or 503 that carries a
    /// `Retry-After` header is [`ErrorKind::RetryAfter`] (RFC 9110 10.2.3:
    /// how long the client ought to wait before its next request).
    pub(crate) fn answer(code: u16, headers: &HeaderMap) -> Self {
        let says_when = headers
            .get(RETRY_AFTER)
            .is_some_and(|value| !value.as_bytes().trim_ascii().is_empty());
        if says_when && RETRY_AFTER_STATUSES.contains(&code) {
            ErrorKind::RetryAfter(code)
        } else {
            ErrorKind::status(code)
        }
    }

    /// A transport failure: `err` and every cause under it, as one line
    /// (`error sending request ...: tcp connect error: Connection refused`).
    pub(crate) fn transport(err: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = err.to_string();
        let mut cause = err.source();
        while let Some(err) = cause {
            text.push_str(": ");
            text.push_str(&err.to_string());
            cause = err.source();
        }
        ErrorKind::Transport(text)
    }

    /// Whether the failure told the client when to retry.
    pub(crate) fn retry_said(&self) -> bool {
        matches!(self, ErrorKind::RetryAfter(_))
    }

    /// The report key: `http_status:503`, `refused:401_unauthorized`,
    /// `jsonrpc:-32600`, `timeout`, ...
    pub(crate) fn key(&self) -> String {
        match self {
            ErrorKind::HttpStatus(code) => format!("http_status:{code}"),
            ErrorKind::Refused(refusal) => refusal.key().to_owned(),
            ErrorKind::RetryAfter(code) => ErrorKind::status(*code).key(),
            ErrorKind::JsonRpc(code) => format!("jsonrpc:{code}"),
            ErrorKind::Timeout => "timeout".to_owned(),
            ErrorKind::Transport(_) => "transport".to_owned(),
            ErrorKind::ToolError => "tool_error".to_owned(),
            ErrorKind::Protocol(name) | ErrorKind::Check(name) | ErrorKind::NotDone(name) => {
                (*name).to_owned()
            }
            ErrorKind::ServerRssLost => "server_rss_lost".to_owned(),
        }
    }
}

/// An HTTP answer that refuses the request for who sent it or how often,
/// rather than for what it asked: a deployment's authorization or rate
/// limits at work. Counted apart from other statuses (a run against a
/// protected server shows at once whether its credentials or its rate were
/// the problem), and always as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 401: no credentials, or ones the server does not accept.
    Unauthorized,
    /// 403: credentials accepted, but not enough (a missing scope), or an
    /// Origin or Host the server refuses.
    Forbidden,
    /// 429: over a rate limit or quota.
    TooManyRequests,
}

impl Refusal {
    /// Every refusal, in status order.
    pub(crate) const ALL: [Refusal; 3] = [
        Refusal::Unauthorized,
        Refusal::Forbidden,
        Refusal::TooManyRequests,
    ];

    /// Its HTTP status.
    pub(crate) fn status(self) -> u16 {
        match self {
            Refusal::Unauthorized => 401,
            Refusal::Forbidden => 403,
            Refusal::TooManyRequests => 429,
        }
    }

    /// The error key in the report.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Refusal::Unauthorized => "refused:401_unauthorized",
            Refusal::Forbidden => "refused:403_forbidden",
            Refusal::TooManyRequests => "refused:429_too_many_requests",
        }
    }
}

/// The statuses whose `Retry-After` counts as saying when to retry: 429
/// Too Many Requests and 503 Service Unavailable (RFC 9110 10.2.3, RFC 6585
/// 4; a 3xx's `Retry-After` is about redirects).
const RETRY_AFTER_STATUSES: [u16; 2] = [429, 503];

/// Most failure samples kept (one per error key).
const MAX_SAMPLES: usize = 32;
/// Longest failure sample, in characters.
const MAX_SAMPLE_CHARS: usize = 600;

/// Counters of one operation (a row of the report).
#[derive(Debug)]
struct OpStats {
    /// Whole-run totals, also read by the live line without a lock.
    ok: AtomicU64,
    failed: AtomicU64,
    /// Locked only to record or read one operation (never across `.await`);
    /// one lock covers both the whole-run and the interval figures.
    latency: Mutex<OpLatency>,
}

/// Latencies of one operation, whole run and current interval.
#[derive(Debug)]
struct OpLatency {
    /// Latency of successful operations over the whole run, microseconds.
    total_us: Histogram<u64>,
    /// The same since the sampler's last tick; swapped out by `take_interval`.
    interval_us: Histogram<u64>,
    interval_ok: u64,
    interval_failed: u64,
}

/// Error counts by key, whole run and current interval, with when they
/// happened and whether they said when to retry.
#[derive(Debug, Default)]
struct ErrorCounts {
    total: BTreeMap<String, u64>,
    /// Since the sampler's last tick; taken by `take_interval`. Keys come from
    /// [`ErrorKind::key`], a small set, so the map stays small.
    interval: BTreeMap<String, u64>,
    /// The first and last of each key, wall clock (same keys as `total`).
    window: ErrorWindow,
    /// Said when to retry or not, per key (same keys as `total`).
    retry: Retry,
}

/// One interval's raw figures, swapped out of [`Stats`] by the sampler. The
/// sampler keeps one and hands it back each tick, so the hot path never
/// allocates a histogram.
#[derive(Debug)]
pub(crate) struct IntervalCounts {
    /// Indexed by [`OpId`].
    pub(crate) ops: Vec<IntervalOpCounts>,
    pub(crate) errors: BTreeMap<String, u64>,
}

/// One operation within one interval.
#[derive(Debug)]
pub(crate) struct IntervalOpCounts {
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    /// Latency of the successful operations, microseconds.
    pub(crate) latency_us: Histogram<u64>,
}

impl IntervalCounts {
    /// Empty figures for every kind.
    ///
    /// # Errors
    /// The histogram bounds are rejected (they are constants, so never).
    pub(crate) fn new(operations: usize) -> anyhow::Result<Self> {
        let mut ops = Vec::with_capacity(operations);
        for _ in 0..operations {
            ops.push(IntervalOpCounts {
                ok: 0,
                failed: 0,
                latency_us: latency_histogram()?,
            });
        }
        Ok(Self {
            ops,
            errors: BTreeMap::new(),
        })
    }

    /// Empties the figures for reuse, keeping the histograms' memory.
    pub(crate) fn clear(&mut self) {
        for op in &mut self.ops {
            op.ok = 0;
            op.failed = 0;
            op.latency_us.reset();
        }
        self.errors.clear();
    }
}

/// A latency histogram with the bounds every histogram here shares, so that
/// they can be added together.
///
/// # Errors
/// The bounds are rejected (they are constants, so never).
pub(crate) fn latency_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(
        1,
        MAX_TRACKED_LATENCY_US,
        HISTOGRAM_SIGFIGS,
    )?)
}

/// Everything the run measures. Shared by reference (`Arc`) with every
/// session; dropped after the report is written.
#[derive(Debug)]
pub(crate) struct Stats {
    /// The report's rows ([`crate::scenario::Scenario::names`]).
    names: Vec<String>,
    /// Indexed by [`OpId`].
    ops: Vec<OpStats>,
    /// Errors are rare, so one lock is enough.
    errors: Mutex<ErrorCounts>,
    violations: AtomicU64,
    /// The first answer that failed each check (`check:*`, `tool_error`),
    /// cut to [`MAX_SAMPLE_CHARS`]: what the server said, for the report.
    samples: Mutex<BTreeMap<String, String>>,
    /// Sessions between their first initialize and their end.
    pub(crate) active_sessions: AtomicU64,
    /// The open model's arrivals so far, and those dropped.
    pub(crate) arrivals: AtomicU64,
    pub(crate) dropped_arrivals: AtomicU64,
    /// Calls asked for as tasks that the server answered at once (it may:
    /// whether to make a task is the server's choice, request by request),
    /// counted as successes when the answer passed every check.
    pub(crate) tasks_answered_at_once: AtomicU64,
}

impl Stats {
    /// Figures for the operations `names` (`initialize` first).
    pub(crate) fn new(names: &[String]) -> anyhow::Result<Self> {
        let mut ops = Vec::with_capacity(names.len());
        for _ in names {
            ops.push(OpStats {
                ok: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                latency: Mutex::new(OpLatency {
                    total_us: latency_histogram()?,
                    interval_us: latency_histogram()?,
                    interval_ok: 0,
                    interval_failed: 0,
                }),
            });
        }
        Ok(Self {
            names: names.to_vec(),
            ops,
            errors: Mutex::new(ErrorCounts::default()),
            violations: AtomicU64::new(0),
            samples: Mutex::new(BTreeMap::new()),
            active_sessions: AtomicU64::new(0),
            arrivals: AtomicU64::new(0),
            dropped_arrivals: AtomicU64::new(0),
            tasks_answered_at_once: AtomicU64::new(0),
        })
    }

    /// A successful operation and its latency.
    pub(crate) fn ok(&self, id: OpId, latency: Duration) {
        let op = &self.ops[id.0];
        op.ok.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        if let Ok(mut latency) = op.latency.lock() {
            latency.total_us.saturating_record(us);
            latency.interval_us.saturating_record(us);
            latency.interval_ok += 1;
        }
    }

    /// A failed operation, begun at `started`.
    pub(crate) fn failed(&self, id: OpId, error: &ErrorKind, started: Instant) {
        let op = &self.ops[id.0];
        op.failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut latency) = op.latency.lock() {
            latency.interval_failed += 1;
        }
        self.counted(&self.names[id.0], error, started);
    }

    /// An error outside any measured operation (the final DELETE).
    pub(crate) fn error(&self, error: &ErrorKind) {
        self.counted("outside any operation", error, Instant::now());
    }

    /// Counts `error` of `operation`, begun at `started`.
    fn counted(&self, operation: &str, error: &ErrorKind, started: Instant) {
        match error {
            ErrorKind::Protocol(_) => {
                self.violations.fetch_add(1, Ordering::Relaxed);
            }
            // Nothing was answered to show: the cause is the sample.
            ErrorKind::Transport(cause) => {
                self.sample(operation, error, &cause.as_str().into());
            }
            _ => {}
        }
        let at = now_unix_ms();
        let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Ok(mut errors) = self.errors.lock() {
            let key = error.key();
            errors.window.record(&key, at, at.saturating_sub(took));
            errors.retry.record(&key, error.retry_said());
            *errors.interval.entry(key.clone()).or_default() += 1;
            *errors.total.entry(key).or_default() += 1;
        }
    }

    /// Keeps `answer` as the sample of `error` if it is the first of its
    /// key (and there is room).
    pub(crate) fn sample(&self, operation: &str, error: &ErrorKind, answer: &serde_json::Value) {
        let Ok(mut samples) = self.samples.lock() else {
            return;
        };
        let key = error.key();
        if samples.len() >= MAX_SAMPLES || samples.contains_key(&key) {
            return;
        }
        let mut text = format!("{operation}: {answer}");
        if let Some((cut, _)) = text.char_indices().nth(MAX_SAMPLE_CHARS) {
            text.truncate(cut);
            text.push_str("...");
        }
        samples.insert(key, text);
    }

    /// The failure samples by error key.
    pub(crate) fn samples(&self) -> BTreeMap<String, String> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Swaps the current interval's figures into `into` and starts a new
    /// interval; `into` must have been [cleared](IntervalCounts::clear).
    /// Each kind is swapped under its own lock, so an operation lands wholly
    /// in one interval or the next, never half in each.
    pub(crate) fn take_interval(&self, into: &mut IntervalCounts) {
        for (op, out) in self.ops.iter().zip(&mut into.ops) {
            if let Ok(mut latency) = op.latency.lock() {
                mem::swap(&mut latency.interval_us, &mut out.latency_us);
                out.ok = mem::take(&mut latency.interval_ok);
                out.failed = mem::take(&mut latency.interval_failed);
            }
        }
        if let Ok(mut errors) = self.errors.lock() {
            mem::swap(&mut errors.interval, &mut into.errors);
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

    /// The report's rows, [`OpId`] order.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// (ok, failed, latency of the successes) of each operation, in
    /// [`OpId`] order: copies, taken one operation at a time.
    pub(crate) fn figures(&self) -> Vec<(u64, u64, Histogram<u64>)> {
        self.ops
            .iter()
            .map(|op| {
                let ok = op.ok.load(Ordering::Relaxed);
                let failed = op.failed.load(Ordering::Relaxed);
                let hist = op
                    .latency
                    .lock()
                    .map(|l| l.total_us.clone())
                    .unwrap_or_else(|poisoned| poisoned.into_inner().total_us.clone());
                (ok, failed, hist)
            })
            .collect()
    }

    /// Error counts by key.
    pub(crate) fn errors(&self) -> BTreeMap<String, u64> {
        self.errors
            .lock()
            .map(|e| e.total.clone())
            .unwrap_or_default()
    }

    /// When the errors were counted, overall and by key.
    pub(crate) fn error_window(&self) -> ErrorWindow {
        self.errors
            .lock()
            .map(|e| e.window.clone())
            .unwrap_or_default()
    }

    /// The errors that said when to retry, and those that did not, by key.
    pub(crate) fn retry(&self) -> Retry {
        self.errors
            .lock()
            .map(|e| e.retry.clone())
            .unwrap_or_default()
    }
}

/// One operation in the report.
#[derive(Debug, Serialize, Deserialize)]
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

impl OpReport {
    /// The figures of `ok` successes with latencies `hist` (microseconds)
    /// and `failed` failures over `secs` seconds.
    pub(crate) fn of(ok: u64, failed: u64, hist: &Histogram<u64>, secs: f64) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            ok,
            failed,
            per_sec: ok as f64 / secs.max(1e-9),
            p50_ms: ms(hist.value_at_quantile(0.50)),
            p90_ms: ms(hist.value_at_quantile(0.90)),
            p99_ms: ms(hist.value_at_quantile(0.99)),
            max_ms: ms(hist.max()),
            mean_ms: hist.mean() / 1000.0,
        }
    }
}

/// A latency histogram as text for the JSON report: HdrHistogram's V2
/// deflated encoding, in base64 (what other HdrHistogram tools read).
///
/// # Errors
/// Encoding failed (it does not for histograms made here).
pub(crate) fn encode_histogram(hist: &Histogram<u64>) -> anyhow::Result<String> {
    use base64::Engine;
    use hdrhistogram::serialization::Serializer;
    let mut bytes = Vec::new();
    hdrhistogram::serialization::V2DeflateSerializer::new()
        .serialize(hist, &mut bytes)
        .map_err(|err| anyhow::anyhow!("encoding a histogram: {err:?}"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The histogram of [`encode_histogram`]'s text.
///
/// # Errors
/// Not base64, or not an HdrHistogram encoding.
pub(crate) fn decode_histogram(text: &str) -> anyhow::Result<Histogram<u64>> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .context("a histogram that is not base64")?;
    let hist: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|err| anyhow::anyhow!("a histogram that does not decode: {err:?}"))?;
    // Re-bounded like every histogram here, so that they add up.
    let mut out = latency_histogram()?;
    out.add(&hist)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::INITIALIZE;

    #[test]
    fn refusals_are_counted_apart_and_as_failures() {
        assert_eq!(
            ErrorKind::status(401),
            ErrorKind::Refused(Refusal::Unauthorized)
        );
        assert_eq!(
            ErrorKind::status(403),
            ErrorKind::Refused(Refusal::Forbidden)
        );
        assert_eq!(
            ErrorKind::status(429),
            ErrorKind::Refused(Refusal::TooManyRequests)
        );
        assert_eq!(ErrorKind::status(503), ErrorKind::HttpStatus(503));
        assert_eq!(ErrorKind::status(401).key(), "refused:401_unauthorized");
        assert_eq!(ErrorKind::status(403).key(), "refused:403_forbidden");
        assert_eq!(
            ErrorKind::status(429).key(),
            "refused:429_too_many_requests"
        );
        assert_eq!(ErrorKind::status(404).key(), "http_status:404");

        let stats = Stats::new(&["initialize".to_owned()]).unwrap();
        for code in [401, 401, 403, 429] {
            stats.failed(INITIALIZE, &ErrorKind::status(code), Instant::now());
        }
        let (ok, failed, violations) = stats.totals();
        assert_eq!((ok, failed, violations), (0, 4, 0));
        let errors = stats.errors();
        assert_eq!(errors.get("refused:401_unauthorized"), Some(&2));
        assert_eq!(errors.get("refused:403_forbidden"), Some(&1));
        assert_eq!(errors.get("refused:429_too_many_requests"), Some(&1));
        let (ok, failed, _) = &stats.figures()[INITIALIZE.0];
        assert_eq!((*ok, *failed), (0, 4));
    }

    #[test]
    fn a_429_or_503_with_retry_after_said_when_to_retry() {
        let mut told = HeaderMap::new();
        told.insert(RETRY_AFTER, "1".parse().unwrap());
        let mut blank = HeaderMap::new();
        blank.insert(RETRY_AFTER, " ".parse().unwrap());
        let silent = HeaderMap::new();
        assert_eq!(ErrorKind::answer(503, &told), ErrorKind::RetryAfter(503));
        assert_eq!(ErrorKind::answer(429, &told), ErrorKind::RetryAfter(429));
        assert_eq!(ErrorKind::answer(503, &silent), ErrorKind::HttpStatus(503));
        assert_eq!(ErrorKind::answer(503, &blank), ErrorKind::HttpStatus(503));
        // Only 429 and 503 say when to retry with it.
        assert_eq!(ErrorKind::answer(500, &told), ErrorKind::HttpStatus(500));
        assert_eq!(
            ErrorKind::answer(429, &silent),
            ErrorKind::Refused(Refusal::TooManyRequests)
        );
        // The same key with or without it.
        assert_eq!(ErrorKind::RetryAfter(503).key(), "http_status:503");
        assert_eq!(
            ErrorKind::RetryAfter(429).key(),
            "refused:429_too_many_requests"
        );

        let stats = Stats::new(&["initialize".to_owned()]).unwrap();
        stats.failed(INITIALIZE, &ErrorKind::answer(503, &told), Instant::now());
        stats.failed(INITIALIZE, &ErrorKind::answer(503, &told), Instant::now());
        stats.failed(INITIALIZE, &ErrorKind::answer(503, &silent), Instant::now());
        stats.failed(INITIALIZE, &ErrorKind::JsonRpc(-32603), Instant::now());
        stats.error(&ErrorKind::answer(429, &told));
        let errors = stats.errors();
        let retry = stats.retry();
        assert_eq!(retry.said["http_status:503"], 2);
        assert_eq!(retry.not_said["http_status:503"], 1);
        assert_eq!(retry.not_said["jsonrpc:-32603"], 1);
        assert_eq!(retry.said["refused:429_too_many_requests"], 1);
        let window = stats.error_window();
        for (key, n) in &errors {
            let said = retry.said.get(key).copied().unwrap_or(0);
            let not_said = retry.not_said.get(key).copied().unwrap_or(0);
            assert_eq!(said + not_said, *n, "{key}");
            assert_eq!(window.by_key[key].count, *n, "{key}");
        }
        assert!(window.first_unix_ms.unwrap() <= window.last_unix_ms.unwrap());
    }

    #[test]
    fn the_first_transport_failure_is_kept_with_its_causes() {
        // An error with a cause, as reqwest's are.
        let refused =
            anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
                .context("error sending request");
        let error = ErrorKind::transport(refused.as_ref());
        assert_eq!(
            error,
            ErrorKind::Transport("error sending request: connection refused".to_owned())
        );
        assert_eq!(error.key(), "transport");

        let stats = Stats::new(&["initialize".to_owned()]).unwrap();
        stats.failed(INITIALIZE, &error, Instant::now());
        stats.failed(
            INITIALIZE,
            &ErrorKind::Transport("later".to_owned()),
            Instant::now(),
        );
        assert_eq!(stats.errors()["transport"], 2);
        assert_eq!(
            stats.samples()["transport"],
            r#"initialize: "error sending request: connection refused""#
        );
    }
}
