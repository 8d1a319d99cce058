//! `mcp-loadtest hold`: opens many idle sessions (each optionally with its
//! standalone GET stream), measures how much resident memory the server
//! spends on them, holds them for a while, then ends them with DELETE.
//!
//! The figure it prints, bytes per idle session, is
//! `(RSS with every session open and settled - RSS before) / sessions`, read
//! from `/proc/<pid>/status` of the server process (so the server must run
//! on this machine). After the hold every session must still answer a
//! `ping` (a server that dropped idle sessions to save memory fails here),
//! then it gets its DELETE.
//!
//! Owner and stop path: `run` owns every client and stream. Each open GET
//! stream is drained by one task in a `JoinSet` (a real client reads what
//! the server sends, keep-alives included); the set is aborted after the
//! hold, then every session gets its DELETE, bounded by
//! [`DELETE_TIMEOUT`]. Nothing outlives `run`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{StreamExt, stream};
use mcp_cluster_client::{Client, Reply, SseStream};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};

use crate::initialize;
use crate::pools::Pools;
use crate::rss::{OwnUsage, own_usage, rss_bytes};

/// Bound on opening one session (initialize, initialized, GET).
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one DELETE, and on one `ping`.
const DELETE_TIMEOUT: Duration = Duration::from_secs(30);

/// What `hold` was asked to do (from the command line).
#[derive(Debug)]
pub(crate) struct HoldPlan {
    pub(crate) url: String,
    pub(crate) protocol_version: String,
    pub(crate) sessions: usize,
    pub(crate) get_stream: bool,
    pub(crate) hold: Duration,
    /// Wait after the last session opened before reading the server's
    /// RSS, so that what the server does later with idle sessions (frees,
    /// buffers, timers) is counted.
    pub(crate) settle: Duration,
    pub(crate) server_pid: Option<u32>,
    /// Sessions being opened at once.
    pub(crate) open_concurrency: usize,
}

/// What was measured.
#[derive(Debug)]
pub(crate) struct HoldResult {
    pub(crate) sessions: usize,
    pub(crate) streams: usize,
    pub(crate) rss_before: Option<u64>,
    pub(crate) rss_after: Option<u64>,
    pub(crate) open_time: Duration,
    /// The generator's own CPU time and memory with every session open.
    pub(crate) generator: Option<OwnUsage>,
}

impl HoldResult {
    /// Extra server memory per open session, when the PID was given.
    pub(crate) fn per_session_bytes(&self) -> Option<i64> {
        let (before, after) = (self.rss_before?, self.rss_after?);
        let sessions = i64::try_from(self.sessions.max(1)).ok()?;
        Some((i64::try_from(after).ok()? - i64::try_from(before).ok()?) / sessions)
    }

    /// The one machine-readable line scripts parse.
    pub(crate) fn line(&self) -> String {
        let show = |v: Option<i64>| v.map_or_else(|| "na".to_owned(), |v| v.to_string());
        let as_i64 = |v: Option<u64>| v.and_then(|v| i64::try_from(v).ok());
        let own = self.generator.unwrap_or_default();
        format!(
            "hold sessions={} streams={} open_secs={:.2} rss_before_bytes={} rss_after_bytes={} per_session_bytes={} generator_cpu_secs={:.2} generator_rss_bytes={}",
            self.sessions,
            self.streams,
            self.open_time.as_secs_f64(),
            show(as_i64(self.rss_before)),
            show(as_i64(self.rss_after)),
            show(self.per_session_bytes()),
            own.cpu_secs,
            own.rss_bytes,
        )
    }
}

/// Opens, measures, holds and closes. Fails if any session could not be
/// opened (the figure would be wrong), after closing those that were.
pub(crate) async fn run(plan: HoldPlan, pools: Pools) -> anyhow::Result<HoldResult> {
    let rss_before = plan.server_pid.map(rss_bytes).transpose()?;
    let started = Instant::now();
    let plan = Arc::new(plan);
    let mut drains = JoinSet::new();
    let mut held = Vec::with_capacity(plan.sessions);
    let mut failures = Vec::new();
    let mut opening = stream::iter(0..plan.sessions)
        .map(|i| open(Arc::clone(&plan), pools.for_session(i).clone()))
        .buffer_unordered(plan.open_concurrency);
    while let Some(opened) = opening.next().await {
        match opened {
            Ok((client, stream)) => {
                if let Some(stream) = stream {
                    drains.spawn(drain(stream));
                }
                held.push(client);
            }
            Err(err) => failures.push(err),
        }
    }
    drop(opening);
    let open_time = started.elapsed();
    sleep(plan.settle).await;
    let rss_after = plan.server_pid.map(rss_bytes).transpose()?;
    let result = HoldResult {
        sessions: held.len(),
        streams: if plan.get_stream { held.len() } else { 0 },
        rss_before,
        rss_after,
        open_time,
        generator: own_usage().ok(),
    };
    if failures.is_empty() {
        eprintln!(
            "{} sessions open; holding for {} s",
            held.len(),
            plan.hold.as_secs()
        );
        sleep(plan.hold).await;
    }
    let silent = ping_all(&held, plan.open_concurrency).await;
    drains.abort_all();
    while drains.join_next().await.is_some() {}
    close_all(held, plan.open_concurrency).await;
    if let Some(first) = failures.first() {
        bail!(
            "{} of {} sessions could not be opened; first error: {first:#}",
            failures.len(),
            plan.sessions
        );
    }
    if silent > 0 {
        bail!(
            "{silent} of {} sessions did not answer ping after the hold",
            result.sessions
        );
    }
    Ok(result)
}

/// One session: initialize + initialized, then the GET stream if asked.
async fn open(
    plan: Arc<HoldPlan>,
    http: reqwest::Client,
) -> anyhow::Result<(Client, Option<SseStream>)> {
    let client = timeout(
        OPEN_TIMEOUT,
        initialize::open(
            &http,
            &plan.url,
            &plan.protocol_version,
            &serde_json::json!({}),
        ),
    )
    .await
    .context("initialize timed out")?
    .map_err(|error| anyhow::anyhow!("initialize failed: {}", error.key()))?;
    if !plan.get_stream {
        return Ok((client, None));
    }
    let reply = timeout(OPEN_TIMEOUT, client.get(None))
        .await
        .context("GET timed out")?
        .context("GET")?;
    match reply {
        Reply::Sse(stream) => Ok((client, Some(stream))),
        Reply::Status(status, body, _) => bail!("GET answered {status}: {body}"),
        other => bail!("GET did not open an event stream: {other:?}"),
    }
}

/// Reads a standalone stream until it ends (or the task is aborted).
async fn drain(mut stream: SseStream) {
    while let Ok(Some(_)) = stream.next_event().await {}
}

/// Sends every session a `ping`, a bounded number at a time; how many got
/// no result (an error, a 404 of a session the server lost, a timeout).
async fn ping_all(held: &[Client], concurrency: usize) -> usize {
    stream::iter(held)
        .map(|client| async move {
            let answer = timeout(
                DELETE_TIMEOUT,
                client.request("ping", serde_json::json!({})),
            );
            matches!(answer.await, Ok(Ok((response, _))) if response.get("result").is_some())
        })
        .buffer_unordered(concurrency)
        .filter(|ok| std::future::ready(!ok))
        .count()
        .await
}

/// DELETEs every session, a bounded number at a time; failures are reported
/// on stderr (the measurement is already taken).
async fn close_all(held: Vec<Client>, concurrency: usize) {
    let failed = stream::iter(held)
        .map(|client| async move {
            matches!(
                timeout(DELETE_TIMEOUT, client.delete()).await,
                Ok(Ok(status)) if status.is_success()
            )
        })
        .buffer_unordered(concurrency)
        .filter(|ok| std::future::ready(!ok))
        .count()
        .await;
    if failed > 0 {
        eprintln!("{failed} sessions did not answer DELETE with success");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_session_is_the_rss_growth_divided_by_sessions() {
        let result = HoldResult {
            sessions: 1000,
            streams: 1000,
            rss_before: Some(10_000_000),
            rss_after: Some(22_000_000),
            open_time: Duration::from_millis(1500),
            generator: Some(OwnUsage {
                cpu_secs: 2.5,
                rss_bytes: 40_000_000,
                peak_rss_bytes: 41_000_000,
            }),
        };
        assert_eq!(result.per_session_bytes(), Some(12_000));
        assert_eq!(
            result.line(),
            "hold sessions=1000 streams=1000 open_secs=1.50 rss_before_bytes=10000000 \
             rss_after_bytes=22000000 per_session_bytes=12000 generator_cpu_secs=2.50 \
             generator_rss_bytes=40000000"
        );
        let no_pid = HoldResult {
            rss_before: None,
            rss_after: None,
            ..result
        };
        assert_eq!(no_pid.per_session_bytes(), None);
        assert!(no_pid.line().contains("per_session_bytes=na "));
    }
}
