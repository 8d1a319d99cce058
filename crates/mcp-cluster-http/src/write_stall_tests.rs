//! The watch over real loopback sockets, with paused time.

use std::io::{ErrorKind, Read};
use std::net::{TcpListener, TcpStream as StdTcpStream};

use futures_util::{StreamExt, stream};

use super::*;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A connection: the client's end, the handle the watch keeps on the
/// server's end, and the server's end itself (actix's, kept open as actix
/// would while it waits to write).
fn connection() -> (StdTcpStream, ConnectionSocket, StdTcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = StdTcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, peer) = listener.accept().unwrap();
    let kept = ConnectionSocket {
        socket: Arc::new(Socket::from(server.try_clone().unwrap())),
        peer: Some(peer),
    };
    (client, kept, server)
}

/// Whether the server has neither sent anything nor closed: the client's
/// read finds nothing yet.
fn still_open(client: &StdTcpStream) -> bool {
    client.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let open =
        matches!((&*client).read(&mut byte), Err(err) if err.kind() == ErrorKind::WouldBlock);
    client.set_nonblocking(false).unwrap();
    open
}

/// Whether the client reads end-of-stream or a reset (within a guard).
fn closed(client: &StdTcpStream) -> bool {
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    match (&*client).read(&mut byte) {
        Ok(0) => true,
        Err(err) => err.kind() == ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

/// A body that gives one chunk, then has nothing more to send.
fn one_chunk() -> impl Stream<Item = Result<Bytes, Infallible>> {
    stream::iter([Ok(Bytes::from_static(b"data: {}\n\n"))]).chain(stream::pending())
}

#[tokio::test(start_paused = true)]
async fn a_body_never_asked_again_is_closed_once_past_the_timeout() {
    let watch = StallWatch::new(TIMEOUT);
    let (client, kept, _server) = connection();
    let mut body = watch.watch_on(Some(&kept), StreamKind::Standalone, one_chunk());
    // It gives bytes and is not asked again: actix's buffer is full.
    assert!(body.next().await.is_some());
    tokio::time::advance(TIMEOUT - Duration::from_millis(1)).await;
    assert!(watch.scan().streams.is_empty(), "not yet");
    assert!(still_open(&client));

    tokio::time::advance(Duration::from_millis(1)).await;
    let stalled = watch.scan();
    assert_eq!(stalled.streams.len(), 1);
    assert_eq!(stalled.streams[0].kind, "standalone");
    assert_eq!(stalled.streams[0].stalled_for, TIMEOUT);
    assert!(closed(&client), "the client sees the connection end");
    // Counted once: the entry went with the close.
    assert_eq!(watch.watched(), 0);
    assert!(watch.scan().streams.is_empty());
    drop(body);
}

#[tokio::test(start_paused = true)]
async fn a_quiet_body_is_not_stalled_however_long() {
    let watch = StallWatch::new(TIMEOUT);
    let (client, kept, _server) = connection();
    let mut body = watch.watch_on(Some(&kept), StreamKind::Request, one_chunk());
    assert!(body.next().await.is_some());
    // Asked again: it has nothing to send.
    assert!(futures_util::poll!(body.next()).is_pending());
    tokio::time::advance(TIMEOUT * 20).await;
    assert!(watch.scan().streams.is_empty());
    assert!(still_open(&client));
    assert_eq!(watch.watched(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_asked_again_before_the_timeout_starts_over() {
    let watch = StallWatch::new(TIMEOUT);
    let (client, kept, _server) = connection();
    let chunks = stream::iter((0..3).map(|_| Ok(Bytes::from_static(b": keep-alive\n\n"))));
    let mut body = watch.watch_on(
        Some(&kept),
        StreamKind::Live,
        chunks.chain(stream::pending()),
    );
    // A client that takes a little now and then: each chunk waits less
    // than the timeout, the three together more.
    for _ in 0..3 {
        assert!(body.next().await.is_some());
        tokio::time::advance(TIMEOUT / 2).await;
        assert!(watch.scan().streams.is_empty());
    }
    assert!(still_open(&client));
    // Then it stops reading: its last chunk waits out the timeout.
    tokio::time::advance(TIMEOUT / 2).await;
    assert_eq!(watch.scan().streams.len(), 1);
    assert!(closed(&client));
}

#[tokio::test(start_paused = true)]
async fn streams_leave_the_watch_with_their_body_or_connection() {
    let watch = StallWatch::new(TIMEOUT);
    let (_client, kept, _server) = connection();
    let mut body = watch.watch_on(Some(&kept), StreamKind::Legacy, one_chunk());
    assert_eq!(watch.watched(), 1);
    drop(body);
    assert_eq!(watch.watched(), 0, "the body's drop removes it");

    // A connection that went (its kept socket dropped) while its body
    // still waited: nothing to close, nothing counted.
    body = watch.watch_on(Some(&kept), StreamKind::Legacy, one_chunk());
    assert!(body.next().await.is_some());
    drop(kept);
    tokio::time::advance(TIMEOUT).await;
    assert!(watch.scan().streams.is_empty());
    assert_eq!(watch.watched(), 0);

    // A connection without a kept socket is passed through.
    let mut unwatched = watch.watch_on(None, StreamKind::Request, one_chunk());
    assert_eq!(watch.watched(), 0);
    assert!(unwatched.next().await.is_some());
}

#[tokio::test(start_paused = true)]
async fn the_scanner_closes_stalls_and_stops_with_the_watch() {
    let watch = StallWatch::new(TIMEOUT);
    let scanner = tokio::spawn(StallWatch::run(Arc::downgrade(&watch)));
    let (client, kept, _server) = connection();
    let mut body = watch.watch_on(Some(&kept), StreamKind::Resumption, one_chunk());
    assert!(body.next().await.is_some());
    // Within a quarter of the timeout after it.
    tokio::time::sleep(TIMEOUT + TIMEOUT / SCANS_PER_TIMEOUT).await;
    assert_eq!(watch.watched(), 0);
    assert!(closed(&client));

    drop(body);
    drop(watch);
    tokio::time::sleep(TIMEOUT).await;
    assert!(scanner.is_finished(), "the scanner ends with the watch");
}
