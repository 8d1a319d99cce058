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
//!
//! With `--announce TOOL`, once the memory is read one session calls `TOOL`
//! (a tool that announces a change to every listening client, such as
//! mcp-node's `test_trigger_tool_change`), and every open stream must hear
//! the announced notification within [`ANNOUNCE_TIMEOUT`]: how long the
//! server took to reach them all, and the CPU it spent doing it, is a
//! second line (`announce ...`). Only a JSON-RPC notification with the
//! expected method counts, once per stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{StreamExt, stream};
use mcp_cluster_client::{Client, Reply, SseStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};

use crate::initialize;
use crate::pools::Pools;
use crate::rss::{OwnUsage, cpu_secs, own_usage, rss_bytes};

/// Bound on opening one session (initialize, initialized, GET).
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one DELETE, and on one `ping`.
const DELETE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on every stream hearing an announcement (`--announce`).
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// Once the memory is read, one session calls this tool, and every
    /// stream must hear [`Self::announced`].
    pub(crate) announce: Option<String>,
    /// The method of the notification the announcement makes.
    pub(crate) announced: String,
}

/// How one announcement went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Announced {
    pub(crate) tool: String,
    pub(crate) streams: usize,
    /// Streams that heard it in time.
    pub(crate) heard: usize,
    /// From the call to the last stream that heard it (or the timeout).
    pub(crate) took: Duration,
    /// The server's CPU time over the same span, when its pid was given.
    pub(crate) server_cpu_secs: Option<f64>,
}

impl Announced {
    /// The machine-readable line scripts parse.
    pub(crate) fn line(&self) -> String {
        format!(
            "announce tool={} streams={} heard={} secs={:.3} server_cpu_secs={}",
            self.tool,
            self.streams,
            self.heard,
            self.took.as_secs_f64(),
            self.server_cpu_secs
                .map_or_else(|| "na".to_owned(), |c| format!("{c:.2}")),
        )
    }
}

/// What the streams heard of an announcement: counted from when it is
/// armed (before the call), once per stream.
#[derive(Debug, Default)]
struct Heard {
    armed: AtomicBool,
    count: AtomicUsize,
    changed: Notify,
}

impl Heard {
    /// Waits until `want` streams heard it; how many did.
    async fn all(&self, want: usize) -> usize {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let count = self.count.load(Ordering::Acquire);
            if count >= want {
                return count;
            }
            changed.await;
        }
    }
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
    /// The announcement, if one was asked for.
    pub(crate) announced: Option<Announced>,
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
    let heard = Arc::new(Heard::default());
    let mut held = Vec::with_capacity(plan.sessions);
    let mut failures = Vec::new();
    let mut opening = stream::iter(0..plan.sessions)
        .map(|i| open(Arc::clone(&plan), pools.for_session(i).clone()))
        .buffer_unordered(plan.open_concurrency);
    while let Some(opened) = opening.next().await {
        match opened {
            Ok((client, stream)) => {
                if let Some(stream) = stream {
                    drains.spawn(drain(stream, Arc::clone(&heard), plan.announced.clone()));
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
    let streams = if plan.get_stream { held.len() } else { 0 };
    let generator = own_usage().ok();
    let announced = match (&plan.announce, held.first()) {
        (Some(tool), Some(caller)) if failures.is_empty() => {
            Some(announce(&plan, tool, caller, &heard, streams).await)
        }
        _ => None,
    };
    let result = HoldResult {
        sessions: held.len(),
        streams,
        rss_before,
        rss_after,
        open_time,
        generator,
        announced,
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
    if let Some(announced) = &result.announced
        && announced.heard < announced.streams
    {
        bail!(
            "{} of {} streams did not hear {} within {} s of calling {}",
            announced.streams - announced.heard,
            announced.streams,
            plan.announced,
            ANNOUNCE_TIMEOUT.as_secs(),
            announced.tool
        );
    }
    Ok(result)
}

/// `caller` calls `tool`; every open stream is to hear the announcement.
/// A call that fails counts as heard by none.
async fn announce(
    plan: &HoldPlan,
    tool: &str,
    caller: &Client,
    heard: &Heard,
    streams: usize,
) -> Announced {
    heard.armed.store(true, Ordering::Release);
    let cpu_before = plan
        .server_pid
        .and_then(|pid| cpu_secs(&pid.to_string()).ok());
    let started = Instant::now();
    let called = timeout(
        ANNOUNCE_TIMEOUT,
        caller.request(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": {}}),
        ),
    )
    .await;
    let answered = matches!(
        &called,
        Ok(Ok((response, _))) if response["result"].is_object()
            && response["result"]["isError"] != true
    );
    if !answered {
        eprintln!("mcp-loadtest: calling {tool} failed: {called:?}");
    }
    let count = if answered {
        timeout(
            ANNOUNCE_TIMEOUT.saturating_sub(started.elapsed()),
            heard.all(streams),
        )
        .await
        .unwrap_or_else(|_| heard.count.load(Ordering::Acquire))
    } else {
        0
    };
    let took = started.elapsed();
    let cpu_after = plan
        .server_pid
        .and_then(|pid| cpu_secs(&pid.to_string()).ok());
    Announced {
        tool: tool.to_owned(),
        streams,
        heard: count.min(streams),
        took,
        server_cpu_secs: cpu_before.zip(cpu_after).map(|(b, a)| a - b),
    }
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

/// Reads a standalone stream until it ends (or the task is aborted);
/// counts the first `announced` notification it hears once `heard` is
/// armed.
async fn drain(mut stream: SseStream, heard: Arc<Heard>, announced: String) {
    let mut counted = false;
    while let Ok(Some(event)) = stream.next_event().await {
        if counted || !heard.armed.load(Ordering::Acquire) {
            continue;
        }
        if is_notification(&event.data, &announced) {
            counted = true;
            heard.count.fetch_add(1, Ordering::AcqRel);
            heard.changed.notify_waiters();
        }
    }
}

/// Whether `data` is a JSON-RPC notification (no id) of `method`.
fn is_notification(data: &str, method: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(data).is_ok_and(|message| {
        message["jsonrpc"] == "2.0" && message.get("id").is_none() && message["method"] == method
    })
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
            announced: None,
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

    #[test]
    fn an_announcement_counts_only_its_notification() {
        let method = "notifications/tools/list_changed";
        assert!(is_notification(
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
            method
        ));
        // Another notification, a request of that name, a priming event's
        // empty data, a broken message: not heard.
        for data in [
            r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"notifications/tools/list_changed"}"#,
            "",
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_cha"#,
        ] {
            assert!(!is_notification(data, method), "{data}");
        }
        let announced = Announced {
            tool: "test_trigger_tool_change".to_owned(),
            streams: 9000,
            heard: 9000,
            took: Duration::from_millis(412),
            server_cpu_secs: Some(0.31),
        };
        assert_eq!(
            announced.line(),
            "announce tool=test_trigger_tool_change streams=9000 heard=9000 secs=0.412 \
             server_cpu_secs=0.31"
        );
    }

    #[tokio::test]
    async fn waiting_for_every_stream_ends_when_the_last_one_heard() {
        let heard = Arc::new(Heard::default());
        let waiter = tokio::spawn({
            let heard = Arc::clone(&heard);
            async move { heard.all(3).await }
        });
        for _ in 0..3 {
            tokio::task::yield_now().await;
            heard.count.fetch_add(1, Ordering::AcqRel);
            heard.changed.notify_waiters();
        }
        assert_eq!(
            timeout(Duration::from_secs(5), waiter)
                .await
                .unwrap()
                .unwrap(),
            3
        );
    }
}
