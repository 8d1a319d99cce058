//! SSE framing of followed streams.
//!
//! Every event carries its event-log id; a stream opens with a priming event
//! (id, `retry`, empty data) for 2025-11-25 sessions, carries keep-alive
//! comments while idle, and ends with a bare `retry` when the server closes
//! it early (polling, takeover, drain) so the client reconnects.

use std::convert::Infallible;

use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::{Stream, StreamExt, future, stream};
use mcp_cluster_runtime::{Follow, FollowEnd, FollowItem};
use mcp_cluster_store::EventId;

use crate::HttpState;

/// How a followed stream is framed.
#[derive(Debug, Clone, Default)]
pub struct Framing {
    /// Sent first: a priming event with this id (and `retry`).
    pub priming: Option<EventId>,
    /// Sent first, raw (the legacy `endpoint` event).
    pub preamble: Option<Bytes>,
    /// `retry` milliseconds for priming and early close.
    pub retry_ms: u64,
    /// Legacy HTTP+SSE: events are named `message`.
    pub legacy: bool,
    /// What the stream is, for `mcp_sse_streams_open`.
    pub kind: StreamKind,
}

/// What an SSE stream carries (label of `mcp_sse_streams_open` and
/// `mcp_sse_write_stalls_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamKind {
    /// The answer to a POST.
    #[default]
    Request,
    /// The standalone GET stream.
    Standalone,
    /// A `Last-Event-ID` resumption.
    Resumption,
    /// The legacy HTTP+SSE session stream.
    Legacy,
    /// A stateless (2026-07-28) request's stream: not resumable.
    Live,
    /// A 2026-07-28 `subscriptions/listen` stream (the runtime counts it
    /// in `mcp_sse_streams_open`).
    Listen,
}

impl StreamKind {
    /// Every kind, in the order of
    /// [`mcp_cluster_telemetry::metrics::SSE_STREAM_KINDS`].
    pub const ALL: [Self; 6] = [
        Self::Request,
        Self::Standalone,
        Self::Resumption,
        Self::Legacy,
        Self::Live,
        Self::Listen,
    ];

    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Standalone => "standalone",
            Self::Resumption => "resumption",
            Self::Legacy => "legacy",
            Self::Live => "live",
            Self::Listen => "listen",
        }
    }
}

/// Counts a stream in `mcp_sse_streams_open` while it lives.
struct Open(prometheus::IntGauge);

impl Open {
    fn new(kind: StreamKind) -> Self {
        let gauge = mcp_cluster_telemetry::metrics::metrics()
            .sse_streams_open
            .with_label_values(&[kind.label()]);
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One event.
pub fn event(id: &EventId, data: &str, legacy: bool) -> Bytes {
    frame(Some(id), data, legacy)
}

/// An event without id (what the server says when a stream's data is
/// gone).
pub fn notice(data: &str, legacy: bool) -> Bytes {
    frame(None, data, legacy)
}

fn frame(id: Option<&EventId>, data: &str, legacy: bool) -> Bytes {
    let mut out = String::with_capacity(data.len() + 80);
    if legacy {
        out.push_str("event: message\n");
    }
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(&id.to_string());
        out.push('\n');
    }
    // Compact JSON has no raw newlines; split anyway so no input can break
    // the framing.
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.trim_end_matches('\r'));
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

/// The priming event: an id to resume from and the reconnect delay.
pub fn priming(id: &EventId, retry_ms: u64) -> Bytes {
    Bytes::from(format!("id: {id}\nretry: {retry_ms}\ndata: \n\n"))
}

/// A named event without id (legacy `endpoint`).
pub fn named(kind: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The SSE body of a follow.
pub fn body(
    follow: Follow,
    framing: Framing,
) -> impl Stream<Item = Result<Bytes, Infallible>> + 'static {
    let mut head = Vec::new();
    if let Some(preamble) = &framing.preamble {
        head.push(preamble.clone());
    }
    if let Some(id) = &framing.priming {
        head.push(priming(id, framing.retry_ms));
    }
    let retry_ms = framing.retry_ms;
    let legacy = framing.legacy;
    let open = Open::new(framing.kind);
    // `ready`, not an `async` block: the body keeps room for the pending
    // future for as long as its stream is open, and a ready value needs
    // half the room of a block holding the item. The follow's stream in a
    // box of its own: inline, the body is a 1 KiB block, the allocator's
    // class of a session actor's task, and an idle session's actor stops
    // while its client reads the stream (it passivates); its block is given
    // back to the system only if no stream's body shares the page (about
    // 1 KB per idle session with a stream, measured).
    let events = follow.into_stream().boxed().filter_map(move |item| {
        future::ready(match item {
            FollowItem::Event(id, data) => Some(event(&id, &data, legacy)),
            FollowItem::KeepAlive => Some(Bytes::from_static(KEEP_ALIVE)),
            // No event id: there is nothing after it to resume.
            FollowItem::Notice(data) => Some(notice(&data, legacy)),
            FollowItem::End(FollowEnd::Kicked | FollowEnd::ShuttingDown | FollowEnd::Failed) => {
                Some(Bytes::from(format!("retry: {retry_ms}\n\n")))
            }
            FollowItem::End(FollowEnd::Completed | FollowEnd::Gone) => None,
        })
    });
    stream::iter(head).chain(events).map(move |chunk| {
        let _open = &open;
        Ok(chunk)
    })
}

/// The SSE body of a stateless (2026-07-28) request or `subscriptions/listen`
/// stream: its messages as events without ids (nothing is resumable), with
/// keep-alive comments while it is quiet. Holds `guard` while the client
/// reads: dropping the body (the client went away) cancels the request.
/// `kind`: counted in `mcp_sse_streams_open` (`None` when the runtime
/// counts it, as for listen streams).
pub fn live_body<G: 'static>(
    rx: tokio::sync::mpsc::Receiver<std::sync::Arc<str>>,
    guard: G,
    kind: Option<StreamKind>,
    keep_alive: std::time::Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + 'static {
    let open = kind.map(Open::new);
    stream::unfold((rx, guard, open), move |(mut rx, guard, open)| async move {
        let chunk = tokio::select! {
            message = rx.recv() => notice(&message?, false),
            () = tokio::time::sleep(keep_alive) => Bytes::from_static(KEEP_ALIVE),
        };
        Some((Ok(chunk), (rx, guard, open)))
    })
}

/// An SSE response whose body the write-stall watch sees: closed when its
/// client takes none of its bytes for the timeout
/// ([`crate::write_stall`]).
pub fn watched_response<S>(
    req: &HttpRequest,
    state: &HttpState,
    kind: StreamKind,
    body: S,
) -> HttpResponse
where
    S: Stream<Item = Result<Bytes, Infallible>> + 'static,
{
    response(state.stalls.watch(req, kind, body))
}

/// An SSE response (with `X-Accel-Buffering: no` so proxies do not hold
/// events back).
pub fn response<S>(body: S) -> HttpResponse
where
    S: Stream<Item = Result<Bytes, Infallible>> + 'static,
{
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/event-stream"))
        .insert_header((CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_cluster_store::{Position, StreamId};

    #[test]
    fn events_frame_every_line_and_end_with_a_blank_line() {
        let id = EventId {
            stream: StreamId::random(),
            position: Position { ms: 1, seq: 2 },
        };
        let framed = event(&id, "a\nb", false);
        assert_eq!(
            framed,
            Bytes::from(format!("id: {id}\ndata: a\ndata: b\n\n"))
        );
        let legacy = event(&id, "{}", true);
        assert!(legacy.starts_with(b"event: message\n"));
        assert_eq!(notice("{}", false), Bytes::from("data: {}\n\n"));
        assert_eq!(
            priming(&id, 500),
            Bytes::from(format!("id: {id}\nretry: 500\ndata: \n\n"))
        );
    }

    #[test]
    fn kinds_are_labelled_as_the_metrics_list_them() {
        let labels = StreamKind::ALL.map(StreamKind::label);
        assert_eq!(
            labels.as_slice(),
            mcp_cluster_telemetry::metrics::SSE_STREAM_KINDS
        );
    }
}
