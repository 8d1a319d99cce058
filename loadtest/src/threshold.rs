//! Thresholds: pass/fail rules on a run's figures, so that a pipeline can
//! gate a deploy on a load test (`--threshold 'p99<200ms'`, or
//! `thresholds = [...]` in the scenario). A broken one fails the run (exit
//! 1) and the report says which, with the figure it was held against.
//!
//! Grammar: `[OPERATION ]METRIC CMP VALUE`. Without an operation the rule
//! is on all operations together (`initialize` included). Metrics:
//! - `p50`, `p90`, `p95`, `p99`, `p999`, `max`, `mean`: latency of the
//!   successful operations, the value with a unit `us`, `ms` or `s`;
//! - `errors`: failed operations, as a share of all (`errors<0.1%`) or a
//!   count (`errors<5`);
//! - `rate`: successful operations per second of the run (`rate>500/s`);
//! - `dropped`: arrivals of the open model (`--rate`, `--stage`) dropped
//!   because every session was busy, as a share (`dropped<1%`) or a count;
//!   on the whole run only.
//!
//! `CMP` is `<`, `<=`, `>` or `>=`; spaces are allowed anywhere between
//! the parts (`p99 < 200 ms`).

use anyhow::{Context, bail, ensure};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// One rule, parsed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Threshold {
    /// As written, for the report.
    pub(crate) text: String,
    /// The operation it is on; `None`: all of them.
    pub(crate) operation: Option<String>,
    metric: Metric,
    cmp: Cmp,
    /// Microseconds for latencies, a share in 0..=1 or a count for errors,
    /// per second for rates.
    limit: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Metric {
    Quantile(f64),
    Max,
    Mean,
    ErrorShare,
    ErrorCount,
    Rate,
    DroppedShare,
    DroppedCount,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

/// The figures of one operation (or all) a threshold is held against.
#[derive(Debug)]
pub(crate) struct Figures<'a> {
    /// Latency of the successful operations, microseconds.
    pub(crate) latency_us: &'a Histogram<u64>,
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    /// The run's length.
    pub(crate) secs: f64,
    /// The open model's (scheduled, dropped) arrivals.
    pub(crate) arrivals: Option<(u64, u64)>,
}

/// A threshold held against the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Verdict {
    pub(crate) threshold: String,
    pub(crate) passed: bool,
    /// The run's figure, with its unit (`182.3ms`, `0.05%`, `812.0/s`).
    pub(crate) actual: String,
}

const METRICS: [&str; 10] = [
    "p50", "p90", "p95", "p99", "p999", "max", "mean", "errors", "rate", "dropped",
];

impl Threshold {
    /// Parses one rule.
    ///
    /// # Errors
    /// Anything that is not the grammar above, said with an example.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        Self::parse_inner(text).with_context(|| {
            format!("threshold {text:?} (write it as [OPERATION ]METRIC<VALUE, e.g. 'p99<200ms', 'errors<0.1%', 'rate>100/s', 'call_tool:search p95<1s')")
        })
    }

    fn parse_inner(text: &str) -> anyhow::Result<Self> {
        let trimmed = text.trim();
        let starts_with_metric = |s: &str| {
            METRICS.iter().any(|m| {
                s.strip_prefix(m)
                    .is_some_and(|rest| rest.trim_start().starts_with(['<', '>']))
            })
        };
        let (operation, rule) = if starts_with_metric(trimmed) {
            (None, trimmed)
        } else {
            match trimmed.split_once(char::is_whitespace) {
                Some((op, rule)) if starts_with_metric(rule.trim_start()) => {
                    (Some(op.to_owned()), rule.trim_start())
                }
                _ => {
                    bail!("no metric (p50, p90, p95, p99, p999, max, mean, errors, rate, dropped)")
                }
            }
        };
        let compact: String = rule.chars().filter(|c| !c.is_whitespace()).collect();
        let at = compact.find(['<', '>']).context("no comparison")?;
        let (name, rest) = compact.split_at(at);
        let (cmp, value) = if let Some(v) = rest.strip_prefix("<=") {
            (Cmp::Le, v)
        } else if let Some(v) = rest.strip_prefix(">=") {
            (Cmp::Ge, v)
        } else if let Some(v) = rest.strip_prefix('<') {
            (Cmp::Lt, v)
        } else {
            (Cmp::Gt, &rest[1..])
        };
        let number = |s: &str| -> anyhow::Result<f64> {
            let n: f64 = s
                .parse()
                .with_context(|| format!("{s:?} is not a number"))?;
            ensure!(n.is_finite() && n >= 0.0, "{s:?} is not a number >= 0");
            Ok(n)
        };
        // `0.1%` is a share (of 1), `5` a count.
        let share_or_count = |share: Metric, count: Metric| -> anyhow::Result<(Metric, f64)> {
            match value.strip_suffix('%') {
                Some(percent) => {
                    let percent = number(percent)?;
                    ensure!(percent <= 100.0, "a share above 100%");
                    Ok((share, percent / 100.0))
                }
                None => Ok((count, number(value)?)),
            }
        };
        let (metric, limit) = match name {
            "errors" => share_or_count(Metric::ErrorShare, Metric::ErrorCount)?,
            "dropped" => {
                ensure!(operation.is_none(), "dropped is on the whole run only");
                share_or_count(Metric::DroppedShare, Metric::DroppedCount)?
            }
            "rate" => (
                Metric::Rate,
                number(value.strip_suffix("/s").unwrap_or(value))?,
            ),
            latency => {
                let metric = match latency {
                    "p50" => Metric::Quantile(0.50),
                    "p90" => Metric::Quantile(0.90),
                    "p95" => Metric::Quantile(0.95),
                    "p99" => Metric::Quantile(0.99),
                    "p999" => Metric::Quantile(0.999),
                    "max" => Metric::Max,
                    "mean" => Metric::Mean,
                    other => bail!("unknown metric {other:?}"),
                };
                (metric, latency_us(value)?)
            }
        };
        Ok(Self {
            text: text.trim().to_owned(),
            operation,
            metric,
            cmp,
            limit,
        })
    }

    /// The same rule on the operation `name` (its text says so).
    pub(crate) fn on(self, name: &str) -> Self {
        Self {
            text: format!("{name} {}", self.text),
            operation: Some(name.to_owned()),
            ..self
        }
    }

    /// Holds the rule against `figures`.
    pub(crate) fn evaluate(&self, figures: &Figures<'_>) -> Verdict {
        let hist = figures.latency_us;
        let total = figures.ok + figures.failed;
        let (actual, shown) = match self.metric {
            // No successful operation: no latency to hold, so the rule
            // fails rather than pass on nothing.
            Metric::Quantile(_) | Metric::Max | Metric::Mean if hist.is_empty() => {
                return self.verdict(false, "no successful operation".to_owned());
            }
            Metric::Quantile(q) => {
                let us = hist.value_at_quantile(q) as f64;
                (us, format!("{:.3}ms", us / 1000.0))
            }
            Metric::Max => {
                let us = hist.max() as f64;
                (us, format!("{:.3}ms", us / 1000.0))
            }
            Metric::Mean => (hist.mean(), format!("{:.3}ms", hist.mean() / 1000.0)),
            Metric::ErrorShare if total == 0 => {
                return self.verdict(false, "no operation".to_owned());
            }
            Metric::ErrorShare => {
                let share = figures.failed as f64 / total as f64;
                (share, format!("{:.4}%", share * 100.0))
            }
            Metric::ErrorCount => (figures.failed as f64, figures.failed.to_string()),
            Metric::Rate => {
                let rate = figures.ok as f64 / figures.secs.max(1e-9);
                (rate, format!("{rate:.1}/s"))
            }
            Metric::DroppedShare | Metric::DroppedCount => {
                let Some((scheduled, dropped)) = figures.arrivals else {
                    return self.verdict(false, "no arrivals (not an open-model run)".to_owned());
                };
                if self.metric == Metric::DroppedCount {
                    (dropped as f64, dropped.to_string())
                } else if scheduled == 0 {
                    return self.verdict(false, "no arrivals".to_owned());
                } else {
                    let share = dropped as f64 / scheduled as f64;
                    (share, format!("{:.4}%", share * 100.0))
                }
            }
        };
        let passed = match self.cmp {
            Cmp::Lt => actual < self.limit,
            Cmp::Le => actual <= self.limit,
            Cmp::Gt => actual > self.limit,
            Cmp::Ge => actual >= self.limit,
        };
        self.verdict(passed, shown)
    }

    /// Whether this is a rule on the open model's dropped arrivals.
    pub(crate) fn is_dropped(&self) -> bool {
        matches!(self.metric, Metric::DroppedShare | Metric::DroppedCount)
    }

    /// Whether this is an error rule on all operations (which then takes
    /// over from `--max-errors`'s default of 0).
    pub(crate) fn is_overall_errors(&self) -> bool {
        self.operation.is_none() && matches!(self.metric, Metric::ErrorShare | Metric::ErrorCount)
    }

    fn verdict(&self, passed: bool, actual: String) -> Verdict {
        Verdict {
            threshold: self.text.clone(),
            passed,
            actual,
        }
    }
}

/// Holds every threshold against a run: `names` and `figures` (ok,
/// failed, latency) per operation, in the same order; the run lasted
/// `secs`. A threshold without an operation is held against all of them
/// together.
pub(crate) fn verdicts(
    thresholds: &[Threshold],
    names: &[String],
    figures: &[(u64, u64, Histogram<u64>)],
    secs: f64,
    arrivals: Option<(u64, u64)>,
) -> anyhow::Result<Vec<Verdict>> {
    let mut all = crate::stats::latency_histogram()?;
    let (mut ok, mut failed) = (0, 0);
    for (n_ok, n_failed, hist) in figures {
        ok += n_ok;
        failed += n_failed;
        all.add(hist)?;
    }
    thresholds
        .iter()
        .map(|threshold| {
            let (ok, failed, latency_us) = match &threshold.operation {
                None => (ok, failed, &all),
                Some(name) => {
                    let index = names.iter().position(|n| n == name).with_context(|| {
                        format!("threshold {:?}: no operation {name:?}", threshold.text)
                    })?;
                    let (ok, failed, hist) = &figures[index];
                    (*ok, *failed, hist)
                }
            };
            Ok(threshold.evaluate(&Figures {
                latency_us,
                ok,
                failed,
                secs,
                arrivals,
            }))
        })
        .collect()
}

/// `200ms`, `1.5s`, `800us` in microseconds.
fn latency_us(value: &str) -> anyhow::Result<f64> {
    let (number, scale) = if let Some(n) = value.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = value.strip_suffix("ms") {
        (n, 1_000.0)
    } else if let Some(n) = value.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        bail!("{value:?} needs a unit: us, ms or s");
    };
    let n: f64 = number
        .parse()
        .with_context(|| format!("{number:?} is not a number"))?;
    ensure!(n.is_finite() && n >= 0.0, "{number:?} is not a number >= 0");
    Ok(n * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values_ms: &[u64]) -> Histogram<u64> {
        let mut h = crate::stats::latency_histogram().unwrap();
        for ms in values_ms {
            h.record(ms * 1000).unwrap();
        }
        h
    }

    fn holds(text: &str, figures: &Figures<'_>) -> bool {
        Threshold::parse(text).unwrap().evaluate(figures).passed
    }

    #[test]
    fn rules_parse_with_or_without_an_operation_and_spaces() {
        let t = Threshold::parse("p99<200ms").unwrap();
        assert_eq!((t.operation.as_deref(), t.limit), (None, 200_000.0));
        let t = Threshold::parse(" call_tool:search  p95 <= 1.5 s ").unwrap();
        assert_eq!(t.operation.as_deref(), Some("call_tool:search"));
        assert_eq!(
            (t.metric, t.cmp, t.limit),
            (Metric::Quantile(0.95), Cmp::Le, 1.5e6)
        );
        let t = Threshold::parse("errors < 0.1 %").unwrap();
        assert_eq!((t.metric, t.limit), (Metric::ErrorShare, 0.001));
        assert!(t.is_overall_errors());
        assert_eq!(
            Threshold::parse("errors<5").unwrap().metric,
            Metric::ErrorCount
        );
        let t = Threshold::parse("echo_call rate>100/s").unwrap();
        assert_eq!((t.metric, t.cmp, t.limit), (Metric::Rate, Cmp::Gt, 100.0));
        assert!(!t.is_overall_errors());
        for bad in [
            "p99",
            "p99<200",
            "p98<200ms",
            "p99<-1ms",
            "errors<101%",
            "rate>fast",
            "echo_call",
            "a b p99<1ms",
            "echo_call dropped<1%",
            "",
        ] {
            let err = Threshold::parse(bad).unwrap_err();
            assert!(
                format!("{err:#}").contains("e.g. 'p99<200ms'"),
                "{bad}: {err:#}"
            );
        }
    }

    #[test]
    fn rules_hold_against_the_figures() {
        let latency = hist(&[10, 20, 30, 40, 500]);
        let figures = Figures {
            latency_us: &latency,
            ok: 5,
            failed: 1,
            secs: 2.0,
            arrivals: Some((200, 3)),
        };
        assert!(holds("p50<31ms", &figures));
        assert!(!holds("p99<200ms", &figures));
        assert!(holds("max<=501ms", &figures));
        assert!(holds("mean>100ms", &figures));
        assert!(!holds("errors<10%", &figures));
        assert!(holds("errors<20%", &figures));
        assert!(holds("errors<=1", &figures));
        assert!(holds("rate>=2.5/s", &figures));
        assert!(!holds("rate>2.5", &figures));
        assert!(holds("dropped<2%", &figures));
        assert!(!holds("dropped<1%", &figures));
        assert!(holds("dropped<=3", &figures));
        let verdict = Threshold::parse("p99 < 200 ms").unwrap().evaluate(&figures);
        assert_eq!(verdict.threshold, "p99 < 200 ms");
        assert!(verdict.actual.ends_with("ms"), "{}", verdict.actual);

        // Nothing succeeded: latency rules fail instead of passing on nothing.
        let empty = hist(&[]);
        let nothing = Figures {
            latency_us: &empty,
            ok: 0,
            failed: 3,
            secs: 1.0,
            arrivals: None,
        };
        assert!(!holds("p99<1s", &nothing));
        assert!(!holds("errors<100%", &nothing));
        assert!(holds("errors<=100%", &nothing));
        // A closed-loop run has no arrivals to hold a dropped rule against.
        assert!(!holds("dropped<1%", &nothing));
    }
}
