//! `mcp-loadtest merge`: the JSON reports of runs made at the same time by
//! several generators (machines) combined into one report, as if one
//! generator had made them all: counts and errors added, latency
//! histograms merged (never percentiles averaged), thresholds held again
//! against the whole. Wall-clock bounds widen: the earliest start and
//! error, the latest end and error.
//!
//! The time series is merged interval by interval, counting each run's
//! intervals from its own start (start the generators together): counts
//! add up; an interval's percentiles are the highest of the generators'
//! (a bound, since the reports keep no per-interval histogram). The
//! server's RSS is left out: each generator sampled its own view.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, ensure};

use crate::failures::{ErrorWindow, Retry, lost_responses};
use crate::open::Arrivals;
use crate::report::{Refusals, Report};
use crate::series::{IntervalOp, Percentiles, Point, Series};
use crate::stats::{OpReport, decode_histogram, encode_histogram, latency_histogram};
use crate::threshold::{self, Threshold};

/// Most reports merged at once.
pub(crate) const MAX_REPORTS: usize = 1024;
/// Largest report read (a report with the longest series is under 20 MB).
const MAX_REPORT_BYTES: u64 = 256 * 1024 * 1024;

/// Reads and merges the reports at `paths`; `extra` thresholds are held
/// besides those the reports carry.
///
/// # Errors
/// A report cannot be read or parsed, or lacks its histograms (written by
/// an older `mcp-loadtest`).
pub(crate) fn merge(command: &str, paths: &[PathBuf], extra: &[String]) -> anyhow::Result<Report> {
    ensure!(!paths.is_empty(), "merge needs at least one report");
    ensure!(
        paths.len() <= MAX_REPORTS,
        "at most {MAX_REPORTS} reports at once"
    );
    let reports = paths
        .iter()
        .map(|path| {
            let size = std::fs::metadata(path)
                .with_context(|| format!("reading {}", path.display()))?
                .len();
            ensure!(
                size <= MAX_REPORT_BYTES,
                "{} holds {size} bytes, more than a report may ({MAX_REPORT_BYTES})",
                path.display()
            );
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_slice::<Report>(&bytes)
                .with_context(|| format!("{} is not an mcp-loadtest report", path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    combine(command, &reports, extra)
}

/// The merged report of `reports`.
fn combine(command: &str, reports: &[Report], extra: &[String]) -> anyhow::Result<Report> {
    let elapsed_secs = reports.iter().map(|r| r.elapsed_secs).fold(0.0, f64::max);
    let mut merged_hist: BTreeMap<String, hdrhistogram::Histogram<u64>> = BTreeMap::new();
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for report in reports {
        for (name, op) in &report.operations {
            let text = report.histograms.get(name).with_context(|| {
                format!(
                    "the report of {:?} has no histogram for {name:?} (an older mcp-loadtest?)",
                    report.command
                )
            })?;
            let hist = decode_histogram(text).with_context(|| format!("operation {name:?}"))?;
            match merged_hist.get_mut(name) {
                Some(into) => into.add(&hist)?,
                None => {
                    merged_hist.insert(name.clone(), hist);
                }
            }
            let entry = counts.entry(name.clone()).or_default();
            entry.0 += op.ok;
            entry.1 += op.failed;
        }
    }
    let mut operations = BTreeMap::new();
    let mut histograms = BTreeMap::new();
    for (name, hist) in &merged_hist {
        let (ok, failed) = counts[name];
        operations.insert(name.clone(), OpReport::of(ok, failed, hist, elapsed_secs));
        histograms.insert(name.clone(), encode_histogram(hist)?);
    }
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut failure_samples = BTreeMap::new();
    for report in reports {
        for (key, n) in &report.errors {
            *errors.entry(key.clone()).or_default() += n;
        }
        for (key, sample) in &report.failure_samples {
            failure_samples
                .entry(key.clone())
                .or_insert_with(|| sample.clone());
        }
    }
    let mut error_window = ErrorWindow::default();
    let mut retry = Retry::default();
    for report in reports {
        error_window.merge(&report.error_window);
        retry.merge(&report.retry);
    }
    let arrivals = merged_arrivals(reports);
    let thresholds = held_again(
        reports,
        extra,
        &operations,
        &merged_hist,
        elapsed_secs,
        arrivals.as_ref(),
    )?;
    let total_ok: u64 = reports.iter().map(|r| r.total_ok).sum();
    Ok(Report {
        command: command.to_owned(),
        url: joined(reports.iter().map(|r| r.url.as_str())),
        scenario: joined(reports.iter().map(|r| r.scenario.as_str())),
        sessions: reports.iter().map(|r| r.sessions).sum(),
        duration_secs: reports.iter().map(|r| r.duration_secs).max().unwrap_or(0),
        ramp_up_secs: reports.iter().map(|r| r.ramp_up_secs).max().unwrap_or(0),
        concurrency_per_session: reports
            .iter()
            .map(|r| r.concurrency_per_session)
            .max()
            .unwrap_or(1),
        elapsed_secs,
        started_unix_ms: reports.iter().filter_map(|r| r.started_unix_ms).min(),
        ended_unix_ms: reports.iter().filter_map(|r| r.ended_unix_ms).max(),
        total_ok,
        total_failed: reports.iter().map(|r| r.total_failed).sum(),
        ops_per_sec: total_ok as f64 / elapsed_secs.max(1e-9),
        protocol_violations: reports.iter().map(|r| r.protocol_violations).sum(),
        unfinished_sessions: reports.iter().map(|r| r.unfinished_sessions).sum(),
        operations,
        histograms,
        refusals: Refusals::from_errors(&errors),
        error_window,
        retry,
        lost_responses: lost_responses(&errors),
        errors,
        failure_samples,
        tasks_answered_at_once: reports.iter().map(|r| r.tasks_answered_at_once).sum(),
        thresholds,
        generator: None,
        arrivals,
        series: merged_series(reports),
    })
}

/// The distinct values, in order, joined by `, `.
fn joined<'a>(values: impl Iterator<Item = &'a str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for value in values {
        if !seen.contains(&value) {
            seen.push(value);
        }
    }
    seen.join(", ")
}

fn merged_arrivals(reports: &[Report]) -> Option<Arrivals> {
    let mut out: Option<Arrivals> = None;
    for arrivals in reports.iter().filter_map(|r| r.arrivals.as_ref()) {
        let into = out.get_or_insert_with(Arrivals::default);
        into.scheduled += arrivals.scheduled;
        into.dropped += arrivals.dropped;
        into.sessions_not_opened += arrivals.sessions_not_opened;
        into.max_start_lag_ms = into.max_start_lag_ms.max(arrivals.max_start_lag_ms);
    }
    out
}

/// Every threshold of the reports (each once) and `extra`, held against
/// the merged figures.
fn held_again(
    reports: &[Report],
    extra: &[String],
    operations: &BTreeMap<String, OpReport>,
    histograms: &BTreeMap<String, hdrhistogram::Histogram<u64>>,
    secs: f64,
    arrivals: Option<&Arrivals>,
) -> anyhow::Result<Vec<threshold::Verdict>> {
    let mut texts: Vec<&str> = Vec::new();
    for text in reports
        .iter()
        .flat_map(|r| r.thresholds.iter().map(|v| v.threshold.as_str()))
        .chain(extra.iter().map(String::as_str))
    {
        if !texts.contains(&text) {
            texts.push(text);
        }
    }
    let thresholds = texts
        .into_iter()
        .map(Threshold::parse)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let names: Vec<String> = operations.keys().cloned().collect();
    for threshold in &thresholds {
        if let Some(name) = &threshold.operation {
            ensure!(
                names.contains(name),
                "threshold {:?}: no operation named {name:?} in the reports (there are: {})",
                threshold.text,
                names.join(", ")
            );
        }
    }
    let empty = latency_histogram()?;
    let figures: Vec<(u64, u64, hdrhistogram::Histogram<u64>)> = names
        .iter()
        .map(|name| {
            let op = &operations[name];
            let hist = histograms.get(name).unwrap_or(&empty).clone();
            (op.ok, op.failed, hist)
        })
        .collect();
    threshold::verdicts(
        &thresholds,
        &names,
        &figures,
        secs,
        arrivals.map(|a| (a.scheduled, a.dropped)),
    )
}

/// The series added up interval by interval (see the module's doc).
fn merged_series(reports: &[Report]) -> Series {
    let longest = reports
        .iter()
        .map(|r| r.series.points.len())
        .max()
        .unwrap_or(0);
    let points = (0..longest)
        .map(|i| {
            let here: Vec<&Point> = reports
                .iter()
                .filter_map(|r| r.series.points.get(i))
                .collect();
            let mut ops: Vec<IntervalOp> = Vec::new();
            for op in here.iter().flat_map(|p| &p.ops) {
                match ops.iter_mut().find(|o| o.kind == op.kind) {
                    Some(into) => add_op(into, op),
                    None => ops.push(op.clone()),
                }
            }
            let mut all = here[0].all.clone();
            for point in &here[1..] {
                add_op(&mut all, &point.all);
            }
            let mut errors: BTreeMap<String, u64> = BTreeMap::new();
            for (key, n) in here.iter().flat_map(|p| &p.errors) {
                *errors.entry(key.clone()).or_default() += n;
            }
            Point {
                t_secs: here.iter().map(|p| p.t_secs).fold(0.0, f64::max),
                dt_secs: here.iter().map(|p| p.dt_secs).fold(0.0, f64::max),
                active_sessions: here.iter().map(|p| p.active_sessions).sum(),
                server_rss_bytes: None,
                all,
                ops,
                errors,
            }
        })
        .collect();
    Series {
        interval_ms: reports
            .iter()
            .map(|r| r.series.interval_ms)
            .max()
            .unwrap_or(0),
        points,
        dropped_points: reports.iter().map(|r| r.series.dropped_points).sum(),
        server_rss: None,
    }
}

/// Counts added; percentiles the higher of the two.
fn add_op(into: &mut IntervalOp, op: &IntervalOp) {
    into.ok += op.ok;
    into.failed += op.failed;
    into.latency = match (into.latency, op.latency) {
        (Some(a), Some(b)) => Some(Percentiles {
            p50_ms: a.p50_ms.max(b.p50_ms),
            p90_ms: a.p90_ms.max(b.p90_ms),
            p99_ms: a.p99_ms.max(b.p99_ms),
            max_ms: a.max_ms.max(b.max_ms),
        }),
        (a, b) => a.or(b),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threshold::Verdict;

    /// A report of `latencies_ms` successes of `echo` over 10 s.
    fn report(latencies_ms: &[u64], failed: u64, thresholds: &[&str]) -> Report {
        let mut hist = latency_histogram().unwrap();
        for ms in latencies_ms {
            hist.record(ms * 1000).unwrap();
        }
        let ok = latencies_ms.len() as u64;
        let point = |ok: u64| Point {
            t_secs: 1.0,
            dt_secs: 1.0,
            active_sessions: 2,
            server_rss_bytes: Some(1 << 20),
            all: IntervalOp {
                kind: "all".into(),
                ok,
                failed: 0,
                latency: None,
            },
            ops: vec![IntervalOp {
                kind: "echo".into(),
                ok,
                failed: 0,
                latency: Some(Percentiles {
                    p50_ms: ok as f64,
                    p90_ms: 1.0,
                    p99_ms: 1.0,
                    max_ms: 1.0,
                }),
            }],
            errors: BTreeMap::new(),
        };
        Report {
            command: "mcp-loadtest run".into(),
            url: "http://127.0.0.1:1/mcp".into(),
            scenario: "s".into(),
            sessions: 2,
            duration_secs: 10,
            ramp_up_secs: 0,
            concurrency_per_session: 1,
            elapsed_secs: 10.0,
            started_unix_ms: Some(1_000_000),
            ended_unix_ms: Some(1_010_000),
            total_ok: ok,
            total_failed: failed,
            ops_per_sec: ok as f64 / 10.0,
            protocol_violations: 0,
            unfinished_sessions: 0,
            operations: BTreeMap::from([(
                "echo".to_owned(),
                OpReport::of(ok, failed, &hist, 10.0),
            )]),
            histograms: BTreeMap::from([("echo".to_owned(), encode_histogram(&hist).unwrap())]),
            errors: BTreeMap::from([("timeout".to_owned(), failed)]),
            error_window: ErrorWindow::default(),
            retry: Retry::default(),
            lost_responses: failed,
            refusals: Refusals::default(),
            failure_samples: BTreeMap::new(),
            tasks_answered_at_once: 0,
            thresholds: thresholds
                .iter()
                .map(|t| Verdict {
                    threshold: (*t).to_owned(),
                    passed: true,
                    actual: String::new(),
                })
                .collect(),
            generator: None,
            arrivals: None,
            series: Series {
                interval_ms: 1000,
                points: vec![point(ok)],
                dropped_points: 0,
                server_rss: None,
            },
        }
    }

    #[test]
    fn histograms_merge_where_percentiles_would_average_wrong() {
        // One generator saw 99 fast answers, the other one slow one: the
        // p99 of the whole is fast, and the median of both p99s is not.
        let fast = report(&[1; 99], 0, &["p99<10ms"]);
        let slow = report(&[1000], 1, &["echo errors<1"]);
        let merged = combine("merge", &[fast, slow], &["p999<2ms".to_owned()]).unwrap();
        let echo = &merged.operations["echo"];
        assert_eq!((echo.ok, echo.failed), (100, 1));
        assert!(echo.p99_ms < 1.1, "{}", echo.p99_ms);
        assert!((echo.max_ms - 1000.0).abs() < 1.0, "{}", echo.max_ms);
        assert_eq!(merged.errors["timeout"], 1);
        assert_eq!(merged.sessions, 4);
        let verdicts: Vec<(&str, bool)> = merged
            .thresholds
            .iter()
            .map(|v| (v.threshold.as_str(), v.passed))
            .collect();
        // Held again on the whole: one failure is no longer fewer than 1.
        assert_eq!(
            verdicts,
            [
                ("p99<10ms", true),
                ("echo errors<1", false),
                ("p999<2ms", false)
            ]
        );
        let point = &merged.series.points[0];
        assert_eq!(point.ops[0].ok, 100);
        assert_eq!(point.active_sessions, 4);
        assert_eq!(point.ops[0].latency.unwrap().p50_ms, 99.0);
        assert_eq!(point.server_rss_bytes, None);
        // The merged report merges again.
        let twice = combine("merge", &[merged], &[]).unwrap();
        assert_eq!(twice.operations["echo"].ok, 100);
    }

    #[test]
    fn merged_reports_widen_the_wall_clock_and_error_windows_and_add_retries() {
        let mut early = report(&[1], 2, &[]);
        early.started_unix_ms = Some(1_000);
        early.ended_unix_ms = Some(11_000);
        early.errors = BTreeMap::from([("http_status:503".to_owned(), 2)]);
        early.error_window.record("http_status:503", 3_000, 2_900);
        early.error_window.record("http_status:503", 4_000, 3_500);
        early.retry.record("http_status:503", true);
        early.retry.record("http_status:503", false);
        let mut late = report(&[1], 3, &[]);
        late.started_unix_ms = Some(1_500);
        late.ended_unix_ms = Some(12_000);
        late.errors =
            BTreeMap::from([("http_status:503".to_owned(), 1), ("timeout".to_owned(), 2)]);
        late.error_window.record("http_status:503", 2_500, 2_400);
        late.error_window.record("timeout", 9_000, 4_000);
        late.error_window.record("timeout", 9_500, 4_500);
        late.retry.record("http_status:503", true);
        late.retry.record("timeout", false);
        late.retry.record("timeout", false);
        let mut clean = report(&[1], 0, &[]);
        clean.started_unix_ms = Some(2_000);
        clean.ended_unix_ms = Some(10_000);

        let merged = combine("merge", &[early, clean, late], &[]).unwrap();
        assert_eq!(merged.started_unix_ms, Some(1_000));
        assert_eq!(merged.ended_unix_ms, Some(12_000));
        let window = &merged.error_window;
        assert_eq!(
            (window.first_unix_ms, window.last_unix_ms),
            (Some(2_500), Some(9_500))
        );
        let http = window.by_key["http_status:503"];
        assert_eq!(
            (http.first_unix_ms, http.last_unix_ms, http.count),
            (2_500, 4_000, 3)
        );
        assert_eq!(window.by_key["timeout"].count, 2);
        // Timeouts fail long after they were sent: the latest send is kept.
        assert_eq!(http.last_started_unix_ms, Some(3_500));
        assert_eq!(window.by_key["timeout"].last_started_unix_ms, Some(4_500));
        assert_eq!(window.last_started_unix_ms, Some(4_500));
        assert_eq!(merged.retry.said["http_status:503"], 2);
        assert_eq!(merged.retry.not_said["http_status:503"], 1);
        assert_eq!(merged.retry.not_said["timeout"], 2);
        assert_eq!(merged.lost_responses, 2);
        // A report from before these fields merges: nothing to widen by.
        let mut json = serde_json::to_value(report(&[1], 0, &[])).unwrap();
        for field in [
            "started_unix_ms",
            "ended_unix_ms",
            "error_window",
            "retry",
            "lost_responses",
        ] {
            json.as_object_mut().unwrap().remove(field);
        }
        let old: Report = serde_json::from_value(json).unwrap();
        let merged = combine("merge", &[old], &[]).unwrap();
        assert_eq!(merged.started_unix_ms, None);
        assert_eq!(merged.error_window, ErrorWindow::default());
    }

    #[test]
    fn a_report_without_histograms_is_refused() {
        let mut old = report(&[1], 0, &[]);
        old.histograms.clear();
        let err = combine("merge", &[old], &[]).unwrap_err();
        assert!(format!("{err:#}").contains("no histogram"), "{err:#}");
    }
}
