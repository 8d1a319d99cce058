//! The request executor: the one place every handler runs, in both eras.
//!
//! The HTTP workers are actix arbiters, one thread each: every connection,
//! stream, keep-alive, session actor and request actor of a worker lives on
//! its thread. A handler run there (a provider's tool that blocks its
//! thread or computes for seconds) would hold all of them. So handlers run
//! on a multi-thread tokio runtime of their own, owned by the node and
//! sized by `executor_threads`; the request actor (session era) and the
//! stateless request task (2026-07-28) stay where they are, own the
//! request's cancellation, timeout and answer, and only await the
//! handler's outcome. Tools declared blocking run on this runtime's
//! blocking pool (`blocking_threads`), never on its worker threads.
//!
//! Owner: [`crate::runtime::Runtime`], one per node. Stop path: dropped with the
//! runtime; handlers still running are abandoned (their requests were
//! answered or cancelled by then).

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::{JoinError, JoinHandle};

/// The runtime handlers run on.
pub(crate) struct Executor {
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    threads: usize,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("threads", &self.threads)
            .finish()
    }
}

impl Executor {
    /// `threads` worker threads (0: one per CPU the process may use) and a
    /// blocking pool of at most `blocking_threads`.
    ///
    /// # Errors
    /// The threads could not be started.
    pub(crate) fn new(threads: usize, blocking_threads: usize) -> std::io::Result<Self> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
        } else {
            threads
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .max_blocking_threads(blocking_threads.max(1))
            .thread_name("mcp-handler")
            .on_thread_start(batch_policy)
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
            threads,
        })
    }

    /// Runs `job` on the executor. Dropping the returned [`Running`] stops
    /// it (its future is dropped at its next await).
    pub(crate) fn spawn<F>(&self, job: F) -> Running<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.runtime {
            Some(runtime) => Running(runtime.spawn(job)),
            // Only while dropping, when nothing spawns any more.
            None => Running(tokio::spawn(job)),
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Not a blocking shutdown: the node drops its runtime on an actix
        // thread, where blocking is not allowed, and a handler that blocks
        // its thread must not hold the process up.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Puts the calling executor thread under `SCHED_BATCH` (Linux): the same
/// share of the CPU as before, but waking it (a handler to run) does not
/// preempt the thread that woke it. An HTTP worker hands a request over and
/// goes on reading and writing its connections; the handlers queued meanwhile
/// run together once it waits, instead of one thread switch per request each
/// way when both share a core. Where CPUs are idle the thread starts at once
/// all the same. Left as it is when the process runs niced (the library that
/// sets the policy would also reset the nice value) or when the call fails.
#[cfg(target_os = "linux")]
fn batch_policy() {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
        thread_native_id,
    };
    use thread_priority::{ThreadPriority, ThreadPriorityOsValue};

    if nice_of_this_thread() != Some(0) {
        return;
    }
    let batch = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch);
    // Normal policies take the nice value as their priority: 0, as it was.
    let nice = ThreadPriority::Os(ThreadPriorityOsValue::default());
    if let Err(err) = set_thread_priority_and_policy(thread_native_id(), nice, batch) {
        tracing::debug!(error = ?err, "Executor thread left under its default policy.");
    }
}

#[cfg(not(target_os = "linux"))]
fn batch_policy() {}

/// The calling thread's nice value (field 19 of its `stat`).
#[cfg(target_os = "linux")]
fn nice_of_this_thread() -> Option<i64> {
    stat_field(&std::fs::read_to_string("/proc/thread-self/stat").ok()?, 19)?
        .parse()
        .ok()
}

/// Field `n` (numbered from 1, as in proc(5)) of a `/proc/<tid>/stat` line.
#[cfg(target_os = "linux")]
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    // The command name (field 2) is in parentheses and may hold spaces:
    // fields are counted from the last `)`, which ends it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(n.checked_sub(3)?)
}

/// A handler running on the executor: its outcome, or how it ended
/// otherwise (a panic). Stops the handler when dropped.
#[derive(Debug)]
pub(crate) struct Running<T>(JoinHandle<T>);

impl<T> Future for Running<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn a_job_runs_off_the_calling_thread_and_a_dropped_one_stops() {
        let executor = Executor::new(2, 2).unwrap();
        let caller = std::thread::current().id();
        let ran_on = executor
            .spawn(async { std::thread::current().id() })
            .await
            .unwrap();
        assert_ne!(ran_on, caller);

        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = executor.spawn(async move {
            // Holds the sender until dropped.
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(running);
        // The sender goes with the aborted job.
        assert!(rx.await.is_err());

        let panicked = executor.spawn(async { panic!("boom") }).await;
        assert!(panicked.unwrap_err().is_panic());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stat_fields_count_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 1 2 3";
        assert_eq!(stat_field(stat, 3), Some("S"));
        assert_eq!(stat_field(stat, 6), Some("3"));
        assert_eq!(stat_field(stat, 7), None);
        assert_eq!(stat_field(stat, 2), None);
    }

    /// `SCHED_BATCH` is 3 in `/proc/<tid>/stat`'s field 41 (policy).
    #[cfg(target_os = "linux")]
    #[actix_rt::test]
    async fn executor_threads_run_under_the_batch_policy() {
        let executor = Executor::new(1, 1).unwrap();
        let policy = |stat: String| -> Option<u32> { stat_field(&stat, 41)?.parse().ok() };
        let here = policy(std::fs::read_to_string("/proc/thread-self/stat").unwrap());
        let there = executor
            .spawn(async move { std::fs::read_to_string("/proc/thread-self/stat").unwrap() })
            .await
            .unwrap();
        assert_eq!(here, Some(0), "the caller stays SCHED_OTHER");
        // A niced test process leaves the policy alone.
        if nice_of_this_thread() == Some(0) {
            assert_eq!(policy(there), Some(3), "SCHED_BATCH on the executor");
        }
    }
}
