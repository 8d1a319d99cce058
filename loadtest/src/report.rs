//! What the operator sees: a live spinner line while the test runs, a
//! summary table at the end, and the same data as a JSON report (the HTML
//! page is `html.rs`'s).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::RunArgs;
use crate::failures::{ErrorWindow, Retry, lost_responses};
use crate::open::Arrivals;
use crate::rss::{OwnUsage, own_usage};
use crate::series::{RssSummary, Series};
use crate::session::Plan;
use hdrhistogram::Histogram;

use crate::stats::{OpReport, Refusal, Stats, encode_histogram};
use crate::threshold::Verdict;

/// How often the live line is refreshed.
const LIVE_REFRESH: Duration = Duration::from_millis(500);
/// How often progress is written as a line when stderr is not a terminal.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The generator's progress on stderr: a bar over the run's duration on a
/// terminal, else a plain line every [`PLAIN_PROGRESS_EVERY`] (for CI
/// logs). Owned by `drive`; its task stops in `finish`.
#[derive(Debug)]
pub(crate) struct Live {
    bar: ProgressBar,
    /// Refreshes the message; aborted by `finish`.
    task: JoinHandle<()>,
}

impl Live {
    /// Starts showing progress over a run of `duration`.
    pub(crate) fn start(stats: Arc<Stats>, sessions: usize, duration: Duration) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = if terminal {
            ProgressBar::new(duration.as_secs().max(1))
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {elapsed_precise}/{len}s {msg}") {
            bar.set_style(style);
        }
        let line = bar.clone();
        let started = tokio::time::Instant::now();
        let every = if terminal {
            LIVE_REFRESH
        } else {
            PLAIN_PROGRESS_EVERY
        };
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            let mut last_ok = 0;
            loop {
                tick.tick().await;
                let (ok, failed, violations) = stats.totals();
                let rate = (ok - last_ok) as f64 / every.as_secs_f64();
                last_ok = ok;
                let message = format!(
                    "sessions {}/{sessions}  ops {ok} ({rate:.0}/s)  errors {failed}  violations {violations}",
                    stats.active_sessions.load(Ordering::Relaxed),
                );
                let elapsed = started.elapsed();
                if terminal {
                    line.set_position(elapsed.as_secs());
                    line.set_message(message);
                } else {
                    eprintln!(
                        "mcp-loadtest: {} s of {} s: {message}",
                        elapsed.as_secs(),
                        duration.as_secs()
                    );
                }
            }
        });
        Self { bar, task }
    }

    /// Stops and clears the line.
    pub(crate) fn finish(self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}

/// The JSON report.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) command: String,
    pub(crate) url: String,
    pub(crate) scenario: String,
    pub(crate) sessions: usize,
    pub(crate) duration_secs: u64,
    pub(crate) ramp_up_secs: u64,
    pub(crate) concurrency_per_session: usize,
    /// Wall time, start to the last session's end.
    pub(crate) elapsed_secs: f64,
    /// When the run's clock started (after the open model's sessions were
    /// opened): Unix epoch milliseconds, the origin of the series'
    /// `t_secs`. A merged report: the earliest start. Absent only in a
    /// merge of reports written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) started_unix_ms: Option<u64>,
    /// When the last session ended (Unix epoch milliseconds). A merged
    /// report: the latest end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ended_unix_ms: Option<u64>,
    pub(crate) total_ok: u64,
    pub(crate) total_failed: u64,
    /// Successful operations per second of elapsed time.
    pub(crate) ops_per_sec: f64,
    pub(crate) protocol_violations: u64,
    /// Sessions aborted at the hard deadline.
    pub(crate) unfinished_sessions: usize,
    pub(crate) operations: BTreeMap<String, OpReport>,
    /// Each operation's latency histogram of the whole run (microseconds;
    /// HdrHistogram V2 deflated, base64), so that `mcp-loadtest merge`
    /// adds runs up instead of averaging their percentiles.
    pub(crate) histograms: BTreeMap<String, String>,
    pub(crate) errors: BTreeMap<String, u64>,
    /// When the `errors` were counted, overall and per key (wall clock).
    #[serde(default)]
    pub(crate) error_window: ErrorWindow,
    /// The `errors` per key that said when to retry (a 429 or 503 with
    /// `Retry-After`), and those that did not.
    #[serde(default)]
    pub(crate) retry: Retry,
    /// The `errors` that got neither an answer nor an error: `timeout` and
    /// `protocol:missing_response`.
    #[serde(default)]
    pub(crate) lost_responses: u64,
    /// The 401, 403 and 429 answers among `errors`, by kind: failures
    /// counted apart, so that credentials or a rate limit show at a glance.
    pub(crate) refusals: Refusals,
    /// The first answer that failed each check, by error key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) failure_samples: BTreeMap<String, String>,
    /// Calls asked for as tasks that the server answered at once (counted
    /// as successes when the answer passed its checks).
    #[serde(default)]
    pub(crate) tasks_answered_at_once: u64,
    /// Each threshold held against the run, set by
    /// [`Report::with_thresholds`]; one that did not pass fails the run.
    pub(crate) thresholds: Vec<Verdict>,
    /// What the generator itself spent (CPU, memory), when `/proc` could
    /// tell; absent in a merged report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) generator: Option<OwnUsage>,
    /// The open model's arrivals (`--rate`, `--stage`); absent for the
    /// closed loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) arrivals: Option<Arrivals>,
    /// The run over time, set by [`Report::with_series`].
    pub(crate) series: Series,
}

impl Report {
    /// The report of a run whose per-operation `figures` (as
    /// [`Stats::figures`] gives them) were taken at its end.
    pub(crate) fn new(
        command: &str,
        plan: &Plan,
        args: &RunArgs,
        figures: &[(u64, u64, Histogram<u64>)],
        duration: Duration,
        elapsed: Duration,
        unfinished: usize,
    ) -> anyhow::Result<Self> {
        let (total_ok, total_failed, protocol_violations) = plan.stats.totals();
        let secs = elapsed.as_secs_f64();
        let mut operations = BTreeMap::new();
        let mut histograms = BTreeMap::new();
        for (name, (ok, failed, hist)) in plan.stats.names().iter().zip(figures) {
            // Operations that never ran are left out.
            if ok + failed > 0 {
                operations.insert(name.clone(), OpReport::of(*ok, *failed, hist, secs));
                histograms.insert(name.clone(), encode_histogram(hist)?);
            }
        }
        let errors = plan.stats.errors();
        Ok(Self {
            command: command.to_owned(),
            url: plan.url.clone(),
            scenario: plan.scenario.name.clone(),
            sessions: args.sessions,
            duration_secs: duration.as_secs(),
            ramp_up_secs: args.ramp_up,
            concurrency_per_session: args.concurrency_per_session,
            elapsed_secs: elapsed.as_secs_f64(),
            started_unix_ms: None,
            ended_unix_ms: None,
            total_ok,
            total_failed,
            ops_per_sec: total_ok as f64 / elapsed.as_secs_f64().max(1e-9),
            protocol_violations,
            unfinished_sessions: unfinished,
            operations,
            histograms,
            refusals: Refusals::from_errors(&errors),
            error_window: plan.stats.error_window(),
            retry: plan.stats.retry(),
            lost_responses: lost_responses(&errors),
            errors,
            failure_samples: plan.stats.samples(),
            tasks_answered_at_once: plan
                .stats
                .tasks_answered_at_once
                .load(std::sync::atomic::Ordering::Relaxed),
            thresholds: Vec::new(),
            generator: own_usage().ok(),
            arrivals: None,
            series: Series::default(),
        })
    }

    /// Why the run failed, one line each: protocol violations, more errors
    /// than `max_errors` (with the most frequent kinds; `None`: no limit),
    /// broken thresholds. Empty: it passed.
    pub(crate) fn failures(&self, max_errors: Option<u64>) -> Vec<String> {
        let mut failures = Vec::new();
        if self.protocol_violations > 0 {
            failures.push(format!("{} protocol violations", self.protocol_violations));
        }
        let errors: u64 = self.errors.values().sum();
        if let Some(max_errors) = max_errors
            && errors > max_errors
        {
            let mut kinds: Vec<(&String, &u64)> = self.errors.iter().collect();
            kinds.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
            let top: Vec<String> = kinds
                .iter()
                .take(5)
                .map(|(kind, n)| format!("{kind} {n}"))
                .collect();
            let more = if kinds.len() > 5 { ", ..." } else { "" };
            failures.push(format!(
                "{errors} errors, more than --max-errors {max_errors} allows ({}{more})",
                top.join(", ")
            ));
        }
        for verdict in self.thresholds.iter().filter(|v| !v.passed) {
            failures.push(format!(
                "threshold {:?} broken: the run had {}",
                verdict.threshold, verdict.actual
            ));
        }
        failures
    }

    /// The report with the run's wall-clock start and end (Unix epoch
    /// milliseconds).
    pub(crate) fn with_wall_clock(mut self, started_unix_ms: u64, ended_unix_ms: u64) -> Self {
        self.started_unix_ms = Some(started_unix_ms);
        self.ended_unix_ms = Some(ended_unix_ms);
        self
    }

    /// The report with the open model's arrival figures.
    pub(crate) fn with_arrivals(mut self, arrivals: Option<Arrivals>) -> Self {
        self.arrivals = arrivals;
        self
    }

    /// The report with the thresholds' verdicts.
    pub(crate) fn with_thresholds(mut self, verdicts: Vec<Verdict>) -> Self {
        self.thresholds = verdicts;
        self
    }

    /// The report with the sampler's time series (and server RSS).
    pub(crate) fn with_series(mut self, series: Series) -> Self {
        self.series = series;
        self
    }

    /// The summary on stdout.
    pub(crate) fn print(&self) {
        println!(
            "scenario {:?}: {} sessions, {} s (ramp-up {} s), {} in flight per session; took {:.1} s",
            self.scenario,
            self.sessions,
            self.duration_secs,
            self.ramp_up_secs,
            self.concurrency_per_session,
            self.elapsed_secs
        );
        let width = self
            .operations
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(16);
        println!(
            "{:<width$} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "operation", "ok", "failed", "ops/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        for (name, op) in &self.operations {
            println!(
                "{name:<width$} {:>9} {:>7} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                op.ok, op.failed, op.per_sec, op.p50_ms, op.p90_ms, op.p99_ms, op.max_ms
            );
        }
        println!(
            "total: {} ok, {} failed, {:.1} ops/s, {} protocol violations, {} sessions aborted at the hard deadline",
            self.total_ok,
            self.total_failed,
            self.ops_per_sec,
            self.protocol_violations,
            self.unfinished_sessions
        );
        if !self.errors.is_empty() {
            let errors: Vec<String> = self
                .errors
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            println!("errors: {}", errors.join(" "));
        }
        if self.refusals.total() > 0 {
            println!("{}", self.refusals.line());
        }
        println!(
            "lost responses: {} (timed out, or the stream ended without the response)",
            self.lost_responses
        );
        for line in self.window_lines() {
            println!("{line}");
        }
        if self.tasks_answered_at_once > 0 {
            println!(
                "calls asked for as tasks and answered at once (the server's choice): {}",
                self.tasks_answered_at_once
            );
        }
        if let Some(arrivals) = &self.arrivals {
            println!("{}", arrivals_line(arrivals));
        }
        if let Some(own) = &self.generator {
            println!(
                "generator: {:.1} s of CPU ({:.2} cores on average), peak RSS {}",
                own.cpu_secs,
                own.cpu_secs / self.elapsed_secs.max(1e-9),
                mib(own.peak_rss_bytes)
            );
        }
        for (key, sample) in &self.failure_samples {
            println!("first {key}: {sample}");
        }
        if let Some(rss) = &self.series.server_rss {
            println!("{}", rss_line(rss));
        }
        for verdict in &self.thresholds {
            println!(
                "threshold {}: {} (the run: {})",
                verdict.threshold,
                if verdict.passed { "passed" } else { "BROKEN" },
                verdict.actual
            );
        }
        println!(
            "time series: {} intervals of {} ms{}",
            self.series.points.len(),
            self.series.interval_ms,
            match self.series.dropped_points {
                0 => String::new(),
                n => format!(" ({n} left out: the series was full)"),
            }
        );
    }
}

impl Report {
    /// When the errors happened (from the start, and as Unix epoch
    /// milliseconds) and how many of each key said when to retry; nothing
    /// when there was no error.
    ///
    /// ```text
    /// errors from +3.104 s to +9.870 s (unix ms 1764000003104 to 1764000009870); 120 said when to retry
    ///   http_status:503   120 from +3.104 s to +9.870 s, Retry-After on 120
    /// ```
    fn window_lines(&self) -> Vec<String> {
        let window = &self.error_window;
        let (Some(first), Some(last)) = (window.first_unix_ms, window.last_unix_ms) else {
            return Vec::new();
        };
        let since = |t: u64| match self.started_unix_ms {
            Some(start) => format!("{:+.3} s", (t as f64 - start as f64) / 1000.0),
            None => format!("{t} unix ms"),
        };
        let mut lines = vec![format!(
            "errors from {} to {} (unix ms {first} to {last}); {} said when to retry",
            since(first),
            since(last),
            self.retry.said_total()
        )];
        let width = window.by_key.keys().map(String::len).max().unwrap_or(0);
        for (key, w) in &window.by_key {
            lines.push(format!(
                "  {key:<width$} {:>7} from {} to {}, Retry-After on {}",
                w.count,
                since(w.first_unix_ms),
                since(w.last_unix_ms),
                self.retry.said.get(key).copied().unwrap_or(0)
            ));
        }
        lines
    }
}

/// Answers that refused a request for who sent it or how often (see
/// [`Refusal`]), by kind. Every one is also a failure under `errors`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Refusals {
    /// 401 Unauthorized.
    pub(crate) unauthorized_401: u64,
    /// 403 Forbidden.
    pub(crate) forbidden_403: u64,
    /// 429 Too Many Requests.
    pub(crate) too_many_requests_429: u64,
}

impl Refusals {
    /// Picks the refusals out of the error counts.
    pub(crate) fn from_errors(errors: &BTreeMap<String, u64>) -> Self {
        let count = |refusal: Refusal| errors.get(refusal.key()).copied().unwrap_or(0);
        Self {
            unauthorized_401: count(Refusal::Unauthorized),
            forbidden_403: count(Refusal::Forbidden),
            too_many_requests_429: count(Refusal::TooManyRequests),
        }
    }

    /// All three.
    pub(crate) fn total(&self) -> u64 {
        self.unauthorized_401 + self.forbidden_403 + self.too_many_requests_429
    }

    /// (status, reason, count) for each kind, in status order.
    pub(crate) fn rows(&self) -> [(u16, &'static str, u64); 3] {
        [
            (401, "Unauthorized", self.unauthorized_401),
            (403, "Forbidden", self.forbidden_403),
            (429, "Too Many Requests", self.too_many_requests_429),
        ]
    }

    /// `refused (failures): 401 unauthorized 3, 403 forbidden 0, 429 too many requests 1`.
    pub(crate) fn line(&self) -> String {
        let parts: Vec<String> = self
            .rows()
            .iter()
            .map(|(status, reason, n)| format!("{status} {} {n}", reason.to_lowercase()))
            .collect();
        format!("refused (failures): {}", parts.join(", "))
    }
}

/// `open model: 3000 arrivals, 12 dropped (0.40 %, every session busy: add
/// --sessions), start lag at most 1.2 ms`.
fn arrivals_line(arrivals: &Arrivals) -> String {
    let share = 100.0 * arrivals.dropped as f64 / arrivals.scheduled.max(1) as f64;
    let mut line = format!(
        "open model: {} arrivals, {} dropped ({share:.2} %",
        arrivals.scheduled, arrivals.dropped
    );
    if arrivals.dropped > 0 {
        line.push_str(", every session busy: the load asked for was not offered; add --sessions");
    }
    line.push_str(&format!(
        "), start lag at most {:.1} ms",
        arrivals.max_start_lag_ms
    ));
    if arrivals.sessions_not_opened > 0 {
        line.push_str(&format!(
            "; {} sessions of the pool could not be opened",
            arrivals.sessions_not_opened
        ));
    }
    line
}

/// `server RSS (pid 42): start 10.0 MiB, peak 50.2 MiB, end 40.1 MiB`.
fn rss_line(rss: &RssSummary) -> String {
    let mut line = format!(
        "server RSS (pid {}): start {}, peak {}, end {}",
        rss.pid,
        mib(rss.start_bytes),
        mib(rss.peak_bytes),
        mib(rss.end_bytes)
    );
    if let Some(t) = rss.lost_at_secs {
        line.push_str(&format!(
            "; unreadable from {t:.1} s on (the process exited?)"
        ));
    }
    line
}

/// Bytes as `12.3 MiB`.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_picked_out_of_the_errors() {
        let errors = BTreeMap::from([
            ("refused:401_unauthorized".to_owned(), 3),
            ("refused:429_too_many_requests".to_owned(), 1),
            ("http_status:503".to_owned(), 7),
        ]);
        let refusals = Refusals::from_errors(&errors);
        assert_eq!(
            refusals,
            Refusals {
                unauthorized_401: 3,
                forbidden_403: 0,
                too_many_requests_429: 1,
            }
        );
        assert_eq!(refusals.total(), 4);
        assert_eq!(
            refusals.line(),
            "refused (failures): 401 unauthorized 3, 403 forbidden 0, 429 too many requests 1"
        );
        let json = serde_json::to_value(refusals).unwrap();
        assert_eq!(json["unauthorized_401"], 3);
        assert_eq!(json["forbidden_403"], 0);
    }
}
