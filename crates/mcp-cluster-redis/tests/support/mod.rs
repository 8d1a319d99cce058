//! A real `redis-server` on a free loopback port, for these tests only.
//!
//! Minimal on purpose: `mcp-cluster-testkit` is getting a shared `RedisServer`;
//! these tests can move to it once it lands.

#![allow(dead_code, unreachable_pub)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mcp_cluster_redis::RedisConfig;

const INSTALL_HINT: &str =
    "redis-server not found on PATH: install redis-server (apt-get install redis-server)";

/// How long a started server gets to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` child process without persistence, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port; panics with an install hint when the
    /// binary is missing.
    pub fn start() -> Self {
        for _ in 0..5 {
            let port = free_port();
            if let Some(server) = Self::try_start(port) {
                return server;
            }
        }
        panic!("redis-server did not start on a free port");
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A store config for this server, failing fast.
    pub fn config(&self) -> RedisConfig {
        RedisConfig {
            url: self.url(),
            command_timeout_ms: 500,
            ..RedisConfig::default()
        }
    }

    /// Kills the server (SIGKILL): connections drop at once.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh (empty) server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let started = (0..20).find_map(|_| {
            let server = Self::try_start(self.port);
            if server.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            server
        });
        let mut server = started.expect("redis-server restarts on its port");
        self.child = server.child.take();
    }

    fn try_start(port: u16) -> Option<Self> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            // A file no one wrote: a `dump.rdb` left in the working
            // directory is not loaded into the test's server.
            .args(["--dbfilename", &format!("mcp-test-{port}-none.rdb")])
            .args(["--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            Err(err) => panic!("cannot spawn redis-server: {err}"),
        };
        let mut server = Self {
            port,
            child: Some(child),
        };
        let deadline = std::time::SystemTime::now() + START_TIMEOUT;
        loop {
            let exited = server
                .child
                .as_mut()
                .is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
            if exited {
                // The port was taken (by another test's server, say).
                server.child = None;
                return None;
            }
            let pid = server.child.as_ref().map_or(0, Child::id);
            // Another test's server may answer on a reused port: ours
            // then exits, and the loop notices.
            if server_pid(port) == Some(pid) {
                return Some(server);
            }
            if std::time::SystemTime::now() > deadline {
                panic!("redis-server on port {port} did not answer");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The pid of the server answering on `port`, if one answers.
fn server_pid(port: u16) -> Option<u32> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    conn.write_all(b"INFO server\r\n").ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(rest) = text.split("process_id:").nth(1)
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.parse().ok();
        }
    }
}

/// A plain connection to the server, separate from any store.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("a valid url")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection to the test server")
}

/// Connections the server holds now.
pub async fn client_count(con: &mut redis::aio::MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(con)
        .await
        .expect("CLIENT LIST answers");
    list.lines().filter(|l| !l.trim().is_empty()).count()
}
