//! The open model: operations arrive at a rate of their own (`--rate`, or
//! ramping `--stage`s), whatever the server's speed, as users of a public
//! service do. Each arrival takes an idle session of the pool (`--sessions`
//! of them, opened first) for one operation of the scenario's mix; an
//! arrival that finds every session busy is dropped and counted: the
//! generator could not offer the load asked for, and the report says so.
//!
//! Latency counts from the arrival's intended time, not from when the
//! generator got round to it, so a stalled server (or generator) shows in
//! the figures instead of slowing the arrivals down (no coordinated
//! omission).
//!
//! Owner and stop path: `main` runs [`run`] to its end. The scheduler stops
//! scheduling at `plan.end`; arrivals under way finish, bounded by their
//! own timeouts, and anything left at `plan.hard_deadline` is aborted; then
//! the pooled sessions are DELETEd. Memory: the pool, and one task per
//! arrival in flight (at most one per session).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, ensure};
use mcp_cluster_client::Client;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};

use crate::pools::Pools;
use crate::scenario::{Era, Scenario};
use crate::session::{self, Plan};
use crate::stateless;
use crate::stats::Stats;

/// The highest rate asked for, per second: far above what one generator
/// offers (about 45,000 checked calls a second from one core), low enough
/// that a typo does not spin the scheduler for nothing.
const MAX_RATE: f64 = 1_000_000.0;
/// Sessions opened (and closed) at once around the run.
const OPEN_CONCURRENCY: usize = 256;
/// How long the pool's sessions may take to open before the run starts
/// without those that did not.
const POOL_OPEN_LIMIT: Duration = Duration::from_secs(60);

/// How arrivals are spread over the run: a rate that changes linearly
/// from one stage's target to the next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Schedule {
    /// The rate at the start, per second.
    start_rate: f64,
    /// (length, rate at its end per second); the rate moves linearly from
    /// the previous stage's end rate to this one's.
    stages: Vec<(Duration, f64)>,
}

impl Schedule {
    /// `rate` per second for `duration`.
    pub(crate) fn constant(rate: f64, duration: Duration) -> anyhow::Result<Self> {
        ensure!(
            rate.is_finite() && rate > 0.0 && rate <= MAX_RATE,
            "--rate must be above 0 and at most {MAX_RATE}"
        );
        Ok(Self {
            start_rate: rate,
            stages: vec![(duration, rate)],
        })
    }

    /// Ramping stages (`10s:100` is 10 seconds ending at 100 per second),
    /// from `start_rate`.
    pub(crate) fn ramping(start_rate: f64, stages: &[String]) -> anyhow::Result<Self> {
        ensure!(
            start_rate.is_finite() && (0.0..=MAX_RATE).contains(&start_rate),
            "--start-rate must be 0 to {MAX_RATE}"
        );
        let stages = stages
            .iter()
            .map(|stage| {
                parse_stage(stage).with_context(|| {
                    format!("--stage {stage:?} (write DURATION:RATE, e.g. 30s:200 or 2m:50)")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        ensure!(
            stages.iter().any(|(_, rate)| *rate > 0.0) || start_rate > 0.0,
            "the stages never rise above 0 per second"
        );
        Ok(Self { start_rate, stages })
    }

    /// The whole schedule's length.
    pub(crate) fn duration(&self) -> Duration {
        self.stages.iter().map(|(d, _)| *d).sum()
    }

    /// Arrivals the schedule asks for, all told.
    #[cfg(test)]
    fn total(&self) -> f64 {
        let mut from = self.start_rate;
        self.stages
            .iter()
            .map(|(d, to)| {
                let n = (from + to) / 2.0 * d.as_secs_f64();
                from = *to;
                n
            })
            .sum()
    }

    /// When the `n`-th arrival (from 0) is due, from the start; `None`
    /// past the end. Arrival `n` comes when the rate's integral reaches
    /// `n + 1/2`, so a constant rate r spaces them 1/r apart from 1/(2r).
    pub(crate) fn due(&self, n: u64) -> Option<Duration> {
        let mut left = n as f64 + 0.5;
        let mut at = 0.0;
        let mut from = self.start_rate;
        for (length, to) in &self.stages {
            let d = length.as_secs_f64();
            let here = (from + to) / 2.0 * d;
            if left <= here && here > 0.0 {
                // Solve from*t + (to-from)/(2d)*t^2 = left for t in 0..=d.
                let slope = (to - from) / d;
                let t = if slope.abs() < 1e-12 {
                    left / from
                } else {
                    (-from + (from * from + 2.0 * slope * left).max(0.0).sqrt()) / slope
                };
                return Some(Duration::from_secs_f64(at + t.clamp(0.0, d)));
            }
            left -= here;
            at += d;
            from = *to;
        }
        None
    }
}

/// `30s:200`, `2m:50`, `500ms:10`.
fn parse_stage(stage: &str) -> anyhow::Result<(Duration, f64)> {
    let (length, rate) = stage.split_once(':').context("no ':'")?;
    let length = length.trim();
    let (number, scale) = if let Some(n) = length.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = length.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = length.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = length.strip_suffix('h') {
        (n, 3600.0)
    } else {
        anyhow::bail!("the duration needs a unit: ms, s, m or h");
    };
    let secs = number.trim().parse::<f64>().context("the duration")? * scale;
    ensure!(
        secs.is_finite() && secs > 0.0,
        "the duration must be above 0"
    );
    let rate = rate.trim().trim_end_matches("/s");
    let rate: f64 = rate.parse().context("the rate")?;
    ensure!(
        rate.is_finite() && (0.0..=MAX_RATE).contains(&rate),
        "the rate must be 0 to {MAX_RATE}"
    );
    Ok((Duration::from_secs_f64(secs), rate))
}

/// What the open model reports besides the operations' figures.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Arrivals {
    /// Arrivals the schedule asked for until the end.
    pub(crate) scheduled: u64,
    /// Of those, dropped because every session was busy.
    pub(crate) dropped: u64,
    /// The most an arrival started after its intended time, milliseconds
    /// (the generator's own lag; its latency includes it).
    pub(crate) max_start_lag_ms: f64,
    /// Sessions of the pool that could not be opened.
    pub(crate) sessions_not_opened: u64,
}

/// The sessions arrivals run on, opened before the clock starts; each
/// with its number (for the data files' `per_session` rows).
#[derive(Debug)]
pub(crate) struct SessionPool {
    sessions: Vec<(usize, Client)>,
    /// Sessions asked for that could not be opened.
    not_opened: u64,
}

impl SessionPool {
    /// Opens `sessions` sessions, [`OPEN_CONCURRENCY`] at a time, each
    /// retried until [`POOL_OPEN_LIMIT`] from now.
    pub(crate) async fn open(
        url: &str,
        scenario: &Scenario,
        pools: &Pools,
        stats: &Arc<Stats>,
        sessions: usize,
    ) -> Self {
        use futures_util::StreamExt;

        let until = Instant::now() + POOL_OPEN_LIMIT;
        let opened: Vec<(usize, Client)> = futures_util::stream::iter(0..sessions)
            .map(|index| async move {
                let http = pools.for_session(index);
                let era = scenario.era_of(index);
                let client = session::connect_until(url, scenario, era, stats, http, until).await?;
                stats.active_sessions.fetch_add(1, Ordering::Relaxed);
                Some((index, client))
            })
            .buffer_unordered(OPEN_CONCURRENCY)
            .filter_map(std::future::ready)
            .collect()
            .await;
        Self {
            not_opened: (sessions - opened.len()) as u64,
            sessions: opened,
        }
    }
}

/// Runs the open model from `start` on the pool's sessions; returns its
/// arrival figures and how many arrivals were aborted at the hard
/// deadline.
pub(crate) async fn run(
    plan: Arc<Plan>,
    schedule: &Schedule,
    pool: SessionPool,
    start: Instant,
) -> (Arrivals, usize) {
    let mut arrivals = Arrivals {
        sessions_not_opened: pool.not_opened,
        ..Arrivals::default()
    };
    let pool = Arc::new(Mutex::new(pool.sessions));
    let mut running = JoinSet::new();
    for n in 0.. {
        let Some(due) = schedule.due(n) else { break };
        let due = start + due;
        if due >= plan.end {
            break;
        }
        sleep_until(due).await;
        while running.try_join_next().is_some() {}
        arrivals.scheduled += 1;
        plan.stats.arrivals.fetch_add(1, Ordering::Relaxed);
        let lag = Instant::now().saturating_duration_since(due);
        arrivals.max_start_lag_ms = arrivals.max_start_lag_ms.max(lag.as_secs_f64() * 1000.0);
        let Some((index, client)) = pool.lock().ok().and_then(|mut p| p.pop()) else {
            arrivals.dropped += 1;
            plan.stats.dropped_arrivals.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (plan, pool) = (Arc::clone(&plan), Arc::clone(&pool));
        running.spawn(async move {
            let era = if stateless::is_stateless(&client) {
                Era::Stateless
            } else {
                Era::Session
            };
            let entry = plan.scenario.pick(era);
            let late = Instant::now().saturating_duration_since(due);
            match session::exclusive_op(&plan, client, entry, index, late).await {
                Some(client) => {
                    if let Ok(mut pool) = pool.lock() {
                        pool.push((index, client));
                    }
                }
                // Its DELETE failed and no new session could be opened.
                None => {
                    plan.stats.active_sessions.fetch_sub(1, Ordering::Relaxed);
                }
            }
        });
    }
    let mut unfinished = 0;
    let all_done = async { while running.join_next().await.is_some() {} };
    if tokio::time::timeout_at(plan.hard_deadline, all_done)
        .await
        .is_err()
    {
        unfinished = running.len();
        running.abort_all();
        while running.join_next().await.is_some() {}
    }
    let pooled = pool
        .lock()
        .map(|mut p| std::mem::take(&mut *p))
        .unwrap_or_default();
    close_pool(&plan, pooled).await;
    (arrivals, unfinished)
}

/// DELETEs the pool's sessions, [`OPEN_CONCURRENCY`] at a time.
async fn close_pool(plan: &Plan, pool: Vec<(usize, Client)>) {
    use futures_util::StreamExt;

    futures_util::stream::iter(pool)
        .for_each_concurrent(OPEN_CONCURRENCY, |(_, client)| session::close(plan, client))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(d: Option<Duration>) -> f64 {
        d.unwrap().as_secs_f64()
    }

    #[test]
    fn a_constant_rate_spaces_arrivals_evenly() {
        let s = Schedule::constant(4.0, Duration::from_secs(2)).unwrap();
        assert_eq!(s.total(), 8.0);
        let due: Vec<f64> = (0..8).map(|n| secs(s.due(n))).collect();
        for (n, t) in due.iter().enumerate() {
            assert!((t - (n as f64 + 0.5) / 4.0).abs() < 1e-9, "{due:?}");
        }
        assert_eq!(s.due(8), None);
        assert!(Schedule::constant(0.0, Duration::from_secs(1)).is_err());
        assert!(Schedule::constant(2e6, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn ramping_stages_follow_the_rate() {
        // 0 to 10/s over 10 s (50 arrivals), then 10/s for 5 s (50 more).
        let s = Schedule::ramping(0.0, &["10s:10".to_owned(), "5s:10".to_owned()]).unwrap();
        assert_eq!(s.duration(), Duration::from_secs(15));
        assert_eq!(s.total(), 100.0);
        // The integral of t over 0..T is T^2/2: arrival n at sqrt(2(n+1/2)).
        for n in [0, 7, 49] {
            let expected = (2.0 * (n as f64 + 0.5)).sqrt();
            assert!((secs(s.due(n)) - expected).abs() < 1e-6, "{n}");
        }
        assert!((secs(s.due(50)) - 10.05).abs() < 1e-6);
        assert!((secs(s.due(99)) - 14.95).abs() < 1e-6);
        assert_eq!(s.due(100), None);
        // Rising, then falling to 0.
        let down = Schedule::ramping(20.0, &["1s:0".to_owned()]).unwrap();
        assert_eq!(down.total(), 10.0);
        let times: Vec<f64> = (0..10).map(|n| secs(down.due(n))).collect();
        assert!(times.windows(2).all(|w| w[1] > w[0]), "{times:?}");
        assert!(times[9] <= 1.0);
        for bad in [
            "10:5",
            "10s",
            "-1s:5",
            "1s:-5",
            "1x:5",
            "0s:5",
            "1s:2000000",
        ] {
            assert!(Schedule::ramping(0.0, &[bad.to_owned()]).is_err(), "{bad}");
        }
        assert!(Schedule::ramping(0.0, &["5s:0".to_owned()]).is_err());
        let units = Schedule::ramping(1.0, &["500ms:1".to_owned(), "1m:1/s".to_owned()]).unwrap();
        assert_eq!(units.duration(), Duration::from_millis(60_500));
    }
}
