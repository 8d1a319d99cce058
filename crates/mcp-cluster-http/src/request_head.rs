//! The header timeout of every request on a connection, without an unasked
//! 408.
//!
//! actix-web times only a connection's first request head (its
//! `client_request_timeout`), and answers a connection whose client has
//! sent nothing at all with `408 Request Timeout`. HTTP clients keep spare
//! connections in their pools (hyper opens one for a waiting request, then
//! parks it when another connection frees up first), so an unused pooled
//! connection received a 408 it never asked for: a client that picked that
//! connection for its next request as the 408 arrived failed the request
//! (hyper: "unexpected message"), a failure no retry policy sees as safe.
//! And after the first request actix times nothing: its keep-alive timer
//! closes a connection idle between requests, but stops at the first byte
//! of the next request and starts no other, so half a head held the
//! connection, and its slot under the connection limits, for ever.
//!
//! Here every connection has a deadline by which its next request must
//! reach the application, and is closed without a word past it (as nginx
//! closes a connection that sent nothing): a FIN, which a client's pool
//! takes as an ordinary idle close.
//!
//! - [`watch`], in the `on_connect` hook after
//!   [`crate::write_stall::ConnectionSocket::keep`]: the header timeout
//!   from now;
//! - [`arrived`], in the outermost middleware: no deadline while a request
//!   is served (its body has the body timeout, a stream the write-stall
//!   watch);
//! - when the response's body ends ([`UntilServed`]): the keep-alive time
//!   plus the header timeout from then, so a client that starts its next
//!   request before actix closes the idle connection has at least the
//!   header timeout for its head;
//! - one sweep per worker thread, every [`SWEEP`] while the worker has
//!   connections, shuts down each connection past its deadline through the
//!   kept socket; actix reads end-of-stream and drops it. A connection
//!   whose socket holds bytes not read yet is left for the next sweep: its
//!   client sent in time, and the worker was too busy to read (an
//!   overloaded node closed connections whose whole request waited in the
//!   socket, and their clients saw the connection close before any
//!   answer).
//!
//! actix's own timer stays as a backstop for the first request, set well
//! after this one ([`BACKSTOP`]), so it never fires first, not even for a
//! request left unread by a busy worker.

use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::rc::{self, Rc};
use std::sync::Weak;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::Extensions;
use actix_web::web::Bytes;
use socket2::Socket;
use tokio::time::Instant;

use crate::write_stall::ConnectionSocket;

/// How much later than the header timeout actix's own timer is set: its
/// 408 is for a connection this watch could not close. actix times from
/// the connection's first poll and answers 408 even when the request waits
/// unread in the socket, so a worker busy for longer than the header
/// timeout plus this sent 408s for requests that came in time.
pub const BACKSTOP: Duration = Duration::from_secs(10);

/// How often a worker looks for connections past their deadline: a
/// connection is closed at most this long after it.
pub const SWEEP: Duration = Duration::from_millis(250);

/// One watched connection, shared by its data and its worker's sweep.
#[derive(Debug)]
struct Watched {
    /// Weak: a connection that ended already is gone.
    socket: Weak<Socket>,
    /// When its next request must have arrived (`None` while one is
    /// served).
    deadline: Cell<Option<Instant>>,
    /// The keep-alive time plus the header timeout.
    after_response: Duration,
}

thread_local! {
    /// The connections of this worker thread (those that ended are
    /// dropped at the next sweep).
    static WATCHED: RefCell<Vec<rc::Weak<Watched>>> = const { RefCell::new(Vec::new()) };
    /// Whether this worker's sweep runs (it stops when no connection is
    /// left, and [`watch`] starts it again).
    static SWEEPING: Cell<bool> = const { Cell::new(false) };
}

/// In a connection's data: its deadline.
#[derive(Debug)]
pub struct RequestDeadline(Rc<Watched>);

/// The `on_connect` hook, after the write-stall watch kept the socket: the
/// connection must bring its first request within `header_timeout`, and
/// each later one within `header_timeout` after `keep_alive` from the end
/// of the previous response, or it is shut down silently. A connection
/// without a kept socket was refused and shut down already.
pub fn watch(data: &mut Extensions, header_timeout: Duration, keep_alive: Duration) {
    let Some(socket) = data.get::<ConnectionSocket>().map(ConnectionSocket::handle) else {
        return;
    };
    let watched = Rc::new(Watched {
        socket,
        deadline: Cell::new(Some(Instant::now() + header_timeout)),
        after_response: keep_alive + header_timeout,
    });
    WATCHED.with_borrow_mut(|all| all.push(Rc::downgrade(&watched)));
    data.insert(RequestDeadline(watched));
    if !SWEEPING.replace(true) {
        actix_web::rt::spawn(sweep());
    }
}

/// Shuts down, every [`SWEEP`], this worker's connections past their
/// deadline; ends when the worker has none left.
async fn sweep() {
    let mut tick = tokio::time::interval(SWEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let left = WATCHED.with_borrow_mut(|all| {
            all.retain(|watched| {
                let Some(watched) = watched.upgrade() else {
                    return false;
                };
                if watched.deadline.get().is_none_or(|deadline| deadline > now) {
                    return true;
                }
                if let Some(socket) = watched.socket.upgrade() {
                    if unread(&socket) {
                        // The client sent, and this worker was too busy
                        // to read it: the delay is the node's, not the
                        // client's. Looked at again at the next sweep.
                        return true;
                    }
                    tracing::debug!(peer = ?socket.peer_addr().ok().and_then(|a| a.as_socket()), "Connection closed: no request within the header timeout.");
                    let _ = socket.shutdown(std::net::Shutdown::Both);
                }
                false
            });
            if all.len() < all.capacity() / 4 {
                all.shrink_to(all.len() * 2);
            }
            all.len()
        });
        if left == 0 {
            SWEEPING.set(false);
            return;
        }
    }
}

/// Whether `socket` holds bytes from its client that were not read yet.
/// The socket shares its descriptor's non-blocking mode with the
/// connection's, so an empty one answers at once; one found blocking is
/// not looked into (a peek would stop the worker until the client sends).
fn unread(socket: &Socket) -> bool {
    if !matches!(socket.nonblocking(), Ok(true)) {
        return false;
    }
    let mut byte = [MaybeUninit::<u8>::uninit(); 1];
    matches!(socket.peek(&mut byte), Ok(n) if n > 0)
}

/// Marks `req`'s connection as serving it: no deadline until the response
/// ends. Wrap the response's body with the returned guard
/// ([`UntilServed`]); `None` for a connection not watched.
pub fn arrived(req: &HttpRequest) -> Option<Served> {
    let watched = &req.conn_data::<RequestDeadline>()?.0;
    watched.deadline.set(None);
    Some(Served(Rc::clone(watched)))
}

/// Held by a response: when dropped, its connection's next request is
/// due.
#[derive(Debug)]
pub struct Served(Rc<Watched>);

impl Drop for Served {
    fn drop(&mut self) {
        let watched = &self.0;
        watched
            .deadline
            .set(Some(Instant::now() + watched.after_response));
    }
}

pin_project_lite::pin_project! {
    /// A response body that starts its connection's next deadline when it
    /// ends (or is dropped).
    pub struct UntilServed<B> {
        #[pin]
        body: B,
        served: Option<Served>,
    }
}

impl<B> UntilServed<B> {
    /// `body`, holding `served` until it ends.
    pub fn new(body: B, served: Option<Served>) -> Self {
        Self { body, served }
    }
}

impl<B: MessageBody> MessageBody for UntilServed<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.project();
        let next = this.body.poll_next(cx);
        if let Poll::Ready(None) = next {
            this.served.take();
        }
        next
    }

    fn try_into_bytes(self) -> Result<Bytes, Self> {
        let Self { body, served } = self;
        body.try_into_bytes().map_err(|body| Self { body, served })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn bytes_not_read_yet_are_seen_without_being_taken() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        // The second handle a connection's data keeps: the same
        // descriptor's description, non-blocking like the connection's.
        let kept = Socket::from(server.try_clone().unwrap());
        assert!(!unread(&kept), "nothing sent yet");
        client.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        for _ in 0..500 {
            if unread(&kept) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(unread(&kept), "sent, not read");
        assert!(unread(&kept), "looking takes nothing");
        let mut head = [0u8; 64];
        let n = server.read(&mut head).unwrap();
        assert_eq!(&head[..n], b"GET / HTTP/1.1\r\n");
        assert!(!unread(&kept), "read by the connection");
        server.set_nonblocking(false).unwrap();
        client.write_all(b"Host: a\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!unread(&kept), "a blocking socket is not looked into");
    }
}
