//! The request-header timeout of a new connection, without an unasked 408.
//!
//! actix-web answers a connection whose first request's headers have not
//! arrived within its `client_request_timeout` with `408 Request Timeout`,
//! even when the client has sent nothing at all. HTTP clients keep spare
//! connections in their pools (hyper opens one for a waiting request, then
//! parks it when another connection frees up first), so an unused pooled
//! connection received a 408 it never asked for: a client that picked that
//! connection for its next request as the 408 arrived failed the request
//! (hyper: "unexpected message"), a failure no retry policy sees as safe.
//!
//! Here a new connection's first request must arrive within the header
//! timeout, or the connection is closed without a word (as nginx closes a
//! connection that sent nothing): a FIN, which a client's pool takes as an
//! ordinary idle close. actix's own timer stays as a backstop, set a little
//! later than this one ([`BACKSTOP`]), so it never fires first.
//!
//! - [`watch`], in the `on_connect` hook after
//!   [`crate::write_stall::ConnectionSocket::keep`], marks the connection
//!   as waiting and starts its timer;
//! - [`arrived`], in the outermost middleware, marks it as served when any
//!   request reaches the application;
//! - at the timeout, a connection still waiting is shut down through the
//!   kept socket; actix reads end-of-stream and drops it.
//!
//! Later requests on a kept-alive connection are not timed here: actix's
//! keep-alive timeout closes an idle one, also without a word.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::dev::Extensions;

use crate::write_stall::ConnectionSocket;

/// How much later than the header timeout actix's own timer is set: its
/// 408 is for a connection this watch could not close.
pub const BACKSTOP: Duration = Duration::from_secs(1);

/// In a connection's data: whether a request of it has reached the
/// application. Shared with the connection's timer.
#[derive(Debug)]
pub struct FirstRequest(Arc<AtomicBool>);

/// The `on_connect` hook, after the write-stall watch kept the socket: the
/// connection must bring its first request within `timeout`, or it is shut
/// down silently. A connection without a kept socket was refused and shut
/// down already.
pub fn watch(data: &mut Extensions, timeout: Duration) {
    let Some(socket) = data.get::<ConnectionSocket>().map(ConnectionSocket::handle) else {
        return;
    };
    let arrived = Arc::new(AtomicBool::new(false));
    data.insert(FirstRequest(Arc::clone(&arrived)));
    actix_web::rt::spawn(async move {
        tokio::time::sleep(timeout).await;
        if arrived.load(Ordering::Acquire) {
            return;
        }
        // Weak: a connection that ended already is gone.
        if let Some(socket) = socket.upgrade() {
            tracing::debug!(peer = ?socket.peer_addr().ok().and_then(|a| a.as_socket()), "Connection closed: no request within the header timeout.");
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    });
}

/// Marks `req`'s connection as served: its timer lets it be.
pub fn arrived(req: &HttpRequest) {
    if let Some(first) = req.conn_data::<FirstRequest>()
        && !first.0.load(Ordering::Relaxed)
    {
        first.0.store(true, Ordering::Release);
    }
}
