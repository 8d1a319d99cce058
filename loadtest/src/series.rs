//! The run over time. A sampler task swaps the current interval out of
//! [`Stats`] every tick and turns it into a [`Point`]: counts and latency
//! percentiles per operation, errors by key, active sessions and,
//! with `--server-pid`, the server's resident memory. The points make up
//! the [`Series`] of the JSON report and the HTML charts.
//!
//! Owner and stop path: `drive` starts the [`Sampler`] before the first
//! session and calls [`Sampler::finish`] after the last one ends; `finish`
//! closes the last (shorter) interval and hands back the series, which the
//! task owns until then. A `Sampler` dropped without `finish` ends its task
//! at the next tick.
//!
//! Memory bound: at most [`MAX_POINTS`] points, and at most
//! [`MAX_POINT_ROWS`] operation rows over all points (a scenario with many
//! named operations gets fewer points, see [`max_points`]). A row holds
//! about 100 bytes (200 as pretty JSON), so the series stays below 20 MB;
//! the interval is made coarser up front when the longest possible run
//! would need more points (see [`interval`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, ensure};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::rss::rss_bytes;
use crate::stats::{ErrorKind, IntervalCounts, Stats, latency_histogram};

/// Most points a series keeps: 5.5 hours at the default 1 s interval.
pub(crate) const MAX_POINTS: usize = 20_000;
/// Most operation rows (`all` included) over all points of a series.
pub(crate) const MAX_POINT_ROWS: usize = 200_000;
/// Shortest interval accepted: each tick resets a histogram per operation and reads
/// `/proc`, which is cheap once a second but not a thousand times.
const MIN_INTERVAL_MS: u64 = 100;

/// The most points a series of `operations` rows per point (the
/// scenario's operation names and `all`) keeps.
pub(crate) fn max_points(operations: usize) -> usize {
    (MAX_POINT_ROWS / operations.max(1)).min(MAX_POINTS)
}

/// The interval to sample at: the requested one, made coarser when a run
/// of `longest_run` would otherwise need more than `max_points` points.
///
/// # Errors
/// `requested_ms` is below the minimum.
pub(crate) fn interval(
    requested_ms: u64,
    longest_run: Duration,
    max_points: usize,
) -> anyhow::Result<Duration> {
    ensure!(
        requested_ms >= MIN_INTERVAL_MS,
        "--interval-ms must be at least {MIN_INTERVAL_MS}"
    );
    let needed_ms = longest_run.as_millis().div_ceil(max_points.max(1) as u128);
    let needed_ms = u64::try_from(needed_ms).unwrap_or(u64::MAX);
    Ok(Duration::from_millis(requested_ms.max(needed_ms)))
}

/// The time series of one run.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Series {
    /// Nominal interval length; each point carries its actual one.
    pub(crate) interval_ms: u64,
    pub(crate) points: Vec<Point>,
    /// Intervals left out because the series was full (0 unless the run
    /// outlived the bound the interval was chosen for).
    pub(crate) dropped_points: u64,
    /// The server's RSS over the run, with `--server-pid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server_rss: Option<RssSummary>,
}

/// One interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Point {
    /// End of the interval, seconds since the run's start.
    pub(crate) t_secs: f64,
    /// Length of the interval, seconds; rates are counts divided by it.
    pub(crate) dt_secs: f64,
    /// Sessions active at the end of the interval.
    pub(crate) active_sessions: u64,
    /// The server's RSS at the end of the interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server_rss_bytes: Option<u64>,
    /// All operations together.
    pub(crate) all: IntervalOp,
    /// Kinds that finished at least one operation in the interval.
    pub(crate) ops: Vec<IntervalOp>,
    /// Errors by key, those of the measured operations and the others.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) errors: BTreeMap<String, u64>,
}

/// One operation (or `all`) within one interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct IntervalOp {
    /// The operation's name (`call_tool:search`, `echo_call`, `all`).
    pub(crate) kind: String,
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    /// Latency of the successful operations; absent when none succeeded.
    #[serde(flatten)]
    pub(crate) latency: Option<Percentiles>,
}

/// Latency percentiles of one interval, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Percentiles {
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

impl Percentiles {
    /// The percentiles of `hist` (microseconds); `None` when it is empty.
    fn of(hist: &Histogram<u64>) -> Option<Self> {
        if hist.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Self {
            p50_ms: ms(hist.value_at_quantile(0.50)),
            p90_ms: ms(hist.value_at_quantile(0.90)),
            p99_ms: ms(hist.value_at_quantile(0.99)),
            max_ms: ms(hist.max()),
        })
    }
}

/// The server's resident memory over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RssSummary {
    pub(crate) pid: u32,
    /// Read when the sampler started, before the first session.
    pub(crate) start_bytes: u64,
    pub(crate) peak_bytes: u64,
    /// The last successful reading.
    pub(crate) end_bytes: u64,
    /// When the process could no longer be read (it exited), seconds since
    /// the start; no readings after that.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lost_at_secs: Option<f64>,
}

/// The sampler task. Owned by `drive`; stopped by [`Sampler::finish`].
#[derive(Debug)]
pub(crate) struct Sampler {
    /// Sent (or dropped) to make the task close the last interval and return.
    stop: oneshot::Sender<()>,
    /// Returns the series the task built.
    task: JoinHandle<Series>,
}

impl Sampler {
    /// Reads the server's RSS once (with `server_pid`) and starts sampling
    /// every `interval` from `start`.
    ///
    /// # Errors
    /// `server_pid` names no readable process.
    pub(crate) fn start(
        stats: Arc<Stats>,
        start: Instant,
        interval: Duration,
        server_pid: Option<u32>,
    ) -> anyhow::Result<Self> {
        let state = SamplerState::new(stats, start, interval, server_pid)?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(state.run(stopped));
        Ok(Self { stop, task })
    }

    /// Closes the last interval and returns the series.
    ///
    /// # Errors
    /// The task panicked.
    pub(crate) async fn finish(self) -> anyhow::Result<Series> {
        // A send error means the task is gone already; joining says why.
        let _ = self.stop.send(());
        self.task.await.context("the sampler task failed")
    }
}

/// What the sampler task owns.
#[derive(Debug)]
struct SamplerState {
    stats: Arc<Stats>,
    start: Instant,
    interval: Duration,
    /// End of the previous interval, since `start`.
    last: Duration,
    /// Reused every tick so that sampling allocates no histograms.
    counts: IntervalCounts,
    /// All operations merged, reused every tick.
    all_us: Histogram<u64>,
    /// `None` without `--server-pid` and once the process is gone.
    server_pid: Option<u32>,
    /// [`MAX_POINTS`]; lowered by tests.
    max_points: usize,
    series: Series,
}

impl SamplerState {
    fn new(
        stats: Arc<Stats>,
        start: Instant,
        interval: Duration,
        server_pid: Option<u32>,
    ) -> anyhow::Result<Self> {
        let server_rss = match server_pid {
            Some(pid) => {
                let bytes = rss_bytes(pid).with_context(|| format!("--server-pid {pid}"))?;
                Some(RssSummary {
                    pid,
                    start_bytes: bytes,
                    peak_bytes: bytes,
                    end_bytes: bytes,
                    lost_at_secs: None,
                })
            }
            None => None,
        };
        Ok(Self {
            counts: IntervalCounts::new(stats.names().len())?,
            max_points: max_points(stats.names().len() + 1),
            stats,
            start,
            interval,
            last: Duration::ZERO,
            all_us: latency_histogram()?,
            server_pid,
            series: Series {
                interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
                points: Vec::new(),
                dropped_points: 0,
                server_rss,
            },
        })
    }

    /// Samples every interval until told to stop, then once more for the
    /// last, shorter interval.
    async fn run(mut self, mut stop: oneshot::Receiver<()>) -> Series {
        let mut tick = tokio::time::interval_at(self.start + self.interval, self.interval);
        // A late tick (busy runtime) shortens no interval: each point
        // carries its own length anyway.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sample(Instant::now()),
                // Sent or dropped: either way the run is over.
                _ = &mut stop => break,
            }
        }
        self.sample(Instant::now());
        self.series
    }

    /// Closes the interval ending at `now` and appends its point.
    fn sample(&mut self, now: Instant) {
        let t = now.saturating_duration_since(self.start);
        let dt = t.saturating_sub(self.last);
        self.last = t;
        // Before taking the interval, so that a lost server's error lands in it.
        let server_rss_bytes = self.read_rss(t);
        self.counts.clear();
        self.stats.take_interval(&mut self.counts);
        if self.series.points.len() >= self.max_points {
            self.series.dropped_points += 1;
            return;
        }
        let point = Point {
            t_secs: t.as_secs_f64(),
            dt_secs: dt.as_secs_f64(),
            active_sessions: self.stats.active_sessions.load(Ordering::Relaxed),
            server_rss_bytes,
            all: self.merge_all(),
            ops: self.per_kind(),
            errors: std::mem::take(&mut self.counts.errors),
        };
        self.series.points.push(point);
    }

    /// Each operation that did anything in the interval.
    fn per_kind(&self) -> Vec<IntervalOp> {
        self.stats
            .names()
            .iter()
            .zip(&self.counts.ops)
            .filter(|(_, op)| op.ok + op.failed > 0)
            .map(|(name, op)| IntervalOp {
                kind: name.clone(),
                ok: op.ok,
                failed: op.failed,
                latency: Percentiles::of(&op.latency_us),
            })
            .collect()
    }

    /// All kinds together.
    fn merge_all(&mut self) -> IntervalOp {
        self.all_us.reset();
        let (mut ok, mut failed) = (0, 0);
        for op in &self.counts.ops {
            ok += op.ok;
            failed += op.failed;
            // Cannot fail: every histogram here has the same bounds.
            let _ = self.all_us.add(&op.latency_us);
        }
        IntervalOp {
            kind: "all".to_owned(),
            ok,
            failed,
            latency: Percentiles::of(&self.all_us),
        }
    }

    /// The server's RSS now. The first failure (the process exited) is
    /// counted once as an error; sampling stops after it.
    fn read_rss(&mut self, t: Duration) -> Option<u64> {
        let pid = self.server_pid?;
        let summary = self.series.server_rss.as_mut()?;
        match rss_bytes(pid) {
            Ok(bytes) => {
                summary.peak_bytes = summary.peak_bytes.max(bytes);
                summary.end_bytes = bytes;
                Some(bytes)
            }
            Err(_) => {
                self.server_pid = None;
                summary.lost_at_secs = Some(t.as_secs_f64());
                self.stats.error(&ErrorKind::ServerRssLost);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::OpId;

    const LIST: OpId = OpId(1);
    const ECHO: OpId = OpId(2);
    const LONG: OpId = OpId(3);

    fn names() -> Vec<String> {
        ["initialize", "tools_list", "echo_call", "long_call"]
            .map(str::to_owned)
            .to_vec()
    }

    fn state(server_pid: Option<u32>) -> (Arc<Stats>, SamplerState, Instant) {
        let stats = Arc::new(Stats::new(&names()).unwrap());
        let start = Instant::now();
        let state = SamplerState::new(
            Arc::clone(&stats),
            start,
            Duration::from_secs(1),
            server_pid,
        )
        .unwrap();
        (stats, state, start)
    }

    fn op(point: &Point, id: OpId) -> Option<&IntervalOp> {
        point.ops.iter().find(|op| op.kind == names()[id.0])
    }

    #[test]
    fn operations_land_in_the_interval_they_finished_in() {
        let (stats, mut state, start) = state(None);
        for ms in 1..=100 {
            stats.ok(ECHO, Duration::from_millis(ms));
        }
        stats.failed(LONG, &ErrorKind::Timeout, tokio::time::Instant::now());
        state.sample(start + Duration::from_secs(1));
        for _ in 0..10 {
            stats.ok(ECHO, Duration::from_millis(500));
        }
        stats.error(&ErrorKind::HttpStatus(503));
        state.sample(start + Duration::from_millis(2500));

        let [first, second] = &state.series.points[..] else {
            panic!("{:?}", state.series.points);
        };
        assert_eq!((first.t_secs, first.dt_secs), (1.0, 1.0));
        assert_eq!((second.t_secs, second.dt_secs), (2.5, 1.5));

        let echo = op(first, ECHO).unwrap();
        assert_eq!((echo.ok, echo.failed), (100, 0));
        let p = echo.latency.unwrap();
        // 3 significant figures: within 0.1 %.
        assert!((p.p50_ms - 50.0).abs() < 0.1, "{p:?}");
        assert!((p.p99_ms - 99.0).abs() < 0.1, "{p:?}");
        assert!((p.max_ms - 100.0).abs() < 0.1, "{p:?}");
        let long = op(first, LONG).unwrap();
        assert_eq!((long.ok, long.failed, long.latency), (0, 1, None));
        assert_eq!(first.errors.get("timeout"), Some(&1));
        assert_eq!((first.all.ok, first.all.failed), (100, 1));

        // The second interval holds only its own operations.
        let echo = op(second, ECHO).unwrap();
        assert_eq!(echo.ok, 10);
        assert!((echo.latency.unwrap().p50_ms - 500.0).abs() < 0.5);
        assert!(op(second, LONG).is_none());
        assert_eq!(second.errors.len(), 1);
        assert_eq!(second.errors.get("http_status:503"), Some(&1));
        // The whole-run figures still see everything.
        assert_eq!(stats.totals(), (110, 1, 0));
        assert_eq!(stats.errors().len(), 2);
    }

    #[test]
    fn all_merges_the_kinds_latencies() {
        let (stats, mut state, start) = state(None);
        for _ in 0..98 {
            stats.ok(ECHO, Duration::from_millis(1));
        }
        stats.ok(LONG, Duration::from_millis(1000));
        stats.ok(LONG, Duration::from_millis(2000));
        state.sample(start + Duration::from_secs(1));
        let all = &state.series.points[0].all;
        let p = all.latency.unwrap();
        assert_eq!(all.ok, 100);
        assert!((p.p50_ms - 1.0).abs() < 0.01, "{p:?}");
        assert!((p.p99_ms - 1000.0).abs() < 1.0, "{p:?}");
        assert!((p.max_ms - 2000.0).abs() < 2.0, "{p:?}");
    }

    #[test]
    fn quiet_interval_has_no_operations_but_keeps_sessions() {
        let (stats, mut state, start) = state(None);
        stats.active_sessions.store(7, Ordering::Relaxed);
        state.sample(start + Duration::from_secs(1));
        let point = &state.series.points[0];
        assert!(point.ops.is_empty());
        assert_eq!(point.all.latency, None);
        assert_eq!(point.active_sessions, 7);
        assert_eq!(point.server_rss_bytes, None);
        assert!(state.series.server_rss.is_none());
    }

    #[test]
    fn series_stops_growing_at_its_bound() {
        let (stats, mut state, start) = state(None);
        state.max_points = 5;
        for s in 1..=8 {
            stats.ok(ECHO, Duration::from_millis(1));
            state.sample(start + Duration::from_secs(s));
        }
        assert_eq!(state.series.points.len(), 5);
        assert_eq!(state.series.points[4].t_secs, 5.0);
        assert_eq!(state.series.dropped_points, 3);
        // Intervals left out are still taken: nothing piles up for later.
        state.max_points = 6;
        stats.ok(ECHO, Duration::from_millis(1));
        state.sample(start + Duration::from_secs(9));
        assert_eq!(state.series.points[5].all.ok, 1);
    }

    #[test]
    fn rss_of_own_process_is_sampled_every_interval() {
        let (stats, mut state, start) = state(Some(std::process::id()));
        let start_bytes = state.series.server_rss.as_ref().unwrap().start_bytes;
        assert!(start_bytes > 1024 * 1024, "{start_bytes}");
        // Grow the resident set: touched pages count, so write them.
        let ballast = std::hint::black_box(vec![1u8; 64 * 1024 * 1024]);
        state.sample(start + Duration::from_secs(1));
        let sampled = state.series.points[0].server_rss_bytes.unwrap();
        assert!(
            sampled >= start_bytes + 32 * 1024 * 1024,
            "{sampled} {start_bytes}"
        );
        drop(ballast);
        state.sample(start + Duration::from_secs(2));
        let summary = state.series.server_rss.clone().unwrap();
        assert!(summary.peak_bytes >= sampled);
        assert_eq!(
            Some(summary.end_bytes),
            state.series.points[1].server_rss_bytes
        );
        assert_eq!(summary.lost_at_secs, None);
        assert!(stats.errors().is_empty());
    }

    #[test]
    fn vanished_server_is_one_error_then_no_samples() {
        let (stats, mut state, start) = state(Some(std::process::id()));
        // As if the process had exited: a PID that cannot exist.
        state.server_pid = Some(u32::MAX);
        for s in 1..=3 {
            state.sample(start + Duration::from_secs(s));
        }
        assert!(
            state
                .series
                .points
                .iter()
                .all(|p| p.server_rss_bytes.is_none())
        );
        let summary = state.series.server_rss.as_ref().unwrap();
        assert_eq!(summary.lost_at_secs, Some(1.0));
        assert_eq!(stats.errors().get("server_rss_lost"), Some(&1));
        let lost_in: Vec<usize> = state.series.points.iter().map(|p| p.errors.len()).collect();
        assert_eq!(lost_in, [1, 0, 0]);
        assert_eq!(stats.totals(), (0, 0, 0));
    }

    #[test]
    fn missing_server_pid_is_refused_at_start() {
        let stats = Arc::new(Stats::new(&names()).unwrap());
        let err = SamplerState::new(
            stats,
            Instant::now(),
            Duration::from_secs(1),
            Some(u32::MAX),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("--server-pid"), "{err:#}");
    }

    #[test]
    fn interval_is_coarsened_for_long_runs_only() {
        let hour = Duration::from_secs(3600);
        assert_eq!(
            interval(1000, hour, MAX_POINTS).unwrap(),
            Duration::from_secs(1)
        );
        assert_eq!(
            interval(250, hour, MAX_POINTS).unwrap(),
            Duration::from_millis(250)
        );
        let day = Duration::from_secs(86_400);
        let coarse = interval(1000, day, MAX_POINTS).unwrap();
        assert_eq!(coarse, Duration::from_millis(4320));
        assert!(day.as_millis() / coarse.as_millis() <= MAX_POINTS as u128);
        assert!(interval(10, hour, MAX_POINTS).is_err());
        // Many named operations: fewer, longer intervals.
        assert_eq!(max_points(4), MAX_POINTS);
        assert_eq!(max_points(65), 3076);
        assert_eq!(
            interval(1000, hour, max_points(65)).unwrap(),
            Duration::from_millis(1171)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sampler_task_ticks_and_closes_the_last_interval() {
        let stats = Arc::new(Stats::new(&names()).unwrap());
        let start = Instant::now();
        let sampler =
            Sampler::start(Arc::clone(&stats), start, Duration::from_secs(1), None).unwrap();
        stats.ok(LIST, Duration::from_millis(3));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        stats.ok(LIST, Duration::from_millis(3));
        let series = sampler.finish().await.unwrap();
        let oks: Vec<u64> = series.points.iter().map(|p| p.all.ok).collect();
        assert_eq!(oks, [1, 0, 1]);
        assert_eq!(series.interval_ms, 1000);
        assert!((series.points[2].t_secs - 2.5).abs() < 0.01);
    }
}
