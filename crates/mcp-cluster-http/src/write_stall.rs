//! The write-stall watch: an SSE stream whose client takes none of its
//! bytes for `http.sse_write_stall_timeout_secs` is closed.
//!
//! actix-web pulls a response body only while the connection's write
//! buffer (32 KiB) has room, so the body of a client that stops reading is
//! never pulled again and nothing inside it can act: without this watch
//! such a client held its connection, actix's buffer, the socket's kernel
//! buffers and the follow's read-ahead for ever. The watch works from
//! outside the body:
//! - when the gate admits a connection, [`ConnectionSocket::keep`] keeps a
//!   second handle on its socket (a duplicate descriptor; over TLS the TCP
//!   socket beneath) in the connection's data;
//! - [`StallWatch::watch`] wraps an SSE body in [`Watched`], which notes
//!   when it last handed out bytes and whether it has been asked for more
//!   since: a body that gave bytes and is not asked again waits for the
//!   client (actix's buffer is full and the socket takes nothing);
//! - one scanner per node ([`StallWatch::run`]) looks at every watched
//!   stream [`SCANS_PER_TIMEOUT`] times per timeout and shuts down the socket
//!   of each that has waited longer than the timeout, with a zero linger so
//!   that the last close resets the connection and the kernel drops what it
//!   still holds for the client. actix then fails its write and drops the
//!   stream, as when a client goes away.
//!
//! A stream with nothing to send is never waiting, however long it stays
//! quiet: its body is asked and answers "nothing yet". Keep-alive comments
//! are bytes like any other. What the watch sees is actix's view: the
//! socket becomes writable once the client has taken about a third of the
//! kernel's send buffer, so a client with a backlog that takes less than
//! that per timeout is stalled too (and, in the session era, resumes). What the client missed stays where it was: a
//! session-era stream's events in the event log (the client resumes with
//! `Last-Event-ID`), while a 2026-07-28 request's stream closing cancels the
//! request and a legacy stream's ends its session, as any disconnection does.
//!
//! Cost: one duplicate descriptor per admitted connection, one entry per
//! open SSE stream, an atomic store each time a stream's body is polled, and
//! one pass over the entries per scan (no task or timer per stream).
//!
//! Not watched: the last bytes of a stream whose body has ended (actix drops
//! the body once the end is in its buffer): at most actix's 32 KiB and the
//! kernel's buffers, which actix's keep-alive timeout closes on a keep-alive
//! connection.

use std::any::Any;
use std::convert::Infallible;
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;
use bytes::Bytes;
use dashmap::DashMap;
use futures_util::Stream;
use mcp_cluster_telemetry::events::{SseStreamsStalled, StalledStream};
use socket2::Socket;
use tokio::time::Instant;

use crate::connections::Admitted;
use crate::sse::StreamKind;

/// Scans per timeout: a stalled stream is closed between one timeout and
/// a quarter more after its client last took bytes.
pub const SCANS_PER_TIMEOUT: u32 = 4;

/// The node's watch over its SSE streams. One per node, shared by every
/// HTTP worker through [`crate::HttpState`].
#[derive(Debug)]
pub struct StallWatch {
    /// How long a stream may wait for its client.
    timeout: Duration,
    /// Time zero of the milliseconds kept in [`Entry::waiting_since`].
    epoch: Instant,
    /// The streams watched. Written by [`StallWatch::watch`] (insert), by a
    /// [`Watched`] body's drop and by the scanner (remove); read by the
    /// scanner. Holds one entry per open SSE stream, no more.
    streams: DashMap<u64, Arc<Entry>>,
    /// The next entry's key.
    next: AtomicU64,
}

/// One watched stream, shared by its body and the registry.
#[derive(Debug)]
struct Entry {
    /// 0 while the body is asked for bytes or has nothing to give; else
    /// 1 + the milliseconds since [`StallWatch::epoch`] at which it gave
    /// bytes and was not asked again since. Written by the body, read by
    /// the scanner.
    waiting_since: AtomicU64,
    /// The connection's socket. Weak: the connection's data owns it, so
    /// the watch never keeps a connection open.
    socket: Weak<Socket>,
    /// For `mcp_sse_write_stalls_total`.
    kind: StreamKind,
    /// For the log.
    peer: Option<SocketAddr>,
}

impl StallWatch {
    /// A watch closing streams that wait longer than `timeout` (which the
    /// configuration keeps positive).
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            timeout,
            epoch: Instant::now(),
            streams: DashMap::new(),
            next: AtomicU64::new(0),
        })
    }

    /// The write-stall timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The streams watched now.
    pub fn watched(&self) -> usize {
        self.streams.len()
    }

    /// Wraps `body`, the SSE body of `req`'s answer, so that the scanner
    /// sees when it waits for its client. A connection without a kept
    /// socket (none was kept at connect) is passed through unwatched.
    pub fn watch<S>(self: &Arc<Self>, req: &HttpRequest, kind: StreamKind, body: S) -> Watched<S>
    where
        S: Stream<Item = Result<Bytes, Infallible>>,
    {
        self.watch_on(req.conn_data::<ConnectionSocket>(), kind, body)
    }

    /// As [`Self::watch`], on the socket kept for the connection.
    fn watch_on<S>(
        self: &Arc<Self>,
        connection: Option<&ConnectionSocket>,
        kind: StreamKind,
        body: S,
    ) -> Watched<S>
    where
        S: Stream<Item = Result<Bytes, Infallible>>,
    {
        let registration = connection.map(|connection| {
            let entry = Arc::new(Entry {
                waiting_since: AtomicU64::new(0),
                socket: Arc::downgrade(&connection.socket),
                kind,
                peer: connection.peer,
            });
            let key = self.next.fetch_add(1, Ordering::Relaxed);
            self.streams.insert(key, Arc::clone(&entry));
            Registration {
                watch: Arc::clone(self),
                key,
                entry,
            }
        });
        Watched {
            body: Box::pin(body),
            registration,
        }
    }

    /// Closes every stream that has waited for its client longer than the
    /// timeout, and says which.
    pub fn scan(&self) -> SseStreamsStalled {
        let now = self.now_ms();
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let stalled_for = |entry: &Entry| {
            let since = entry.waiting_since.load(Ordering::Acquire);
            (since != 0 && now.saturating_sub(since) >= timeout_ms)
                .then(|| Duration::from_millis(now.saturating_sub(since)))
        };
        // Keys first: the map's shards stay locked while it is iterated,
        // and removing inside the iteration would wait on them.
        let due: Vec<u64> = self
            .streams
            .iter()
            .filter(|entry| stalled_for(entry.value()).is_some())
            .map(|entry| *entry.key())
            .collect();
        let mut streams = Vec::with_capacity(due.len());
        for key in due {
            // Looked at again as it is removed: its client may have taken
            // bytes since.
            let Some((_, entry)) = self
                .streams
                .remove_if(&key, |_, entry| stalled_for(entry).is_some())
            else {
                continue;
            };
            let Some(socket) = entry.socket.upgrade() else {
                continue; // the connection is going anyway
            };
            // A zero linger makes the last close (actix's or the kept
            // handle's, whichever is later) reset the connection, so the
            // kernel drops the bytes the client never took instead of
            // offering them to a closed window for minutes.
            let _ = socket.set_linger(Some(Duration::ZERO));
            // The peer's reading end sees nothing more, actix's next write
            // fails, and it drops the connection with its stream.
            let _ = socket.shutdown(Shutdown::Both);
            streams.push(StalledStream {
                kind: entry.kind.label(),
                peer: entry.peer,
                stalled_for: stalled_for(&entry).unwrap_or(self.timeout),
            });
        }
        SseStreamsStalled {
            streams,
            timeout: self.timeout,
        }
    }

    /// The scanner: scans [`SCANS_PER_TIMEOUT`] times per timeout and
    /// reports what each scan closed. Owned by the node, which spawns it
    /// once beside the HTTP server; it stops at the first tick after the
    /// watch is dropped (with the server's state).
    pub async fn run(watch: Weak<Self>) {
        let Some(period) = watch.upgrade().map(|w| w.timeout / SCANS_PER_TIMEOUT) else {
            return;
        };
        let mut ticks = tokio::time::interval(period.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(watch) = watch.upgrade() else {
                return;
            };
            watch.scan().emit();
        }
    }

    /// 1 + milliseconds since the epoch (0 means "not waiting").
    fn now_ms(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.epoch);
        u64::try_from(elapsed.as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }
}

/// A second handle on an admitted connection's socket, kept in its
/// connection data for the watch. Dropped with the connection.
#[derive(Debug)]
pub struct ConnectionSocket {
    /// A duplicate of the connection's descriptor: shutting it down ends
    /// the connection for actix too.
    socket: Arc<Socket>,
    /// The client's address.
    peer: Option<SocketAddr>,
}

impl ConnectionSocket {
    /// A handle on the socket that does not keep the connection open.
    pub fn handle(&self) -> Weak<Socket> {
        Arc::downgrade(&self.socket)
    }

    /// The `on_connect` hook, after the gate's
    /// ([`crate::connections::ConnectionGate::on_connect`]): keeps a handle
    /// on the socket of a connection the gate admitted (`connection`: the
    /// TCP stream, over TLS the one beneath). A connection whose descriptor
    /// cannot be duplicated (the process is out of descriptors) is shut
    /// down, as the gate refuses one: a stream the watch cannot see could
    /// be held for ever.
    pub fn keep(connection: &dyn Any, data: &mut Extensions) {
        if !data.contains::<Admitted>() {
            return; // refused, and shut down already
        }
        let Some(stream) = connection.downcast_ref::<TcpStream>() else {
            return;
        };
        let peer = stream.peer_addr().ok();
        match socket2::SockRef::from(stream).try_clone() {
            Ok(socket) => {
                data.insert(Self {
                    socket: Arc::new(socket),
                    peer,
                });
            }
            Err(err) => {
                tracing::warn!(?peer, error = %err, "Connection refused: its socket could not be watched.");
                let _ = socket2::SockRef::from(stream).shutdown(Shutdown::Both);
            }
        }
    }
}

/// An SSE body the watch sees. Passes every item through unchanged.
#[derive(Debug)]
pub struct Watched<S> {
    body: Pin<Box<S>>,
    /// `None`: the connection is not watched.
    registration: Option<Registration>,
}

/// A body's entry in the watch; its drop (the body's) removes it.
#[derive(Debug)]
struct Registration {
    watch: Arc<StallWatch>,
    key: u64,
    entry: Arc<Entry>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.watch.streams.remove(&self.key);
    }
}

impl<S> Stream for Watched<S>
where
    S: Stream<Item = Result<Bytes, Infallible>>,
{
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        // Asked again: whatever it gave before was taken into actix's
        // buffer, which has room.
        if let Some(registration) = &this.registration
            && registration.entry.waiting_since.load(Ordering::Relaxed) != 0
        {
            registration.entry.waiting_since.store(0, Ordering::Release);
        }
        let polled = this.body.as_mut().poll_next(cx);
        if let (Poll::Ready(Some(_)), Some(registration)) = (&polled, &this.registration) {
            // Until it is asked again, these bytes wait for the client.
            registration
                .entry
                .waiting_since
                .store(registration.watch.now_ms(), Ordering::Release);
        }
        polled
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.body.size_hint()
    }
}

#[cfg(test)]
#[path = "write_stall_tests.rs"]
mod tests;
