//! A TCP proxy on a free loopback port that can stop forwarding: a node
//! given the proxy's address as its Redis sees a network partition (its
//! requests go unanswered, its connections stay open, new ones are
//! accepted and hang) without Redis or the node knowing of the proxy.
//!
//! Threads, not tasks: a proxy outlives any one test runtime and must keep
//! forwarding while a test blocks. Every thread ends after [`TcpProxy`] is
//! dropped: the accept loop polls a stop flag, and each copy thread ends
//! when either side closes, which dropping the proxy forces by shutting
//! every socket down.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

/// How often a blocked thread looks at the partition and stop flags.
const POLL: Duration = Duration::from_millis(10);

/// Bytes read per copy.
const CHUNK: usize = 16 * 1024;

/// State shared by the proxy's threads.
#[derive(Debug, Default)]
struct Shared {
    /// Set by [`TcpProxy::partition`], cleared by [`TcpProxy::heal`]:
    /// nothing is forwarded while set (what was read waits in the thread).
    partitioned: AtomicBool,
    /// Set on drop: every thread ends.
    stopped: AtomicBool,
    /// Every socket on both sides, shut down on drop.
    sockets: Mutex<Vec<TcpStream>>,
}

/// Forwards `127.0.0.1:<port>` to a target address until dropped.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl TcpProxy {
    /// Starts forwarding a free loopback port to `target`.
    ///
    /// # Errors
    /// No port could be bound.
    pub fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the proxy")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("tcp-proxy-accept".into())
                .spawn(move || accept_loop(&listener, target, &shared))?
        };
        Ok(Self {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The proxy's own address (give it to the client).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding in both directions, on open connections and new
    /// ones alike: bytes sent meanwhile wait, as on a link that drops
    /// packets, until [`Self::heal`].
    pub fn partition(&self) {
        self.shared.partitioned.store(true, Ordering::SeqCst);
    }

    /// Forwards again, what waited first.
    pub fn heal(&self) {
        self.shared.partitioned.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for socket in self
            .shared
            .sockets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, target: SocketAddr, shared: &Arc<Shared>) {
    while !shared.stopped.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(err) = connect(client, target, shared) {
                    eprintln!("tcp proxy: {err:#}");
                }
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(err) => {
                eprintln!("tcp proxy: accept failed: {err}");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Connects `client` to `target` and starts one copy thread each way.
fn connect(client: TcpStream, target: SocketAddr, shared: &Arc<Shared>) -> anyhow::Result<()> {
    client.set_nonblocking(false)?;
    client.set_nodelay(true)?;
    let server = TcpStream::connect(target).with_context(|| format!("connecting to {target}"))?;
    server.set_nodelay(true)?;
    {
        let mut sockets = shared
            .sockets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sockets.push(client.try_clone()?);
        sockets.push(server.try_clone()?);
    }
    for (from, to) in [(client.try_clone()?, server.try_clone()?), (server, client)] {
        let shared = Arc::clone(shared);
        std::thread::Builder::new()
            .name("tcp-proxy-copy".into())
            .spawn(move || copy(from, to, &shared))?;
    }
    Ok(())
}

/// Copies `from` to `to` until either closes, holding what it read while
/// the proxy is partitioned.
fn copy(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buf = vec![0; CHUNK];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while shared.partitioned.load(Ordering::SeqCst) {
            if shared.stopped.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(POLL);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free port, serving each connection on a thread.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let _ = std::io::copy(&mut reader, &mut stream);
                });
            }
        });
        addr
    }

    fn round_trip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text)?;
        let mut got = vec![0; text.len()];
        stream.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn forwards_holds_while_partitioned_and_delivers_after_healing() {
        let proxy = TcpProxy::start(echo_server()).unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut stream, b"hello").unwrap(), b"hello");

        proxy.partition();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let held = round_trip(&mut stream, b"lost?").unwrap_err();
        assert!(
            matches!(held.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{held}"
        );
        // A new connection is accepted but carries nothing either.
        let mut other = TcpStream::connect(proxy.addr()).unwrap();
        other
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(round_trip(&mut other, b"x").is_err());

        proxy.heal();
        stream.set_read_timeout(Some(crate::GUARD)).unwrap();
        let mut late = vec![0; 5];
        stream.read_exact(&mut late).unwrap();
        assert_eq!(late, b"lost?");
        assert_eq!(round_trip(&mut stream, b"again").unwrap(), b"again");
    }

    #[test]
    fn dropping_the_proxy_closes_its_connections() {
        let proxy = TcpProxy::start(echo_server()).unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut stream, b"hi").unwrap(), b"hi");
        drop(proxy);
        stream.set_read_timeout(Some(crate::GUARD)).unwrap();
        let mut buf = [0; 1];
        assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)));
    }
}
