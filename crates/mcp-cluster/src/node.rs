//! Running a server as a node: Streamable HTTP (and legacy HTTP+SSE) on the
//! embedded store, health endpoints, connection limits, and a drain on
//! SIGTERM / SIGINT that clients behind a load balancer do not notice.
//!
//! Drain (see `drain` below): readiness fails while load balancers catch
//! up; then the listener refuses new connections (a load balancer retries
//! those elsewhere: nothing was sent), SSE connections end with `retry`
//! (clients resume elsewhere), every answer closes its connection, admitted
//! requests get `drain_grace_secs`, and the process exits.

use std::any::Any;
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[cfg(feature = "tls")]
use actix_tls::accept::rustls_0_23::TlsStream;
use actix_web::dev::Service;
use actix_web::http::ConnectionType;
#[cfg(feature = "tls")]
use actix_web::rt::net::TcpStream;
use actix_web::{App, HttpResponse, HttpServer, web};
use mcp_cluster_auth::Authenticator;
use mcp_cluster_http::HttpState;
use mcp_cluster_http::connections::ConnectionGate;
use mcp_cluster_http::request_head;
use mcp_cluster_http::write_stall::{ConnectionSocket, StallWatch};
use mcp_cluster_runtime::Runtime;
use mcp_cluster_store::Store;

#[cfg(feature = "tls")]
use crate::tls::{ReloadingCert, spawn_reload};
use crate::{NodeConfig, Served};

mod startup;

pub use startup::{StartingNode, start};

/// How often the drain checks for running requests.
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// How long stopped requests get to write their -32603 answers.
const STOP_WRITE_LIMIT: Duration = Duration::from_secs(2);
/// How long the drain keeps accepting once new handshakes are held back:
/// the accept loop empties the kernel's queue in far less.
const ACCEPT_QUEUE_SETTLE: Duration = Duration::from_millis(150);
/// How long the accept loop gets to take the pause in.
const PAUSE_SETTLE: Duration = Duration::from_millis(50);
/// Pending connections the kernel queues for the listener.
const LISTEN_BACKLOG: i32 = 2048;
/// File descriptors kept out of the connection limit: the store's
/// connections, the admin listener and its connections (at most
/// [`ADMIN_MAX_CONNECTIONS`] + [`ADMIN_IN_TRANSIT`]), the runtime's own
/// (epoll, wake-ups), log files. A node with two workers and Redis holds
/// 38 of its own (eight workers: 61; the reserve does not grow with them).
const FD_RESERVE: u64 = 64;
/// Descriptors each admitted connection of the main listener holds: its
/// socket, and the write-stall watch's handle on it
/// (`mcp_cluster_http::write_stall`). The default connection limit is the
/// open-file limit, less [`FD_RESERVE`], divided by this.
const DESCRIPTORS_PER_CONNECTION: u64 = 2;
/// Connections the admin listener holds at once: probes and scrapes come
/// a few at a time (the kubelet's two or three probes, one or two
/// Prometheus), and each takes milliseconds. Beyond it (and beyond a
/// quarter of it from one address outside `connection_limit_exempt`) a
/// connection is closed at once, so that connections to the admin port
/// take their descriptors from [`FD_RESERVE`], never from the main
/// listener's.
const ADMIN_MAX_CONNECTIONS: usize = 16;
/// Connections the admin listener's one worker may hold beyond
/// [`ADMIN_MAX_CONNECTIONS`]: those accepted and not yet refused by its
/// gate (each is shut down as soon as it is accepted).
const ADMIN_IN_TRANSIT: usize = 4;
/// How long an admin connection may take to send its request head, and
/// stay idle between requests: a probe or a scrape sends at once, so an
/// idle connection gives its slot back soon.
const ADMIN_IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections each worker may hold beyond its share of the limit: those
/// accepted and not yet refused by the gate. Bounds the descriptors a
/// flood can take between the accept and the refusal; kept out of the
/// connection limit too.
const IN_TRANSIT_PER_WORKER: usize = 32;
/// How long a client gets to complete its TLS handshake on the main
/// listener. Connections are counted by the gate only once their handshake
/// is done; until then actix's per-worker bound holds them, for this long
/// at most.
#[cfg(feature = "tls")]
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// A node about to serve: bound, not yet running.
pub struct BoundNode {
    server: actix_web::dev::Server,
    /// The probe listener's server, if `admin_bind` is set.
    admin: Option<actix_web::dev::Server>,
    runtime: Runtime,
    addrs: Vec<SocketAddr>,
    admin_addrs: Vec<SocketAddr>,
    /// The main listener, which the drain closes while the server finishes
    /// the connections it holds.
    listener: Listener,
    drain_grace: Duration,
    drain_delay: Duration,
}

impl std::fmt::Debug for BoundNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundNode")
            .field("addrs", &self.addrs)
            .field("admin_addrs", &self.admin_addrs)
            .finish()
    }
}

impl BoundNode {
    /// The addresses it listens on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The probe listener's addresses (empty without `admin_bind`).
    pub fn admin_addrs(&self) -> &[SocketAddr] {
        &self.admin_addrs
    }

    /// The runtime (for embedding and tests).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The connection limits of the main listener.
    pub fn connections(&self) -> &Arc<ConnectionGate> {
        &self.listener.gate
    }

    /// Serves until SIGTERM or SIGINT, then drains.
    ///
    /// # Errors
    /// The HTTP server failed.
    pub async fn run(self) -> std::io::Result<()> {
        self.run_until(wait_for_signal()).await
    }

    /// Serves until `shutdown` completes, then drains (as on SIGTERM).
    ///
    /// # Errors
    /// The HTTP server failed.
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()> + 'static,
    ) -> std::io::Result<()> {
        let handle = self.server.handle();
        let admin = self.admin.as_ref().map(actix_web::dev::Server::handle);
        if let Some(admin) = self.admin {
            actix_web::rt::spawn(admin);
        }
        let runtime = self.runtime.clone();
        let listener = self.listener;
        let (grace, delay) = (self.drain_grace, self.drain_delay);
        let drained = actix_web::rt::spawn(async move {
            shutdown.await;
            let answered = drain(&runtime, grace, delay, &handle, &listener).await;
            // Sessions whose server another node can take over are left to
            // the cluster, before their actors stop with the workers.
            runtime.hand_over_sessions().await;
            // The workers stop once their (now finished) connections end.
            handle.stop(true).await;
            if let Some(admin) = admin {
                admin.stop(true).await;
            }
            // Whatever else the service started (a hosted server's
            // children) ends before the node leaves.
            runtime.service().shutdown().await;
            if answered {
                runtime.leave().await;
            } else {
                // Not leaving: the heartbeat stops with the process and a
                // survivor answers what is still open.
                tracing::warn!("Requests still unanswered; leaving them to the cluster.");
            }
            tracing::info!("Drained.");
        });
        let served = self.server.await;
        // The server future completes as soon as `handle.stop` has stopped
        // the workers, while the drain still has to leave the cluster:
        // returning now would end the actix system and drop the drain
        // halfway. Only the drain stops the server (signals are disabled),
        // so after a clean stop it is about to finish.
        match &served {
            Ok(()) => {
                let _ = drained.await;
            }
            Err(_) => drained.abort(),
        }
        served
    }
}

/// The drain, up to the point where the workers may stop:
///
/// 1. Readiness fails; everything is still served as usual for `delay`, so
///    that load balancers stop routing here.
/// 2. The listener closes ([`close_listener`]: a load balancer retries a
///    refused connection on another node, nothing having been sent).
///    Every SSE connection ends with `retry` once it sent what the log
///    holds (clients resume from the log on another node), and every
///    answer from now on closes its connection: a client or load balancer
///    with a connection here uses it once more at most, then connects
///    elsewhere. An idle one is closed by the keep-alive timeout, which
///    a load balancer's own (shorter) idle timeout pre-empts.
/// 3. Once no connection is left, every admitted request is answered and
///    every client whose standalone stream closed has resumed it elsewhere
///    (its notifications are written here until then), or the grace
///    period is over, no more work is admitted; what still runs then
///    answers -32603 into its stream.
///
/// Session actors live on the HTTP workers, which stop after this: every
/// admitted request is answered before. Returns whether all were (else the
/// node must not leave the cluster: a survivor finalizes its open streams
/// once its heartbeat expires).
async fn drain(
    runtime: &Runtime,
    grace: Duration,
    delay: Duration,
    server: &actix_web::dev::ServerHandle,
    listener: &Listener,
) -> bool {
    tracing::info!(in_flight = runtime.in_flight(), ?delay, "Draining.");
    runtime.start_drain();
    tokio::time::sleep(delay).await;
    let deadline = tokio::time::Instant::now() + grace;
    close_listener(server, listener).await;
    runtime.close_streams();
    let connections = &listener.gate;
    tracing::info!(
        open = runtime.open_exchanges(),
        connections = connections.open(),
        "Listener closed; finishing admitted requests."
    );
    // A connection accepted just before the listener closed may still bring
    // its request: it is served like any other. Once no connection is left,
    // none can come.
    // Until every client told to reconnect has done so elsewhere (or a few
    // seconds passed), this node goes on writing what their standalone
    // streams are sent (resource updates, list changes) into the log,
    // where the resumption finds it.
    while (runtime.open_exchanges() > 0
        || connections.open() > 0
        || runtime.streams_awaiting_resume() > 0)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(DRAIN_POLL).await;
    }
    // What still arrives on a connection left open at the deadline gets 503.
    runtime.start_closing();
    if runtime.open_exchanges() > 0 {
        tracing::warn!(
            open = runtime.open_exchanges(),
            "Grace period over; stopping requests."
        );
        runtime.stop_requests();
        let written = tokio::time::Instant::now() + STOP_WRITE_LIMIT;
        while runtime.open_exchanges() > 0 && tokio::time::Instant::now() < written {
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }
    runtime.open_exchanges() == 0
}

/// The main listener, as the drain closes it.
#[derive(Debug)]
struct Listener {
    /// A second handle on the listening socket.
    socket: std::net::TcpListener,
    /// Connections held; the drain waits for none to be left.
    gate: Arc<ConnectionGate>,
    /// Set once the listener is closed: every answer then closes its
    /// connection. Read by the app's middleware.
    closed: Arc<AtomicBool>,
}

/// Closes the listener without resetting a connection a client may already
/// have sent a request on (a load balancer could not retry that one):
///
/// 1. new handshakes are dropped (a socket filter, Linux), so clients
///    retry their SYN about a second later;
/// 2. the connections already in the accept queue are accepted and served;
/// 3. accepting stops and the socket is shut down: the retried SYNs, and
///    any later, are refused at once (a load balancer moves on to another
///    node), and the port is free for a successor.
async fn close_listener(server: &actix_web::dev::ServerHandle, listener: &Listener) {
    let socket = socket2::SockRef::from(&listener.socket);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // One instruction, "return 0": drop every packet the listening
        // socket would take (new SYNs). Established connections, queued or
        // not, are sockets of their own and unaffected.
        const BPF_RET_K: u16 = 0x06;
        let drop_all = [socket2::SockFilter::new(BPF_RET_K, 0, 0, 0)];
        match socket.attach_filter(&drop_all) {
            Ok(()) => tokio::time::sleep(ACCEPT_QUEUE_SETTLE).await,
            Err(err) => tracing::debug!(error = %err, "New connections not held back."),
        }
    }
    listener.closed.store(true, Ordering::Release);
    server.pause().await;
    // The pause reaches the accept loop asynchronously; shutting the socket
    // down under a running accept loop makes it log an error.
    tokio::time::sleep(PAUSE_SETTLE).await;
    // Elsewhere than on Linux new connections wait in the queue instead,
    // until the process exits.
    if let Err(err) = socket.shutdown(Shutdown::Read) {
        tracing::debug!(error = %err, "Listener not shut down; new connections wait in its queue.");
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Opens the store: Redis when configured (the node joins that cluster),
/// otherwise the embedded in-memory store.
///
/// Fails at once when Redis cannot be reached: a caller that must wait for
/// it instead (a node behind an orchestrator) uses [`start`]. Stdio mode
/// keeps this: its client started the process and is waiting on it, and
/// gets an exit and a message sooner than a silent wait.
///
/// # Errors
/// Redis cannot be reached or its configuration is invalid.
pub async fn open_store(config: &NodeConfig) -> std::io::Result<Store> {
    let Some(redis) = redis_config(config) else {
        return Ok(Store::memory(config.retention.to_retention()));
    };
    crate::features::connect(&redis)
        .await
        .map_err(std::io::Error::other)
}

/// The Redis store's configuration, when the node has one, with the node's
/// retention (one retention setting for both stores).
fn redis_config(config: &NodeConfig) -> Option<mcp_cluster_redis::RedisConfig> {
    let mut redis = config.redis.clone()?;
    redis.retention = config.retention.to_retention().into();
    Some(redis)
}

/// Opens the store, builds the runtime and binds the HTTP server (and the
/// admin listener, when configured). Must run inside an actix system
/// (`#[actix_web::main]`). Fails when Redis cannot be reached now; [`start`]
/// waits for it instead.
///
/// # Errors
/// The store cannot be opened, the configuration is invalid, or an address
/// cannot be bound.
pub async fn bind(server: impl Into<Served>, config: NodeConfig) -> std::io::Result<BoundNode> {
    // The addresses first: a node that cannot listen stops before it
    // starts anything (actors, cluster duties) it would have to unwind.
    let socket = listen(config.bind)?;
    let admin_socket = config.admin_bind.map(listen).transpose()?;
    let tls = https(&config)?;
    let store = open_store(&config).await?;
    serve_on(server.into(), config, socket, admin_socket, tls, store).await
}

/// The main listener's TLS configuration, when `[tls]` is set: the
/// certificate and key are loaded now (bad files fail the start) and
/// reloaded in the background when they change (see [`crate::tls`]).
#[cfg(not(feature = "tls"))]
fn https(config: &NodeConfig) -> std::io::Result<Option<crate::features::ServerTls>> {
    match config.tls {
        None => Ok(None),
        Some(_) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "[tls] is configured, but this binary was built without the `tls` feature of mcp-cluster",
        )),
    }
}

/// The main listener's TLS configuration, when `[tls]` is set (see above).
#[cfg(feature = "tls")]
fn https(config: &NodeConfig) -> std::io::Result<Option<crate::features::ServerTls>> {
    let Some(tls) = &config.tls else {
        return Ok(None);
    };
    let invalid = |err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err);
    let cert = ReloadingCert::load(tls).map_err(invalid)?;
    let server_config = cert.server_config().map_err(invalid)?;
    spawn_reload(&cert, Duration::from_secs(tls.reload_interval_secs));
    tracing::info!(
        cert_file = %tls.cert_file.display(),
        reload_interval_secs = tls.reload_interval_secs,
        "HTTPS on the main listener; the admin listener stays plain HTTP."
    );
    Ok(Some(server_config))
}

/// The TCP stream under an accepted connection, plain or TLS: what the
/// connection gate looks at (its peer address, and the socket it shuts
/// down to refuse), and the socket the write-stall watch keeps.
fn tcp_stream(connection: &dyn Any) -> &dyn Any {
    #[cfg(feature = "tls")]
    if let Some(tls) = connection.downcast_ref::<TlsStream<TcpStream>>() {
        return tls.get_ref().0;
    }
    connection
}

/// The resource server, when authorization is configured; its issuers'
/// keys are fetched in the background. Without it, a node listening beyond
/// loopback says loudly that anyone who reaches it may use it.
fn authenticator(config: &NodeConfig) -> std::io::Result<Option<Arc<Authenticator>>> {
    let Some(auth) = &config.auth else {
        let exposed = std::iter::once(config.bind)
            .chain(config.admin_bind)
            .any(|addr| !addr.ip().is_loopback());
        if exposed && !config.bind.ip().is_loopback() {
            tracing::warn!(
                bind = %config.bind,
                "AUTHORIZATION IS OFF on a non-loopback address: anyone who reaches this node \
                 can open sessions and call every tool. Configure [auth] (see README, \
                 \"Authorization\") or bind to 127.0.0.1."
            );
        }
        return Ok(None);
    };
    let auth = Authenticator::new(auth.clone())
        .map(Arc::new)
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
    let prefetch = Arc::clone(&auth);
    actix_web::rt::spawn(async move { prefetch.prefetch().await });
    tracing::info!(
        resource = %auth.config().resource,
        issuers = ?auth.config().issuers,
        metadata = auth.metadata().url(),
        "Authorization on: every MCP request needs a bearer token."
    );
    Ok(Some(auth))
}

/// Builds the runtime over an open store, joins the cluster, and builds
/// the HTTP servers on bound sockets (not yet running).
async fn serve_on(
    server: Served,
    config: NodeConfig,
    socket: std::net::TcpListener,
    admin_socket: Option<std::net::TcpListener>,
    tls: Option<crate::features::ServerTls>,
    store: Store,
) -> std::io::Result<BoundNode> {
    let auth = authenticator(&config)?;
    let discovery =
        crate::card::discovery(&config, &server, auth.as_ref().map(|a| a.metadata().url()))
            .map(Arc::new);
    let runtime = Runtime::new(server.service(), store, config.runtime_config());
    // A member of the node set before anything is served (see
    // `Runtime::join`); connections wait in the accept queue meanwhile.
    runtime.join().await;
    server.forward_events(&runtime);
    start_audit(&config, &runtime)?;
    let http = &config.http;
    let exempt = http
        .exempt_networks()
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
    let workers = workers(&config);
    let gate = ConnectionGate::new(
        max_connections(http.max_connections, workers),
        http.max_connections_per_peer,
        exempt,
    );
    let stalls = StallWatch::new(http.sse_write_stall_timeout());
    // Ends once the servers, which hold the state and so the watch, are
    // dropped.
    actix_web::rt::spawn(StallWatch::run(Arc::downgrade(&stalls)));
    let state = HttpState {
        runtime: runtime.clone(),
        config: Arc::new(config.http.clone()),
        auth,
        connections: Some(Arc::clone(&gate)),
        stalls,
        discovery,
    };
    tracing::info!(
        max_connections = gate.max(),
        max_connections_per_peer = gate.max_per_peer(),
        "Connection limits."
    );
    let drain_grace = Duration::from_secs(config.drain_grace_secs);
    let admitted = Arc::clone(&gate);
    let header_timeout = Duration::from_secs(http.request_header_timeout_secs);
    let keep_alive = Duration::from_secs(http.keep_alive_secs);
    let closed = Arc::new(AtomicBool::new(false));
    let closing = Arc::clone(&closed);
    let app_state = state.clone();
    // With an admin listener, `/metrics` is served there only: the public
    // port does not hand the node's internals to whoever reaches it.
    // Without one, only to the hosts the MCP endpoint accepts (not to a
    // DNS-rebinding page).
    let metrics_on_main = if admin_socket.is_none() {
        Metrics::HereForAllowedHosts
    } else {
        Metrics::Elsewhere
    };
    let mut main = HttpServer::new(move || {
        let state = app_state.clone();
        let closing = Arc::clone(&closing);
        App::new()
            // Once a draining node's listener is closed, every answer closes
            // its connection: the client's (or load balancer's) next request
            // opens one to a node that is not going away.
            .wrap_fn(move |req, srv| {
                let fut = srv.call(req);
                let closing = closing.load(Ordering::Acquire);
                async move {
                    let mut res = fut.await?;
                    if closing {
                        res.response_mut()
                            .head_mut()
                            .set_connection_type(ConnectionType::Close);
                    }
                    Ok(res)
                }
            })
            .configure(|cfg| mcp_cluster_http::configure(cfg, state.clone()))
            .configure(|cfg| probes(cfg, metrics_on_main))
            // Counts every request of a client without a principal that
            // the pipeline does not, and refuses an address over its rate
            // before its request runs.
            .wrap(actix_web::middleware::from_fn(
                mcp_cluster_http::address_quota::requests_per_address,
            ))
            // Outermost: sees every request, and the final status.
            .wrap(actix_web::middleware::from_fn(
                mcp_cluster_http::observe::access_log,
            ))
    })
    .disable_signals()
    // SSE events are small writes that must leave at once; with Nagle a
    // write behind an unacknowledged one waits for the peer's delayed ACK
    // (about 40 ms on Linux), e.g. the end of a cancelled request's stream.
    .tcp_nodelay(true)
    .keep_alive(keep_alive)
    // A backstop: a new connection without a request is closed silently
    // at the header timeout (`request_head`), before actix would answer
    // it with a 408 its client never asked for.
    .client_request_timeout(header_timeout + request_head::BACKSTOP)
    // The gate bounds connections (and closes the ones beyond at once);
    // actix's own per-worker bound, which stops accepting, is just above
    // each worker's share, so that the connections accepted but not yet
    // refused cannot take the descriptors the node needs.
    .max_connections(gate.max().div_ceil(workers) + IN_TRANSIT_PER_WORKER)
    // Over TLS this runs once the handshake is done (actix calls it with
    // the TLS stream); the gate and the write-stall watch see the TCP
    // stream under it either way.
    .on_connect(move |connection, data| {
        let tcp = tcp_stream(connection);
        admitted.on_connect(tcp, data);
        ConnectionSocket::keep(tcp, data);
        request_head::watch(data, header_timeout, keep_alive);
    })
    // Connections still open when the workers stop (after the drain) get
    // this long to end.
    .shutdown_timeout(drain_grace.as_secs().max(1));
    main = main.workers(workers);
    let listener = socket.try_clone()?;
    let main = match tls {
        #[cfg(feature = "tls")]
        Some(tls) => main
            .tls_handshake_timeout(TLS_HANDSHAKE_TIMEOUT)
            .listen_rustls_0_23(socket, tls)?,
        #[cfg(not(feature = "tls"))]
        Some(tls) => match tls {},
        None => main.listen(socket)?,
    };
    let addrs = main.addrs();
    let (admin, admin_addrs) = match admin_socket {
        Some(admin_socket) => {
            let gate = admin_gate(http)?;
            let admin = HttpServer::new(move || {
                App::new()
                    .app_data(web::Data::new(state.clone()))
                    .configure(|cfg| probes(cfg, Metrics::Here))
            })
            .disable_signals()
            .workers(1)
            .keep_alive(ADMIN_IDLE_TIMEOUT)
            .client_request_timeout(ADMIN_IDLE_TIMEOUT)
            .max_connections(ADMIN_MAX_CONNECTIONS + ADMIN_IN_TRANSIT)
            .on_connect(move |connection, data| gate.on_connect(connection, data))
            .listen(admin_socket)?;
            let admin_addrs = admin.addrs();
            (Some(admin.run()), admin_addrs)
        }
        None => (None, Vec::new()),
    };
    Ok(BoundNode {
        server: main.run(),
        admin,
        runtime,
        addrs,
        admin_addrs,
        listener: Listener {
            socket: listener,
            gate,
            closed,
        },
        drain_grace,
        drain_delay: Duration::from_secs(config.drain_delay_secs),
    })
}

/// The admin listener's connection gate: [`ADMIN_MAX_CONNECTIONS`] in
/// all, a quarter of them per address outside
/// `http.connection_limit_exempt`. One per admin server: the placeholder's
/// while the node waits for its store, then the node's.
///
/// # Errors
/// `http.connection_limit_exempt` does not parse (validation said so
/// first).
fn admin_gate(http: &mcp_cluster_http::HttpConfig) -> std::io::Result<Arc<ConnectionGate>> {
    let exempt = http
        .exempt_networks()
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
    Ok(ConnectionGate::new_unmetered(
        ADMIN_MAX_CONNECTIONS,
        0,
        exempt,
    ))
}

/// `/healthz` (alive), `/readyz` (not draining, store reachable) and
/// `/metrics` (Prometheus) as `metrics` says.
fn probes(cfg: &mut web::ServiceConfig, metrics: Metrics) {
    cfg.route(
        "/healthz",
        web::get().to(|| async { HttpResponse::Ok().body("ok") }),
    )
    .route("/readyz", web::get().to(readyz));
    match metrics {
        Metrics::Here => cfg.route(
            "/metrics",
            web::get().to(mcp_cluster_http::observe::metrics),
        ),
        Metrics::HereForAllowedHosts => cfg.route(
            "/metrics",
            web::get().to(mcp_cluster_http::observe::metrics_on_main),
        ),
        Metrics::Elsewhere => cfg,
    };
}

/// Where a listener stands for `/metrics`.
#[derive(Debug, Clone, Copy)]
enum Metrics {
    /// Served to whoever asks (the admin listener).
    Here,
    /// Served to requests whose Host and Origin the MCP endpoint would
    /// accept (the main listener of a node without an admin one).
    HereForAllowedHosts,
    /// Not served (the main listener beside an admin one: 404).
    Elsewhere,
}

/// A listening socket as actix would make it, of which the drain keeps a
/// second handle.
fn listen(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// The main listener's HTTP workers: as configured, else one per CPU.
fn workers(config: &NodeConfig) -> usize {
    if config.workers > 0 {
        config.workers
    } else {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }
}

/// The connection limit: as configured, or the open-file limit less a
/// reserve (the node's own descriptors, and the connections in transit),
/// shared by the [`DESCRIPTORS_PER_CONNECTION`] each connection holds.
fn max_connections(configured: usize, workers: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let reserve = FD_RESERVE + (IN_TRANSIT_PER_WORKER * workers) as u64;
    match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok((soft, _)) => {
            usize::try_from((soft.saturating_sub(reserve) / DESCRIPTORS_PER_CONNECTION).max(16))
                .unwrap_or(usize::MAX)
        }
        Err(err) => {
            tracing::warn!(error = %err, "Open-file limit unknown; connections limited to 1024.");
            1024
        }
    }
}

/// Ready: not draining and the store answers.
async fn readyz(state: web::Data<HttpState>) -> HttpResponse {
    if state.runtime.is_draining() {
        return HttpResponse::ServiceUnavailable().body("draining");
    }
    match state.runtime.store().sessions.ping().await {
        Ok(()) => HttpResponse::Ok().body("ready"),
        Err(err) => {
            tracing::warn!(error = %err, "Not ready: store unavailable.");
            HttpResponse::ServiceUnavailable().body("store unavailable")
        }
    }
}

/// Starts the audit trail (`[audit]`) when configured, its records naming
/// this node.
///
/// # Errors
/// Its file cannot be opened for appending.
pub(crate) fn start_audit(config: &NodeConfig, runtime: &Runtime) -> std::io::Result<()> {
    match &config.audit {
        Some(audit) => mcp_cluster_telemetry::audit::install(audit, &runtime.node_id().to_string()),
        None => Ok(()),
    }
}
