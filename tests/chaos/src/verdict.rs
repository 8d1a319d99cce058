//! One run judged from the load generator's report, and many summed up.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};

use crate::Fault;

/// When a fault struck and until when its errors may show (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// The fault's first act (the kill, the cut, the stop).
    pub(crate) from_ms: u64,
    /// When the system was whole again (the promotion, the heal, the
    /// restart answered); the fault's own end for a fault without errors.
    pub(crate) recovered_ms: u64,
    /// The last moment an error may show: the recovery plus the aftermath,
    /// or later for a fault whose survivors answer the dead one's requests.
    pub(crate) until_ms: u64,
}

/// What one run showed.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The fault injected.
    pub fault: Fault,
    /// Operations that succeeded and failed.
    pub ok: u64,
    /// See [`Self::ok`].
    pub failed: u64,
    /// Requests that got neither an answer nor an error (timed out, or a
    /// stream that ended without its response).
    pub lost: u64,
    /// Protocol violations.
    pub violations: u64,
    /// Failed operations by error key.
    pub errors: BTreeMap<String, u64>,
    /// The first and last error, in ms after the fault struck (negative:
    /// before).
    pub error_span_ms: Option<(i64, i64)>,
    /// How long after the fault errors were allowed, in ms.
    pub allowed_ms: i64,
    /// How long the fault took to be over (recovery), in ms.
    pub recovery_ms: i64,
    /// Errors that told the client when to retry (`Retry-After`), and
    /// those that did not.
    pub retry_said: u64,
    /// See [`Self::retry_said`].
    pub retry_not_said: u64,
    /// The highest per-second p99 latency of successful operations while
    /// errors were allowed, and after (ms).
    pub p99_during_ms: Option<f64>,
    /// See [`Self::p99_during_ms`].
    pub p99_after_ms: Option<f64>,
    /// Failed operations by operation (the load generator's rows).
    pub failed_ops: BTreeMap<String, u64>,
    /// One failure of each kind as the client saw it (the load
    /// generator's samples, by error key).
    pub samples: BTreeMap<String, String>,
    /// Calls asked for as tasks that a node answered at once (a success:
    /// it may, and does when it cannot store the task).
    pub tasks_answered_at_once: u64,
    /// Why the run failed; empty when it passed.
    pub problems: Vec<String>,
}

impl Verdict {
    /// Judges `report` (the load generator's JSON) of a run of `fault`
    /// struck at `window`.
    pub(crate) fn judge(fault: Fault, report: &Value, window: Window) -> Self {
        let count = |v: &Value| v.as_u64().unwrap_or(0);
        let errors: BTreeMap<String, u64> = report["errors"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), count(v))).collect())
            .unwrap_or_default();
        let lost = match report.get("lost_responses") {
            Some(lost) => count(lost),
            None => {
                errors.get("timeout").copied().unwrap_or(0)
                    + errors
                        .get("protocol:missing_response")
                        .copied()
                        .unwrap_or(0)
            }
        };
        let violations = count(&report["protocol_violations"]);
        let at = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX) - window.from_ms as i64;
        let span = error_span(report).map(|(first, last)| (at(first), at(last)));
        // An error belongs to the fault if its operation was sent before
        // the window closed: a call sent during it may fail at its timeout.
        let last_sent = report["error_window"]["last_started_unix_ms"]
            .as_u64()
            .map(at);
        let allowed_ms = at(window.until_ms);
        let (retry_said, retry_not_said) = retry_counts(report);
        let (p99_during_ms, p99_after_ms) = p99s(report, window);

        let mut problems = Vec::new();
        if lost > 0 {
            problems.push(format!("{lost} responses lost"));
        }
        if violations > 0 {
            problems.push(format!("{violations} protocol violations"));
        }
        if report["ended_unix_ms"]
            .as_u64()
            .is_some_and(|ended| ended < window.until_ms)
        {
            problems.push("the load ended before the fault's window did".to_owned());
        }
        if count(&report["total_ok"]) == 0 {
            problems.push("no operation succeeded".to_owned());
        }
        if let Some((first, last)) = span {
            if !fault.errors_allowed() {
                problems.push(format!(
                    "{} errors where none may show",
                    count(&report["total_failed"])
                ));
            } else if first < 0 || last_sent.unwrap_or(last) > allowed_ms {
                problems.push(format!(
                    "errors from {first} ms to {last} ms, outside 0..={allowed_ms} ms: {}",
                    outside_keys(report, window).join(", ")
                ));
            }
        }
        Self {
            fault,
            ok: count(&report["total_ok"]),
            failed: count(&report["total_failed"]),
            lost,
            violations,
            errors,
            error_span_ms: span,
            allowed_ms,
            recovery_ms: at(window.recovered_ms),
            retry_said,
            retry_not_said,
            p99_during_ms,
            p99_after_ms,
            failed_ops: report["operations"]
                .as_object()
                .map(|ops| {
                    ops.iter()
                        .map(|(name, row)| (name.clone(), count(&row["failed"])))
                        .filter(|(_, failed)| *failed > 0)
                        .collect()
                })
                .unwrap_or_default(),
            samples: report["failure_samples"]
                .as_object()
                .map(|samples| {
                    samples
                        .iter()
                        .filter_map(|(key, text)| Some((key.clone(), text.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default(),
            tasks_answered_at_once: count(&report["tasks_answered_at_once"]),
            problems,
        }
    }

    /// A run that set up or injected nothing: `why` is its one problem.
    pub(crate) fn broken(fault: Fault, why: String) -> Self {
        Self {
            fault,
            ok: 0,
            failed: 0,
            lost: 0,
            violations: 0,
            errors: BTreeMap::new(),
            error_span_ms: None,
            allowed_ms: 0,
            recovery_ms: 0,
            retry_said: 0,
            retry_not_said: 0,
            p99_during_ms: None,
            p99_after_ms: None,
            failed_ops: BTreeMap::new(),
            samples: BTreeMap::new(),
            tasks_answered_at_once: 0,
            problems: vec![why],
        }
    }

    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }

    /// The run as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "fault": self.fault.name(),
            "passed": self.passed(),
            "ok": self.ok,
            "failed": self.failed,
            "lost_responses": self.lost,
            "protocol_violations": self.violations,
            "errors": self.errors,
            "first_error_ms": self.error_span_ms.map(|s| s.0),
            "last_error_ms": self.error_span_ms.map(|s| s.1),
            "recovery_ms": self.recovery_ms,
            "errors_allowed_until_ms": self.allowed_ms,
            "retry_said": self.retry_said,
            "retry_not_said": self.retry_not_said,
            "p99_during_ms": self.p99_during_ms,
            "p99_after_ms": self.p99_after_ms,
            "failed_operations": self.failed_ops,
            "failure_samples": self.samples,
            "tasks_answered_at_once": self.tasks_answered_at_once,
            "problems": self.problems,
        })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = match self.error_span_ms {
            Some((first, last)) => format!("errors {first}..{last} ms"),
            None => "no error".to_owned(),
        };
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        write!(
            f,
            "{} {}: {} ok, {} failed, {} lost, {} violations; {span} (recovered at {} ms, allowed to {} ms); \
             retry said {} / not {}; p99 during {} after {}; [{}]",
            self.fault,
            if self.passed() { "PASS" } else { "FAIL" },
            self.ok,
            self.failed,
            self.lost,
            self.violations,
            self.recovery_ms,
            self.allowed_ms,
            self.retry_said,
            self.retry_not_said,
            ms(self.p99_during_ms),
            ms(self.p99_after_ms),
            errors.join(" ")
        )?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        if !self.passed() && !self.failed_ops.is_empty() {
            let ops: Vec<String> = self
                .failed_ops
                .iter()
                .map(|(op, n)| format!("{op}={n}"))
                .collect();
            write!(f, "\n  failed operations: {}", ops.join(" "))?;
        }
        if !self.passed() {
            for (key, sample) in &self.samples {
                write!(f, "\n  sample {key}: {sample}")?;
            }
        }
        Ok(())
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ms"))
}

/// The first and last error of the run (Unix ms).
fn error_span(report: &Value) -> Option<(u64, u64)> {
    let window = &report["error_window"];
    Some((
        window["first_unix_ms"].as_u64()?,
        window["last_unix_ms"].as_u64()?,
    ))
}

/// The error keys with an error outside `window`.
fn outside_keys(report: &Value, window: Window) -> Vec<String> {
    report["error_window"]["by_key"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, w)| {
            w["first_unix_ms"]
                .as_u64()
                .is_some_and(|t| t < window.from_ms)
                || w["last_started_unix_ms"]
                    .as_u64()
                    .or_else(|| w["last_unix_ms"].as_u64())
                    .is_some_and(|t| t > window.until_ms)
        })
        .map(|(key, w)| {
            let at = |field: &str| w[field].as_i64().unwrap_or(0) - window.from_ms as i64;
            let sample = report["failure_samples"][key]
                .as_str()
                .unwrap_or("no sample");
            format!(
                "{key} ({} from {} ms to {} ms; first: {sample:.300})",
                w["count"],
                at("first_unix_ms"),
                at("last_unix_ms")
            )
        })
        .collect()
}

/// Errors that said when to retry, and those that did not.
fn retry_counts(report: &Value) -> (u64, u64) {
    let sum = |v: &Value| -> u64 {
        v.as_object()
            .map(|m| m.values().filter_map(Value::as_u64).sum())
            .unwrap_or(0)
    };
    (
        sum(&report["retry"]["said"]),
        sum(&report["retry"]["not_said"]),
    )
}

/// The highest per-interval p99 while errors were allowed, and after.
fn p99s(report: &Value, window: Window) -> (Option<f64>, Option<f64>) {
    let Some(started) = report["started_unix_ms"].as_u64() else {
        return (None, None);
    };
    let mut during: Option<f64> = None;
    let mut after: Option<f64> = None;
    for point in report["series"]["points"].as_array().into_iter().flatten() {
        let (Some(end), Some(p99)) = (point["t_secs"].as_f64(), point["all"]["p99_ms"].as_f64())
        else {
            continue;
        };
        let dt = point["dt_secs"].as_f64().unwrap_or(1.0);
        let end_ms = started + (end * 1000.0) as u64;
        let start_ms = end_ms.saturating_sub((dt * 1000.0) as u64);
        let slot = if end_ms < window.from_ms {
            continue;
        } else if start_ms <= window.until_ms {
            &mut during
        } else {
            &mut after
        };
        *slot = Some(slot.map_or(p99, |v: f64| v.max(p99)));
    }
    (during, after)
}

/// Many runs of one fault, summed up.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The fault.
    pub fault: Fault,
    /// Every run's verdict, in order.
    pub runs: Vec<Verdict>,
}

impl Summary {
    /// Whether every run passed.
    pub fn passed(&self) -> bool {
        self.runs.iter().all(Verdict::passed)
    }

    /// The summary as JSON: totals, worst cases, and every run.
    pub fn to_json(&self) -> Value {
        let failed: Vec<u64> = self.runs.iter().map(|r| r.failed).collect();
        json!({
            "fault": self.fault.name(),
            "runs": self.runs.len(),
            "passed": self.runs.iter().filter(|r| r.passed()).count(),
            "lost_responses": self.runs.iter().map(|r| r.lost).sum::<u64>(),
            "protocol_violations": self.runs.iter().map(|r| r.violations).sum::<u64>(),
            "errors_per_run": {"min": failed.iter().min(), "median": median(&failed), "max": failed.iter().max()},
            "longest_error_window_ms": self.runs.iter().filter_map(|r| r.error_span_ms.map(|(f, l)| l - f)).max(),
            "latest_error_ms": self.runs.iter().filter_map(|r| r.error_span_ms.map(|s| s.1)).max(),
            "longest_recovery_ms": self.runs.iter().map(|r| r.recovery_ms).max(),
            "retry_said": self.runs.iter().map(|r| r.retry_said).sum::<u64>(),
            "retry_not_said": self.runs.iter().map(|r| r.retry_not_said).sum::<u64>(),
            "worst_p99_during_ms": worst(self.runs.iter().filter_map(|r| r.p99_during_ms)),
            "worst_p99_after_ms": worst(self.runs.iter().filter_map(|r| r.p99_after_ms)),
            "each": self.runs.iter().map(Verdict::to_json).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let j = self.to_json();
        write!(
            f,
            "{}: {}/{} runs passed; lost {}, violations {}; errors per run {}/{}/{} (min/median/max); \
             longest error window {} ms, latest error {} ms after the fault, longest recovery {} ms; \
             retry said {} / not {}; worst p99 during {} ms, after {} ms",
            self.fault,
            j["passed"],
            j["runs"],
            j["lost_responses"],
            j["protocol_violations"],
            j["errors_per_run"]["min"],
            j["errors_per_run"]["median"],
            j["errors_per_run"]["max"],
            j["longest_error_window_ms"],
            j["latest_error_ms"],
            j["longest_recovery_ms"],
            j["retry_said"],
            j["retry_not_said"],
            j["worst_p99_during_ms"],
            j["worst_p99_after_ms"],
        )
    }
}

fn median(values: &[u64]) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

fn worst(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |worst, v| Some(worst.map_or(v, |w: f64| w.max(v))))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAULT_AT: u64 = 1_000_000;

    fn window() -> Window {
        Window {
            from_ms: FAULT_AT,
            recovered_ms: FAULT_AT + 3_000,
            until_ms: FAULT_AT + 5_000,
        }
    }

    fn report(first: u64, last: u64) -> Value {
        json!({
            "total_ok": 100, "total_failed": 4, "protocol_violations": 0,
            "errors": {"http_status:503": 4},
            "error_window": {"first_unix_ms": first, "last_unix_ms": last,
                "by_key": {"http_status:503": {"first_unix_ms": first, "last_unix_ms": last, "count": 4}}},
            "retry": {"said": {"http_status:503": 3}, "not_said": {"jsonrpc:-32603": 1}},
        })
    }

    #[test]
    fn errors_inside_the_window_pass_and_outside_fail() {
        let inside = Verdict::judge(
            Fault::ShardFailover,
            &report(FAULT_AT + 10, FAULT_AT + 4_000),
            window(),
        );
        assert!(inside.passed(), "{inside}");
        assert_eq!(inside.error_span_ms, Some((10, 4_000)));
        assert_eq!((inside.retry_said, inside.retry_not_said), (3, 1));

        let late = Verdict::judge(
            Fault::ShardFailover,
            &report(FAULT_AT + 10, FAULT_AT + 9_000),
            window(),
        );
        assert!(!late.passed());
        assert!(late.problems[0].contains("http_status:503"), "{late}");

        let early = Verdict::judge(
            Fault::ShardFailover,
            &report(FAULT_AT - 500, FAULT_AT + 1_000),
            window(),
        );
        assert!(!early.passed(), "{early}");
    }

    #[test]
    fn an_error_counts_by_when_its_operation_was_sent() {
        // Failed after the window closed, sent inside it (a call that
        // waited out its timeout): the fault's.
        let mut sent_inside = report(FAULT_AT + 10, FAULT_AT + 5_100);
        sent_inside["error_window"]["last_started_unix_ms"] = json!(FAULT_AT + 4_900);
        sent_inside["error_window"]["by_key"]["http_status:503"]["last_started_unix_ms"] =
            json!(FAULT_AT + 4_900);
        let verdict = Verdict::judge(Fault::ShardFailover, &sent_inside, window());
        assert!(verdict.passed(), "{verdict}");
        // Sent after it closed: not the fault's, whenever it failed.
        let mut sent_after = report(FAULT_AT + 10, FAULT_AT + 5_300);
        sent_after["error_window"]["last_started_unix_ms"] = json!(FAULT_AT + 5_200);
        sent_after["error_window"]["by_key"]["http_status:503"]["last_started_unix_ms"] =
            json!(FAULT_AT + 5_200);
        let verdict = Verdict::judge(Fault::ShardFailover, &sent_after, window());
        assert!(!verdict.passed(), "{verdict}");
        assert!(verdict.problems[0].contains("http_status:503"), "{verdict}");
    }

    #[test]
    fn a_fault_without_errors_fails_on_one() {
        let verdict = Verdict::judge(
            Fault::RollingRestart,
            &report(FAULT_AT + 10, FAULT_AT + 20),
            window(),
        );
        assert!(!verdict.passed());
        assert!(verdict.problems[0].contains("none may show"), "{verdict}");
    }

    #[test]
    fn one_lost_response_or_violation_fails_the_run() {
        let mut lost = report(FAULT_AT + 10, FAULT_AT + 20);
        lost["lost_responses"] = json!(1);
        assert!(!Verdict::judge(Fault::NodeKill, &lost, window()).passed());
        let mut violation = report(FAULT_AT + 10, FAULT_AT + 20);
        violation["protocol_violations"] = json!(1);
        assert!(!Verdict::judge(Fault::NodeKill, &violation, window()).passed());
    }
}
