//! Notable happenings of a node: each a struct whose `emit()` writes its log
//! lines and records its metrics together, so that the two always agree
//! (vector's `internal_events`). The crate that notices a happening fills the
//! struct; the names, levels and wording live here.

use std::net::SocketAddr;
use std::time::Duration;

use crate::metrics::metrics;

/// One SSE stream closed for a write stall.
#[derive(Debug, Clone, Copy)]
pub struct StalledStream {
    /// Its `kind` label (one of [`crate::metrics::SSE_STREAM_KINDS`]).
    pub kind: &'static str,
    /// The client's address, when the connection knows it.
    pub peer: Option<SocketAddr>,
    /// How long its bytes had waited for the client when it was closed.
    pub stalled_for: Duration,
}

/// SSE streams that one scan of the write-stall watch closed because their
/// clients took none of their bytes for `timeout`.
///
/// Logs one line per stream at DEBUG (a client chooses how many streams it
/// stalls) and one summary per scan at INFO, so the log grows by at most
/// a few lines per timeout whatever the clients do; counts each stream in
/// `mcp_sse_write_stalls_total` by kind.
#[derive(Debug, Clone)]
pub struct SseStreamsStalled {
    /// The streams closed.
    pub streams: Vec<StalledStream>,
    /// The write-stall timeout they exceeded.
    pub timeout: Duration,
}

impl SseStreamsStalled {
    /// Logs and counts the streams; nothing when there are none.
    pub fn emit(&self) {
        if self.streams.is_empty() {
            return;
        }
        let stalls = &metrics().sse_write_stalls;
        for stream in &self.streams {
            stalls.with_label_values(&[stream.kind]).inc();
            tracing::debug!(
                kind = stream.kind,
                peer = ?stream.peer,
                stalled_ms = u64::try_from(stream.stalled_for.as_millis()).unwrap_or(u64::MAX),
                "SSE stream closed: its client took none of its bytes."
            );
        }
        tracing::info!(
            streams = self.streams.len(),
            timeout_secs = self.timeout.as_secs_f64(),
            "Closed SSE streams whose clients took none of their bytes within the write-stall \
             timeout; resumable clients resume them with Last-Event-ID."
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stream_is_counted_under_its_kind() {
        let counter = |kind: &str| metrics().sse_write_stalls.with_label_values(&[kind]).get();
        let (request, listen) = (counter("request"), counter("listen"));
        let stream = |kind| StalledStream {
            kind,
            peer: None,
            stalled_for: Duration::from_secs(31),
        };
        SseStreamsStalled {
            streams: vec![stream("request"), stream("request"), stream("listen")],
            timeout: Duration::from_secs(30),
        }
        .emit();
        assert_eq!(counter("request"), request + 2);
        assert_eq!(counter("listen"), listen + 1);
    }
}
