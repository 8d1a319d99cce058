//! Idle connections to the admin listener (`--admin-bind`) cannot take the
//! node's descriptors: the admin listener has a small connection gate of
//! its own, inside the descriptors the node keeps out of the main
//! listener's limit. With 256 descriptors and 450 idle connections held to
//! the admin port (reopened as the node closes them), the main listener
//! keeps serving and `/healthz` answers; the same while the node still
//! waits for Redis (its placeholder listeners have the same gates). Before:
//! 450 idle admin connections used every descriptor, the main listener
//! failed to accept ("Too many open files") and `/healthz` timed out.

mod hostile_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use hostile_support::assert_serving;
use mcp_cluster_testkit::{GUARD, NodeProcess, free_port, node_binary, within};
use socket2::{Domain, Socket, Type};

/// The node's open-file limit (soft and hard).
const OPEN_FILES: u64 = 256;
/// Idle connections the attacker keeps open to one listener.
const IDLE: usize = 450;
/// Descriptors the admin listener may hold beyond the node's own: its gate
/// (16) and the connections accepted but not yet refused (4).
const ADMIN_DESCRIPTORS: usize = 20;
/// The node's other descriptors that come and go meanwhile (a probe's
/// connection closing, a connection attempt to Redis).
const SLACK: usize = 8;
/// How often the attacker reopens what the node closed.
const REOPEN_EVERY: Duration = Duration::from_millis(500);

/// Idle connections (connected, nothing sent) held to one listener from
/// some source addresses; whatever the node closes is opened again every
/// [`REOPEN_EVERY`], as an attacker keeps its count up. Stops when dropped.
struct IdleFlood {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl IdleFlood {
    /// Opens `per_source` connections from each of `sources` to `target`
    /// and returns once every one was opened (accepted by the node or
    /// waiting in its accept queue).
    fn start(target: SocketAddr, sources: &[Ipv4Addr], per_source: usize) -> Self {
        let slots: Vec<Ipv4Addr> = sources
            .iter()
            .flat_map(|source| std::iter::repeat_n(*source, per_source))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let (ready, opened) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut held: Vec<Option<TcpStream>> = slots.iter().map(|_| None).collect();
            let mut first = true;
            while !stopped.load(Ordering::Relaxed) {
                for (slot, source) in held.iter_mut().zip(&slots) {
                    if slot.as_ref().is_none_or(closed) {
                        *slot = connect(*source, target);
                    }
                }
                if first {
                    first = false;
                    let _ = ready.send(());
                }
                std::thread::sleep(REOPEN_EVERY);
            }
        });
        opened
            .recv_timeout(GUARD)
            .expect("the idle connections were opened");
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for IdleFlood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A connection from `source` to `target`, nothing sent; `None` when the
/// connect failed.
fn connect(source: Ipv4Addr, target: SocketAddr) -> Option<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    socket
        .bind(&SocketAddr::new(IpAddr::V4(source), 0).into())
        .ok()?;
    socket.connect(&target.into()).ok()?;
    let stream: TcpStream = socket.into();
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

/// Whether the node closed (or reset) `stream`: it reads end-of-stream
/// or an error other than "nothing yet".
fn closed(stream: &TcpStream) -> bool {
    match stream.peek(&mut [0u8; 1]) {
        // Nothing to read: still held.
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => false,
        // End of stream, a reset, or an answer (a 408, after which the
        // node closes it).
        _ => true,
    }
}

/// `n` source addresses on loopback from 127.0.0.`first`.
fn sources(first: u8, n: u8) -> Vec<Ipv4Addr> {
    (first..first + n)
        .map(|last| Ipv4Addr::new(127, 0, 0, last))
        .collect()
}

/// The status of `GET http://{addr}{path}`, from 127.0.0.1. Waits as long
/// as the node takes (at most [`GUARD`]): a node out of descriptors never
/// answers.
async fn get(addr: SocketAddr, path: &str) -> u16 {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    within(
        &format!("GET {path} on {addr}"),
        http.get(format!("http://{addr}{path}")).send(),
    )
    .await
    .unwrap_or_else(|err| panic!("GET {path} on {addr}: {err}"))
    .status()
    .as_u16()
}

/// Descriptors the process `pid` holds now.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(Iterator::count)
        .unwrap_or_else(|err| panic!("/proc/{pid}/fd: {err}"))
}

/// The most descriptors the node holds over a few looks a moment apart.
async fn most_descriptors(pid: u32) -> usize {
    let mut most = 0;
    for _ in 0..5 {
        most = most.max(descriptors(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    most
}

/// A node with 256 descriptors, an admin listener and `args`.
fn node(admin: SocketAddr, args: &[&str]) -> NodeProcess {
    let admin = admin.to_string();
    let mut all = vec!["--log", "warn", "--admin-bind", admin.as_str()];
    all.extend_from_slice(args);
    NodeProcess::spawn_with_open_files(&node_binary(), &all, OPEN_FILES)
        .unwrap_or_else(|err| panic!("node: {err:#}"))
}

/// Lets this test process hold the attackers' connections whatever its
/// soft limit (the hard one is far higher on any machine that runs it).
fn raise_own_descriptor_limit() {
    rlimit::increase_nofile_limit(4 * IDLE as u64).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_admin_connections_leave_the_main_listener_serving() {
    raise_own_descriptor_limit();
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
    let node = node(admin, &[]);
    let (addr, url) = (node.addr(), node.url().to_owned());
    assert_serving(&url).await;
    let before = descriptors(node.pid());

    // One address: it gets a quarter of the admin gate, the probes from
    // elsewhere still find room there, and the main listener serves.
    let flood = IdleFlood::start(admin, &sources(2, 1), IDLE);
    let during = most_descriptors(node.pid()).await;
    eprintln!(
        "{IDLE} idle admin connections from one address: the node holds {before} -> {during} \
         descriptors"
    );
    assert!(
        during <= before + ADMIN_DESCRIPTORS + SLACK,
        "{during} descriptors with the admin flood, {before} before"
    );
    assert_eq!(get(addr, "/healthz").await, 200);
    assert_eq!(
        get(admin, "/healthz").await,
        200,
        "the admin gate kept room"
    );
    assert_eq!(get(admin, "/readyz").await, 200);
    assert_serving(&url).await;
    drop(flood);

    // Fifteen addresses fill the admin gate: the main listener serves.
    let flood = IdleFlood::start(admin, &sources(3, 15), IDLE / 15);
    let during = most_descriptors(node.pid()).await;
    eprintln!(
        "{IDLE} idle admin connections from fifteen addresses: the node holds {before} -> \
         {during} descriptors"
    );
    assert!(
        during <= before + ADMIN_DESCRIPTORS + SLACK,
        "{during} descriptors with the admin flood, {before} before"
    );
    assert_eq!(get(addr, "/healthz").await, 200);
    assert_eq!(get(addr, "/readyz").await, 200);
    assert_serving(&url).await;
    drop(flood);

    // Once the flood ends, the admin listener answers again.
    within("the admin listener answers after the flood", async {
        while reqwest::get(format!("http://{admin}/healthz"))
            .await
            .map_or(true, |r| r.status() != 200)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_while_waiting_for_redis_leave_the_probes_answering() {
    raise_own_descriptor_limit();
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
    // Nothing listens there: the node waits for Redis, its placeholder
    // listeners answer the probes meanwhile.
    let redis = format!("redis://127.0.0.1:{}", free_port().unwrap());
    let node = node(admin, &["--redis-url", &redis]);
    let addr = node.addr();
    assert_eq!(get(addr, "/healthz").await, 200);
    assert_eq!(get(addr, "/readyz").await, 503, "not connected yet");
    let before = descriptors(node.pid());

    // The admin port flooded: the main listener answers.
    let flood = IdleFlood::start(admin, &sources(2, 15), IDLE / 15);
    let during = most_descriptors(node.pid()).await;
    eprintln!(
        "waiting for Redis, {IDLE} idle admin connections: the node holds {before} -> {during} \
         descriptors"
    );
    assert!(
        during <= before + ADMIN_DESCRIPTORS + SLACK,
        "{during} descriptors with the admin flood, {before} before"
    );
    assert_eq!(get(addr, "/healthz").await, 200);
    assert_eq!(get(addr, "/readyz").await, 503);
    drop(flood);

    // The main port flooded: beyond its connection limit connections are
    // closed at once, and the admin listener answers the probes.
    let flood = IdleFlood::start(addr, &sources(2, 15), IDLE / 15);
    let during = most_descriptors(node.pid()).await;
    eprintln!(
        "waiting for Redis, {IDLE} idle main connections: the node holds {before} -> {during} \
         descriptors (of {OPEN_FILES})"
    );
    assert_eq!(get(admin, "/healthz").await, 200);
    assert_eq!(get(admin, "/readyz").await, 503);
    drop(flood);
}
