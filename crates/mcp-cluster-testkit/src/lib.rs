//! Test support: MCP nodes started for a test, in this process (with any
//! server, e.g. one with test-only tools) or as a real `mcp-node` process,
//! always on a free loopback port.
//!
//! # Layout
//! - [`InProcessNode`]: a node on its own actix system thread.
//! - [`NodeProcess`]: the `mcp-node` binary as a child process.
//! - [`RedisServer`] (`redis`): a real `redis-server` on a free port, no disk;
//!   plain, or TLS only with client certificates and an ACL user.
//! - [`TestPki`] (`pki`): a CA, server and client certificates made with the
//!   real `openssl`, in a temporary directory.
//! - [`Nginx`] (`nginx`): a real nginx, round robin over nodes, unbuffered.
//! - [`TcpProxy`] (`proxy`): a loopback TCP proxy that can stop forwarding
//!   (a node partitioned from its Redis).
//! - [`Cluster`] (`cluster`): Redis + `mcp-node` processes (or a
//!   provider's own binary, [`NodeCommand`]) + nginx.
//! - [`fixtures`]: a server with test-only tools.
//! - [`Prometheus`] (`prometheus`): a real Prometheus scraping nodes every
//!   second, queried over its HTTP API.
//! - [`OtlpReceiver`] (`otlp`): a real OTLP/HTTP receiver keeping the
//!   spans and log records it gets.
//! - [`TestIssuer`] (`issuer`): an OAuth 2.1 authorization server over real
//!   HTTP (metadata, JWKS, introspection, client credentials) and the
//!   tokens, valid or forged, that tests present to nodes.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_cluster::{McpServer, NodeConfig};
use mcp_cluster_client::Client;

/// Hang guard for network waits in tests: long enough for a loaded CI
/// machine, short enough to fail a hung test quickly.
pub const GUARD: Duration = Duration::from_secs(10);

/// Pause between two looks at a node's log or exit status.
const LOG_POLL: Duration = Duration::from_millis(20);

/// Awaits `f`, panicking with `what` if it takes longer than [`GUARD`]. A
/// guard against hangs, not an assertion on time.
///
/// # Panics
/// When `f` does not complete within [`GUARD`].
pub async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(GUARD, f).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// Opens a legacy HTTP+SSE session (2024-11-05): `GET {base}/sse`, 200,
/// then its `endpoint` event. Returns the stream and the URL to POST its
/// messages to (`{base}/messages?sessionId=…`).
///
/// # Panics
/// When the node does not answer 200 with an `endpoint` event within
/// [`GUARD`].
pub async fn open_legacy_sse(
    http: &reqwest::Client,
    base: &str,
) -> (mcp_cluster_client::SseStream, String) {
    let response = within(
        "GET /sse",
        http.get(format!("{base}/sse"))
            .header("accept", "text/event-stream")
            .send(),
    )
    .await
    .expect("GET /sse");
    assert_eq!(response.status(), 200, "GET /sse");
    let mut stream = mcp_cluster_client::SseStream::new(response);
    let endpoint = within("the endpoint event", stream.next_event())
        .await
        .expect("the endpoint event")
        .expect("an endpoint event");
    assert_eq!(endpoint.event.as_deref(), Some("endpoint"));
    (stream, format!("{base}{}", endpoint.data))
}

/// Waits until [`metric`] `series` of the node at `base` reads `value`.
///
/// # Panics
/// When it does not within [`GUARD`].
pub async fn until_metric(base: &str, series: &str, value: f64) {
    within(series, async {
        while metric(base, series).await != value {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// The value of the sample line of `{base}/metrics` that starts with
/// `series` (`name{labels}` exactly as printed, or a bare name), 0 when
/// there is none.
///
/// # Panics
/// When `/metrics` does not answer within [`GUARD`].
pub async fn metric(base: &str, series: &str) -> f64 {
    let response = within("GET /metrics", reqwest::get(format!("{base}/metrics")))
        .await
        .expect("GET /metrics");
    let text = within("the /metrics body", response.text())
        .await
        .expect("the /metrics body");
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A loopback port that was free a moment ago, for servers that must be
/// told their port (and keep it across restarts).
///
/// Drawn outside the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`): a port bound to port 0 and
/// released comes from that range, where every outgoing connection (the
/// load generator's, nginx's, a proxy's) takes its own port, and one of
/// them took a node's between the draw and the node's bind ("Address
/// already in use") while a chaos run's load was running. Outside it,
/// only another listener can take it, and this one checks that none has.
///
/// Each port is handed out once per process: the tests of one binary run
/// side by side, each drawing ports for its Redis, nginx and nodes before
/// they bind, and two draws of the same port (a node and another test's
/// nginx) left one of them without it ("Address already in use"). A port
/// drawn here stays the drawer's, so a node restarted on its address finds
/// it free of the other tests' listeners too.
///
/// # Errors
/// No free port was found.
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((low, high)) = listener_ports() {
        for _ in 0..256 {
            let port = fastrand::u16(low..high);
            if !handed_out.contains(&port)
                && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            {
                handed_out.insert(port);
                return Ok(port);
            }
        }
    }
    // No room outside the ephemeral range, or none free there: the
    // kernel's choice, as a last resort (never one handed out: it holds
    // the listener until it has a port it did not give before).
    let mut held = Vec::new();
    loop {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        if handed_out.insert(port) {
            return Ok(port);
        }
        held.push(listener);
    }
}

/// The ports [`free_port`] draws from: the larger side of the ephemeral
/// range, above 10000 (the usual `32768..=60999` gives `10000..32768`);
/// `None` when the ephemeral range leaves fewer than 1,000.
fn listener_ports() -> Option<(u16, u16)> {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(|n| n.parse::<u16>().ok());
            Some((bounds.next()??, bounds.next()??))
        })
        .unwrap_or((32768, 60999));
    let below = (10_000, ephemeral.0.max(10_000));
    let above = (ephemeral.1.saturating_add(1).max(10_000), u16::MAX);
    let wider = if below.1 - below.0 >= above.1 - above.0 {
        below
    } else {
        above
    };
    (wider.1 - wider.0 >= 1_000).then_some(wider)
}

/// Resident memory of process `pid` in bytes (`VmRSS` in
/// `/proc/<pid>/status`); `None` when it cannot be read.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Sends one HTTP/1.1 request over a plain socket, exactly as written (for
/// requests an HTTP client would amend: missing or repeated headers, odd
/// header-name case). `head` is the request line and headers without the
/// blank line; `Connection: close` must be among them. Blocking: call it
/// from `spawn_blocking`. Returns the status and the body.
///
/// # Errors
/// The connection failed or the response is not HTTP.
pub fn raw_http(addr: SocketAddr, head: &str, body: &str) -> anyhow::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr)?;
    socket.set_read_timeout(Some(GUARD))?;
    socket.write_all(format!("{head}\r\n\r\n{body}").as_bytes())?;
    let mut response = Vec::new();
    socket.read_to_end(&mut response)?;
    status_and_body(&response)
}

/// Waits until the server `child` started answers HTTP on `addr` (any
/// status to a `GET /`), for at most `within`. An accepted connection
/// alone is not enough: another process may hold the port for a moment,
/// or a probe from a port in the ephemeral range may connect to itself;
/// neither answers HTTP.
///
/// # Errors
/// `child` exited, or nothing answered within `within`.
pub fn wait_serving(child: &mut Child, addr: SocketAddr, within: Duration) -> anyhow::Result<()> {
    let head = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close");
    let started = tokio::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the server exited ({status}) before it answered on {addr}");
        }
        let probe = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).and_then(
            |socket| {
                socket.set_read_timeout(Some(Duration::from_secs(1)))?;
                Ok(socket)
            },
        );
        if let Ok(mut socket) = probe {
            use std::io::{Read, Write};
            let mut response = Vec::new();
            let answered = socket.write_all(head.as_bytes()).is_ok()
                && socket.write_all(b"\r\n\r\n").is_ok()
                && socket.read_to_end(&mut response).is_ok();
            if answered && response.starts_with(b"HTTP/1.") {
                return Ok(());
            }
        }
        if started.elapsed() >= within {
            bail!("nothing answered HTTP on {addr} within {within:?}");
        }
        std::thread::sleep(LOG_POLL);
    }
}

/// The status and body of a raw HTTP/1.1 response read to its end.
fn status_and_body(response: &[u8]) -> anyhow::Result<(u16, String)> {
    let response = String::from_utf8_lossy(response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("no end of headers")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status")?;
    Ok((status, body.to_owned()))
}

/// As [`raw_http`], from a socket bound to `local` (any 127.0.0.0/8
/// address stands for another client), with a head of raw bytes: header
/// values may hold what no HTTP client library sends (obs-text, bytes
/// 0x80 to 0xFF).
///
/// # Errors
/// As [`raw_http`].
pub fn raw_http_from(
    local: std::net::IpAddr,
    addr: SocketAddr,
    head: &[u8],
    body: &str,
) -> anyhow::Result<(u16, String)> {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.bind(&SocketAddr::new(local, 0).into())?;
    socket.connect_timeout(&addr.into(), GUARD)?;
    let mut socket: std::net::TcpStream = socket.into();
    socket.set_read_timeout(Some(GUARD))?;
    let mut request = head.to_vec();
    request.extend_from_slice(b"\r\n\r\n");
    request.extend_from_slice(body.as_bytes());
    socket.write_all(&request)?;
    let mut response = Vec::new();
    socket.read_to_end(&mut response)?;
    status_and_body(&response)
}

/// A node running on its own actix system in a thread of this process.
/// Dropping it stops the system.
#[derive(Debug)]
pub struct InProcessNode {
    addr: SocketAddr,
    endpoint: String,
    /// Completing it drains and stops the node.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl InProcessNode {
    /// Starts `server` with `config` on `127.0.0.1:0`.
    ///
    /// # Errors
    /// The node could not bind or start.
    pub fn start(server: McpServer, mut config: NodeConfig) -> anyhow::Result<Self> {
        config.bind = SocketAddr::from(([127, 0, 0, 1], 0));
        if config.workers == 0 {
            config.workers = 2;
        }
        let endpoint = config.http.endpoint.clone();
        config.drain_grace_secs = 0;
        config.drain_delay_secs = 0;
        let (tx, rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let system = actix_rt::System::new();
            let started = system.block_on(mcp_cluster::node::bind(server, config));
            match started {
                Ok(node) => {
                    let _ = tx.send(Ok(node.addrs()[0]));
                    let _ = system.block_on(node.run_until(async move {
                        let _ = stop_rx.await;
                    }));
                }
                Err(err) => {
                    let _ = tx.send(Err(err));
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .context("node did not start")??;
        Ok(Self {
            addr,
            endpoint,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Starts `server` with the default configuration.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_default(server: McpServer) -> anyhow::Result<Self> {
        Self::start(server, NodeConfig::default())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.endpoint)
    }

    /// A client for the latest protocol version (not yet initialized).
    pub fn client(&self) -> Client {
        Client::new(&self.url(), "2025-11-25")
    }

    /// An initialized session (2025-11-25) with the given client
    /// capabilities.
    ///
    /// # Panics
    /// When initialization fails or takes longer than [`GUARD`].
    pub async fn session(&self, capabilities: serde_json::Value) -> Client {
        let mut client = self.client();
        let initialized = within("initialize", client.initialize(capabilities)).await;
        if let Err(err) = initialized {
            panic!("initialize failed: {err}");
        }
        client
    }
}

impl Drop for InProcessNode {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Lines of a node's log kept by [`NodeProcess::spawn_logged`]: far more
/// than a test's node writes at the default level.
const NODE_LOG_LINES_KEPT: usize = 10_000;

/// The `mcp-node` binary as a child process; killed on drop.
#[derive(Debug)]
pub struct NodeProcess {
    child: Child,
    url: String,
    /// What the node logged (stderr), for [`Self::spawn_logged`] only:
    /// filled by a reader thread until the node exits, read by
    /// [`Self::log`]; at most [`NODE_LOG_LINES_KEPT`] lines, the latest.
    log: Option<Arc<Mutex<Vec<String>>>>,
}

impl NodeProcess {
    /// Spawns `binary` with `args` plus `--bind 127.0.0.1:0`, and waits for
    /// its "listening on" line.
    ///
    /// # Errors
    /// The binary is missing, exits, or does not report its address.
    pub fn spawn(binary: &Path, args: &[&str]) -> anyhow::Result<Self> {
        Self::spawn_bound(binary, args, "127.0.0.1:0")
    }

    /// Spawns `binary` with `args` plus `--bind bind`, and waits for its
    /// "listening on" line (a cluster node keeps a fixed port, so the load
    /// balancer's upstream stays right across restarts).
    ///
    /// # Errors
    /// The binary is missing, exits, or does not report its address.
    pub fn spawn_bound(
        binary: &Path,
        args: &[impl AsRef<std::ffi::OsStr>],
        bind: &str,
    ) -> anyhow::Result<Self> {
        Self::spawn_command(binary, Command::new(binary), args, Some(bind), false)
    }

    /// Spawns any program that serves MCP (an example of the workspace,
    /// say) with exactly `args`, and waits for the line
    /// `<name> listening on <url>` on its stdout.
    ///
    /// # Errors
    /// The binary is missing, exits, or does not report its address.
    pub fn spawn_program(binary: &Path, args: &[&str]) -> anyhow::Result<Self> {
        Self::spawn_command(binary, Command::new(binary), args, None, false)
    }

    /// As [`Self::spawn`], with `env` added to the node's environment, and
    /// keeping what the node logs (its stderr) for [`Self::log`]; each line
    /// is also written to this process's stderr.
    ///
    /// # Errors
    /// As [`Self::spawn`].
    pub fn spawn_logged(
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(binary);
        command.envs(env.iter().copied());
        Self::spawn_command(binary, command, args, Some("127.0.0.1:0"), true)
    }

    /// As [`Self::spawn`], with the open-file limit (soft and hard) set to
    /// `open_files` for the node (through `sh -c 'ulimit -n'`).
    ///
    /// # Errors
    /// As [`Self::spawn`].
    pub fn spawn_with_open_files(
        binary: &Path,
        args: &[&str],
        open_files: u64,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(binary);
        Self::spawn_command(binary, command, args, Some("127.0.0.1:0"), false)
    }

    /// As [`Self::spawn`], with `env` added to the node's environment and
    /// what the node logs (its stderr) written to the file `log` (created,
    /// or truncated), for tests that measure the log itself: its size,
    /// lines of any length (through `sh -c`, which redirects and then runs
    /// the node in its place).
    ///
    /// # Errors
    /// As [`Self::spawn`].
    pub fn spawn_logging_to(
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new("sh");
        command
            .envs(env.iter().copied())
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 2>\"$TESTKIT_NODE_LOG\"")
            .arg(binary)
            .env("TESTKIT_NODE_LOG", log);
        Self::spawn_command(binary, command, args, Some("127.0.0.1:0"), false)
    }

    pub(crate) fn spawn_command(
        binary: &Path,
        mut command: Command,
        args: &[impl AsRef<std::ffi::OsStr>],
        bind: Option<&str>,
        keep_log: bool,
    ) -> anyhow::Result<Self> {
        if !binary.exists() {
            bail!(
                "{} not found: build it first (cargo build -p mcp-node)",
                binary.display()
            );
        }
        command.args(args);
        if let Some(bind) = bind {
            command.args(["--bind", bind]);
        }
        let mut child = command
            // The tests' choice of binary is not the node's setting (it
            // would warn about an unknown MCP_ variable).
            .env_remove(crate::NODE_BIN_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if keep_log {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .with_context(|| format!("spawning {}", binary.display()))?;
        let log = child.stderr.take().map(|stderr| {
            let log = Arc::new(Mutex::new(Vec::new()));
            let kept = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("{line}");
                    let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                    if kept.len() == NODE_LOG_LINES_KEPT {
                        kept.remove(0);
                    }
                    kept.push(line);
                }
            });
            log
        });
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = mpsc::channel();
        // Reads stdout to its end, so the node never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // `mcp-node listening on <url>`, or another program's name.
                if let Some((_, url)) = line.split_once(" listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        // A NodeProcess from here on: dropped on error, it is killed.
        let mut node = Self {
            child,
            url: String::new(),
            log,
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => {
                node.url = url;
                Ok(node)
            }
            Err(_) => match node.child.try_wait() {
                Ok(Some(status)) => {
                    bail!("{} exited ({status}) before listening", binary.display())
                }
                _ => bail!("{} did not report its address", binary.display()),
            },
        }
    }

    /// The MCP endpoint URL, as the node reported it: `https://` when it
    /// serves TLS (`--tls-cert`, `--tls-key`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What the node logged so far, one line per entry (empty unless
    /// started by [`Self::spawn_logged`]).
    pub fn log(&self) -> Vec<String> {
        self.log.as_ref().map_or_else(Vec::new, |log| {
            log.lock().unwrap_or_else(PoisonError::into_inner).clone()
        })
    }

    /// Waits (at most [`GUARD`]) until a logged line contains `text`, and
    /// returns it. Blocking.
    ///
    /// # Errors
    /// No such line within [`GUARD`] (the error holds the log).
    pub fn wait_for_log(&self, text: &str) -> anyhow::Result<String> {
        let mut waited = Duration::ZERO;
        loop {
            if let Some(line) = self.log().into_iter().find(|line| line.contains(text)) {
                return Ok(line);
            }
            if waited >= GUARD {
                bail!("no log line with {text:?}:\n{}", self.log().join("\n"));
            }
            std::thread::sleep(LOG_POLL);
            waited += LOG_POLL;
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The node's address.
    ///
    /// # Panics
    /// When the URL the node reported has no address (never for a node
    /// this type started).
    pub fn addr(&self) -> SocketAddr {
        self.url
            .strip_prefix("http://")
            .or_else(|| self.url.strip_prefix("https://"))
            .and_then(|rest| rest.split('/').next())
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("no address in {}", self.url))
    }

    /// Its resident memory now, in bytes.
    ///
    /// # Panics
    /// When `/proc` cannot tell (not Linux, or the node exited).
    pub fn rss_bytes(&self) -> u64 {
        rss_bytes(self.pid()).unwrap_or_else(|| panic!("no VmRSS for pid {}", self.pid()))
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM (via `kill`) and waits for the exit status.
    ///
    /// # Errors
    /// The signal could not be sent or the wait failed.
    pub fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        self.send_term()?;
        Ok(self.child.wait()?)
    }

    /// Sends SIGTERM and waits at most `limit` for the exit status.
    ///
    /// # Errors
    /// The signal could not be sent, the wait failed, or the node still
    /// runs after `limit`.
    pub fn terminate_within(
        &mut self,
        limit: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        self.send_term()?;
        let mut waited = Duration::ZERO;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if waited >= limit {
                bail!("still running {limit:?} after SIGTERM");
            }
            std::thread::sleep(LOG_POLL);
            waited += LOG_POLL;
        }
    }

    fn send_term(&self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -TERM failed");
        }
        Ok(())
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

mod cluster;
pub mod fixtures;
mod issuer;
mod nginx;
mod otlp;
mod pki;
mod prometheus;
mod proxy;
mod redis;

pub use cluster::{
    Cluster, MixedLoad, NODE_BIN_ENV, NodeCommand, REDIS_KIND_ENV, example_binary, loadtest,
    loadtest_binary, loadtest_output, loadtest_scenario, node_binary, program_binary,
};
pub use issuer::{Discovery, IssuerOptions, KeyAlg, PublicKeyForm, TestIssuer, TokenBuilder};
pub use nginx::Nginx;
pub use otlp::{OtlpReceiver, ReceivedLink, ReceivedLog, ReceivedSpan};
pub use pki::TestPki;
pub use prometheus::{PROMETHEUS_JOB, Prometheus};
pub use proxy::TcpProxy;
pub use redis::{NODE_ACL_USER, RedisCluster, RedisServer, Sentinel, node_acl_rules};

#[cfg(test)]
mod tests {
    use super::{free_port, listener_ports};

    #[test]
    fn free_ports_are_drawn_where_outgoing_connections_take_none() {
        let range = listener_ports();
        for _ in 0..20 {
            let port = free_port().unwrap();
            if let Some((low, high)) = range {
                assert!((low..high).contains(&port), "{port} outside {low}..{high}");
            }
            // Free indeed (another listener could take it only now).
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
        // Never the same port twice in one process, however many are
        // drawn (by chance, 2,000 draws of about 22,000 ports repeat one).
        let mut drawn = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            let port = free_port().unwrap();
            assert!(drawn.insert(port), "{port} handed out twice");
        }
        // The usual ephemeral range leaves the ports below it.
        if std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .is_ok_and(|r| r.split_whitespace().eq(["32768", "60999"]))
        {
            assert_eq!(range, Some((10_000, 32_768)));
        }
    }
}
