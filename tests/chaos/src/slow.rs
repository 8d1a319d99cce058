//! Clients that open an SSE stream with much to send and never read it:
//! each holds a socket with a small receive buffer, on which a long call
//! with progress was POSTed, until dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, bail};
use socket2::{Domain, Socket, Type};

/// The revision the slow readers' sessions speak.
const VERSION: &str = "2025-11-25";

/// Receive buffer of a slow reader's socket: the kernel holds little for
/// it, so the server's side fills up soon.
const RECEIVE_BUFFER: usize = 4096;

/// Bound on one set-up exchange (initialize, initialized).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest set-up answer read.
const MAX_ANSWER: u64 = 1 << 20;

/// Open SSE streams nobody reads; closed on drop.
#[derive(Debug)]
pub(crate) struct SlowReaders {
    sockets: Vec<TcpStream>,
}

impl SlowReaders {
    /// Opens `count` sessions at `addr` (path `/mcp`), each with a call of
    /// `long_running_operation` streaming `steps` progress events over
    /// `duration_ms`, and reads nothing of them.
    pub(crate) fn open(
        addr: SocketAddr,
        count: usize,
        steps: u64,
        duration_ms: u64,
    ) -> anyhow::Result<Self> {
        // All at once, as a crowd of them would come: one after the other,
        // on a busy machine, opening them outlasted the load.
        let sockets = std::thread::scope(|scope| {
            let opening: Vec<_> = (0..count)
                .map(|i| {
                    scope.spawn(move || {
                        open_one(addr, i, steps, duration_ms)
                            .with_context(|| format!("slow reader {i}"))
                    })
                })
                .collect();
            opening
                .into_iter()
                .map(|thread| {
                    thread
                        .join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a slow reader's thread panicked")))
                })
                .collect::<anyhow::Result<Vec<TcpStream>>>()
        })?;
        Ok(Self { sockets })
    }
}

/// One session with its call POSTed on a socket nobody reads.
fn open_one(addr: SocketAddr, i: usize, steps: u64, duration_ms: u64) -> anyhow::Result<TcpStream> {
    let session = initialize(addr)?;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"long_running_operation","arguments":{{"duration_ms":{duration_ms},"steps":{steps}}},"_meta":{{"progressToken":"slow-{i}"}}}}}}"#
    );
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_recv_buffer_size(RECEIVE_BUFFER)?;
    socket.connect(&addr.into())?;
    let mut stream: TcpStream = socket.into();
    stream.write_all(request(addr, Some(&session), &call).as_bytes())?;
    Ok(stream)
}

impl Drop for SlowReaders {
    fn drop(&mut self) {
        for socket in &self.sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// A POST of `body` to `/mcp` at `addr`.
fn request(addr: SocketAddr, session: Option<&str>, body: &str) -> String {
    let session = session
        .map(|id| format!("Mcp-Session-Id: {id}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n\
         {session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One exchange on a connection of its own: the status and the headers.
fn exchange(addr: SocketAddr, session: Option<&str>, body: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    stream.write_all(request(addr, session, body).as_bytes())?;
    let mut answer = String::new();
    stream.take(MAX_ANSWER).read_to_string(&mut answer)?;
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP answer: {answer:.200}"))?;
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_owned();
    Ok((status, head))
}

/// A session, initialized: its id.
fn initialize(addr: SocketAddr) -> anyhow::Result<String> {
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{VERSION}","capabilities":{{}},"clientInfo":{{"name":"slow-reader","version":"0"}}}}}}"#
    );
    let (status, head) = exchange(addr, None, &init)?;
    if status != 200 {
        bail!("initialize answered {status}");
    }
    let session = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .context("initialize answered without Mcp-Session-Id")?;
    let (status, _) = exchange(
        addr,
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )?;
    if status != 202 {
        bail!("notifications/initialized answered {status}");
    }
    Ok(session)
}
